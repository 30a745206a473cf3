"""Engine benchmarks: decode speed of every drafting mode against Hugging Face baselines
(`decode`), over fill-in-the-middle holes cut from real code (`corpus`)."""

"""Engine benchmarks: decode speed of every drafting mode against Hugging Face baselines.

decode.py   modes, configuration and the run order (`quickdraft bench engine`)
runs.py     one mode on one prompt, timed (HF generate or quickdraft's decoder)
figures.py  per-mode summaries, ratios against the baselines, targets
report.py   the terminal table and the plots
corpus.py   fill-in-the-middle holes cut from real source files
common.py   the machine's description and text tables (shared with the session benchmark)
cpu_weights.py  a pass's cost in each weight format (`bench passes --compare-weights`)
calibration.py  the verifier this CPU affords, measured once (`doctor --calibrate`), the server's default
"""

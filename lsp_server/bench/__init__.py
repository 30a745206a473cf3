"""Server benchmarks: a simulated typist driving the real server over stdio (`session`)."""

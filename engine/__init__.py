"""quickdraft's engine: models and speculative decoding. It knows nothing about LSP.

A request walks straight down: CompletionRequest → cursor context (text/cursor.py) → prompt
(text/document_prompts.py) → decode (decoding/, drafters/) → post-process (text/postprocess.py)
→ CompletionResult.

completion.py  the front door: a CompletionRequest in, a post-processed completion out
text/          the text around the cursor: cursor context, FIM prompts, healing, syntax, post-processing
decoding/      the speculative loop, acceptance rules, KV caches (dynamic; static + CUDA graphs), token trees
drafters/      prompt lookup, draft model, hybrid, tree drafters, Medusa; DrafterConfig
medusa/        heads on the verifier: Medusa heads, the feature head; training data, fitting, storage
kernels/       CPU kernels of our own, built at first use: 4-bit weights (AVX2)
models/        presets, the model store, downloads, conversion, loading, int8 and 4-bit weights
backends/      the Backend interface: this engine in-process, or a remote inference server
bench/         engine benchmarks and the corpus of holes they decode
modes.py       names every layer shares: drafter modes, multiline policies (no torch)
stats.py       decoding figures and percentiles (no torch)
errors.py      the errors a user can hit

Lower layers never import higher ones: shared names < kernels < models < text < decoding < medusa <
drafters < completion < backends < bench (tests/test_layout.py).
"""

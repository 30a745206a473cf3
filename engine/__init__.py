"""quickdraft's engine: models and speculative decoding. It knows nothing about LSP.

completion.py  the front door: a CompletionRequest in, a post-processed completion out
decoder.py     the speculative loop (draft → verify → accept → crop → stop checks)
verify.py      acceptance rules: greedy and speculative sampling
kv.py          a model's KV cache with the tokens it holds (reuse, crop)
anchor.py      anchored fill-in-the-middle while the user types at the cursor
drafters/      prompt lookup, draft model, hybrid; DrafterConfig
models/        presets, the model store, downloads, conversion, loading
fim.py         FIM templates per model family
prompt.py      token-budgeted prompts (prefix, suffix, other documents)
syntax.py      tree-sitter decisions at the cursor (language, single or multi-line)
postprocess.py trimming a completion to its scope, suffix overlap
text_stream.py output tokens → text deltas and stop strings
modes.py       names every layer shares: drafter modes, multiline policies (no torch)
stats.py       decoding figures and percentiles (no torch)
errors.py      the errors a user can hit
bench/         engine benchmarks and the corpus of holes they decode
"""

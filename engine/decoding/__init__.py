"""Speculative decoding: the loop, its acceptance rules, and the KV caches it runs on.

decoder.py      the loop: draft → verify in one pass → accept → crop → stop checks
stops.py        why a decode stops (StopReason) and the rules the loop asks once per pass (no torch)
draft.py        what the loop asks of a drafter (a Draft; start / propose / observe)
verify.py       acceptance rules: greedy and speculative sampling, on the device
tree.py         token trees: mask, positions, greedy and SpecInfer acceptance
tree_kv.py      one verifier pass over a tree, and the KV cache compacted to the kept path
kv.py           a model's KV cache with the tokens it holds (reuse, crop, chunked prefill)
kv_static.py    the static cache for CUDA: preallocated, passes replayed as CUDA graphs
cuda_graphs.py  capturing and replaying those graphs
confidence.py   how sure the verifier was of the answer shown, and the gate
"""

"""CPU kernels of our own, compiled on this machine at first use (torch's C++ extension
builder, cached under ~/.cache/torch_extensions).

Each kernel is optional: where it cannot be built (no AVX2, no C++ compiler) the engine says
why and uses ATen's kernels instead.
"""

"""Weight-only int8 for CPU decoding: each linear layer also holds its weights as int8 with
one scale per output row, and reads them on passes of a few tokens.

Why: on a CPU a decoding pass is bound by reading the weights (a 0.5B model in bf16 reads
about 1 GB per pass), so int8 weights make a pass of up to four tokens about twice as
fast. ATen's int8 kernel reads the weights once per four rows, though, so for a long
prompt chunk it is slower than the float matmul: prompt chunks (`float_weights`, used by
the KV cache's prefill and by warming) read the float weights, which the layer keeps.
Speculative and plain decoding read a prompt the same way, so the speculative output is
still exactly what plain decoding writes; it can differ from the float model's.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch

# ATen's int8 kernel reads the reduction dimension in blocks: layers whose input width is
# not a multiple of this stay in float (every layer of the Qwen models is a multiple).
INPUT_MULTIPLE = 64
# It reads the weights once per this many rows: a pass of up to this many tokens costs one read.
ROWS_PER_READ = 4
# A first pass that would feed more prompt tokens than this (with its draft) costs more weight
# reads than prefilling them with the float weights first: see `pass_prompt_tokens`.
PASS_PROMPT_TOKENS = 16
QUANTIZE_ROWS = 2048  # rows quantized at a time at load: a block stays in cache (30× faster than whole)


class WeightChoice:
    """Which weights a model's int8 layers read now; one per model, shared by its layers."""

    def __init__(self) -> None:
        self.float_weights = False


class Int8Linear(torch.nn.Module):
    """A linear layer with int8 weights scaled per output row (symmetric, absmax), and its
    float weights for prompt chunks."""

    def __init__(self, linear: torch.nn.Linear, choice: WeightChoice) -> None:
        super().__init__()
        weight = linear.weight.detach()
        scale = weight.abs().amax(dim=1).float().clamp(min=torch.finfo(torch.float32).tiny) / 127
        qweight = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
        for start in range(0, weight.shape[0], QUANTIZE_ROWS):  # in blocks: no full-size float32 copies
            rows = slice(start, start + QUANTIZE_ROWS)
            qweight[rows] = weight[rows].to(torch.float32, copy=True).div_(scale[rows, None]).round_().clamp_(-127, 127)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale.to(weight.dtype))
        self.weight, self.bias = linear.weight, linear.bias  # tied weights stay tied (the output layer)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.choice = choice

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.choice.float_weights:
            return torch.nn.functional.linear(x, self.weight, self.bias)
        rows = x.reshape(-1, self.in_features).contiguous()
        y = torch.ops.aten._weight_int8pack_mm(rows, self.qweight, self.scale).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    def dequantized(self) -> torch.Tensor:
        """The weights the int8 path computes with, in float32."""
        return self.qweight.float() * self.scale.float()[:, None]


def can_quantize(linear: torch.nn.Linear) -> bool:
    return (linear.weight.device.type == "cpu" and linear.in_features % INPUT_MULTIPLE == 0
            and linear.weight.dtype in (torch.bfloat16, torch.float32))


def quantize_int8(model: torch.nn.Module) -> int:
    """Give the model's linear layers, the output layer included, int8 weights; returns how
    many layers now have them."""
    choice = WeightChoice()
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear) and can_quantize(module)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Int8Linear(module, choice))
    if targets:
        model.int8_weight_choice = choice
    return len(targets)


@contextmanager
def float_weights(model: torch.nn.Module) -> Iterator[None]:
    """Within: the model's int8 layers read their float weights (a no-op for other models)."""
    choice = getattr(model, "int8_weight_choice", None)
    if choice is None:
        yield
        return
    choice.float_weights = True
    try:
        yield
    finally:
        choice.float_weights = False


def pass_prompt_tokens(model: torch.nn.Module) -> int | None:
    """GenerationConfig.pass_prompt_tokens for this model: a limit with int8 weights, else none."""
    return PASS_PROMPT_TOKENS if getattr(model, "int8_weight_choice", None) is not None else None

"""Weight-only int8 or 4-bit weights for CPU decoding: each linear layer also holds its weights
as int8 with one scale per output row (ATen's kernel), or in 4 bits by blocks
(engine/kernels/cpu_int4.py, our kernel), and reads them on passes of a few tokens.

Why: on a CPU a decoding pass is bound by reading the weights (a 0.5B model in bf16 reads
about 1 GB per pass), so int8 weights make a pass of up to four tokens about twice as
fast. ATen's int8 kernel reads the weights once per four rows, though, so for a long
prompt chunk it is slower than the float matmul: prompt chunks (`float_weights`, used by
the KV cache's prefill and by warming) read the float weights, which the layer keeps.
Speculative and plain decoding read a prompt the same way, so the speculative output is
still exactly what plain decoding writes; it can differ from the float model's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Iterator

import torch

from engine.kernels import cpu_int4

# ATen's int8 kernel reads the reduction dimension in blocks: layers whose input width is
# not a multiple of this stay in float (every layer of the Qwen models is a multiple).
INPUT_MULTIPLE = 64
# It reads the weights once per this many rows: a pass of up to this many tokens costs one read.
ROWS_PER_READ = 4
# A first pass that would feed more prompt tokens than this (with its draft) costs more weight
# reads than prefilling them with the float weights first: see `pass_prompt_tokens`.
PASS_PROMPT_TOKENS = 16
QUANTIZE_ROWS = 2048  # rows quantized at a time at load: a block stays in cache (30× faster than whole)


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _onednn_runs() -> bool:
    try:
        probe = torch.ones(2, 8)
        return torch.backends.mkldnn.is_available() and torch.equal(_onednn_linear(probe, probe, None), probe @ probe.T)
    except (AttributeError, RuntimeError):  # an op this build lacks, a CPU it does not run on
        return False


# How a prompt chunk multiplies by the float weights, of those that run here. oneDNN's matmul reads a
# chunk faster than ATen's (MKL's): on a 2-core AMD EPYC with AVX2, 1.2x for 128 tokens and 1.5x for 17
# (`quickdraft bench passes --device cpu --compare-weights int4`; docs/models.md).
PROMPT_MATMULS = {"aten": torch.nn.functional.linear, **({"onednn": _onednn_linear} if _onednn_runs() else {})}
DEFAULT_PROMPT_MATMUL = "onednn" if "onednn" in PROMPT_MATMULS else "aten"


class WeightChoice:
    """Which weights a model's quantized layers read now, and how prompt chunks multiply by the
    float ones; one per model, shared by its layers."""

    def __init__(self) -> None:
        self.float_weights = False
        self.prompt_matmul = PROMPT_MATMULS[DEFAULT_PROMPT_MATMUL]


class QuantizedLinear(torch.nn.Module, ABC):
    """A linear layer that reads quantized weights on decoding passes and its float weights
    on prompt chunks."""

    def __init__(self, linear: torch.nn.Linear, choice: WeightChoice) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias  # tied weights stay tied (the output layer)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.choice = choice

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A prompt chunk's last-token logits are one row: the output layer reads its quantized weights
        # for them, a sixth of the float bytes (35 ms of a 0.5B's chunk on 2 cores, 5 ms in 4 bits).
        if self.choice.float_weights and x.numel() > ROWS_PER_READ * self.in_features:
            return self.choice.prompt_matmul(x, self.weight, self.bias)
        rows = x.reshape(-1, self.in_features).contiguous()
        y = self.quantized_matmul(rows).reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias

    @abstractmethod
    def quantized_matmul(self, rows: torch.Tensor) -> torch.Tensor:
        """rows [n, in] @ the quantized weights.T, in rows' dtype."""

    @abstractmethod
    def dequantized(self) -> torch.Tensor:
        """The weights the quantized path computes with, in float32."""


class Int8Linear(QuantizedLinear):
    """int8 weights scaled per output row (symmetric, absmax). The kernel reads its rows in
    bfloat16 whatever the model's dtype: with float32 rows ATen's kernel is about ten times
    slower on a CPU without AVX512 (docs/models.md, "Weights in int8")."""

    rows_dtype = torch.bfloat16

    def __init__(self, linear: torch.nn.Linear, choice: WeightChoice) -> None:
        super().__init__(linear, choice)
        weight = linear.weight.detach()
        scale = weight.abs().amax(dim=1).float().clamp(min=torch.finfo(torch.float32).tiny) / 127
        kernel_scale = rounded_up(scale, self.rows_dtype)  # never below the exact one: no weight rounds past 127
        scale = kernel_scale.float()
        qweight = torch.empty(weight.shape, dtype=torch.int8, device=weight.device)
        for start in range(0, weight.shape[0], QUANTIZE_ROWS):  # in blocks: no full-size float32 copies
            rows = slice(start, start + QUANTIZE_ROWS)
            qweight[rows] = weight[rows].to(torch.float32, copy=True).div_(scale[rows, None]).round_().clamp_(-127, 127)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", kernel_scale)

    def quantized_matmul(self, rows: torch.Tensor) -> torch.Tensor:
        product = torch.ops.aten._weight_int8pack_mm(rows.to(self.rows_dtype), self.qweight,
                                                     self.scale.to(self.rows_dtype))
        return product.to(rows.dtype)

    def dequantized(self) -> torch.Tensor:
        return self.qweight.float() * self.scale.float()[:, None]


class Int4Linear(QuantizedLinear):
    """4-bit weights in blocks of 128 inputs (engine/kernels/cpu_int4.py)."""

    def __init__(self, linear: torch.nn.Linear, choice: WeightChoice) -> None:
        super().__init__(linear, choice)
        blocks = cpu_int4.quantize(linear.weight)
        self.register_buffer("codes", blocks.codes)
        self.register_buffer("group_scales", blocks.group_scales)
        self.register_buffer("block_scales", blocks.block_scales)

    @property
    def blocks(self) -> cpu_int4.Int4Weights:
        return cpu_int4.Int4Weights(self.codes, self.group_scales, self.block_scales)

    def quantized_matmul(self, rows: torch.Tensor) -> torch.Tensor:
        return cpu_int4.matmul(rows, self.blocks)

    def dequantized(self) -> torch.Tensor:
        return cpu_int4.dequantize(self.blocks)


def rounded_up(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`values` in `dtype`, each the nearest representable value at or above it."""
    rounded = values.to(dtype)
    return torch.where(rounded.float() < values, torch.nextafter(rounded, torch.full_like(rounded, float("inf"))), rounded)


LAYERS: dict[str, type[QuantizedLinear]] = {"int8": Int8Linear, "int4": Int4Linear}
# The input widths each format's kernel reads in whole blocks.
INPUT_MULTIPLES = {"int8": INPUT_MULTIPLE, "int4": cpu_int4.BLOCK}


def can_quantize(linear: torch.nn.Linear, weights: str = "int8") -> bool:
    return (linear.weight.device.type == "cpu" and linear.in_features % INPUT_MULTIPLES[weights] == 0
            and linear.weight.dtype in (torch.bfloat16, torch.float32))


def quantize_weights(model: torch.nn.Module, weights: str = "int8") -> int:
    """Give the model's linear layers, the output layer included, `weights` ("int8" or "int4");
    returns how many layers now have them."""
    layer = LAYERS[weights]
    if weights == "int4":
        cpu_int4.kernel()  # KernelUnavailable here, before any layer is replaced
    choice = WeightChoice()
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear) and can_quantize(module, weights)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer(module, choice))
    if targets:
        model.quantized_weight_choice = choice
    return len(targets)


@contextmanager
def float_weights(model: torch.nn.Module) -> Iterator[None]:
    """Within: the model's quantized layers read their float weights (a no-op for other models)."""
    choice = getattr(model, "quantized_weight_choice", None)
    if choice is None:
        yield
        return
    choice.float_weights = True
    try:
        yield
    finally:
        choice.float_weights = False


def pass_prompt_tokens(model: torch.nn.Module) -> int | None:
    """GenerationConfig.pass_prompt_tokens for this model: a limit with quantized weights, else none."""
    return PASS_PROMPT_TOKENS if getattr(model, "quantized_weight_choice", None) is not None else None

"""4-bit weights for CPU decoding passes: the format, the quantizer, and the kernel that reads them.

The format is that of llama.cpp's k-quants, in blocks of 128 inputs (Qwen's widths are
multiples of 128, not all of 256): each block of each output row has four groups of 32
weights, w = block_scale * group_scale * code - block_offset * group_offset, with 4-bit
codes, 8-bit group scales and offsets, and a float32 (scale, offset) per block: 5 bits a
weight. The kernel (cpu_int4.cpp) rounds the activations to int8 per block and keeps each
block's sums in integers.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

BLOCK = 128
GROUP = 32
CODE_MAX = 15
SCALE_MAX = 255  # group scales and offsets are 8-bit
SOURCE = Path(__file__).with_name("cpu_int4.cpp")
FLAGS = ["-O3", "-mavx2", "-mfma", "-mf16c"]
# at::parallel_for is inlined into the kernel: where torch threads with OpenMP, only these flags
# keep its parallel region (without them the kernel runs on one core, at half the speed on two).
THREAD_FLAGS = ["-fopenmp"] if torch.backends.openmp.is_available() else []


class KernelUnavailable(RuntimeError):
    """The 4-bit kernel cannot run here; the message says why."""


@dataclass
class Int4Weights:
    codes: torch.Tensor  # uint8 [out, in / 2]: two 4-bit codes a byte
    group_scales: torch.Tensor  # uint8 [out, in / 128, 8]: four scales, then four offsets
    block_scales: torch.Tensor  # float32 [out, in / 128, 2]: scale, offset

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.codes, self.group_scales, self.block_scales))


def can_hold(weight: torch.Tensor) -> bool:
    return weight.dim() == 2 and weight.shape[1] % BLOCK == 0


def quantize(weight: torch.Tensor, rows_at_once: int = 4096) -> Int4Weights:
    """Each group of 32 weights to 16 levels between its minimum (or 0, if above) and its
    maximum; `rows_at_once` keeps the float32 copies small."""
    rows, width = weight.shape
    blocks = Int4Weights(torch.empty(rows, width // 2, dtype=torch.uint8),
                         torch.empty(rows, width // BLOCK, 2 * BLOCK // GROUP, dtype=torch.uint8),
                         torch.empty(rows, width // BLOCK, 2, dtype=torch.float32))
    for start in range(0, rows, rows_at_once):
        part = slice(start, start + rows_at_once)
        blocks.codes[part], blocks.group_scales[part], blocks.block_scales[part] = _quantize_rows(weight[part])
    return blocks


def _quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, width = weight.shape
    groups = weight.detach().float().reshape(rows, width // BLOCK, BLOCK // GROUP, GROUP)
    low = groups.amin(-1).clamp(max=0)
    scale = (groups.amax(-1) - low) / CODE_MAX
    offset = -low
    tiny = torch.finfo(torch.float32).tiny
    block_scale = (scale.amax(-1, keepdim=True) / SCALE_MAX).clamp(min=tiny)
    block_offset = (offset.amax(-1, keepdim=True) / SCALE_MAX).clamp(min=tiny)
    group_scale = (scale / block_scale).round_().clamp_(0, SCALE_MAX)
    group_offset = (offset / block_offset).round_().clamp_(0, SCALE_MAX)
    step = (group_scale * block_scale).unsqueeze(-1)
    codes = ((groups + (group_offset * block_offset).unsqueeze(-1)) / step.clamp(min=tiny)).round_().clamp_(0, CODE_MAX)
    codes = codes.to(torch.uint8)
    packed = codes[:, :, 0::2] | (codes[:, :, 1::2] << 4)  # a pair of groups shares 32 bytes
    return (packed.reshape(rows, width // 2), torch.cat([group_scale, group_offset], -1).to(torch.uint8),
            torch.cat([block_scale, block_offset], -1))


def dequantize(weights: Int4Weights) -> torch.Tensor:
    """The weights the kernel computes with, in float32 [out, in]."""
    rows = weights.codes.shape[0]
    packed = weights.codes.reshape(rows, -1, BLOCK // GROUP // 2, GROUP)
    codes = torch.stack([packed & 0x0F, packed >> 4], dim=3).reshape(rows, -1, BLOCK // GROUP, GROUP).float()
    group = weights.group_scales.float()
    scale = group[..., :4] * weights.block_scales[..., :1]
    offset = group[..., 4:] * weights.block_scales[..., 1:]
    return (codes * scale.unsqueeze(-1) - offset.unsqueeze(-1)).reshape(rows, -1)


def matmul(x: torch.Tensor, weights: Int4Weights) -> torch.Tensor:
    """x [rows, in] @ weights.T → [rows, out], in x's dtype."""
    return kernel().int4_matmul(x, weights.codes, weights.group_scales, weights.block_scales)


def why_unavailable() -> str | None:
    """None where the kernel runs here; else the reason, for `doctor` and the load log."""
    try:
        kernel()
    except KernelUnavailable as error:
        return str(error)
    return None


@functools.lru_cache(maxsize=1)
def kernel():
    """The compiled kernel module: built once per machine (about a minute), then loaded from cache.
    Where the compiler lacks OpenMP (clang without libomp), built again for one core: half as fast
    on two cores, still faster than int8."""
    capability = torch.backends.cpu.get_cpu_capability()
    if capability not in ("AVX2", "AVX512"):
        raise KernelUnavailable(f"the 4-bit kernel needs an x86 CPU with AVX2 (this one: {capability})")
    started = time.perf_counter()
    try:
        module = _build("quickdraft_cpu_int4", THREAD_FLAGS)
    except KernelUnavailable as threaded:
        if not THREAD_FLAGS:
            raise
        log.warning("%s with %s; building it for one core", threaded, " ".join(THREAD_FLAGS))
        module = _build("quickdraft_cpu_int4_one_core", [])
    log.info("4-bit CPU kernel ready in %.1f s (its loop on %d threads)", time.perf_counter() - started,
             module.parallel_threads())
    return module


def _build(name: str, thread_flags: list[str]):
    from torch.utils.cpp_extension import load

    try:
        return load(name=name, sources=[str(SOURCE)], extra_cflags=FLAGS + thread_flags, extra_ldflags=thread_flags,
                    verbose=os.environ.get("QUICKDRAFT_KERNEL_VERBOSE") == "1")
    except Exception as error:  # no compiler, no ninja, a compile error: the reason is in the message
        text = " ".join(str(error).split())[:300]
        raise KernelUnavailable(f"the 4-bit kernel could not be built: {type(error).__name__}: {text}") from error

"""4-bit weights (engine/kernels/cpu_int4.py, engine/models/quantize.py): the format, the
kernel against the weights it stores, and the loading. Exact speculative decoding on them is
in test_quantize.py, beside int8's."""

from __future__ import annotations

import pytest
import torch

from engine.errors import ModelError
from engine.kernels import cpu_int4
from engine.models.loading import load_model, parse_precision
from engine.models.quantize import ROWS_PER_READ, Int4Linear, float_weights, pass_prompt_tokens, quantize_weights
from support.tiny_models import assert_logits_close

pytestmark = pytest.mark.skipif(cpu_int4.why_unavailable() is not None, reason=str(cpu_int4.why_unavailable()))


def weights(rows: int, width: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(rows, width, generator=generator) * 0.02


@pytest.mark.parametrize("shape", [(8, 128), (37, 896), (300, 1536)])
def test_each_weight_lands_within_half_a_step_of_its_group_grid(shape):
    w = weights(*shape)
    blocks = cpu_int4.quantize(w, rows_at_once=16)  # several chunks: the chunking keeps rows in place
    codes = torch.stack([blocks.codes & 0x0F, blocks.codes >> 4])
    assert codes.max() <= cpu_int4.CODE_MAX
    groups = w.reshape(shape[0], -1, cpu_int4.GROUP)
    step = (groups.amax(-1) - groups.amin(-1).clamp(max=0)) / cpu_int4.CODE_MAX
    error = (cpu_int4.dequantize(blocks) - w).reshape_as(groups).abs().amax(-1)
    # Half a step, plus how far the 8-bit group scale and offset's rounding (half a block unit
    # each) move the grid: the scale's over 15 codes, the offset's once.
    block_scale, block_offset = (blocks.block_scales[..., i].repeat_interleave(4, dim=1) for i in (0, 1))
    assert (error <= step / 2 + 8 * block_scale + block_offset + 1e-7).all()


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernel_computes_with_the_stored_weights_and_int8_rows(rows, dtype):
    """Its one approximation: each block of 128 inputs is rounded to int8, moving each input at most
    half its block's step, so the output moves at most that times the block's absolute weights."""
    w = weights(45, 640, seed=rows)
    blocks = cpu_int4.quantize(w)
    dequantized = cpu_int4.dequantize(blocks)
    x = torch.randn(rows, 640, generator=torch.Generator().manual_seed(7)).to(dtype)
    got = cpu_int4.matmul(x, blocks)
    assert got.dtype == dtype and got.shape == (rows, 45)
    xf = x.float()
    exact = xf @ dequantized.T
    step = xf.reshape(rows, -1, cpu_int4.BLOCK).abs().amax(-1) / 127  # [rows, blocks]
    weight_mass = dequantized.abs().reshape(45, -1, cpu_int4.BLOCK).sum(-1)  # [out, blocks]
    bound = (step / 2) @ weight_mass.T
    float_slack = 1e-5 * (xf.abs() @ dequantized.abs().T) + (exact.abs() * 2 ** -7 if dtype == torch.bfloat16 else 0)
    assert ((got.float() - exact).abs() <= bound + float_slack).all()


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_the_kernel_runs_on_every_thread_torch_has(two_threads):
    """Built without torch's threading flags, the kernel's parallel loop silently runs on one core."""
    assert cpu_int4.kernel().parallel_threads() == 2


def test_a_compiler_without_openmp_still_gets_the_kernel_on_one_core(monkeypatch, caplog, two_threads):
    monkeypatch.setattr(cpu_int4, "THREAD_FLAGS", ["-fno-such-threading-flag"])  # the compiler refuses it
    module = cpu_int4.kernel.__wrapped__()  # a fresh build, not the cached module
    assert "building it for one core" in caplog.text
    assert module.parallel_threads() == 1
    blocks = cpu_int4.quantize(weights(8, 256))
    x = torch.randn(3, 256)
    assert torch.equal(module.int4_matmul(x, blocks.codes, blocks.group_scales, blocks.block_scales), cpu_int4.matmul(x, blocks))


def test_the_kernel_refuses_what_it_cannot_read():
    blocks = cpu_int4.quantize(weights(4, 256))
    with pytest.raises(RuntimeError, match="multiple of 128"):
        cpu_int4.kernel().int4_matmul(torch.randn(1, 200), blocks.codes[:, :100], blocks.group_scales, blocks.block_scales)
    with pytest.raises(RuntimeError, match="scales do not match"):
        cpu_int4.kernel().int4_matmul(torch.randn(1, 256), blocks.codes, blocks.group_scales[:2], blocks.block_scales)


def test_an_int4_layer_reads_its_float_weights_on_prompt_chunks():
    layer = torch.nn.Linear(256, 24, bias=True)
    model = torch.nn.Sequential(layer)
    assert quantize_weights(model, "int4") == 1
    quantized = model[0]
    assert isinstance(quantized, Int4Linear) and quantized.weight is layer.weight
    chunk, row = torch.randn(ROWS_PER_READ + 1, 256), torch.randn(1, 256)
    with torch.no_grad():
        with float_weights(model):
            assert_logits_close(model(chunk), layer(chunk))
            # A chunk's last-token logits are one row: the quantized weights, a sixth of the bytes.
            assert torch.equal(model(row), quantized.quantized_matmul(row) + layer.bias)
        assert torch.allclose(model(chunk), chunk @ quantized.dequantized().T + layer.bias, atol=0.05)
        assert not torch.allclose(model(chunk), layer(chunk), atol=1e-3)
    assert pass_prompt_tokens(model) is not None


def test_dtype_int4_loads_int4_weights_and_says_so(wide_tiny_model_dir):
    loaded = load_model(str(wide_tiny_model_dir), dtype="int4", device="cpu")
    assert loaded.weights == "int4" and loaded.precision.startswith("int4 weights, ")
    linears = [m for m in loaded.model.modules() if isinstance(m, (torch.nn.Linear, Int4Linear))]
    assert linears and all(isinstance(m, Int4Linear) for m in linears)
    with pytest.raises(ModelError, match="int4 weights are for the CPU"):
        parse_precision("int4", torch.device("cuda"))


def test_where_the_kernel_cannot_run_the_engine_says_why_and_takes_int8(wide_tiny_model_dir, monkeypatch):
    # A CPU without AVX2 cannot be had here: its capability is what the kernel asks torch for.
    from engine.models.loading import cpu_weights

    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    cpu_int4.kernel.cache_clear()
    try:
        assert "needs an x86 CPU with AVX2 (this one: DEFAULT)" in cpu_int4.why_unavailable()
        assert cpu_weights() == "int8"
        with pytest.raises(ModelError, match="cannot give .* int4 weights: the 4-bit kernel needs .*use --dtype int8"):
            load_model(str(wide_tiny_model_dir), dtype="int4", device="cpu")
    finally:
        monkeypatch.undo()
        cpu_int4.kernel.cache_clear()
    assert cpu_int4.why_unavailable() is None

"""Weight-only int8 (engine/models/quantize.py): the arithmetic, the loading, and exact
speculative decoding on the quantized model."""

from __future__ import annotations

import pytest
import torch

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import DrafterConfig, make_drafter
from engine.errors import ModelError
from engine.kernels import cpu_int4
from engine.models.loading import load_model, parse_precision
from engine.models.quantize import (DEFAULT_PROMPT_MATMUL, PASS_PROMPT_TOKENS, PROMPT_MATMULS, ROWS_PER_READ, Int8Linear,
                                    WeightChoice, float_weights, pass_prompt_tokens, quantize_weights)
from support.tiny_models import assert_logits_close


def linear(in_features: int, out_features: int, dtype: torch.dtype, bias: bool = False) -> torch.nn.Linear:
    torch.manual_seed(in_features + out_features)
    layer = torch.nn.Linear(in_features, out_features, bias=bias)
    return layer.to(dtype)


@pytest.mark.parametrize("shape", [(64, 48), (896, 130)])
def test_rounding_moves_no_weight_more_than_half_a_step(shape):
    layer = linear(*shape, torch.float32)
    q = Int8Linear(layer, WeightChoice())
    step = q.scale.float()[:, None]
    weight = layer.weight.float()
    assert q.qweight.dtype == torch.int8 and q.qweight.abs().max() <= 127
    # Half a step, give or take float32's rounding of the division and the product.
    assert ((q.dequantized() - weight).abs() <= step / 2 + 4 * torch.finfo(torch.float32).eps * weight.abs()).all()
    # The largest weight of each row takes the top code (or the one below: the scale is rounded
    # up to what the kernel reads).
    assert (q.qweight.abs().amax(dim=1) >= 126).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 4, 9])
def test_the_layer_computes_with_its_dequantized_weights(dtype, rows):
    layer = linear(128, 96, dtype, bias=True)
    q = Int8Linear(layer, WeightChoice())
    x = torch.randn(2, rows, 128).to(dtype)
    reference = x.float() @ q.dequantized().T + layer.bias.float()
    got = q(x)
    assert got.shape == (2, rows, 96) and got.dtype == dtype
    # The rows' rounding to the kernel's dtype, one rounding of the output, the sum's rounding.
    tolerance = 4 * torch.finfo(Int8Linear.rows_dtype).eps * (x.float().abs() @ q.dequantized().abs().T
                                                               + layer.bias.float().abs())
    assert ((got.float() - reference).abs() <= tolerance + 1e-6).all()


def test_quantizing_replaces_every_linear_layer_and_keeps_the_float_weights(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    model = loaded.model
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    output_matrix = model.get_output_embeddings().weight
    floats = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    assert quantize_weights(model) == linears > 0
    after = model.state_dict()
    assert all(torch.equal(after[name], tensor) for name, tensor in floats.items())  # float weights untouched
    assert not any(isinstance(m, torch.nn.Linear) for m in model.modules())
    # Medusa heads read the output layer's float matrix (tied to the embeddings in Qwen's).
    output = model.get_output_embeddings()
    assert isinstance(output, Int8Linear) and output.weight is output_matrix


def test_prompt_chunks_read_the_float_weights_and_passes_the_int8_ones():
    layer = linear(128, 96, torch.float32)
    choice = WeightChoice()
    q = Int8Linear(layer, choice)
    model = torch.nn.Sequential(q)
    model.quantized_weight_choice = choice
    x = torch.randn(ROWS_PER_READ + 1, 128)
    with float_weights(model), torch.no_grad():
        assert_logits_close(q(x), layer(x))  # oneDNN's float matmul where it runs: not ATen's rounding
    assert not choice.float_weights
    assert not torch.equal(q(x), layer(x))  # rounded weights
    with float_weights(torch.nn.Linear(2, 2)):  # no int8 layers: nothing to switch
        pass


def test_dtype_int8_loads_int8_weights_and_says_so(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="int8", device="cpu")
    assert loaded.weights == "int8" and loaded.precision.startswith("int8 weights, ")
    assert any(isinstance(m, Int8Linear) for m in loaded.model.modules())
    assert not load_model(str(tiny_model_dir), dtype="float32", device="cpu").weights


def test_int8_is_for_the_cpu():
    assert parse_precision("int8", torch.device("cpu"))[1]
    with pytest.raises(ModelError, match="int8 weights are for the CPU"):
        parse_precision("int8", torch.device("cuda"))


@pytest.mark.parametrize("weights", ["int8", pytest.param("int4", marks=pytest.mark.skipif(
    cpu_int4.why_unavailable() is not None, reason="no 4-bit kernel here"))])
@pytest.mark.parametrize("drafter", ["draft", "draft-tree"])
def test_speculative_decoding_on_the_quantized_model_is_exact(tiny_model_dir, wide_tiny_model_dir, drafter, weights):
    """The output equals the quantized model's own plain decoding (fp32 activations). The
    quantized model drafts for itself: its drafts come from one-row passes and are verified
    in passes of several rows, the kernel's two paths."""
    loaded = load_model(str(wide_tiny_model_dir if weights == "int4" else tiny_model_dir), dtype="float32", device="cpu")
    assert quantize_weights(loaded.model, weights) > 0
    prompt = loaded.tokenizer("def add(a, b):\n    return a + b\n" * 3, add_special_tokens=False)["input_ids"]
    assert len(prompt) > PASS_PROMPT_TOKENS  # read as the engine reads it: float chunks, then int8 passes
    config = GenerationConfig(max_new_tokens=40, max_draft_tokens=5, pass_prompt_tokens=pass_prompt_tokens(loaded.model))
    with torch.inference_mode():
        plain = SpeculativeDecoder(loaded.model, None).generate(prompt, config)
        drafts = make_drafter(drafter, loaded.model, DrafterConfig(max_draft_tokens=5), verifier=loaded.model)
        speculative = SpeculativeDecoder(loaded.model, drafts).generate(prompt, config)
    assert speculative.token_ids == plain.token_ids
    # Drafts were checked and taken. The wide model's random logits are closer to ties, so fewer
    # of its own drafts survive the several-row passes' other rounding; exactness is the point.
    assert speculative.stats.accepted > len(plain.token_ids) // (2 if weights == "int8" else 4)


def test_a_long_prompt_rest_is_prefilled_and_the_first_pass_feeds_its_last_token(tiny_model_dir):
    loaded = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    assert pass_prompt_tokens(loaded.model) is None  # float weights: the first pass feeds the whole rest
    quantize_weights(loaded.model)
    assert pass_prompt_tokens(loaded.model) == PASS_PROMPT_TOKENS
    forwards = []  # (tokens fed, read with the float weights)
    choice = loaded.model.quantized_weight_choice
    loaded.model.model.register_forward_pre_hook(
        lambda module, args, kwargs: forwards.append((kwargs["input_ids"].shape[1], choice.float_weights)),
        with_kwargs=True)
    decoder = SpeculativeDecoder(loaded.model, None)
    with torch.inference_mode():
        for tail in (PASS_PROMPT_TOKENS, PASS_PROMPT_TOKENS + 1):
            forwards.clear()
            decoder.kv.crop(0)
            config = GenerationConfig(max_new_tokens=1, prefill_chunk=None, pass_prompt_tokens=PASS_PROMPT_TOKENS)
            decoder.generate(list(range(5, 5 + tail)), config)
            expected = [(tail, False)] if tail <= PASS_PROMPT_TOKENS else [(tail - 1, True), (1, False)]
            assert forwards == expected


def test_prompt_chunks_multiply_with_onednn_where_the_build_has_it_and_agree_with_aten():
    assert DEFAULT_PROMPT_MATMUL == ("onednn" if torch.backends.mkldnn.is_available() else "aten")
    assert WeightChoice().prompt_matmul is PROMPT_MATMULS[DEFAULT_PROMPT_MATMUL]
    torch.manual_seed(0)
    x, weight, bias = torch.randn(1, 40, 256), torch.randn(96, 256) * 0.05, torch.randn(96)
    expected = PROMPT_MATMULS["aten"](x, weight, bias)
    for multiply in PROMPT_MATMULS.values():
        assert_logits_close(multiply(x, weight, bias), expected)

"""`quickdraft bench passes` on the CPU: small random models through the real CLI, the real
caches (dynamic and static, bucketed), the real draft-model drafter and acceptance code.
Nothing here asserts a speed; what is checked is that the figures are all there and that
the replayed decodes follow their acceptance pattern."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.bench.model_configs import QWEN_CONFIGS
from engine.bench.passes import REPLAYS
from engine.models import store
from lsp_server.cli import main as cli_main


def test_quick_run_writes_every_figure(tmp_path, capsys):
    assert cli_main(["bench", "passes", "--quick", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "passes.json").read_text())
    config = result["config"]
    assert config["fast_modes"] == ["bucketed"] and config["device"] == "cpu"
    models = [config["draft"], *config["verifiers"]]
    assert result["fast_mode_used"] == {m: {"bucketed": "bucketed"} for m in models}
    expected = {(m, c, k) for m in models for c in config["contexts"] for k in (1, 2, 4, 8, 16)}
    assert {(r["model"], r["context"], r["pass_tokens"]) for r in result["records"]} == expected
    assert all(r["eager_ms"] > 0 and r["fast_ms"] > 0 for r in result["records"])
    assert all(r["decode_ms"] > 0 for r in result["records"])  # the CPU's decode attention, beside SDPA
    assert {(d["model"], d["context"]) for d in result["draft_steps"]} == {(m, c) for m in models
                                                                            for c in config["contexts"]}
    assert all(p["eager_tokens_per_s"] > 0 and p["fast_tokens_per_s"] > 0 for p in result["prefill"])
    replays = {r["name"]: r for r in result["replays"]}
    assert set(replays) == {r.name for r in REPLAYS}
    for replay in replays.values():
        assert replay["new_tokens"] == config["new_tokens"] and replay["eager_ms"] > 0 and replay["fast_ms"] > 0
    assert replays["plain"]["passes"] == config["new_tokens"]  # one token a pass
    for name in ("lookup", "draft"):  # τ tokens a pass, give or take the last pass's rounding
        assert abs(config["new_tokens"] / replays[name]["passes"] - replays[name]["tau"]) < 0.5
    assert result["targets"] == []  # the H200 targets are only judged on CUDA
    table = capsys.readouterr().out
    assert "k+1" in table and "decode attention" in table and "replayed decode" in table and "passes.json" in table


def test_int8_weights_are_measured_and_said(tmp_path, capsys):
    args = ["bench", "passes", "--quick", "--dtype", "int8", "--verifiers", "none", "--fast-mode", "eager"]
    assert cli_main([*args, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "passes.json").read_text())
    assert result["config"]["dtype"].startswith("int8 weights, ") and result["environment"]["dtype"].startswith("int8")
    assert result["records"] and all(r["eager_ms"] > 0 for r in result["records"])
    assert "int8 weights" in capsys.readouterr().out


def test_cuda_asked_for_but_missing_is_one_clear_line(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():  # the message under test needs a machine without CUDA
        pytest.skip("this machine has CUDA")
    assert cli_main(["bench", "passes", "--quick", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "CUDA is not available" in capsys.readouterr().err
    assert cli_main(["bench", "passes", "--quick", "--fast-mode", "graphs", "--out", str(tmp_path)]) == 2
    assert "needs --device cuda" in capsys.readouterr().err
    assert cli_main(["bench", "passes", "--quick", "--verifiers", "qwen-9000b", "--out", str(tmp_path)]) == 2
    assert "unknown model shape" in capsys.readouterr().err


@pytest.mark.real_model
@pytest.mark.parametrize("preset", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_embedded_shapes_are_the_real_configs(preset):
    path = store.installed_path(preset)
    assert path is not None, f"{preset} is not pulled (real_model tests need the default pair)"
    real = json.loads((Path(path) / "config.json").read_text())
    metadata = {"_model_name_or_path", "transformers_version", "dtype", "layer_types"}
    assert {k: v for k, v in real.items() if k not in metadata} == QWEN_CONFIGS[preset]


def test_ops_per_pass_eager_vs_compiled(tmp_path, capsys):
    """The quick draft model's shape, as tests/decoding/test_compiled_step.py compiles it: its graphs
    (passes of 1 and 8 tokens after 32) are in inductor's cache by then. Nothing is timed."""
    args = ["bench", "passes", "--quick", "--verifiers", "none", "--measure", "ops", "--out", str(tmp_path)]
    assert cli_main(args) == 0
    result = json.loads((tmp_path / "passes.json").read_text())
    assert result["records"] == [] and result["replays"] == []
    ops = {r["pass_tokens"]: r for r in result["ops"]}
    assert set(ops) == {1, 8} and all(r["context"] == 32 and r["model"] == "quick-draft" for r in ops.values())
    for row in ops.values():
        assert 0 < row["compiled_ops"] < row["eager_ops"] and row["ratio"] == row["compiled_ops"] / row["eager_ops"]
        assert row["compile_s"] > 0
    table = capsys.readouterr().out
    assert "ops per pass" in table and "compiled/eager" in table
    assert cli_main(["bench", "passes", "--quick", "--measure", "speed", "--out", str(tmp_path)]) == 2
    assert "--measure takes" in capsys.readouterr().err


def test_every_qwen_shape_has_its_published_size():
    """Built on the meta device (no memory): parameter counts as Qwen2.5-Coder publishes them."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    published_billions = {"qwen2.5-coder-0.5b": 0.49, "qwen2.5-coder-1.5b": 1.54, "qwen2.5-coder-3b": 3.09,
                          "qwen2.5-coder-7b": 7.61, "qwen2.5-coder-14b": 14.7}
    assert set(QWEN_CONFIGS) == set(published_billions)
    for name, billions in published_billions.items():
        with torch.device("meta"):
            model = Qwen2ForCausalLM(Qwen2Config(**QWEN_CONFIGS[name]))
        counted = sum(p.numel() for p in model.parameters())
        if name in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):  # published tied; converted from GGUF untied
            counted -= model.lm_head.weight.numel()
        counted /= 1e9
        assert abs(counted - billions) / billions < 0.01, (name, counted)


def test_compare_weights_times_each_format_of_each_model_side_by_side(tmp_path, capsys):
    from engine.kernels import cpu_int4
    from engine.models.quantize import DEFAULT_PROMPT_MATMUL, PROMPT_MATMULS

    formats = ["int8", "int8-f32rows", "float"] + (["int4"] if cpu_int4.why_unavailable() is None else [])
    args = ["bench", "passes", "--quick", "--device", "cpu", "--compare-weights", ",".join(formats)]
    assert cli_main([*args, "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "weights.json").read_text())
    assert [(r["model"], r["weights"]) for r in result["rows"]] == [(m, f) for m in ("quick-draft", "quick-verifier")
                                                                    for f in formats]
    assert all(ms > 0 for r in result["rows"] for ms in r["pass_ms"].values())
    by_format = {r["weights"]: r for r in result["rows"] if r["model"] == "quick-verifier"}
    assert by_format["float"]["weight_bytes"] > 3 * by_format["int8"]["weight_bytes"]  # float32 against int8
    if "int4" in by_format:
        assert by_format["int4"]["weight_bytes"] < by_format["int8"]["weight_bytes"]
    assert result["rows"][0]["ratio"] == {"1": 1.0, "4": 1.0}  # the quick draft in int8 is the baseline
    # Cold prompt chunks, each prompt matmul in turn, the engine's own marked.
    chunks = result["prompt_chunks"]
    assert [(r["model"], r["matmul"]) for r in chunks] == [(m, matmul) for m in ("quick-draft", "quick-verifier")
                                                           for matmul in PROMPT_MATMULS]
    assert all(ms > 0 for r in chunks for ms in r["chunk_ms"].values())
    assert sum(r["default"] for r in chunks) == 2
    out = capsys.readouterr().out
    assert "| quick-verifier | int8 |" in out and f"| quick-verifier | {DEFAULT_PROMPT_MATMUL} * |" in out


def test_compare_weights_refuses_an_unknown_format(capsys):
    assert cli_main(["bench", "passes", "--quick", "--device", "cpu", "--compare-weights", "int3"]) == 2
    assert "--compare-weights takes" in capsys.readouterr().err

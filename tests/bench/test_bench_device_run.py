"""`quickdraft bench passes --device-run`, the GPU session's one command, run `--quick` on the CPU:
tiny shapes, the captured path's computation uncaptured (`bucketed`) beside the compiled step
(two graphs a model: passes of 1 and 8 tokens). What is checked is that every section is there
with sane values, not a speed; the issue's targets (judged on CUDA only) are checked on made-up
figures."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity

from engine.bench import pass_ops
from engine.bench.device_run import device_run_config
from engine.bench.pass_targets import targets
from engine.decoding.compiled_step import CompiledKVCache
from lsp_server.cli import main as cli_main

PATHS = ("eager", "bucketed", "compiled")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One run for the tests below (a module fixture: capsys is per test, so stdout is caught here)."""
    out = tmp_path_factory.mktemp("device-run")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = cli_main(["bench", "passes", "--device-run", "--quick", "--device", "cpu", "--out", str(out)])
    return status, json.loads((out / "device-run.json").read_text()), printed.getvalue()


def test_every_section_is_there_with_sane_values(quick_run):
    status, result, _ = quick_run
    assert status == 0 and result["errors"] == []
    config = result["config"]
    assert config["preset"] == "device-run" and config["fast_modes"] == ["bucketed", "compiled"]
    models = [config["draft"], *config["verifiers"]]
    assert models == ["quick-draft", "quick-verifier"]
    modes = config["fast_modes"]
    assert {(r["model"], r["pass_tokens"], r["fast_mode"]) for r in result["records"]} == {
        (m, k, mode) for m in models for k in (1, 8) for mode in modes}
    assert all(r["eager_ms"] > 0 and r["fast_ms"] > 0 and r["speedup"] > 0 for r in result["records"])
    assert {(d["model"], d["fast_mode"]) for d in result["draft_steps"]} == {(m, mode) for m in models for mode in modes}
    assert all(d["eager_ms"] > 0 and d["fast_ms"] > 0 for d in result["draft_steps"])
    loops = result["draft_loops"]  # the draft model's k tokens in one device loop, beside token by token
    assert config["draft_loop_ks"] == [4, 8]
    assert {(d["model"], d["context"], d["fast_mode"], d["k"]) for d in loops} == {
        ("quick-draft", 32, mode, k) for mode in modes for k in (4, 8)}
    assert all(d["per_token_ms"] > 0 and d["loop_ms"] > 0 and d["same_drafts"] is True for d in loops)
    prefill = result["prefill"]
    assert {(p["model"], p["context"], p["chunk"], p["fast_mode"]) for p in prefill} == {
        (m, 300, chunk, mode) for m in models for chunk in (300, 128) for mode in modes}
    assert all(p["eager_ms"] > 0 and p["fast_tokens_per_s"] > 0 for p in prefill)
    replays = result["replays"]
    assert {(r["name"], r["fast_mode"]) for r in replays} == {(n, mode) for n in ("plain", "lookup", "draft")
                                                             for mode in modes}
    for replay in replays:
        assert replay["new_tokens"] == config["new_tokens"] and replay["eager_ms"] > 0 and replay["fast_ms"] > 0
        assert abs(config["new_tokens"] / replay["passes"] - replay["tau"]) < 0.5
    assert {r["draft_tokens"] for r in replays if r["name"] == "lookup"} == {7}  # a pass of 8: a compiled size
    assert all(result["warmup_s"][m]["compiled"] > 0 for m in models)
    assert result["fast_mode_used"] == {m: {"bucketed": "bucketed", "compiled": "compiled"} for m in models}
    assert result["targets"] == []  # judged on CUDA only
    assert result["seconds"]["total"] > 0 and set(models) < set(result["seconds"])


def test_kernels_per_pass_and_the_profilers_summary(quick_run):
    _, result, _ = quick_run
    profiles = {(p["model"], p["pass_tokens"], p["path"]): p for p in result["profiles"]}
    assert set(profiles) == {(m, k, path) for m in ("quick-draft", "quick-verifier") for k in (1, 8) for path in PATHS}
    for (model, size, path), profile in profiles.items():
        assert profile["unit"] == "ops" and profile["count"] > 0 and profile["ms"] > 0
        assert 0 < len(profile["top"]) <= 5 and all(t["name"] and t["ms"] >= 0 and t["calls"] > 0 for t in profile["top"])
        if path == "compiled":
            assert profile["count"] < profiles[model, size, "eager"]["count"]


def test_the_table_is_markdown(quick_run):
    _, _, printed = quick_run
    assert "| model | context | k+1 | eager ms | bucketed ms | bucketed × | compiled ms | compiled × |" in printed
    for section in ("| draft token |", "| draft token, k-step loop |", "| prefill |", "| replayed decode |",
                    "| ops per pass |", "| top ops by time |"):
        assert section in printed
    assert "device-run.json" in printed


def test_a_path_that_fails_is_an_error_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    def broken(self, *args, **kwargs):
        raise RuntimeError("inductor fell over")

    monkeypatch.setattr(CompiledKVCache, "warm", broken)
    args = ["bench", "passes", "--device-run", "--quick", "--device", "cpu", "--verifiers", "none", "--out", str(tmp_path)]
    assert cli_main(args) == 1
    result = json.loads((tmp_path / "device-run.json").read_text())
    assert result["errors"] == ["quick-draft compiled (warming): RuntimeError: inductor fell over"]
    assert result["records"] and {r["fast_mode"] for r in result["records"]} == {"bucketed"}
    assert {p["path"] for p in result["profiles"]} == {"eager", "bucketed"}
    assert "error: quick-draft compiled (warming)" in capsys.readouterr().out


def test_the_preset_sets_its_own_shape_of_run(tmp_path, capsys):
    assert cli_main(["bench", "passes", "--device-run", "--quick", "--contexts", "64", "--out", str(tmp_path)]) == 2
    assert "--device-run sets --contexts itself" in capsys.readouterr().err
    assert cli_main(["bench", "passes", "--device-run", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert "elsewhere add --quick" in capsys.readouterr().err
    full = device_run_config("cuda", None)
    assert full.contexts == (512,) and full.prefill_contexts == (2300,) and full.compiled_buckets == (1, 8)
    assert full.resolved_fast_modes() == ("graphs", "compiled") and full.verifiers is None and not full.quick


def made_up(fast_ms: dict[str, float]) -> dict:
    """A device run's result with the figures the targets read, every fast path at `fast_ms`'s values."""
    modes = list(fast_ms)
    result = {"config": {"fast_modes": modes}, "records": [], "draft_steps": [], "draft_loops": [], "replays": [],
              "prefill": []}
    for mode, ms in fast_ms.items():
        for model in ("qwen2.5-coder-1.5b", "qwen2.5-coder-7b"):
            result["records"].append({"model": model, "context": 512, "pass_tokens": 8, "fast_mode": mode,
                                      "fast_ms": ms * (3 if model.endswith("7b") else 1)})
            result["prefill"].append({"model": model, "context": 2300, "chunk": 2300, "fast_mode": mode,
                                      "fast_ms": ms * 20})
        result["draft_steps"].append({"model": "qwen2.5-coder-0.5b", "context": 512, "fast_mode": mode,
                                      "fast_ms": ms / 2})
        result["draft_loops"] += [{"model": "qwen2.5-coder-0.5b", "context": 512, "fast_mode": mode, "k": k,
                                   "loop_ms": ms / (5 if k == 8 else 4)} for k in (4, 8)]
        result["replays"] += [{"verifier": "qwen2.5-coder-7b", "name": "plain", "fast_mode": mode, "fast_ms": ms * 192},
                              {"verifier": "qwen2.5-coder-7b", "name": "draft", "fast_mode": mode, "fast_ms": ms * 60},
                              {"verifier": "qwen2.5-coder-1.5b", "name": "lookup", "fast_mode": mode,
                               "fast_ms": ms * 26}]
    return result


def test_the_issues_targets_are_judged_for_each_path():
    rows = targets(made_up({"graphs": 7.5, "compiled": 1.0}))
    by = {(t["fast_mode"], t["target"]): t for t in rows}
    assert len(rows) == 2 * 8
    compiled = [t for t in rows if t["fast_mode"] == "compiled"]
    assert all(t["met"] and t["off_by"] == 0 for t in compiled)  # 1.0 / 3.0 / 0.5 / 0.2 ms, 3.2×, 26 ms, 20 ms
    loop = by["graphs", "0.5B draft token, k = 8 in the draft loop ≤ 0.6 ms"]  # k = 8's figure, not k = 4's
    assert loop["value"] == pytest.approx(1.5) and not loop["met"]
    graphs = by["graphs", "1.5B pass, k+1 = 8, 512 context ≤ 1.5 ms"]
    assert not graphs["met"] and graphs["off_by"] == pytest.approx(6.0) and graphs["value"] == 7.5
    speedup = by["graphs", "64 tokens, 7B + 0.5B draft at τ = 3, × the 7B plain ≥ 2.5×"]
    assert speedup["value"] == pytest.approx(3.2) and speedup["met"]  # a ratio: the same whatever the pass costs
    assert by["graphs", "1.5B cold 2,300-token prompt, one forward ≤ 40 ms"]["met"] is False
    assert targets(made_up({})) == []


class FakeEvent:
    def __init__(self, name: str, device: str, kind: str, us: float = 10.0) -> None:
        self.name, self.activity_type, self.cpu_parent = name, kind, None
        self.device_type = getattr(DeviceType, device)
        self.time_range = type("Range", (), {"elapsed_us": lambda _: us})()


def test_a_cuda_profile_counts_the_kernels_the_gpu_ran(monkeypatch):
    """The CUDA branch of profile_pass on a made-up trace: a graph replay's kernels, not its copy or its host calls."""
    events = [FakeEvent("cudaGraphLaunch", "CPU", "cuda_runtime"), FakeEvent("aten::copy_", "CPU", "cpu_op"),
              FakeEvent("Memcpy HtoD (Pinned -> Device)", "CUDA", "gpu_memcpy"),
              *[FakeEvent("triton_poi_fused_add_0", "CUDA", "kernel", 2.0) for _ in range(3)],
              *[FakeEvent(f"sm90_xmma_gemm_{i}", "CUDA", "kernel", 30.0 + i) for i in range(6)]]

    class FakeProfile:
        def __init__(self, activities):
            assert ProfilerActivity.CUDA in activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def events(self):
            return events

    monkeypatch.setattr(pass_ops, "profile", FakeProfile)
    monkeypatch.setattr(pass_ops.cuda_graphs, "synchronize", lambda device: None)
    summary = pass_ops.profile_pass(lambda: None, lambda: None, torch.device("cuda"))
    assert summary["unit"] == "kernels" and summary["count"] == 9
    assert summary["ms"] == pytest.approx((3 * 2.0 + sum(30.0 + i for i in range(6))) / 1000)
    assert [t["name"] for t in summary["top"]] == [f"sm90_xmma_gemm_{i}" for i in (5, 4, 3, 2, 1)]
    assert summary["launches"] == {"cudaGraphLaunch": 1}
    assert summary["device_activities"] == {"gpu_memcpy": 1, "kernel": 9}

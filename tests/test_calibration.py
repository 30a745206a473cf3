"""The verifier this CPU affords (engine/calibration.py): the rule on injected measurements (never
this machine's clock), the cache per machine, the server's default taking it, and a real measurement
of a tiny model."""

from __future__ import annotations

import json

import pytest

from engine.bench import calibration
from engine.bench.calibration import ModelSpeed, choose_verifier

SMALL, LARGE = calibration.CANDIDATES


def speeds(small_pass: float, small_prompt: float, large_pass: float, large_prompt: float) -> list[ModelSpeed]:
    return [ModelSpeed(SMALL, "int4 weights, float32", small_pass, small_pass / 2, small_prompt),
            ModelSpeed(LARGE, "int4 weights, float32", large_pass, large_pass / 2, large_prompt)]


def test_a_slow_machine_gets_the_small_model_and_says_why():
    # This machine's figures of 2026-12-07 (docs/benchmarks.md, "On a CPU without fast bf16").
    choice = choose_verifier(speeds(91, 120, 237, 38), budget_ms=200)
    assert choice.verifier == SMALL
    assert "237 ms, over half the 200 ms budget" in choice.reason and "38 prompt tokens/s" in choice.reason


def test_a_fast_machine_gets_the_large_model():
    assert choose_verifier(speeds(30, 900, 80, 320), budget_ms=200).verifier == LARGE


def test_prompt_reading_alone_can_rule_a_model_out():
    assert choose_verifier(speeds(30, 900, 80, 50), budget_ms=200).verifier == SMALL


def test_a_longer_budget_affords_more():
    measured = speeds(91, 300, 180, 150)
    assert choose_verifier(measured, budget_ms=200).verifier == SMALL
    assert choose_verifier(measured, budget_ms=400).verifier == LARGE


def test_where_nothing_fits_the_smallest_is_chosen():
    choice = choose_verifier(speeds(300, 50, 900, 20), budget_ms=200)
    assert choice.verifier == SMALL and choice.reason.startswith("none fits")
    with pytest.raises(ValueError):
        choose_verifier([], budget_ms=200)


def test_the_choice_is_kept_per_machine_and_becomes_the_cpu_default(tmp_path, monkeypatch):
    from lsp_server.workspace.settings import MACHINE_DEFAULTS, machine_defaults

    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path))
    assert calibration.load() is None
    assert machine_defaults("cpu").verifier == MACHINE_DEFAULTS["cpu"]["verifier"]
    measured = speeds(30, 900, 80, 320)
    path = calibration.save(measured, choose_verifier(measured, 200), 200)
    assert calibration.load()["verifier"] == LARGE
    assert machine_defaults("cpu").verifier == LARGE
    assert machine_defaults("gpu").verifier == MACHINE_DEFAULTS["gpu"]["verifier"]  # a CPU figure only
    record = json.loads(path.read_text())
    for key, other in (("cores", -1), ("int4_kernel", "an older kernel")):  # measured again, not used
        changed = json.loads(json.dumps(record))
        changed["machine"][key] = other
        path.write_text(json.dumps(changed))
        assert calibration.load() is None and machine_defaults("cpu").verifier == MACHINE_DEFAULTS["cpu"]["verifier"]
    path.write_text("{not json")
    assert calibration.load() is None


def test_a_measurement_times_a_real_model(tiny_model_dir):
    speed = calibration.measure(str(tiny_model_dir), dtype="float32")
    assert speed.pass_ms > 0 and speed.one_token_ms > 0 and speed.prompt_tokens_per_s > 0
    assert speed.precision == "float32"


def install(home, *names):
    from engine.models import store

    for name in names:
        path = store.model_dir(name, home)
        path.mkdir(parents=True, exist_ok=True)
        (path / store.MANIFEST).write_text("{}")


def test_a_machine_is_measured_once_it_holds_two_verifiers_and_again_for_a_new_one(tmp_path):
    assert not calibration.needed(tmp_path)
    install(tmp_path, SMALL)
    assert not calibration.needed(tmp_path)  # one model: nothing to choose
    install(tmp_path, LARGE)
    assert calibration.needed(tmp_path) and not calibration.needed(tmp_path, has_gpu=True)
    calibration.save(speeds(91, 120, 237, 38)[:1], choose_verifier(speeds(91, 120, 237, 38)[:1], 200), 200, tmp_path)
    assert calibration.needed(tmp_path)  # the record measured the 0.5B alone
    measured = speeds(91, 120, 237, 38)
    calibration.save(measured, choose_verifier(measured, 200), 200, tmp_path)
    assert not calibration.needed(tmp_path)


def test_pulling_the_second_verifier_measures_the_machine_and_the_default_follows(tmp_path, monkeypatch, capsys):
    from lsp_server.cli import models
    from lsp_server.workspace.settings import machine_defaults

    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path))
    install(tmp_path, SMALL, LARGE)
    fast = {speed.name: speed for speed in speeds(30, 900, 80, 320)}  # a machine that affords the 1.5B
    monkeypatch.setattr(calibration, "measure", lambda name: fast[name])
    models._calibrate_once()
    assert "measuring which it affords" in capsys.readouterr().out
    assert calibration.load()["verifier"] == LARGE and machine_defaults("cpu").verifier == LARGE
    models._calibrate_once()  # measured: not again
    assert capsys.readouterr().out == ""

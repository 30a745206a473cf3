"""`quickdraft/stats` says what `doctor --calibrate` had measured on this machine and chosen when the
server started (engine/bench/calibration.py)."""

from __future__ import annotations

from test_service import Editor, make_service

from engine.bench import calibration
from engine.bench.calibration import ModelSpeed, choose_verifier


def test_stats_carry_the_calibration_or_none(tmp_path, monkeypatch):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path))
    service = make_service(Editor())
    assert service.stats()["calibration"] is None
    service.shutdown()
    measured = [ModelSpeed("qwen2.5-coder-0.5b", "int4 weights, float32", 91.0, 49.0, 120.0),
                ModelSpeed("qwen2.5-coder-1.5b", "int4 weights, float32", 237.0, 114.0, 38.0)]
    calibration.save(measured, choose_verifier(measured, 200), 200)
    service = make_service(Editor())  # read as the server starts
    try:
        stats = service.stats()["calibration"]
        assert stats["verifier"] == "qwen2.5-coder-0.5b" and "237 ms" in stats["reason"] and stats["budgetMs"] == 200
        assert [m["passMs"] for m in stats["measured"]] == [91.0, 237.0]
    finally:
        service.shutdown()

"""Telemetry in-process: request counts, draft vs user acceptance, the stats snapshot, retuning."""

from __future__ import annotations

from lsp_server.workspace.telemetry import RETUNE_MIN_DRAFTED, WINDOW, RequestRecord, Telemetry


def model_record(i: int, *, drafted: int = 0, accepted: int = 0, latency_ms: float = 50.0, **extra) -> RequestRecord:
    drafters = {"draft": {"proposals": 1, "drafted": drafted, "accepted": accepted}} if drafted else {}
    return RequestRecord(id=str(i), uri="file:///a.py", source="model", latency_ms=latency_ms, budget_ms=200.0,
                         emitted=accepted + 2, verifier_passes=2, drafted=drafted, accepted=accepted,
                         drafters=drafters, **extra)


def test_counts_totals_and_per_drafter_figures():
    telemetry = Telemetry()
    telemetry.record(model_record(1, drafted=10, accepted=6))
    telemetry.record(model_record(2, drafted=4, accepted=4, stop_reason="cancelled"))
    telemetry.record(RequestRecord(id="3", uri="file:///a.py", source="typethrough", latency_ms=1.0, budget_ms=200.0))
    telemetry.count("superseded")
    snapshot = telemetry.snapshot("hybrid")
    assert snapshot["requests"] == 3 and snapshot["drafter"] == "hybrid"
    assert {k: snapshot["counts"][k] for k in ("model", "typethrough", "cancelled", "superseded")} == {
        "model": 2, "typethrough": 1, "cancelled": 1, "superseded": 1}
    assert snapshot["draftAcceptance"] == 10 / 14
    assert snapshot["tau"] == (8 + 6) / 4  # emitted per verifier pass over the model requests
    assert snapshot["drafters"]["draft"] == {"proposals": 2, "drafted": 14, "accepted": 10, "acceptance": 10 / 14}
    assert snapshot["withinBudget"] == 1.0 and len(snapshot["recent"]) == 3


def test_an_empty_server_reports_nothing_rather_than_zeros():
    snapshot = Telemetry().snapshot("lookup")
    assert snapshot["draftAcceptance"] is None and snapshot["tau"] is None and snapshot["userAcceptance"] is None
    assert snapshot["latencyMs"] == {"p50": None, "p90": None, "p99": None} and snapshot["withinBudget"] is None


def test_user_acceptance_is_kept_apart_from_draft_acceptance():
    telemetry = Telemetry()
    for item in ("qd-1", "qd-2", "qd-3", "qd-4"):
        telemetry.did_show(item)
    telemetry.did_accept("qd-1")
    telemetry.did_accept("qd-5")  # accepted without a show notification: shown too
    telemetry.did_partially_accept("qd-2", 3)
    telemetry.did_partially_accept("qd-2", 1)  # the longest partial accept counts
    snapshot = telemetry.snapshot("lookup")
    assert snapshot["shown"] == 5 and snapshot["accepted"] == 2 and snapshot["partiallyAccepted"] == 1
    assert snapshot["userAcceptance"] == 2 / 5 and telemetry.partial["qd-2"] == 3
    assert snapshot["draftAcceptance"] is None


def test_requests_over_budget_count_against_within_budget():
    telemetry = Telemetry()
    telemetry.record(model_record(1, latency_ms=150.0))
    telemetry.record(model_record(2, latency_ms=250.0))
    assert telemetry.snapshot("lookup")["withinBudget"] == 0.5


def test_retune_switches_to_lookup_only_when_the_draft_model_is_not_paying():
    telemetry = Telemetry()
    per_request = RETUNE_MIN_DRAFTED // 4
    for i in range(4):
        telemetry.record(model_record(i, drafted=per_request, accepted=per_request // 4))
    assert telemetry.retune("lookup") is None  # no draft model to drop
    mode, reason = telemetry.retune("hybrid")
    assert mode == "lookup" and "draft-model acceptance 25%" in reason
    assert len(telemetry.recent) == 0  # the new mode is judged on its own requests
    assert telemetry.retune("hybrid") is None


def test_retune_waits_for_enough_drafted_tokens_and_keeps_a_paying_draft():
    telemetry = Telemetry()
    telemetry.record(model_record(1, drafted=RETUNE_MIN_DRAFTED - 1, accepted=0))
    assert telemetry.retune("draft") is None  # too few drafted tokens to judge
    telemetry.record(model_record(2, drafted=RETUNE_MIN_DRAFTED, accepted=RETUNE_MIN_DRAFTED))
    assert telemetry.retune("draft") is None  # acceptance above the threshold


def test_the_window_is_rolling():
    telemetry = Telemetry()
    for i in range(WINDOW + 5):
        telemetry.record(model_record(i, latency_ms=float(i)))
    assert len(telemetry.recent) == WINDOW and telemetry.recent[0].id == "5"
    assert telemetry.snapshot("lookup")["requests"] == WINDOW + 5

"""The session benchmark's table says when the machine, not the model, made its quality figures.

On a 2-core machine busy with other work a one-token pass of the 0.5B took 0.8–2 s (50 ms when the
published figures were made): every model answer came empty at its deadline, before one verifier
pass, and the table showed 0 % shown beside a normal latency, with nothing to say why.
"""

from __future__ import annotations

from types import SimpleNamespace

from lsp_server.bench.session_report import figures, format_table, summarize
from lsp_server.bench.typist import SentRequest


def session(passes: list[int]):
    """A typing session whose model answers ran these many verifier passes each (0: empty at the deadline)."""
    records = []
    for typed, count in enumerate(passes):
        shown = "x = 1" if count else ""
        records.append(SentRequest(
            session="default", file="f.py", hole=0, version=typed + 2, line=9, character=typed, typed=typed,
            sent_s=float(typed), answered_s=typed + 0.1, status="answered", latency_ms=80.0, shown=shown,
            expected="x = 1"[typed:], within_budget=True,
            server={"source": "model", "stop_reason": "deadline", "verifier_passes": count, "emitted": count,
                    "prompt_tokens": 0 if not count else 3, "prefill_tokens": 0}))
    warming = {"recent": [{"uri": "file:///bench/f.py", "outcome": "warmed", "fed_tokens": 122, "ms": 5446.2}]}
    return SimpleNamespace(name="default", records=records, jumps=[], typed_chars=len(passes), budget_ms=200.0,
                           status={}, files=[], final_stats={"drafter": "lookup", "warming": warming})


def table(run) -> str:
    return format_table({"modes": [summarize(run)], "config": {"typing_cps": 6.0, "debounce_ms": 75.0},
                         "environment": {"cpu": "AMD EPYC", "cpu_cores": 2, "load_average": [4.4]}})


def test_a_session_whose_model_answers_ran_no_pass_says_the_machine_was_too_slow():
    run = session([0, 0, 0, 1, 0, 0, 1, 0])
    assert figures(run, run.records, run.typed_chars)["model_answers_without_pass"] == 0.75
    warning = [line for line in table(run).splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1
    assert "75 % of the model's 8 answers" in warning[0] and "200 ms budget" in warning[0]
    assert "22 tokens/s while warming" in warning[0]  # 122 tokens in 5.4 s: the server's own reading speed


def test_a_session_whose_model_answers_ran_passes_has_no_warning():
    run = session([2, 1, 0, 3, 0, 1, 1, 2])
    assert figures(run, run.records, run.typed_chars)["model_answers_without_pass"] == 0.25
    assert "WARNING" not in table(run)
    # One model answer, the cold one after a jump, and the rest followed or typed through: no sign.
    assert "WARNING" not in table(session([0]))
    empty = session([])
    assert figures(empty, [], 0)["model_answers_without_pass"] is None and "WARNING" not in table(empty)


def test_a_session_that_showed_the_draft_first_says_what_the_verdicts_did():
    run = session([1, 1, 1, 1])
    run.final_stats["verdicts"] = {"provisional": 4, "confirmed": 1, "extended": 1, "replaced": 2,
                                   "replaced_chars": 7, "unseen": 1, "cancelled": 0, "moved": 0}
    [line] = [line for line in table(run).splitlines() if "shown first" in line]
    assert "4 answers shown first" in line and "2 replaced (50 % of those shown, 3.5 characters each)" in line
    assert "3 came while the user was still there, 1 after they typed on" in line
    assert not [line for line in table(session([1, 1])).splitlines() if "shown first" in line]

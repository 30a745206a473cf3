"""`quickdraft bench engine|session` end to end on tiny models, and the figures' consistency.

Tiny random models write nonsense, so nothing here asserts a speed or a completion's
quality; what is checked is that both harnesses run through the real CLI, the real
`generate`, the real decoder and the real server, and that what they report hangs together.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict

from engine.bench.corpus import (HOLE_KINDS, body_holes, default_corpus, display_path, make_holes, midline_holes,
                                 statement_end_holes)
from engine.bench.figures import first_difference, positions_matching
from engine.drafters.config import DrafterConfig
from lsp_server.bench.session import SessionBenchConfig, pick_files, session_holes
from lsp_server.bench.session_report import keys_on_screen, language_table, parses
from lsp_server.bench.typist import SentRequest, judge
from lsp_server.cli import main as cli_main

ENGINE_MODES = ("hf-greedy", "hf-assisted", "hf-prompt-lookup", "quickdraft-lookup", "quickdraft-draft",
                "quickdraft-hybrid")

MODULE = textwrap.dedent('''\
    """A small module to type into."""

    import os


    GREETING = "hello"


    def join_words(words, separator=" "):
        """Join words with a separator."""
        parts = [w.strip() for w in words if w.strip()]
        return separator.join(parts)


    class Counter:
        def __init__(self, start=0):
            self.value = start

        def increment(self, step=1):
            self.value = self.value + step
            return self.value

        def reset(self):
            self.value = 0
            return self.value


    def main():
        counter = Counter(start=len(GREETING))
        print(join_words(["a", "b"], separator=os.sep), counter.increment())
    ''')


# ----------------------------------------------------------------------------- pure helpers


def test_first_difference_and_matching_positions():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 9, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2  # a prefix differs where it ends
    assert positions_matching([1, 2, 3], [1, 9, 3]) == (2, 3)
    assert positions_matching([1, 2], [1, 2, 3, 4]) == (2, 4)


def test_judge_exact_match_and_accepted_characters():
    assert judge("return x", "return x + 1\n") == (True, 8)
    assert judge("return x\n", "return x") == (True, 8)  # trailing blanks aside
    assert judge("return y", "return x") == (False, 7)
    assert judge("", "return x") == (False, 0)
    assert judge("   ", "   x") == (False, 3)  # whitespace only is never an exact match


def test_keys_on_screen_counts_the_keys_the_last_answer_before_them_had_right():
    def record(typed: int, shown: str, status: str = "answered") -> SentRequest:
        return SentRequest(session="s", file="f.py", hole=0, version=typed + 2, line=0, character=typed, typed=typed,
                             sent_s=0.0, status=status, shown=shown, expected="abcd"[typed:])
    records = [record(0, "ab"),  # "a" was on screen
               record(1, "xx"), record(1, "bcd"),  # the last answer before "b" (a ready re-ask) had it
               record(2, "c", status="cancelled"),  # never on screen
               record(3, "")]
    assert keys_on_screen(records, typed_chars=4) == 0.5
    assert keys_on_screen([], typed_chars=0) is None


def test_parses_judges_the_file_with_the_shown_completion_taken_against_the_users_own_keys():
    from engine.bench.corpus import Hole

    hole = Hole("m.py", "body", 1, 4, "def f(x):\n    ", "y = x + 1\n    return y", "\n\n\ndef g():\n    pass\n")
    js = Hole("m.js", "body", 1, 2, "function f(x) {\n  ", "return x + 1;", "\n}\n")
    block = Hole("b.js", "body", 1, 2, "function f(x) {\n  ", "if (x) {\n    return 1;\n  }", "\n}\n")
    holes = {("m.py", 0): hole, ("m.js", 0): js, ("b.js", 0): block}

    def record(typed: int, shown: str, file: str = "m.py", replace_chars: int = 0) -> SentRequest:
        return SentRequest(session="s", file=file, hole=0, version=2, line=1, character=4, typed=typed, sent_s=0.0,
                             status="answered", shown=shown, replace_chars=replace_chars)
    assert parses(holes, record(0, "y = x + 1\n    return y"))
    assert parses(holes, record(4, "x + 1"))  # typed "y = ": the file does not compile until the line is done
    assert not parses(holes, record(4, "(x + 1"))  # an open bracket the file never closes
    assert parses(holes, record(9, "\n    return y")) and not parses(holes, record(9, "\n  return y"))  # a bad dedent
    assert parses(holes, record(0, "return x * 2;", "m.js")) and not parses(holes, record(0, "return x + 1;)", "m.js"))
    assert parses(holes, record(0, "if (x) {", "b.js"))  # an open block, as the user's own next keys leave it too
    assert not parses(holes, record(0, "if (x) {", "m.js"))  # where the user writes a statement
    assert parses({}, record(0, "x")) is None  # a hole the run does not know


def test_language_table_only_when_several_languages_were_typed():
    figures = {"typed_chars": 10, "answered": 4, "latency_ms": {"p99": 150.0}, "latency_ms_model": {"p50": 120.0},
               "within_budget": 1.0, "shown_rate": 0.5, "exact_match_rate": 0.5, "parses_of_shown": 1.0,
               "accepted_chars_per_request": 2.0, "keys_on_screen": 0.4}
    assert language_table([{"name": "default", "by_language": {"python": figures}}]) == []
    table = language_table([{"name": "default", "by_language": {"python": figures, "c": figures}}])
    assert "parses" in table[1] and [line.split()[:2] for line in table[3:]] == [["default", "python"], ["default", "c"]]
    assert table[3].split()[9] == "100%"  # parses of shown


# ----------------------------------------------------------------------------- corpus and holes


def test_holes_rebuild_the_file_and_have_the_right_shape():
    for cutter, kind in ((body_holes, "body"), (statement_end_holes, "statement_end"), (midline_holes, "midline")):
        holes = cutter("m.py", MODULE)
        assert holes, kind
        for hole in holes:
            assert hole.kind == kind
            assert hole.prefix + hole.middle + hole.suffix == MODULE
            assert hole.middle.strip()
            lines = hole.prefix.split("\n")
            assert hole.line == len(lines) - 1 and hole.character == len(lines[-1])
            if kind == "midline":
                assert hole.suffix[0] in ")]}" and "\n" not in hole.middle
            if kind == "statement_end":
                assert "\n" not in hole.middle and hole.suffix.startswith("\n")
    bodies = {h.middle for h in body_holes("m.py", MODULE)}
    # The docstring stays in the prefix: the body starts at the first statement after it.
    assert "parts = [w.strip() for w in words if w.strip()]\n    return separator.join(parts)" in bodies


def test_default_corpus_and_holes_are_fixed_by_the_seed():
    files = default_corpus(9, seed=3)
    assert len(files) == 9 and files == default_corpus(9, seed=3)
    holes = make_holes(files, 6, seed=3)
    assert [h.kind for h in holes] == list(HOLE_KINDS) * 2
    again = make_holes(files, 6, seed=3)
    assert [(h.path, h.line, h.character, h.middle) for h in holes] == [(h.path, h.line, h.character, h.middle)
                                                                          for h in again]


# ----------------------------------------------------------------------------- engine benchmark


def _check_rate(value, name):
    assert value is None or 0.0 <= value <= 1.0, f"{name} = {value}"


def test_engine_bench_end_to_end_on_tiny_models(tiny_model_dir, tiny_draft_dir, tmp_path, capsys):
    out = tmp_path / "engine"
    code = cli_main(["bench", "engine", "--quick", "--verifier", str(tiny_model_dir), "--draft", str(tiny_draft_dir),
                     "--dtype", "float32", "--holes", "3", "--max-new-tokens", "12", "--prefix-tokens", "192",
                     "--suffix-tokens", "64", "--modes", ",".join(ENGINE_MODES + ("quickdraft-none",)),
                     "--tuned", "confidence_threshold=0.8,hybrid_min_match=3",
                     "--out", str(out), "--no-progress"])
    assert code == 0
    table = capsys.readouterr().out
    assert "quickdraft-hybrid" in table and "target quickdraft-hybrid" in table

    result = json.loads((out / "engine.json").read_text())
    assert (out / "engine-speedup.png").stat().st_size > 0 and (out / "engine-tau.png").stat().st_size > 0
    env = result["environment"]
    assert env["torch"] and env["cpu"] and env["dtype"] == "float32"
    assert env["verifier"]["parameters"] > 0 and env["draft"]["parameters"] > 0
    assert len(result["prompts"]) == 3 and [p["kind"] for p in result["prompts"]] == list(HOLE_KINDS)

    modes = {m["name"]: m for m in result["modes"]}
    assert set(ENGINE_MODES) <= set(modes)
    for name, m in modes.items():
        assert m["prompts"] == 3 and m["tokens"] > 0, name
        assert m["tokens_per_s"] > 0 and m["decode_tokens_per_s"] > 0, name
        assert m["speedup_vs_hf_greedy"] > 0 and len(m["speedups_per_prompt"]) == 3, name
        assert m["tau"] >= 1.0 and all(t >= 1.0 for t in m["tau_per_prompt"]), name
        assert m["verifier_passes"] <= m["tokens"], name
        assert 0 <= m["accepted"] <= m["drafted"], name
        for key in ("draft_acceptance", "match_vs_hf_greedy", "identical_completions"):
            _check_rate(m[key], f"{name}.{key}")
        assert m["matched_positions"] <= m["compared_positions"]
        assert m["timing_ms"]["total"] > 0
    greedy = modes["hf-greedy"]
    assert greedy["speedup_vs_hf_greedy"] == 1.0 and greedy["match_vs_hf_greedy"] == 1.0
    assert greedy["tau"] == 1.0 and greedy["drafted"] == 0 and greedy["draft_acceptance"] is None
    assert modes["quickdraft-none"]["tau"] == 1.0 and modes["quickdraft-none"]["drafted"] == 0
    assert modes["hf-assisted"]["drafted"] > 0 and modes["quickdraft-draft"]["drafted"] > 0
    # Float32: quickdraft's output is the verifier's own greedy output, token for token.
    for name in ("quickdraft-lookup", "quickdraft-draft", "quickdraft-hybrid", "quickdraft-none",
                 "quickdraft-hybrid+tuned"):
        assert modes[name]["identical_completions"] == 1.0, name
        assert modes[name]["first_difference_median"] is None, name
    assert result["quickdraft_identical_to_hf_greedy"] is True

    drafters = result["config"]["drafters_per_mode"]
    assert drafters["quickdraft-hybrid+tuned"]["confidence_threshold"] == 0.8
    assert drafters["quickdraft-hybrid+tuned"]["hybrid_min_match"] == 3
    assert drafters["quickdraft-hybrid"] == result["config"]["drafters"] == asdict(DrafterConfig())

    targets = {t["versus"]: t for t in result["targets"]}
    assert set(targets) == {"hf-greedy", "hf-assisted", "hf-prompt-lookup"}
    for t in targets.values():
        assert t["median_ratio"] > 0 and t["met"] == (t["median_ratio"] >= t["target"])
    runs = result["runs"]
    assert len(runs) == 3 * len(modes)
    for run in runs:
        assert run["seconds"] > 0 and run["prompt_forward_s"] < run["seconds"]
        assert len(run["token_ids"]) == 12  # every mode decodes exactly --max-new-tokens by default


# ----------------------------------------------------------------------------- session benchmark


def module_file(folder, monkeypatch) -> str:
    """MODULE as `module.py` in `folder`, named relative to it (the working directory from now on).

    The bench picks a file's bodies by --seed and the path it is given: an absolute path would
    carry pytest's numbered folder (…/pytest-57/…), and every pytest run would type other bodies."""
    (folder / "module.py").write_text(MODULE)
    monkeypatch.chdir(folder)
    return "module.py"


def test_the_session_tests_type_the_same_bodies_in_every_pytest_run(tmp_path, monkeypatch):
    """Were the bodies chosen by where pytest put the file, the patient test below would type the body
    of join_words in about half of the runs: the tiny model writes nothing there after its deadline
    answer, so no ready notification comes, and the typist waits out its patience and fails."""
    config = SessionBenchConfig(files=1, holes_per_file=1, max_hole_chars=80)
    typed = []
    for run in ("pytest-1", "pytest-2"):
        folder = tmp_path / run
        folder.mkdir()
        path = pick_files([module_file(folder, monkeypatch)], config)[0]
        typed.append((display_path(path), [hole.middle for hole in session_holes([path], config)[0][2]]))
    assert typed[0] == typed[1]


def test_session_bench_end_to_end_through_the_server(tiny_model_dir, tiny_draft_dir, tmp_path, monkeypatch, capsys):
    source = module_file(tmp_path, monkeypatch)
    out = tmp_path / "session"
    code = cli_main(["bench", "session", source, "--verifier", str(tiny_model_dir), "--draft", str(tiny_draft_dir),
                     "--drafter", "hybrid", "--dtype", "float32", "--files", "1", "--holes-per-file", "2",
                     "--max-hole-chars", "80", "--cps", "25", "--debounce-ms", "20", "--line-pause-ms", "100", "--patient",
                     "--budget-ms", "10000", "--max-new-tokens", "8", "--out", str(out), "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "p50 ms" in printed and "full garbage collections while serving" in printed
    result = json.loads((out / "session.json").read_text())
    assert (out / "session-latency-cdf.png").stat().st_size > 0 and (out / "session-tau.png").stat().st_size > 0
    # The server froze its loaded models out of the collector's full collections (lsp_server/workspace/gc_pauses.py).
    assert result["server_stats"]["collector"]["frozenObjects"] > 0

    requests = result["requests"]
    assert requests and result["request_count"] == len(requests)
    answered = [r for r in requests if r["status"] == "answered"]
    # Patient: at least the request on each emptied body and at each line start is answered.
    assert result["answered"] == len(answered) >= 2
    assert result["answered"] + result["cancelled"] + result["errors"] == len(requests)
    lat = result["latency_ms"]
    assert lat["n"] == len(answered)
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    for key in ("within_budget", "within_budget_model", "shown_rate", "exact_match_rate", "exact_match_rate_answered",
                "exact_match_rate_model", "draft_acceptance"):
        _check_rate(result[key], key)
    assert result["tau"] is None or result["tau"] >= 1.0
    assert result["typed_chars"] == sum(len(h["middle"]) for h in result["holes"])
    holes = {(h["file"], h["line"], h["character"]) for h in result["holes"]}
    assert len(holes) == 2

    for r in answered:
        assert r["latency_ms"] > 0 and r["within_budget"] == (r["latency_ms"] <= result["budget_ms"])
        assert 0 <= r["accepted_chars"] <= len(r["shown"])
        assert r["exact_match"] == (bool(r["shown"].strip()) and r["expected"].startswith(r["shown"].rstrip()))
    # The server's own record is found for answered requests, with its decoding figures.
    matched = [r for r in answered if r["server"]]
    assert matched and result["server_matched"] == len(matched)
    for r in matched:
        server = r["server"]
        if server["source"] == "model" and server["verifier_passes"]:
            assert server["prefill_tokens"] <= server["prompt_tokens"]
            assert server["emitted"] >= server["verifier_passes"]
    assert result["modes"][0]["name"] == "hybrid" and result["environment"]["cpu"]
    _check_rate(result["parses_of_shown"], "parses_of_shown")
    assert set(result["by_language"]) == {"python"} and result["by_language"]["python"]["typed_chars"] == result["typed_chars"]


def one_ms_session(model_dir, tmp_path, monkeypatch, *flags: str) -> dict:
    """`bench session` on one file with a 1 ms budget (every model answer empty at its deadline: the
    run starts at the request, not at the edit, which could have it done when the request comes)."""
    source = module_file(tmp_path, monkeypatch)
    out = tmp_path / "one-ms"
    assert cli_main(["bench", "session", source, "--verifier", str(model_dir), "--draft", "none",
                     "--drafter", "lookup", "--dtype", "float32", "--files", "1", "--max-hole-chars", "80",
                     "--cps", "25", "--debounce-ms", "20", "--budget-ms", "1", "--max-new-tokens", "8",
                     "--settings", '{"anticipate": false}', "--out", str(out), "--no-progress", *flags]) == 0
    return json.loads((out / "session.json").read_text())


def test_session_bench_jump_scenario_follows_ready_notifications(tiny_model_dir, tmp_path, monkeypatch):
    """A 1 ms budget answers every model request empty at its deadline; the typist asks again on
    quickdraft/completionReady, as the editor clients do, and the kept answer is ghost text."""
    result = one_ms_session(tiny_model_dir, tmp_path, monkeypatch, "--holes-per-file", "2", "--line-pause-ms", "600",
                            "--jump-rest-ms", "50")
    requests = result["requests"]
    ready = [r for r in requests if r["trigger"] == "ready" and r["status"] == "answered"]
    assert ready and result["ready_requests"] >= len(ready)
    # Asked again at the very spot and version of an earlier, empty answer.
    for r in ready:
        assert any(q["trigger"] == "typing" and (q["version"], q["line"], q["character"]) ==
                   (r["version"], r["line"], r["character"]) for q in requests)
    assert any((r["server"] or {}).get("source") == "kept" and r["shown"] for r in ready)
    assert result["jumps"] == 2
    first = result["first_ghost_text_after_jump_s"]
    assert 1 <= first["n"] <= 2 and first["p50"] > 0
    # The ready answer at the emptied body came in the 600 ms pause, before the first key.
    assert 1 <= result["jumps_with_text_before_first_key"] <= first["n"]


def test_a_jump_counts_as_text_before_a_key_only_where_the_ghost_text_beat_the_first_key():
    from types import SimpleNamespace as Record
    from lsp_server.bench.session_report import first_ghost_text_after_jumps, text_before_first_key

    def request(hole, typed, sent_s, answered_s, shown):
        return Record(file="a.py", hole=hole, typed=typed, sent_s=sent_s, answered_s=answered_s,
                      status="answered", shown=shown)
    run = Record(jumps=[{"file": "a.py", "hole": 0, "jump_s": 1.0}, {"file": "a.py", "hole": 1, "jump_s": 9.0},
                        {"file": "a.py", "hole": 2, "jump_s": 20.0}],
                 records=[request(0, 0, 1.3, 1.5, ""), request(0, 0, 2.0, 2.0, "if x:"),  # ready, in the pause
                          request(0, 1, 2.3, 2.3, "f x:"),
                          request(1, 0, 9.3, 9.5, ""), request(1, 1, 10.3, 10.4, "f y:"),  # at the first key
                          request(2, 0, 20.3, 20.5, ""), request(2, 1, 21.3, 21.5, "")])  # none at all
    assert first_ghost_text_after_jumps(run) == [1.0, 1.4]
    assert text_before_first_key(run) == 1


def test_a_patient_typist_waits_for_the_ready_answer(tiny_model_dir, tmp_path, monkeypatch):
    requests = one_ms_session(tiny_model_dir, tmp_path, monkeypatch, "--holes-per-file", "1", "--line-pause-ms", "0",
                              "--patient", "--jump-rest-ms", "0")["requests"]
    # No pause of its own: only waiting for the ready notification gets the emptied body its answer.
    first, second = requests[0], requests[1]
    assert first["typed"] == 0 and first["shown"] == "" and first["trigger"] == "typing"
    assert second["typed"] == 0 and second["trigger"] == "ready" and second["shown"]

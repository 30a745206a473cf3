"""`quickdraft bench quality`: the judging, the holes, and a --quick run on a tiny model.

A tiny random model writes nonsense, so nothing here asserts that completions are good;
what is checked is that the metrics mean what they say and the report hangs together.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from engine.bench.quality import edit_similarity, judge
from engine.syntax_check import syntax_errors
from engine.bench.quality_holes import QUALITY_KINDS, QualityHole, line_holes, make_quality_holes
from lsp_server.cli import main as cli_main

MODULE = textwrap.dedent('''\
    import os


    def join_words(words, separator=" "):
        parts = [w.strip() for w in words if w.strip()]
        return separator.join(parts)


    class Counter:
        def increment(self, step=1):
            self.value = self.value + step
            return self.value
    ''')


def test_edit_similarity():
    assert edit_similarity("return x", "return x") == 1.0
    assert edit_similarity("", "") == 1.0 and edit_similarity("abc", "") == 0.0
    assert edit_similarity("return x", "return y") == pytest.approx(1 - 1 / 8)
    assert edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)


def test_error_nodes_counts_what_the_parser_could_not_make_sense_of():
    assert syntax_errors("python", MODULE).count == 0
    assert syntax_errors("python", MODULE.replace("return separator.join(parts)", "return separator.join(parts")).count > 0
    assert syntax_errors("cobol", MODULE) is None  # no grammar: no verdict


def hole(middle: str, prefix: str = "def f(x):\n    ", suffix: str = "\n") -> QualityHole:
    return QualityHole("m.py", "line", 1, 4, prefix, middle, suffix, language="python")


def test_judge():
    h = hole("return x + 1", prefix="def f(x):\n    x = x * 2\n    ")
    right = judge(h, "return x + 1  ", (0, True))
    assert right == {"exact": True, "edit_similarity": 1.0, "stray_whitespace": False, "parses": True, "empty": False}
    deeper = judge(h, "    return x + 1", (0, True))  # the model wrote a deeper line: an unexpected indent
    assert deeper["stray_whitespace"] and not deeper["exact"] and not deeper["parses"]
    broken = judge(h, "return (x + 1", (0, True))
    assert not broken["parses"] and broken["edit_similarity"] > 0.9
    assert judge(h, "", (0, True))["empty"] and judge(h, "", (0, True))["parses"] is None  # nothing shown, nothing broken
    assert not judge(hole(" 1", "x =", "\n"), " 1", (0, True))["stray_whitespace"]
    assert judge(h, "return (", (3, False))["parses"]  # a file that did not compile cannot get worse at it
    assert judge(h, "x", None)["parses"] is None  # no grammar, no verdict


def test_line_holes_keep_the_indentation_and_take_the_code():
    holes = line_holes("m.py", MODULE)
    assert holes and all(h.prefix.endswith(("    ", "        ")) and h.middle == h.middle.strip() for h in holes)
    assert {h.middle for h in holes} >= {"return separator.join(parts)", "self.value = self.value + step"}
    assert all(h.prefix + h.middle + h.suffix == MODULE for h in holes)


def test_holes_cycle_through_kinds_from_installed_code():
    holes = make_quality_holes(6, seed=0, languages=("python",))
    assert [h.kind for h in holes] == list(QUALITY_KINDS) * 2
    assert all(h.multiline == (h.kind == "multiline") and h.language == "python" for h in holes)
    assert all(h.middle.strip() and h.prefix + h.middle + h.suffix == h.text for h in holes)
    assert make_quality_holes(3, seed=0, languages=("cobol",)) == []


def test_quick_run_on_a_tiny_model(tiny_model_dir, tmp_path, capsys):
    code = cli_main(["bench", "quality", "--quick", "--verifier", str(tiny_model_dir), "--dtype", "float32",
                     "--languages", "python", "--holes", "3", "--suffix-tokens", "16,64", "--max-new-tokens", "8",
                     "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    result = json.loads((tmp_path / "quality.json").read_text())
    labels = {f"{name} suffix={n}" for name in ("raw", "noheal", "quickdraft") for n in (16, 64)}
    assert set(result["summary"]) == labels and len(result["holes"]) == 3
    for record in result["holes"]:
        assert set(record["results"]) == labels
        for r in record["results"].values():
            assert r["exact"] <= (r["edit_similarity"] == 1.0)
            assert r["empty"] == (not r["shown"].strip())
            if record["kind"] != "multiline":
                assert "\n" not in r["shown"]
    for entry in result["summary"].values():
        assert entry["all"]["holes"] == 3
        assert all(0 <= entry["all"][m] <= 1 for m in ("exact", "edit_similarity", "parses", "empty"))
    assert result["config"]["context_budget"]["suffix_tokens"] > 0
    assert "| quickdraft suffix=16 |" in capsys.readouterr().out

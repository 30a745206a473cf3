"""`quickdraft bench quality`: the judging, the holes, and a --quick run on a tiny model.

A tiny random model writes nonsense, so nothing here asserts that completions are good;
what is checked is that the metrics mean what they say and the report hangs together.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from engine.bench.quality import edit_similarity, judge
from engine.text.syntax import syntax_errors
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
    assert right == {"exact": True, "accepted_chars": 12, "edit_similarity": 1.0, "stray_whitespace": False,
                     "parses": True, "empty": False}
    deeper = judge(h, "    return x + 1", (0, True))  # the model wrote a deeper line: an unexpected indent
    assert deeper["stray_whitespace"] and not deeper["exact"] and not deeper["parses"]
    broken = judge(h, "return (x + 1", (0, True))
    assert not broken["parses"] and broken["edit_similarity"] > 0.9 and broken["accepted_chars"] == len("return ")
    assert judge(h, "", (0, True))["empty"] and judge(h, "", (0, True))["parses"] is None  # nothing shown, nothing broken
    assert not judge(hole(" 1", "x =", "\n"), " 1", (0, True))["stray_whitespace"]
    assert judge(h, "return (", (3, False))["parses"]  # a file that did not compile cannot get worse at it
    assert judge(h, "x", None)["parses"] is None  # no grammar, no verdict


def test_judge_counts_the_closers_an_item_replaces():
    """`foo(|)`: an item "a, b)" that replaces the ")" adds "a, b"; inserted without replacing, it doubles it."""
    h = hole("a, b", prefix="def f(a, b):\n    return g(", suffix=")\n")
    assert judge(h, "a, b)", (0, True), replaces=1) == {
        "exact": True, "accepted_chars": 4, "edit_similarity": 1.0, "stray_whitespace": False, "parses": True,
        "empty": False}
    doubled = judge(h, "a, b)", (0, True))
    assert not doubled["exact"] and not doubled["parses"]
    assert judge(h, "a, b", (0, True), replaces=0)["exact"]
    assert not judge(h, "a, c)", (0, True), replaces=1)["exact"]


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
            assert 0 <= r["replaces"] <= len(r["shown"])
            if record["kind"] != "multiline":
                assert "\n" not in r["shown"]
    for entry in result["summary"].values():
        assert entry["all"]["holes"] == 3
        assert all(0 <= entry["all"][m] <= 1 for m in ("exact", "edit_similarity", "parses", "empty"))
    assert result["config"]["context_budget"]["suffix_tokens"] > 0
    assert "| quickdraft suffix=16 |" in capsys.readouterr().out


def test_quick_run_at_a_budget_records_confidences_and_the_gate_curve(tiny_model_dir, tmp_path, capsys):
    code = cli_main(["bench", "quality", "--quick", "--verifier", str(tiny_model_dir), "--dtype", "float32",
                     "--languages", "python", "--holes", "4", "--max-new-tokens", "8", "--budget-ms", "5000",
                     "--configs", "raw,quickdraft", "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    result = json.loads((tmp_path / "quality.json").read_text())
    assert set(result["summary"]) == {"raw", "quickdraft @5000ms"} and set(result["gate"]) == {"quickdraft @5000ms"}
    for record in result["holes"]:
        answer = record["results"]["quickdraft @5000ms"]
        assert (answer["confidence"] is None) == answer["empty"]
        assert answer["confidence"] is None or 0 < answer["confidence"]["min"] <= answer["confidence"]["mean"] <= 1
        assert 0 <= answer["accepted_chars"] <= len(answer["shown"]) and record["results"]["raw"]["confidence"] is None
    for entry in result["gate"]["quickdraft @5000ms"].values():
        rows = entry["rows"]["all"]
        assert rows[0]["threshold"] == 0 and rows[0]["shown"] == 1 - result["summary"]["quickdraft @5000ms"]["all"]["empty"]
        assert [r["shown"] for r in rows] == sorted((r["shown"] for r in rows), reverse=True)  # a gate only withholds
        assert entry["choice"] in [r["threshold"] for r in rows]
    assert "Confidence gate, quickdraft @5000ms" in capsys.readouterr().out


def test_the_gate_curve_and_its_choice_from_recorded_confidences():
    from engine.bench.quality_gate import choose, curve_row, gate_curves, half

    def answer(mean, exact, accepted):
        return {"empty": False, "exact": exact, "parses": True, "accepted_chars": accepted,
                "confidence": {"mean": mean, "min": mean / 2}}

    results = [answer(0.9, True, 20), answer(0.8, True, 10), answer(0.3, False, 1), answer(0.2, False, 0),
               {"empty": True, "exact": False, "parses": None, "accepted_chars": 0, "confidence": None}]
    ungated, gated = curve_row(results, 0.0, "mean"), curve_row(results, 0.5, "mean")
    assert (ungated["shown"], ungated["exact_of_shown"], ungated["accepted_chars"]) == (0.8, 0.5, 6.2)
    assert (gated["shown"], gated["exact_of_shown"], gated["accepted_chars"]) == (0.4, 1.0, 6.0)
    assert curve_row(results, 0.42, "min")["shown"] == 0.2  # the least token's probability is stricter
    # The highest threshold keeping 90 % of the ungated accepted characters: 0.5 keeps 6.0 of 6.2; 0.85 keeps 4.0.
    rows = [curve_row(results, t, "mean") for t in (0.0, 0.5, 0.85)]
    assert choose(rows) == 0.5
    records = [{"path": f"f{i}.py", "results": {"q": r}} for i, r in enumerate(results)]
    curves = gate_curves(records, "q")
    assert {half(r["path"]) for r in records} == {"pick", "check"}  # both halves have files
    assert curves["mean"]["rows"]["all"][0]["holes"] == 5
    assert sum(curves["mean"]["rows"][side][0]["holes"] for side in ("pick", "check")) == 5


# -- every language: discovery on a folder of our own, never on what this machine has --------------

from engine.bench import quality_sources  # noqa: E402
from engine.bench.corpus import midline_holes  # noqa: E402
from engine.bench.quality import format_language_table  # noqa: E402
from engine.bench.quality_holes import available_languages, resolve_languages  # noqa: E402
from engine.bench.quality_sources import ALL_LANGUAGES, CPP_TEXT, REPO, Root, is_project_file, language_files  # noqa: E402

# (file name, head, one function numbered {i}, tail): functions are added until a file is long enough.
FUNCTIONS = {
    "python": ("util.py", "import os\n\n\n", "def twice{i}(first, second):\n    y = first * 2\n"
               "    total = compute(first, second, y)\n    return total + {i}\n\n\n", ""),
    "javascript": ("util.js", "'use strict';\n\n", "function twice{i}(first, second) {{\n  const y = first * 2;\n"
                   "  const total = compute(first, second, y);\n  return total + {i};\n}}\n\n", ""),
    "typescript": ("util.ts", "import {{ compute }} from './compute';\n\n",
                   "export function twice{i}(first: number, second: number): number {{\n  const y = first * 2;\n"
                   "  const total = compute(first, second, y);\n  return total + {i};\n}}\n\n", ""),
    "java": ("Util.java", "package demo;\n\npublic final class Util {{\n", "    static int twice{i}(int first, int second) {{\n"
             "        int y = first * 2;\n        int total = compute(first, second, y);\n        return total + {i};\n"
             "    }}\n\n", "}}\n"),
    "c": ("util.c", "#include <stdio.h>\n\n", "static int\ntwice{i}(int first, int second)\n{{\n\tint y = first * 2;\n"
          "\tint total = compute(first, second, y);\n\treturn total + {i};\n}}\n\n", ""),
    "cpp": ("util.cc", "#include <vector>\n\nnamespace demo {{\n\n", "int twice{i}(int first, int second) {{\n"
            "  int y = first * 2;\n  int total = compute(first, second, y);\n  return total + {i};\n}}\n\n",
            "}}  // namespace demo\n"),
    "csharp": ("Util.cs", "namespace Demo\n{{\n    public static class Util\n    {{\n",
               "        public static int Twice{i}(int first, int second)\n        {{\n            var y = first * 2;\n"
               "            var total = Compute(first, second, y);\n            return total + {i};\n        }}\n\n",
               "    }}\n}}\n"),
    "go": ("util.go", "package demo\n\n", "func twice{i}(first, second int) int {{\n\ty := first * 2\n"
           "\ttotal := compute(first, second, y)\n\treturn total + {i}\n}}\n\n", ""),
    "rust": ("util.rs", "use std::fmt;\n\n", "fn twice{i}(first: i32, second: i32) -> i32 {{\n    let y = first * 2;\n"
             "    let total = compute(first, second, y);\n    total + {i}\n}}\n\n", ""),
}


def source_text(language: str, functions: int = 24) -> str:
    _, head, function, tail = FUNCTIONS[language]
    return head.format() + "".join(function.format(i=i) for i in range(functions)) + tail.format()


VARIANTS = {"": 24, "b": 28, "c": 32}  # file name prefix → functions in the file


def write(path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def source_tree(tmp_path):
    """A machine in miniature: every language's sources where its roots say, and decoys."""
    import zipfile

    modules = tmp_path / "node_modules"
    for prefix, functions in VARIANTS.items():  # three files each: one hole of each kind
        for language in ("python", "go", "rust", "c", "cpp"):
            write(tmp_path / language / "pkg" / (prefix + FUNCTIONS[language][0]), source_text(language, functions))
        for language in ("javascript", "typescript"):
            write(modules / "lib-a" / "src" / (prefix + FUNCTIONS[language][0]), source_text(language, functions))
        # C# only where node_modules are entered
        write(modules / "lib-a" / "node_modules" / "dep" / f"{prefix}Find.cs", source_text("csharp", functions))
    write(modules / "dep-b" / "node_modules" / "x" / "deep.js", source_text("javascript"))  # JS does not go that deep
    # Decoys: tests, minified, declarations, too short, C++ in a C folder.
    write(tmp_path / "go" / "pkg" / "util_test.go", source_text("go"))
    write(modules / "lib-a" / "node_modules" / "dep" / "deep.ts", source_text("typescript"))  # TS does not go that deep
    write(tmp_path / "python" / "tests" / "helpers.py", source_text("python"))
    write(modules / "lib-a" / "dist" / "util.min.js", source_text("javascript"))
    write(modules / "lib-a" / "types" / "util.d.ts", source_text("typescript"))
    write(modules / "lib-a" / "src" / "util.spec.ts", source_text("typescript"))
    write(tmp_path / "rust" / "pkg" / "tiny.rs", "fn main() {}\n")
    write(tmp_path / "c" / "pkg" / "vector.h", source_text("cpp"))
    jdk = tmp_path / "jvm" / "jdk-25" / "lib"
    jdk.mkdir(parents=True)
    with zipfile.ZipFile(jdk / "src.zip", "w") as archive:
        for prefix, functions in VARIANTS.items():
            archive.writestr(f"java.base/demo/{prefix}Util.java", source_text("java", functions))
        archive.writestr("java.base/demo/UtilTest.java", source_text("java"))
        archive.writestr("java.base/test/demo/Other.java", source_text("java"))
    roots = {
        "python": (Root(str(tmp_path / "python"), (".py",)),),
        "javascript": (Root(str(modules), (".js",)),),
        "typescript": (Root(str(modules), (".ts",)),),
        "java": (Root(str(tmp_path / "jvm" / "*" / "lib" / "src.zip"), (".java",)),),
        "c": (Root(str(tmp_path / "c"), (".c", ".h"), reject=CPP_TEXT),),
        "cpp": (Root(str(tmp_path / "cpp"), (".cc",)),),
        "csharp": (Root(str(modules), (".cs",), nested_modules=True),),
        "go": (Root(str(tmp_path / "go"), (".go",)),),
        "rust": (Root(str(tmp_path / "rust"), (".rs",)), Root(str(tmp_path / "rust"), (".rs",))),  # twice: one copy
    }
    return tmp_path, roots


def names(files) -> list[str]:
    return sorted(f.name for f in files)


def test_language_files_finds_each_language_and_skips_decoys(source_tree):
    _, roots = source_tree
    found = {language: names(language_files(language, 100, seed=0, roots=roots)) for language in ALL_LANGUAGES}
    assert found == {language: sorted(prefix + FUNCTIONS[language][0] for prefix in VARIANTS)
                     for language in ALL_LANGUAGES if language not in ("java", "csharp")} | {
        "java": ["Util.java", "bUtil.java", "cUtil.java"], "csharp": ["Find.cs", "bFind.cs", "cFind.cs"]}
    assert len(language_files("go", 1, seed=0, roots=roots)) == 1
    assert names(language_files("go", 3, seed=1, roots=roots)) == found["go"]
    with pytest.raises(ValueError, match="no source locations known for 'cobol'"):
        language_files("cobol", 1, seed=0, roots=roots)


def test_languages_all_and_those_available(source_tree):
    _, roots = source_tree
    assert resolve_languages(["python", "all", "go"]) == list(ALL_LANGUAGES)
    assert available_languages(["all"], seed=0, roots=roots) == list(ALL_LANGUAGES)
    assert available_languages(["all"], seed=0, roots={"go": roots["go"]}) == ["go"]  # no files: left out


def test_holes_in_every_language_from_the_folder(source_tree):
    _, roots = source_tree
    holes = make_quality_holes(27, seed=0, languages=("all",), roots=roots)
    by_language = {language: [h for h in holes if h.language == language] for language in ALL_LANGUAGES}
    assert all(len(found) == 3 for found in by_language.values()), {k: len(v) for k, v in by_language.items()}
    for language, found in by_language.items():
        assert {h.kind for h in found} == set(QUALITY_KINDS), language
        texts = {source_text(language, functions) for functions in VARIANTS.values()}
        assert all(h.text in texts and h.middle.strip() for h in found), language
        assert all(h.multiline == (h.kind == "multiline") for h in found)
    java = by_language["java"][0]
    assert "src.zip/java.base/demo/" in java.path and java.path.endswith("Util.java")
    # Tab-indented lines (C, Go) are cut too; in a Python file a tab is mixed indentation.
    def tabbed(path):
        return [h for h in midline_holes(path, source_text("c")) if h.prefix.rsplit("\n", 1)[-1].startswith("\t")]
    assert tabbed("util.c") and not tabbed("util.py")


def test_the_projects_own_files_are_never_corpus():
    assert is_project_file(REPO / "tests" / "golden" / "postprocess" / "go-function-body.txt")
    assert is_project_file(REPO / "editor-clients" / "vscode" / "src" / "extension.ts")
    assert not is_project_file(REPO / "editor-clients" / "vscode" / "node_modules" / "ajv" / "lib" / "core.ts")
    assert not is_project_file(REPO / ".venv" / "lib" / "python3.11" / "site-packages" / "six.py")
    assert not is_project_file(REPO.parent / "elsewhere" / "main.go")
    roots = [root for table in quality_sources.LANGUAGE_ROOTS.values() for root in table]
    assert not any("e2e" in root.pattern or "{repo}/tests" in root.pattern for root in roots)


def test_language_table():
    rates = {"holes": 2, "exact": 0.5, "exact_of_shown": 0.5, "edit_similarity": 0.75, "stray_whitespace": 0.0,
             "parses": 1.0, "empty": 0.0, "accepted_chars": 3.5, "ms_mean": 10}
    summary = {"raw": {"all": rates, "language=c": rates, "language=java": {**rates, "parses": None}}}
    table = format_language_table({"summary": summary})
    assert table.splitlines()[2:] == ["| c | raw | 2 | 50 % | 50 % | 0.75 | 100 % | 0 % | 3.5 |",
                                      "| java | raw | 2 | 50 % | 50 % | 0.75 | – | 0 % | 3.5 |"]


def test_per_language_run_on_a_tiny_model(source_tree, tiny_model_dir, tmp_path, capsys, monkeypatch):
    _, roots = source_tree
    monkeypatch.setattr(quality_sources, "LANGUAGE_ROOTS", roots)
    code = cli_main(["bench", "quality", "--verifier", str(tiny_model_dir), "--dtype", "float32", "--languages", "all",
                     "--holes", "9", "--kinds", "line", "--configs", "raw,quickdraft", "--max-new-tokens", "4",
                     "--out", str(tmp_path / "out"), "--no-progress"])
    assert code == 0
    result = json.loads((tmp_path / "out" / "quality.json").read_text())
    assert result["config"]["languages_measured"] == sorted(ALL_LANGUAGES)
    assert sorted({record["language"] for record in result["holes"]}) == sorted(ALL_LANGUAGES)
    for label in ("raw", "quickdraft"):
        assert all(result["summary"][label][f"language={lang}"]["holes"] == 1 for lang in ALL_LANGUAGES)
    out = capsys.readouterr().out
    assert "| language | configuration | holes | exact | exact of shown | edit similarity | parses | empty | " \
           "accepted chars |" in out
    assert all(f"| {lang} | quickdraft | 1 |" in out for lang in ALL_LANGUAGES)

"""`quickdraft bench crossfile`: holes cut from a package folder, and a quick run on a tiny model."""

from __future__ import annotations

import json
import random

import pytest

from engine.bench.crossfile import CrossFileBenchConfig, first_name_right, format_table, run_crossfile_bench
from engine.bench.crossfile_holes import cross_imports, file_holes, make_crossfile_holes
from engine.completion import CompletionEngine
from engine.models.loading import load_model
from engine.text.prompt import ContextBudget
from lsp_server.cli import main as cli_main

UTIL = '''"""Helpers of the toy package."""


def compute_total(items, *, scale=1.0):
    """Sum the items' prices, scaled."""
    return scale * sum(item.price for item in items)


class Ledger:
    def __init__(self, owner):
        self.owner = owner
'''


def filler(count: int) -> str:
    return "".join(f"def step_{i}(value):\n    doubled = value + value + {i}\n    return doubled\n\n\n"
                   for i in range(count))


MAIN = ('"""The toy package\'s entry point."""\nfrom .util import compute_total, Ledger\nimport os\n\n\n'
        + filler(40)
        + "def report(basket):\n    total = compute_total(basket.items, scale=0.5)\n    return total\n\n\n"
        + "def describe(value):\n    label = os.path.basename(str(value))\n    return label\n")


@pytest.fixture
def package_root(tmp_path):
    package = tmp_path / "site" / "toypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "util.py").write_text(UTIL)
    (package / "main.py").write_text(MAIN)
    (package / "other.py").write_text(filler(3))
    (package / "broken.py").write_bytes(b"\xff\xfe not utf-8 \x00")  # unreadable as source: skipped
    return package


def test_cross_imports_resolve_relative_imports_to_the_defining_module(package_root):
    assert cross_imports(package_root / "main.py", package_root) == {
        "compute_total": package_root / "util.py", "Ledger": package_root / "util.py"}


def test_a_cross_file_hole_uses_an_imported_name_and_a_control_hole_none(package_root):
    holes = {hole.group: hole for hole in file_holes(package_root / "main.py", package_root, random.Random(0))}
    cross, control = holes["crossfile"], holes["control"]
    assert cross.middle == "compute_total(basket.items, scale=0.5)" and cross.names == ["compute_total"]
    assert cross.prefix.endswith("\n    total = ") and cross.kind == "name"
    assert "compute_total" not in cross.prefix[-2000:]  # far from the import: the prompt's window cannot see it
    assert "compute_total" not in control.middle and "Ledger" not in control.middle
    assert [path for path, _ in cross.documents][0] == "toypkg/util.py"
    assert cross.path == "toypkg/main.py"


def test_holes_from_folders_and_packages_the_project_uses_are_left_out(package_root):
    holes = make_crossfile_holes(1, 0, roots=[package_root.parent], exclude=frozenset())
    assert sorted(hole.group for hole in holes) == ["control", "crossfile"]
    assert make_crossfile_holes(1, 0, roots=[package_root.parent], exclude=frozenset({"toypkg"})) == []
    assert make_crossfile_holes(1, 0, roots=[package_root.parent / "missing"], exclude=frozenset()) == []


def test_a_quick_run_on_a_tiny_model_puts_the_context_in_the_prompt(package_root, tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    engine = CompletionEngine(verifier, None, drafter="lookup",
                              context_budget=ContextBudget(prefix_tokens=160, suffix_tokens=16, other_documents_tokens=0))
    holes = make_crossfile_holes(1, 0, roots=[package_root.parent], exclude=frozenset())
    config = CrossFileBenchConfig(holes=1, configs=("raw", "context", "heads"), context_tokens=400,
                                  max_new_tokens=4, progress=False)
    result = run_crossfile_bench(engine, holes, config)
    cross = result["summary"]["crossfile"]
    assert cross["raw"]["holes"] == 1
    assert cross["context"]["prompt_tokens"] > cross["raw"]["prompt_tokens"] + 50
    assert cross["heads"]["prompt_tokens"] > cross["raw"]["prompt_tokens"] + 50
    assert engine.context_budget == engine.default_budget and engine.crossfile.enabled  # left as found
    table = format_table(result)
    assert "| crossfile | context | 1 |" in table and "context − raw" in table


@pytest.mark.parametrize("shown, right", [("compute_total(x)", True), ("compute_totals(x)", False), ("", False),
                                          ("compute_total", True), ("sum(x)", False)])
def test_first_name_right(shown, right):
    assert first_name_right("compute_total(basket.items)", shown) is right


def test_the_cli_writes_its_json(package_root, tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("engine.bench.crossfile_holes.project_imports", lambda: frozenset())
    code = cli_main(["bench", "crossfile", "--quick", str(package_root.parent), "--verifier", str(tiny_model_dir),
                     "--dtype", "float32", "--device", "cpu", "--draft", "none", "--max-new-tokens", "2",
                     "--no-progress", "--out", str(tmp_path / "out")])
    assert code == 0
    result = json.loads((tmp_path / "out" / "crossfile.json").read_text())
    assert {hole["group"] for hole in result["holes"]} == {"crossfile", "control"}
    assert "| control | raw |" in capsys.readouterr().out

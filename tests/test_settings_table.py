"""The settings are described once, in lsp_server/workspace/settings.py. Every copy is checked
against that table here: the VS Code extension's package.json and src/settings.ts, the flags of
`quickdraft serve`, docs/server.md's settings table and machine-defaults table, and the README
(which links to the docs instead of repeating them). `python -m lsp_server.workspace.settings_docs`
rewrites package.json's and docs/server.md's copies."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from engine.models import presets
from engine.modes import DRAFTER_MODES
from lsp_server.cli import build_parser
from lsp_server.cli.serve import settings_from_args
from lsp_server.workspace.settings import MACHINE_DEFAULT, MACHINE_DEFAULTS, SETTINGS, machine_defaults
from lsp_server.workspace.settings_docs import (
    DOCS,
    PACKAGE_JSON,
    TABLE_END,
    TABLE_START,
    VSCODE_CLIENT_ONLY,
    markdown_table,
    vscode_key,
    vscode_properties,
)

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_TS = ROOT / "editor-clients" / "vscode" / "src" / "settings.ts"
REWRITE = "run `python -m lsp_server.workspace.settings_docs` (or fix the table in lsp_server/workspace/settings.py)"
SERVE_OWN_FLAGS = {"-h", "--help", "--tcp", "--stdio", "--host", "--port", "--token-file", "--log-file"}


# -- the VS Code extension ----------------------------------------------------------------
def test_package_json_declares_the_tables_settings():
    properties = json.loads(PACKAGE_JSON.read_text())["contributes"]["configuration"]["properties"]
    server = {key: value for key, value in properties.items() if key not in VSCODE_CLIENT_ONLY}
    assert server == vscode_properties(), REWRITE
    assert server["quickdraft.drafter"]["enum"] == list(DRAFTER_MODES)
    # A default the machine picks is the server's to choose: the extension shows none.
    machine_picks = [vscode_key(spec) for spec in SETTINGS if spec.default_is]
    assert machine_picks and [key for key in machine_picks if "default" in server[key]] == []


def test_settings_ts_sends_the_tables_settings_under_their_server_names():
    source = SETTINGS_TS.read_text()
    listed = re.search(r"export const SERVER_SETTINGS = \[(.*?)\]", source, re.S)
    renamed = re.search(r"export const VSCODE_NAMES: Record<string, string> = \{(.*?)\}", source, re.S)
    assert listed and renamed, "settings.ts keeps SERVER_SETTINGS and VSCODE_NAMES"
    assert re.findall(r"'(\w+)'", listed.group(1)) == [spec.client_name for spec in SETTINGS]
    assert dict(re.findall(r"(\w+): '(\w+)'", renamed.group(1))) == {
        spec.client_name: spec.vscode for spec in SETTINGS if spec.vscode}


# -- quickdraft serve ---------------------------------------------------------------------
def serve_parser() -> argparse.ArgumentParser:
    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return commands.choices["serve"]


def some_value(spec) -> list[str]:
    """Command-line words that set `spec` to something other than its default."""
    if spec.kind is bool:
        return [spec.flag]
    if spec.choices:
        return [spec.flag, next(choice for choice in reversed(spec.choices) if choice != spec.default)]
    if spec.kind in (int, float):
        return [spec.flag, str(int(spec.high))]
    return [spec.flag, "something"]


def test_serve_has_a_flag_for_each_setting_the_table_gives_one_and_no_other():
    flags = {option for action in serve_parser()._actions for option in action.option_strings}
    assert flags - SERVE_OWN_FLAGS == {spec.flag for spec in SETTINGS if spec.flag}


@pytest.mark.parametrize("spec", [spec for spec in SETTINGS if spec.flag], ids=lambda spec: spec.flag)
def test_each_serve_flag_sets_its_setting_within_the_tables_limits(spec, capsys):
    words = some_value(spec)
    settings = settings_from_args(build_parser().parse_args(["serve", *words]))
    expected = not spec.default if spec.kind is bool else spec.parse_flag(words[1])
    assert getattr(settings, spec.name) == expected != getattr(machine_defaults(), spec.name)
    if spec.kind in (int, float):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["serve", spec.flag, str(spec.high * 2)])
        assert f"from {spec.low:g} to {spec.high:g}" in capsys.readouterr().err
    if spec.choices:
        assert next(a for a in serve_parser()._actions if spec.flag in a.option_strings).choices == spec.choices


# -- the docs -----------------------------------------------------------------------------
def test_the_docs_settings_table_is_the_tables():
    text = DOCS.read_text()
    assert text.count(TABLE_START) == 1 and text.count(TABLE_END) == 1, "docs/server.md keeps the table's markers"
    written = text[text.index(TABLE_START):text.index(TABLE_END) + len(TABLE_END)]
    assert written == markdown_table(), REWRITE


def test_the_docs_say_what_each_machine_gets(tmp_path, monkeypatch):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path))  # no installed pair: the card alone decides
    from engine.completion import CPU_CONTEXT_BUDGET
    from engine.text.prompt import ContextBudget

    text = DOCS.read_text()
    section = text[text.index("## What runs by default where"):]
    header = next(line for line in section.splitlines() if line.startswith("| machine |"))
    assert [spec.client_name for spec in SETTINGS if spec.default_is == MACHINE_DEFAULT and
            f"`{spec.client_name}`" not in header] == [], "a column for every machine default"
    rows = {line.split("|")[1].strip(): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in section.splitlines() if line.startswith(("| GPU", "| CPU"))}
    gpu_rows = gpu_rows_by_memory()
    assert [label for label in rows if label.startswith("GPU")] == list(gpu_rows), "a GPU row per pair, by memory"
    for label, models in [*gpu_rows.items(), ("CPU only", MACHINE_DEFAULTS["cpu"])]:
        assert rows[label][:3] == [f"`{models[name]}`" for name in ("verifier", "draft", "drafter")]
    for label, budget in [*((label, ContextBudget()) for label in gpu_rows), ("CPU only", CPU_CONTEXT_BUDGET)]:
        tokens = [budget.prefix_tokens, budget.suffix_tokens, budget.other_documents_tokens, budget.cold_prefix_tokens]
        assert rows[label][4].startswith(" / ".join("off" if n is None else str(n) for n in tokens))


def test_the_readme_links_to_the_settings_instead_of_copying_them():
    readme = (ROOT / "README.md").read_text()
    assert "docs/server.md#settings" in readme
    rows = [line for line in readme.splitlines() if re.match(r"\| `(\w+)`", line)
            and re.match(r"\| `(\w+)`", line).group(1) in {spec.client_name for spec in SETTINGS}]
    assert rows == []


def gpu_rows_by_memory() -> dict[str, dict[str, str]]:
    """The GPU rows the docs must have: a label with the card sizes (engine/models/gpu_pairs.py's
    thresholds, in GB) → the machine defaults such a card gets."""
    from engine.models.gpu_pairs import pairs_by_size, smallest_card_bytes

    pairs = pairs_by_size()
    bounds = [round(smallest_card_bytes(pair) / 1e9, 1) for pair in pairs[1:]]
    ranges = [f"under {bounds[0]} GB", *(f"{low}–{high} GB" for low, high in zip(bounds, bounds[1:])),
              f"{bounds[-1]} GB and more"]
    rows = {}
    for pair, text, low in zip(pairs, ranges, [0, *bounds]):
        # The card at the range's low end (or 8 GB) really gets this pair from machine_defaults.
        defaults = machine_defaults("gpu", gpu_memory=int(max(low, 8) * 1e9) + 1)
        assert defaults.verifier == presets.PAIRS[pair]["verifier"], text
        rows[f"GPU (CUDA), {text}"] = {"verifier": defaults.verifier, "draft": defaults.draft, "drafter": defaults.drafter}
    return rows

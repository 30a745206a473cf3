"""docs/server.md's settings table and the VS Code extension's settings, written from the one
table in settings.py:

    python -m lsp_server.workspace.settings_docs      # rewrites both in this checkout

tests/test_settings_table.py fails when either differs from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from lsp_server.workspace.settings import MACHINE_DEFAULT, MACHINE_DEFAULTS, SETTINGS, SettingSpec

CHECKOUT = Path(__file__).resolve().parents[2]
DOCS = CHECKOUT / "docs" / "server.md"
PACKAGE_JSON = CHECKOUT / "editor-clients" / "vscode" / "package.json"

TABLE_START = ("<!-- Written from lsp_server/workspace/settings.py by `python -m lsp_server.workspace.settings_docs`; "
               "tests/test_settings_table.py checks it. -->")
TABLE_END = "<!-- end of the settings table -->"
MACHINE_DEFAULTS_ANCHOR = "#what-runs-by-default-where"

# The VS Code extension's own settings, not the server's: package.json keeps them as they are.
VSCODE_CLIENT_ONLY = ("quickdraft.server.command", "quickdraft.server.args", "quickdraft.debounceMs",
                      "quickdraft.trace.server")
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", tuple: "array"}


def json_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def per_machine(spec: SettingSpec) -> str:
    """"lookup on a CPU, hybrid on a GPU" for the settings MACHINE_DEFAULTS names, else ""."""
    cpu, gpu = MACHINE_DEFAULTS["cpu"].get(spec.name), MACHINE_DEFAULTS["gpu"].get(spec.name)
    if spec.name == "verifier":  # a GPU's is chosen by its memory (engine/models/gpu_pairs.py)
        from engine.models import gpu_pairs, presets

        sizes = [presets.PAIRS[pair]["verifier"] for pair in gpu_pairs.pairs_by_size()]
        gpu = f"from {sizes[0]} to {sizes[-1]} by the card's memory"
    return f"{cpu} on a CPU, {gpu} on a GPU" if cpu is not None else ""


# -- docs/server.md -----------------------------------------------------------------------
def _code(value: Any) -> str:
    return f"`{json.dumps(json_value(value))}`" if not isinstance(value, str) else f"`{value}`"


def _default_cell(spec: SettingSpec) -> str:
    if spec.default_is == MACHINE_DEFAULT:
        return f"[machine default]({MACHINE_DEFAULTS_ANCHOR})"
    if spec.default_is:
        return spec.default_is
    if spec.default is None:
        return "unset"
    return f"{spec.default:g}" if spec.kind in (int, float) else _code(spec.default)


def _values_cell(spec: SettingSpec) -> str:
    if spec.choices:
        return " · ".join(f"`{choice}`" for choice in spec.choices)
    if spec.kind is bool:
        return "`true` · `false`"
    if spec.kind in (int, float):
        return f"{spec.low:g} to {spec.high:g}"
    return "list of strings" if spec.kind is tuple else "text"


def markdown_table() -> str:
    """The settings table, between its two marker comments."""
    rows = [TABLE_START, "| setting | `serve` flag | default | values | meaning |", "|---|---|---|---|---|"]
    for spec in SETTINGS:
        flag = f"`{spec.flag} {spec.metavar}`" if spec.metavar else f"`{spec.flag}`" if spec.flag else ""
        meaning = spec.help + (f" ([more]({spec.see}))" if spec.see else "")
        rows.append(f"| `{spec.client_name}` | {flag} | {_default_cell(spec)} | {_values_cell(spec)} | {meaning} |")
    return "\n".join([*rows, TABLE_END])


def docs_with_table(text: str) -> str:
    """docs/server.md's text with the settings table written afresh."""
    start, end = text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)
    return text[:start] + markdown_table() + text[end:]


# -- the VS Code extension's package.json ------------------------------------------------
def vscode_key(spec: SettingSpec) -> str:
    return f"quickdraft.{spec.vscode or spec.client_name}"


def _description(spec: SettingSpec) -> str:
    text = spec.help[0].upper() + spec.help[1:] + "."
    if spec.default_is == MACHINE_DEFAULT:
        machines = per_machine(spec)
        return text + f" Unset: the server's machine default{f' ({machines})' if machines else ''}."
    if spec.default_is:
        return text + f" Unset: the server's default ({spec.default_is})."
    return text


def vscode_properties() -> dict[str, dict]:
    """`contributes.configuration.properties` for the server's settings. The extension sends only
    what the user set, so a default is shown only where it is the server's on every machine."""
    properties = {}
    for spec in SETTINGS:
        prop: dict[str, Any] = {"type": _JSON_TYPES[spec.kind]}
        if spec.kind is tuple:
            prop["items"] = {"type": "string"}
        if spec.choices:
            prop["enum"] = list(spec.choices)
        if spec.default is not None and spec.default_is is None:
            prop["default"] = json_value(spec.default)
        if spec.low is not None:
            prop["minimum"], prop["maximum"] = json_value(spec.low), json_value(spec.high)
        prop["description"] = _description(spec)
        properties[vscode_key(spec)] = prop
    return properties


def package_with_properties(package: dict) -> dict:
    """package.json with the server's settings written afresh after the extension's own."""
    old = package["contributes"]["configuration"]["properties"]
    own = {key: old[key] for key in VSCODE_CLIENT_ONLY if key in old}
    package["contributes"]["configuration"]["properties"] = {**own, **vscode_properties()}
    return package


def main() -> int:
    DOCS.write_text(docs_with_table(DOCS.read_text()))
    package = package_with_properties(json.loads(PACKAGE_JSON.read_text()))
    PACKAGE_JSON.write_text(json.dumps(package, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote the settings into {DOCS.relative_to(CHECKOUT)} and {PACKAGE_JSON.relative_to(CHECKOUT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

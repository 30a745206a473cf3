"""Paths and small helpers shared by the editor tests."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VSCODE_DIR = ROOT / "editor-clients" / "vscode"
NEOVIM_DIR = ROOT / "editor-clients" / "neovim"
TEST_OUTPUT = ROOT / "test-output"
SETUP_HINT = "run `bash editor-clients/setup.sh` (or `make clients`) first"


def require_file(path: Path, what: str) -> Path:
    if not path.exists():
        pytest.fail(f"{what} not found at {path}; {SETUP_HINT}")
    return path

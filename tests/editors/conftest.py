"""Fixtures for the real-editor tests: the quickdraft executable, a tiny model, the editors.

Everything here is installed by `bash editor-clients/setup.sh` (which `make test` runs first).
A missing piece fails the test with the command that installs it, never a silent skip.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support.editors import ROOT, SETUP_HINT


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.editor)


@pytest.fixture(scope="session")
def quickdraft_bin() -> Path:
    """The `quickdraft` executable the editors start ($QUICKDRAFT_BIN or the repo's .venv)."""
    path = Path(os.environ.get("QUICKDRAFT_BIN", ROOT / ".venv" / "bin" / "quickdraft"))
    if not os.access(path, os.X_OK):
        pytest.fail(f"quickdraft executable not found at {path}; run `make setup`")
    return path


@pytest.fixture(scope="session")
def editor_model_dir(tiny_model_dir) -> Path:
    """The tiny random verifier (float32, seeded) the editors' server loads."""
    return Path(tiny_model_dir)


@pytest.fixture(scope="session")
def node_bin() -> str:
    node = shutil.which("node")
    if not node:
        pytest.fail(f"node not found; {SETUP_HINT}")
    return node


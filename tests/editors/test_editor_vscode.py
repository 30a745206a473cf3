"""VS Code client: the `node --test` tier and the code-server end-to-end test, run from pytest.

Both drive the real `quickdraft serve` on a tiny random model:
- fast tier: our extension bundle with the real vscode-languageclient 10.1 and a stand-in
  `vscode` module (editor-clients/vscode/test/);
- e2e: code-server 4.100 (VS Code 1.100) with the packaged .vsix installed into a fresh profile
  (`--install-extension quickdraft.vsix --extensions-dir <new> --user-data-dir <new>`), driven
  through chromium (editor-clients/vscode/e2e/e2e.mjs); leaves test-output/vscode-ghost-text.png.
  The `ready` scenario gives the server a 1 ms budget: the ghost text must appear through
  `quickdraft/completionReady` with no keystroke after the empty answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from lsp_server.workspace.settings import client_settings, machine_defaults
from support.editors import TEST_OUTPUT, VSCODE_DIR, require_file

pytestmark = [pytest.mark.editor]


def run_node(node_bin, args, *, env_extra, timeout):
    env = {**os.environ, **env_extra}
    started = time.monotonic()
    proc = subprocess.run([node_bin, *args], cwd=VSCODE_DIR, env=env, capture_output=True, text=True,
                          timeout=timeout)
    elapsed = time.monotonic() - started
    output = proc.stdout + proc.stderr
    print(output)
    print(f"[{' '.join(args)}: {elapsed:.1f}s]")
    return proc.returncode, output


@pytest.mark.timeout(600)
def test_vscode_fast_tier(node_bin, quickdraft_bin, editor_model_dir):
    require_file(VSCODE_DIR / "node_modules" / "vscode-languageclient", "vscode-languageclient")
    require_file(VSCODE_DIR / "out" / "extension.js", "the extension bundle")
    tests = sorted(str(p.relative_to(VSCODE_DIR)) for p in (VSCODE_DIR / "test").glob("*.test.cjs"))
    assert tests, "no node tests found"
    defaults = client_settings(machine_defaults())
    rc, output = run_node(node_bin, ["--test", "--test-concurrency=1", *tests], timeout=540, env_extra={
        "QUICKDRAFT_BIN": str(quickdraft_bin),
        "QUICKDRAFT_TINY_MODEL": str(editor_model_dir),
        "QUICKDRAFT_MACHINE_DEFAULTS": json.dumps(defaults),
    })
    assert rc == 0, "node --test failed (output above)"
    assert "# fail 0" in output
    assert "# pass 0" not in output
    # test/defaults.test.cjs: a user who set no drafter and no budget gets the server's machine
    # defaults, as in Neovim (test_editor_neovim.py checks the same there).
    assert (f"server settings with nothing set: drafter {defaults['drafter']}, budgetMs {defaults['budgetMs']:g}"
            in output)


def run_e2e(node_bin, quickdraft_bin, editor_model_dir, scenario: str):
    require_file(VSCODE_DIR / "quickdraft.vsix", "the packaged extension")
    require_file(VSCODE_DIR / "e2e" / "node_modules" / "code-server" / "out" / "node" / "entry.js", "code-server")
    TEST_OUTPUT.mkdir(exist_ok=True)
    shot = TEST_OUTPUT / ("vscode-ghost-text.png" if scenario == "type" else f"vscode-{scenario}-ghost-text.png")
    if shot.exists():
        shot.unlink()
    rc, output = run_node(node_bin, ["e2e/e2e.mjs"], timeout=540, env_extra={
        "QUICKDRAFT_BIN": str(quickdraft_bin),
        "QUICKDRAFT_TINY_MODEL": str(editor_model_dir),
        "QD_E2E_OUT": str(TEST_OUTPUT),
        "QD_E2E_SCENARIO": scenario,
    })
    assert rc == 0, "the code-server end-to-end test failed (output above)"
    assert "PASS" in output
    assert "installing the .vsix" in output, "the packaged extension was installed into the fresh profile"
    assert shot.exists() and shot.stat().st_size > 10_000, "the ghost-text screenshot was saved"
    return output


@pytest.mark.timeout(600)
def test_vscode_e2e_code_server(node_bin, quickdraft_bin, editor_model_dir):
    run_e2e(node_bin, quickdraft_bin, editor_model_dir, "type")


@pytest.mark.timeout(600)
def test_vscode_e2e_ghost_text_follows_the_ready_notification(node_bin, quickdraft_bin, editor_model_dir):
    output = run_e2e(node_bin, quickdraft_bin, editor_model_dir, "ready")
    assert "-> completionReady after" in output and "asked again" in output
    assert "initializationOptions: only what settings.json sets" in output

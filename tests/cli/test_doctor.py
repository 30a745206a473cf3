"""`quickdraft doctor` as a user runs it: a missing model names the pull and exits 1; models in
the store are hashed once (a stamp remembers it) and the server can start (exit 0)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.models import presets, store
from engine.models.tiny import write_tiny_model

pytestmark = pytest.mark.timeout(300)


def doctor(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "QUICKDRAFT_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "lsp_server.cli", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=240)


def install_tiny(home: Path, name: str, seed: int) -> Path:
    """A tiny random model committed into the store under a real preset's name, as a pull leaves it."""
    scratch = store.models_dir(home) / f".{name}.tmp-test"
    write_tiny_model(scratch, seed=seed)
    return store.commit(presets.get_preset(name), scratch, {"kind": "test"}, time.monotonic(), home)


def test_an_empty_store_names_the_pull_and_exits_1(tmp_path):
    out = doctor(tmp_path / "empty")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "!! verifier" in out.stdout
    assert "quickdraft models pull qwen2.5-coder-" in out.stdout  # the exact next step
    assert "The server cannot start" in out.stdout


def test_models_in_the_store_are_verified_once_and_the_server_can_start(tmp_path):
    home = tmp_path / "home"
    # Both members of the default pair: a GPU's default needs the two, a CPU's the 0.5B.
    paths = {name: install_tiny(home, name, seed) for seed, name in enumerate(presets.expand("default"))}
    first = doctor(home)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "ok verifier" in first.stdout and "sha256 verified just now" in first.stdout
    assert "The server can start" in first.stdout

    second = doctor(home)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "verified just now" not in second.stdout and "verifying" not in second.stderr  # the stamp held

    # A file that changed since is hashed again, and damage is reported with its repair.
    verifier = next(line for line in second.stdout.splitlines() if "ok verifier" in line).split()[2]
    with open(paths[verifier] / "model.safetensors", "ab") as weights:
        weights.write(b"\0")
    damaged = doctor(home)
    assert damaged.returncode == 1
    assert f"quickdraft models pull --force {verifier}" in damaged.stdout


def test_a_local_model_directory_is_enough(tmp_path, tiny_model_dir):
    out = doctor(tmp_path / "empty", "--verifier", str(tiny_model_dir), "--drafter", "lookup", "--dtype", "float32")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "a local model" in out.stdout

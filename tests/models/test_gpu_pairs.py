"""The pair a GPU runs by default (engine/models/gpu_pairs.py): the rule on injected card sizes and
pass costs (this machine has no GPU), the server's defaults taking it, the user's verifier still
winning, and `quickdraft doctor` saying what was chosen and why."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import torch

from engine.models import gpu_pairs, presets, store
from engine.models.gpu_pairs import gpu_pair_for, smallest_card_bytes
from engine.models.tiny import write_tiny_model
from lsp_server.cli import build_parser
from lsp_server.cli.doctor import gpu_pair_check
from lsp_server.workspace.settings import MACHINE_DEFAULTS, apply_client_settings, machine_defaults, settings_from_flags

GiB = 2**30


@pytest.mark.parametrize("card_gib, pair", [(8, "default"), (12, "3b"), (16, "3b"), (24, "7b"), (32, "7b"),
                                            (40, "14b"), (80, "14b"), (141, "14b")])
def test_the_largest_pair_that_fits_the_card(card_gib, pair):
    choice = gpu_pair_for(card_gib * GiB)
    assert choice.pair == pair and choice.verifier == presets.PAIRS[pair]["verifier"]
    assert choice.draft == "qwen2.5-coder-0.5b" and choice.reason.startswith("the largest that fits")


def test_each_pair_needs_exactly_its_smallest_card():
    smaller = None
    for pair in gpu_pairs.pairs_by_size():
        need = smallest_card_bytes(pair)
        assert gpu_pair_for(need + 1).pair == pair
        if smaller is not None:
            assert gpu_pair_for(need - 1).pair == smaller
        smaller = pair
    # The thresholds the README and docs/models.md state, in GB.
    assert [round(smallest_card_bytes(p) / 1e9, 1) for p in gpu_pairs.pairs_by_size()] == [7.6, 10.5, 20.6, 36.5]


def test_a_card_too_small_for_any_pair_gets_the_smallest_and_is_told():
    choice = gpu_pair_for(4 * GiB)
    assert choice.pair == "default" and choice.reason.startswith("none fits") and "--device cpu" in choice.reason


def test_a_verifier_whose_pass_is_too_slow_is_ruled_out():
    slow = {"qwen2.5-coder-14b": 31.0, "qwen2.5-coder-7b": 11.5}  # ms of an 8-token pass
    choice = gpu_pair_for(80 * GiB, slow)
    assert choice.pair == "7b" and "14b: a pass takes 31.0 ms, over 25" in choice.reason
    assert gpu_pair_for(80 * GiB, slow, budget_ms=400).pair == "14b"  # a longer budget affords it
    assert gpu_pair_for(80 * GiB, {"qwen2.5-coder-14b": 20.0}).pair == "14b"


def test_installed_pairs_come_first_and_the_larger_one_is_named():
    choice = gpu_pair_for(80 * GiB, installed={"default", "3b"})
    assert choice.pair == "3b" and choice.larger == "14b" and "14b also fits but is not installed" in choice.reason
    assert gpu_pair_for(80 * GiB, installed={"default", "14b"}).larger is None
    # Installed but too large for the card: not chosen; nothing installed fits: the largest that fits, to pull.
    assert gpu_pair_for(8 * GiB, installed={"14b"}).pair == "default"
    assert gpu_pair_for(24 * GiB, installed=set()).pair == "7b"


def install_tiny(home, name: str, seed: int) -> None:
    scratch = store.models_dir(home) / f".{name}.tmp-test"
    write_tiny_model(scratch, seed=seed)
    store.commit(presets.get_preset(name), scratch, {"kind": "test"}, time.monotonic(), home)


def test_the_server_default_follows_the_card_and_the_users_verifier_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path / "empty"))
    assert machine_defaults("gpu", gpu_memory=8 * GiB).verifier == "qwen2.5-coder-1.5b"
    assert machine_defaults("gpu", gpu_memory=24 * GiB).verifier == "qwen2.5-coder-7b"
    on_80 = machine_defaults("gpu", gpu_memory=80 * GiB)
    assert (on_80.verifier, on_80.draft, on_80.drafter) == ("qwen2.5-coder-14b", "qwen2.5-coder-0.5b", "hybrid")
    flags = build_parser().parse_args(["serve", "--verifier", "qwen2.5-coder-1.5b"])
    assert settings_from_flags(on_80, flags) == replace(on_80, verifier="qwen2.5-coder-1.5b")
    assert apply_client_settings(on_80, {"verifier": "qwen2.5-coder-3b"}).verifier == "qwen2.5-coder-3b"
    assert machine_defaults("cpu", gpu_memory=80 * GiB).verifier == MACHINE_DEFAULTS["cpu"]["verifier"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_without_a_card_to_ask_the_gpu_default_is_the_tables():
    assert gpu_pairs.card_memory() is None
    assert machine_defaults("gpu").verifier == MACHINE_DEFAULTS["gpu"]["verifier"]


def test_doctor_says_which_pair_the_card_affords_and_what_to_pull(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    for seed, name in enumerate(presets.expand("default")):
        install_tiny(home, name, seed)
    assert gpu_pairs.installed_pairs() == {"default"}
    check = gpu_pair_check(None, gpu_memory=24 * GiB)
    assert check.ok and check.detail.startswith("default = qwen2.5-coder-1.5b + qwen2.5-coder-0.5b: the largest installed")
    assert check.next_step.startswith("quickdraft models pull 7b")
    assert machine_defaults("gpu", gpu_memory=24 * GiB).verifier == "qwen2.5-coder-1.5b"  # what is there runs
    small = gpu_pair_check("qwen2.5-coder-3b", gpu_memory=8 * GiB)
    assert small.next_step == "" and "(--verifier overrides it)" in small.detail

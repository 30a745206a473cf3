"""Bytes on disk for the model store: checksums, progress bars, locks, free-space checks.

Every file a pull writes itself is opened through `open_output` (tests simulate a full
disk there), and a full disk becomes a `ModelError` that says how much space is needed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import shutil
from pathlib import Path
from typing import BinaryIO, Iterator

from engine.errors import ModelError

log = logging.getLogger(__name__)

CHUNK = 1 << 20
GB = 1e9


def progress(**kwargs):
    from tqdm.auto import tqdm

    # disable=None: bars on a terminal, silent in logs and test output.
    return tqdm(disable=None, dynamic_ncols=True, **kwargs)


def sha256_file(path: Path, bar=None) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
            if bar is not None:
                bar.update(len(chunk))
    return digest.hexdigest()


def open_output(path: Path) -> BinaryIO:
    """Every byte the pull writes itself goes through here (tests simulate a full disk on it)."""
    return open(path, "wb")


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def rmtree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)


def fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())


@contextlib.contextmanager
def locked(name: str, home: Path) -> Iterator[None]:
    """One pull/remove of a preset at a time, across processes (several `make test` at once)."""
    lock_dir = home / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another quickdraft process working on %s", name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def disk_error(error: OSError, what: str, home: Path, need_bytes: int) -> ModelError:
    if error.errno == errno.ENOSPC:
        return ModelError(
            f"no space left on device while {what} (in {home}); about {need_bytes / GB:.1f} GB are needed: "
            f"free some space or set QUICKDRAFT_HOME to a bigger disk, then run the pull again"
        )
    return ModelError(f"{what} failed: {error}")


def check_free_space(home: Path, need_bytes: int, what: str) -> None:
    free = shutil.disk_usage(home).free
    if free < need_bytes:
        raise ModelError(
            f"not enough disk space for {what}: {need_bytes / GB:.1f} GB needed, {free / GB:.1f} GB free in {home}; "
            f"free some space or set QUICKDRAFT_HOME to a bigger disk"
        )


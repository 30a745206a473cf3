"""Source files on this machine: which ones to read and how (text only, size-capped).

Pure Python (no torch): the benchmarks' corpus, their clients and the Medusa heads' training
data all pick files with it.
"""

from __future__ import annotations

import logging
import os
import sysconfig
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

SOURCE_SUFFIXES = {".py", ".js", ".ts", ".tsx", ".jsx", ".go", ".rs", ".java", ".c", ".h", ".cc", ".cpp", ".hpp",
                   ".rb", ".lua", ".sh", ".kt", ".swift", ".cs", ".php", ".scala"}
# Not representative of code a user writes, or huge generated tables.
SKIP_DIRS = {"__pycache__", "test", "tests", "idlelib", "lib2to3", "ensurepip", "turtledemo", "encodings",
             "site-packages", "dist-packages", "node_modules", ".git", "_vendor", "vendor", "pydoc_data"}
MIN_FILE_CHARS, MAX_FILE_CHARS = 2_000, 200_000


def walk_sources(root: Path, suffixes: set[str]) -> list[Path]:
    found: list[Path] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            path = Path(directory, name)
            if path.suffix in suffixes and not name.startswith("test_"):
                found.append(path)
    return found


def size_ok(path: Path) -> bool:
    try:
        size = path.stat().st_size
    except OSError:
        return False
    return MIN_FILE_CHARS <= size <= MAX_FILE_CHARS


def default_corpus_roots() -> dict[str, Path]:
    """The installed standard library and the installed packages (no network needed)."""
    paths = sysconfig.get_paths()
    return {"stdlib": Path(paths["stdlib"]), "packages": Path(paths["purelib"])}


def read_source(path: Path | zipfile.Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, KeyError, zipfile.BadZipFile) as error:
        log.debug("skipping %s: %s", path, error)
        return None
    return text if "\x00" not in text else None

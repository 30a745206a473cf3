"""Holes for `quickdraft bench crossfile`: lines of real multi-file Python packages on this machine.

A package is a folder with ``__init__.py`` and at least ``MIN_MODULES`` modules, in the standard
library or the installed packages (never this checkout, nor a package the project's own code,
tests or README import: the benchmark must not measure on code the project works with).

- **cross-file** holes: an indented code line that uses a name imported from another module of
  the same package — where that module defines it (``def``, ``class`` or an assignment at its
  top) — and that the ``NEAR_CHARS`` before the cursor do not mention, so the prompt's own window
  cannot show it. The cursor waits just before that name (``x = `` typed, as CrossCodeEval cuts):
  the middle is the rest of the line, starting with the other file's name;
- **control** holes: lines of the same files that use no name imported from the package nor
  defined at the top of the documents opened beside them, the cursor before the line's last
  name that follows a blank, a bracket, a comma or ``=`` (the line's start where there is none).

Beside each file the user has open the modules its cross-file names come from (up to
``MAX_SOURCES``) and ``DISTRACTORS`` other modules of its package, as the other documents.
Pure Python (no torch).
"""

from __future__ import annotations

import ast
import functools
import logging
import os
import random
import re
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from engine.text.sources import MAX_FILE_CHARS, MIN_FILE_CHARS, SKIP_DIRS, read_source
from engine.bench.quality_holes import QualityHole, line_holes
from engine.bench.quality_sources import REPO, is_project_file

log = logging.getLogger(__name__)

MIN_MODULES = 3
MAX_PACKAGE_MODULES = 400  # larger packages are walked no further than this many modules
MAX_SOURCES = 3
DISTRACTORS = 2
NEAR_CHARS = 2_000  # about the CPU prompt's prefix window (384 tokens)
MAX_FILES_TRIED = 3_000
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IMPORT = re.compile(r"^\s*(?:from\s+([A-Za-z_][\w.]*)\s+import|import\s+([A-Za-z_][\w.]*))", re.M)


@dataclass
class CrossFileHole(QualityHole):
    group: str = "crossfile"  # "crossfile" | "control"
    names: list[str] = field(default_factory=list)  # the other files' names the middle uses
    documents: list[tuple[str, str]] = field(default_factory=list)  # (path, text) open beside it

    def describe(self) -> dict:
        data = super().describe()
        data["documents"] = [path for path, _ in data.pop("documents")]
        return data


def default_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    return [Path(paths["stdlib"]), Path(paths["purelib"])]


@functools.cache
def project_imports() -> frozenset[str]:
    """Top-level modules the project's code, tests and README import: never measured on."""
    names: set[str] = set()
    files = [*REPO.glob("engine/**/*.py"), *REPO.glob("lsp_server/**/*.py"), *REPO.glob("tests/**/*.py"),
             REPO / "README.md"]
    for path in files:
        text = read_source(path) or ""
        names.update((a or b).split(".")[0] for a, b in _IMPORT.findall(text))
    return frozenset(names)


def packages(roots: Sequence[Path], seed: int, exclude: frozenset[str] = frozenset()) -> list[Path]:
    """Top-level package folders under ``roots`` with enough modules, shuffled by ``seed``."""
    found = []
    for root in roots:
        try:
            entries = sorted(root.iterdir())
        except OSError:
            continue
        for entry in entries:
            if entry.name in SKIP_DIRS or entry.name in exclude or entry.name.startswith((".", "_")) \
                    or is_project_file(entry):
                continue
            try:
                if (entry / "__init__.py").is_file() and len(list(entry.glob("*.py"))) >= MIN_MODULES:
                    found.append(entry)
            except OSError:
                continue
    random.Random(seed).shuffle(found)
    return found


def modules(package: Path) -> list[Path]:
    out = []
    for directory, subdirs, files in os.walk(package):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS and not d.startswith((".", "test")))
        out += [Path(directory, f) for f in sorted(files) if f.endswith(".py") and not f.startswith("test")]
        if len(out) >= MAX_PACKAGE_MODULES:
            break
    return out[:MAX_PACKAGE_MODULES]


@functools.lru_cache(maxsize=512)
def top_names(path: Path) -> frozenset[str]:
    """Names defined at the top of a module (def, class, assignment)."""
    tree = _parse(path)
    names: set[str] = set()
    for node in tree.body if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return frozenset(names)


def _parse(path: Path) -> ast.Module | None:
    text = read_source(path)
    try:
        return ast.parse(text) if text is not None else None
    except (SyntaxError, ValueError, RecursionError):
        return None


@functools.lru_cache(maxsize=64)
def _import_lines(path: Path) -> frozenset[int]:
    """0-based lines of the module's import statements."""
    tree = _parse(path)
    return frozenset(line - 1 for node in (ast.walk(tree) if tree is not None else ())
                     if isinstance(node, (ast.Import, ast.ImportFrom))
                     for line in range(node.lineno, (node.end_lineno or node.lineno) + 1))


def _module_file(package_root: Path, dotted: str) -> Path | None:
    base = package_root.parent.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def cross_imports(path: Path, package_root: Path) -> dict[str, Path]:
    """Names ``path`` imports from other modules of its package that define them there."""
    tree = _parse(path)
    if tree is None:
        return {}
    own = ".".join(path.relative_to(package_root.parent).with_suffix("").parts)
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            parts = own.split(".")[: -node.level]  # a module's package is its name less one part per dot
            if path.name == "__init__.py":
                parts = own.split(".")[: len(own.split(".")) - node.level + 1]
            dotted = ".".join([*parts, *([node.module] if node.module else [])])
        else:
            dotted = node.module or ""
        if not dotted.startswith(package_root.name):
            continue
        source = _module_file(package_root, dotted)
        if source is None or source == path:
            continue
        for alias in node.names:
            if alias.name != "*" and alias.name in top_names(source):
                found[alias.asname or alias.name] = source
    return found


def _name(path: Path, package_root: Path) -> str:
    return str(path.relative_to(package_root.parent))


def file_holes(path: Path, package_root: Path, rng: random.Random) -> list[CrossFileHole]:
    """One cross-file and one control hole of ``path``, where it has them."""
    text = read_source(path)
    if text is None or not MIN_FILE_CHARS <= len(text) <= MAX_FILE_CHARS:
        return []
    imported = cross_imports(path, package_root)
    if not imported:
        return []
    sources = list(dict.fromkeys(imported.values()))
    rng.shuffle(sources)
    sources = sources[:MAX_SOURCES]
    others = [m for m in modules(package_root) if m != path and m not in sources]
    rng.shuffle(others)
    opened = [*sources, *[m for m in others if (read_source(m) or "") and len(read_source(m)) <= MAX_FILE_CHARS]
              [:DISTRACTORS]]
    documents = [(_name(m, package_root), read_source(m) or "") for m in opened]
    usable = {name for name, source in imported.items() if source in sources}
    opened_names = set().union(*(top_names(m) for m in opened)) | set(imported)
    cross, control = [], []
    for hole in line_holes(_name(path, package_root), text):
        if hole.line in _import_lines(path):  # an import names what it imports: no file beside it needed
            continue
        words = set(_IDENT.findall(hole.middle))
        needed = sorted(n for n in words & usable if not re.search(rf"\b{re.escape(n)}\b", hole.prefix[-NEAR_CHARS:]))
        if needed:
            cross.append((hole, needed))
        elif not words & opened_names:
            control.append((hole, []))
    picked = []
    for group, candidates in (("crossfile", cross), ("control", control)):
        if candidates:
            hole, names = rng.choice(candidates)
            start = _cursor(hole.middle, names)
            picked.append(CrossFileHole(
                path=hole.path, kind="name", line=hole.line, character=hole.character + start,
                prefix=hole.prefix + hole.middle[:start], middle=hole.middle[start:], suffix=hole.suffix,
                language="python", multiline=False, group=group, names=names, documents=documents))
    return picked


def _cursor(middle: str, names: Sequence[str]) -> int:
    """Where the user waits for the completion: just before the other file's name (as CrossCodeEval cuts);
    in a control line, before its last name after a blank, bracket or ``=`` — the same shape of hole."""
    if names:
        return min(m.start() for n in names for m in [re.search(rf"\b{re.escape(n)}\b", middle)] if m)
    starts = [m.start() for m in _IDENT.finditer(middle.split("#")[0]) if m.start() > 0 and middle[m.start() - 1] in " ([=,"]
    return starts[-1] if starts else 0


def make_crossfile_holes(count: int, seed: int, roots: Sequence[Path] | None = None,
                         exclude: frozenset[str] | None = None) -> list[CrossFileHole]:
    """``count`` cross-file holes and ``count`` control holes, one of each kind per file at most."""
    rng = random.Random(seed)
    exclude = project_imports() if exclude is None else exclude
    wanted = {"crossfile": count, "control": count}
    holes: list[CrossFileHole] = []
    tried = 0
    for package_root in packages(roots if roots is not None else default_roots(), seed, exclude):
        files = [m for m in modules(package_root) if m.name != "__init__.py"]
        rng.shuffle(files)
        for path in files[:8]:  # a few files a package: many packages, not one big one
            tried += 1
            for hole in file_holes(path, package_root, rng):
                if wanted[hole.group] > 0:
                    wanted[hole.group] -= 1
                    holes.append(hole)
            if not any(wanted.values()) or tried >= MAX_FILES_TRIED:
                return holes
    return holes

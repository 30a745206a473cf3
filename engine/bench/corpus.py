"""Benchmark corpus: real source files and fill-in-the-middle holes cut from them.

Pure Python (no torch), so the session benchmark's client process can use it too.
Everything is chosen by a seed: the same seed on the same Python install picks the same
files and the same holes, so runs are comparable.

Three kinds of hole, the places an editor asks for a completion:
- ``body``: a function body, cursor at its first statement (after the indentation);
- ``statement_end``: the rest of a line, cursor at a word boundary in its middle;
- ``midline``: the arguments between a pair of brackets on one line, the closing bracket stays.
"""

from __future__ import annotations

import ast
import io
import logging
import random
import tokenize
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

from engine.text.sources import SOURCE_SUFFIXES, default_corpus_roots, read_source, size_ok, walk_sources

log = logging.getLogger(__name__)

HOLE_KINDS = ("body", "statement_end", "midline")

BODY_LINES = (2, 40)  # a body hole spans this many lines (first statement to the end)


@dataclass
class Hole:
    path: str  # the file, as given or relative to its corpus root
    kind: str  # body | statement_end | midline
    line: int  # 0-based line of the cursor
    character: int  # 0-based code-point column of the cursor
    prefix: str  # text before the cursor
    middle: str  # the text cut out: what the user types next
    suffix: str  # text after the hole

    @property
    def text(self) -> str:
        return self.prefix + self.middle + self.suffix

    def describe(self) -> dict:
        data = asdict(self)
        for key in ("prefix", "suffix"):
            data[key + "_chars"] = len(data.pop(key))
        return data


# ----------------------------------------------------------------------------- corpus


def default_corpus(count: int, seed: int, sources: Sequence[str] = ("stdlib", "packages")) -> list[Path]:
    """`count` Python modules picked by `seed`, alternating between the sources.

    The candidate lists are sorted before sampling, so the pick depends only on the seed
    and on what is installed.
    """
    roots = default_corpus_roots()
    pools: list[list[Path]] = []
    for source in sources:
        if source not in roots:
            raise ValueError(f"unknown corpus source {source!r}; choose from {', '.join(roots)}")
        pool = [p for p in walk_sources(roots[source], {".py"}) if size_ok(p)]
        random.Random(f"{seed}:{source}").shuffle(pool)
        pools.append(pool)
    picked: list[Path] = []
    cursors = [0] * len(pools)
    while len(picked) < count and any(c < len(p) for c, p in zip(cursors, pools)):
        for i, pool in enumerate(pools):
            if len(picked) < count and cursors[i] < len(pool):
                picked.append(pool[cursors[i]])
                cursors[i] += 1
    return picked


def expand_paths(paths: Iterable[str | Path], seed: int, count: int | None = None) -> list[Path]:
    """Files as given; folders contribute their source files, shuffled by `seed`."""
    files: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found = [p for p in walk_sources(path, SOURCE_SUFFIXES) if size_ok(p)]
            random.Random(f"{seed}:{path}").shuffle(found)
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"no such file or folder: {path}")
    return files if count is None else files[:count]


def display_path(path: Path | zipfile.Path) -> str:
    """A short stable name: relative to the stdlib or site-packages when it lives there; an
    archive member (the JDK's src.zip) as the archive's path and the member's."""
    if isinstance(path, zipfile.Path):
        return f"{path.root.filename}/{path.at}"
    for name, root in default_corpus_roots().items():
        try:
            return f"{name}/{path.resolve().relative_to(root.resolve())}"
        except ValueError:
            continue
    return str(path)


# ----------------------------------------------------------------------------- holes


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _hole(path: str, kind: str, text: str, starts: list[int], start: int, end: int) -> Hole:
    line = max(i for i, s in enumerate(starts) if s <= start)
    return Hole(path, kind, line, start - starts[line], text[:start], text[start:end], text[end:])


def _python_bodies(text: str) -> list[tuple[int, int]] | None:
    """(first body line, last body line), 1-based, of every function; None if not Python."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            # Keep the docstring in the prefix when there is code after it: the user wrote it.
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str) and len(node.body) > 1):
                first = node.body[1]
            if first.lineno > node.lineno and node.end_lineno is not None:
                spans.append((first.lineno, node.end_lineno))
    return spans


def _indented_bodies(lines: list[str]) -> list[tuple[int, int]]:
    """Bodies by indentation, for any language: the lines under a line ending in ':' or '{'."""
    spans = []
    for i, line in enumerate(lines[:-1]):
        if not line.rstrip().endswith((":", "{")):
            continue
        base, j = _indent(line), i + 1
        while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > base):
            j += 1
        last = j - 1
        while last > i and not lines[last].strip():
            last -= 1
        if last > i and _indent(lines[i + 1]) > base:
            spans.append((i + 2, last + 1))  # 1-based like ast
    return spans


def body_holes(path: str, text: str) -> list[Hole]:
    lines = text.split("\n")
    starts = _line_starts(text)
    spans = _python_bodies(text) if path.endswith((".py", ".pyi")) else None
    if spans is None:
        spans = _indented_bodies(lines)
    holes = []
    for first, last in spans:
        if not BODY_LINES[0] <= last - first + 1 <= BODY_LINES[1]:
            continue
        start = starts[first - 1] + _indent(lines[first - 1])
        end = starts[last - 1] + len(lines[last - 1])
        if text[start:end].strip():
            holes.append(_hole(path, "body", text, starts, start, end))
    return holes


def _code_line(line: str, path: str = "") -> bool:
    """A line of code long enough to cut; no tabs inside it (alignment), nor in a Python file's
    indentation (mixed indentation), though Go and C indent with tabs."""
    stripped = line.strip()
    tabs = line if path.endswith((".py", ".pyi")) else stripped
    return len(stripped) >= 24 and not stripped.startswith(("#", "//", "/*", "*", '"', "'", "@")) and "\t" not in tabs


def _string_lines(path: str, text: str) -> set[int]:
    """0-based lines inside multi-line Python strings (docstrings): prose, not code."""
    if not path.endswith((".py", ".pyi")):
        return set()
    lines: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                lines.update(range(token.start[0] - 1, token.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return lines


def statement_end_holes(path: str, text: str) -> list[Hole]:
    """Cursor at a word boundary in the middle part of a code line; the rest of the line is the hole."""
    starts = _line_starts(text)
    prose = _string_lines(path, text)
    holes = []
    for number, line in enumerate(text.split("\n")):
        if number in prose or not _code_line(line, path):
            continue
        lo = _indent(line) + int((len(line) - _indent(line)) * 0.3)
        hi = _indent(line) + int((len(line) - _indent(line)) * 0.7)
        cut = next((c for c in range(lo, hi) if line[c - 1] in " (.=,[" and line[c] != " "), None)
        if cut is not None:
            start = starts[number] + cut
            holes.append(_hole(path, "statement_end", text, starts, start, starts[number] + len(line)))
    return holes


def midline_holes(path: str, text: str) -> list[Hole]:
    """The inside of the first bracket pair on a line holding at least 6 characters; the closer stays."""
    starts = _line_starts(text)
    pairs = {"(": ")", "[": "]", "{": "}"}
    prose = _string_lines(path, text)
    holes = []
    for number, line in enumerate(text.split("\n")):
        if number in prose or not _code_line(line, path):
            continue
        for i, ch in enumerate(line):
            if ch not in pairs:
                continue
            depth, j = 0, i
            while j < len(line):
                if line[j] == ch:
                    depth += 1
                elif line[j] == pairs[ch]:
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if j < len(line) and j - i - 1 >= 6:
                holes.append(_hole(path, "midline", text, starts, starts[number] + i + 1, starts[number] + j))
                break
    return holes


_CUTTERS = {"body": body_holes, "statement_end": statement_end_holes, "midline": midline_holes}


def cut_hole(path: str, text: str, kind: str, rng: random.Random) -> Hole | None:
    """One hole of `kind` from `text`, chosen by `rng`; None when the file has none."""
    candidates = _CUTTERS[kind](path, text)
    # Leave enough prefix for a real prompt: not in the first few lines of the file.
    candidates = [h for h in candidates if h.line >= 8] or candidates
    return rng.choice(candidates) if candidates else None


def make_holes(files: Sequence[Path], count: int, seed: int, kinds: Sequence[str] = HOLE_KINDS) -> list[Hole]:
    """`count` holes, kinds in turn (body, statement_end, midline, body, …), one per file.

    A file without a hole of the wanted kind is skipped for that kind and tried again later.
    """
    holes: list[Hole] = []
    pending = list(files)
    rejected: set[tuple[int, str]] = set()
    while len(holes) < count and pending:
        kind = kinds[len(holes) % len(kinds)]
        chosen = None
        for index, path in enumerate(pending):
            if (id(path), kind) in rejected:
                continue
            text = read_source(path)
            hole = cut_hole(display_path(path), text, kind, random.Random(f"{seed}:{path}:{kind}")) if text else None
            if hole is None:
                rejected.add((id(path), kind))
                continue
            chosen = index, hole
            break
        if chosen is None:
            if all((id(p), k) in rejected for p in pending for k in kinds):
                break
            # No file has this kind left: take the next kind instead.
            kinds = [k for k in kinds if k != kind] or kinds
            continue
        pending.pop(chosen[0])
        holes.append(chosen[1])
    if len(holes) < count:
        log.warning("only %d holes from %d files (wanted %d); name more files or folders", len(holes), len(files), count)
    return holes

"""Holes for the quality benchmark: real code in several languages, three kinds of cursor.

Pure Python (no torch). Sources are what is on the machine (engine.bench.quality_sources:
the Python standard library and packages, npm packages' JavaScript and TypeScript, the JDK's
src.zip, C and C++ under /usr, Go, Rust and C# where a toolchain or package left them). A
language counts only where its tree-sitter grammar is installed too (the benchmark checks
that spliced files parse). ``all`` names every language with a grammar and files here.

- ``line``: a whole line of code inside a block; its indentation already typed, the cursor
  after it (single-line completion);
- ``midline``: the cursor in the middle of a line: the rest of a statement, or the inside
  of a bracket pair (single-line completion);
- ``multiline``: a short function body (at most ``MULTILINE_MAX_LINES`` lines), cursor at its
  first statement (multi-line completion).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Mapping, Sequence

from engine.bench.corpus import (
    Hole, _line_starts, _string_lines, body_holes, display_path, midline_holes, statement_end_holes,
)
from engine.bench.quality_sources import ALL_LANGUAGES, Root, Source, known_languages, language_files
from engine.text.sources import read_source
from engine.text.syntax import get_parser

QUALITY_KINDS = ("line", "midline", "multiline")
MULTILINE_MAX_LINES = 6
MIN_LINE_CODE_CHARS = 12
DEFAULT_LANGUAGES = ("python", "javascript", "go", "rust")


@dataclass
class QualityHole(Hole):
    language: str = "python"
    multiline: bool = False


def resolve_languages(languages: Sequence[str]) -> list[str]:
    """The languages asked for, ``all`` standing for every one quickdraft knows, each once."""
    named = [lang for name in languages for lang in (ALL_LANGUAGES if name == "all" else (name,))]
    return list(dict.fromkeys(named))


def available_languages(languages: Sequence[str], seed: int,
                        roots: Mapping[str, Sequence[Root]] | None = None) -> list[str]:
    """The languages (``all`` expanded) with both a grammar and source files here."""
    return [lang for lang in resolve_languages(languages) if get_parser(lang) is not None
            and lang in known_languages(roots) and language_files(lang, 1, seed, roots)]


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def line_holes(path: str, text: str) -> list[Hole]:
    """Indented code lines: the indentation stays, the code after it is the hole."""
    starts = _line_starts(text)
    prose = _string_lines(path, text)
    holes = []
    for number, line in enumerate(text.split("\n")):
        code = line.strip()
        if number in prose or _indent(line) == 0 or len(code) < MIN_LINE_CODE_CHARS:
            continue
        if code.startswith(("#", "//", "/*", "*", '"', "'", "@")) or not any(c.isalnum() for c in code[:3]):
            continue
        start = starts[number] + _indent(line)
        holes.append(Hole(path, "line", number, _indent(line), text[:start], text[start:starts[number] + len(line)],
                          text[starts[number] + len(line):]))
    return holes


def _short_bodies(path: str, text: str) -> list[Hole]:
    return [h for h in body_holes(path, text) if h.middle.count("\n") < MULTILINE_MAX_LINES]


_CUTTERS = {
    "line": lambda path, text: line_holes(path, text),
    "midline": lambda path, text: statement_end_holes(path, text) + midline_holes(path, text),
    "multiline": _short_bodies,
}


def cut_hole(path: Source, language: str, kind: str, seed: int) -> QualityHole | None:
    text = read_source(path)
    if not text:
        return None
    name = display_path(path)
    candidates = [h for h in _CUTTERS[kind](name, text) if h.line >= 8]  # leave a real prefix
    if not candidates:
        return None
    hole = random.Random(f"{seed}:{name}:{kind}").choice(candidates)
    return QualityHole(**{**vars(hole), "kind": kind}, language=language, multiline=kind == "multiline")


def make_quality_holes(count: int, seed: int, languages: Sequence[str] = DEFAULT_LANGUAGES,
                       kinds: Sequence[str] = QUALITY_KINDS,
                       roots: Mapping[str, Sequence[Root]] | None = None) -> list[QualityHole]:
    """``count`` holes, languages and kinds in turn, at most one hole per file and kind.
    ``roots`` replaces where each language's files are looked for (tests use a folder of their own)."""
    languages = available_languages(languages, seed, roots)
    if not languages:
        return []
    pools = {lang: iter(language_files(lang, 4 * count, seed, roots)) for lang in languages}
    slots = [(lang, kind) for kind in kinds for lang in languages]
    exhausted: set[tuple[str, str]] = set()
    holes: list[QualityHole] = []
    turn = 0
    while len(holes) < count and len(exhausted) < len(slots):
        lang, kind = slot = slots[turn % len(slots)]
        turn += 1
        if slot in exhausted:
            continue
        hole = next((h for h in (cut_hole(p, lang, kind, seed) for p in pools[lang]) if h is not None), None)
        if hole is None:
            exhausted.add(slot)
        else:
            holes.append(hole)
    return holes

"""Holes for the quality benchmark: real code in several languages, three kinds of cursor.

Pure Python (no torch). Sources are what is installed on the machine: the Python standard
library and packages, the JavaScript of globally installed npm packages, Go and Rust
sources where a toolchain or a package left them. A language counts only where its
tree-sitter grammar is installed too (the benchmark checks that spliced files parse).

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
from pathlib import Path
from typing import Sequence

from engine.bench.corpus import (
    Hole, _line_starts, _string_lines, _walk_sources, _size_ok, body_holes, default_corpus, display_path,
    midline_holes, read_source, statement_end_holes,
)
from engine.syntax import get_parser

QUALITY_KINDS = ("line", "midline", "multiline")
MULTILINE_MAX_LINES = 6
MIN_LINE_CODE_CHARS = 12
# Where installed code of each language lives, first match wins per root.
LANGUAGE_SOURCES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # language: (file suffixes, roots to look under)
    "javascript": ((".js",), ("/usr/lib/node_modules", "/usr/local/lib/node_modules", "/usr/share/nodejs")),
    "go": ((".go",), ("/usr/lib/go/src", "/usr/local/go/src", "/usr/share/gocode/src", "/usr/share/doc/git/contrib",
                      "~/go/pkg/mod")),
    "rust": ((".rs",), ("~/.cargo/registry/src", "/usr/share/cargo/registry")),
}
DEFAULT_LANGUAGES = ("python", "javascript", "go", "rust")


@dataclass
class QualityHole(Hole):
    language: str = "python"
    multiline: bool = False


def language_files(language: str, count: int, seed: int) -> list[Path]:
    """Up to ``count`` source files of ``language`` installed here, shuffled by ``seed``."""
    if language == "python":
        return default_corpus(count, seed)
    if language not in LANGUAGE_SOURCES:
        raise ValueError(f"no source locations known for {language!r}; choose from python, "
                         f"{', '.join(LANGUAGE_SOURCES)}")
    suffixes, roots = LANGUAGE_SOURCES[language]
    found: list[Path] = []
    for root in roots:
        path = Path(root).expanduser()
        if path.is_dir():
            found += [p for p in _walk_sources(path, set(suffixes)) if _size_ok(p) and ".min." not in p.name]
    random.Random(f"{seed}:{language}").shuffle(found)
    return found[:count]


def available_languages(languages: Sequence[str], seed: int) -> list[str]:
    """The languages with both a grammar and installed sources."""
    return [lang for lang in languages if get_parser(lang) is not None and language_files(lang, 1, seed)]


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


def cut_hole(path: Path, language: str, kind: str, seed: int) -> QualityHole | None:
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
                       kinds: Sequence[str] = QUALITY_KINDS) -> list[QualityHole]:
    """``count`` holes, languages and kinds in turn, at most one hole per file and kind."""
    languages = available_languages(languages, seed)
    if not languages:
        return []
    pools = {lang: iter(language_files(lang, 4 * count, seed)) for lang in languages}
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

"""Where real source files of each language lie on this machine, for `bench quality`.

Nothing is downloaded: the Python standard library and installed packages; the JavaScript
and TypeScript of npm packages (global ones, and the editor client's dependencies); the
JDK's ``src.zip`` (read in place); C and C++ headers, sources and examples under /usr; Go,
Rust and C# files that a toolchain or a package left behind. A root is a glob; ``~`` and
``$VARS`` expand, ``{repo}`` is this checkout.

Skipped: tests (test folders, ``*_test.go``, ``*.spec.ts``, ``FooTest.java``, …), minified
and declaration-only files (``.min.js``, ``.d.ts``), and the project's own files — its
sources, tests and fixtures, anything in this checkout outside a ``node_modules`` folder or
the virtual environment — so the benchmark never measures on code the project's tests use.
The editor tests' own harness (``editor-clients/*/e2e``) is not a root either.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import random
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence, Union

from engine.bench.corpus import default_corpus
from engine.text.sources import MAX_FILE_CHARS, MIN_FILE_CHARS, SKIP_DIRS, read_source

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
ALL_LANGUAGES = ("python", "javascript", "typescript", "java", "c", "cpp", "csharp", "go", "rust")

Source = Union[Path, zipfile.Path]  # a file on disk, or a member of an archive (the JDK's src.zip)


@dataclass(frozen=True)
class Root:
    pattern: str  # a glob; a .zip is read inside
    suffixes: tuple[str, ...]
    skip: tuple[str, ...] = ()  # more folder names not to enter
    nested_modules: bool = False  # enter node_modules below the root too (C# ships deep in npm packages)
    reject: str = ""  # a file whose text matches this (multi-line) pattern is another language's


# C++ in a C header: /usr/include holds LLVM's and others' C++ headers beside libc's.
CPP_TEXT = r"^\s*(namespace\s+\w+\s*\{|template\s*<|class\s+\w+[^;\n]*\{|(public|private|protected):)|\bstd::"


_NODE = ("/usr/lib/node_modules", "/usr/local/lib/node_modules", "{repo}/editor-clients/*/node_modules")
_C = (".c", ".h")
_CPP = (".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx")
LANGUAGE_ROOTS: dict[str, tuple[Root, ...]] = {
    "javascript": (*(Root(p, (".js",)) for p in _NODE[:2]), Root("/usr/share/nodejs", (".js",)),
                   Root(_NODE[2], (".js",))),
    "typescript": tuple(Root(p, (".ts", ".mts", ".cts")) for p in _NODE),
    "java": (Root("$JAVA_HOME/lib/src.zip", (".java",)), Root("/usr/lib/jvm/*/lib/src.zip", (".java",)),
             Root("/usr/lib/jvm/*/src.zip", (".java",))),
    "c": (Root("/usr/share/doc", _C, reject=CPP_TEXT), Root("/usr/src", _C, reject=CPP_TEXT),
          Root("/usr/local/src", _C, reject=CPP_TEXT), Root("/usr/include", (".h",), skip=("c++",), reject=CPP_TEXT)),
    "cpp": (Root("/usr/include/c++/*", (".h", ".tcc", ".hpp")), Root("/usr/share/doc", _CPP), Root("/usr/src", _CPP),
            Root("/usr/local/include", _CPP)),
    "csharp": (Root("~/.nuget/packages", (".cs",)), Root("/usr/share/dotnet", (".cs",)),
               Root("/usr/lib/dotnet", (".cs",)), *(Root(p, (".cs",), nested_modules=True) for p in _NODE)),
    "go": tuple(Root(p, (".go",)) for p in ("/usr/lib/go/src", "/usr/local/go/src", "/usr/share/gocode/src",
                                           "/usr/share/doc/git/contrib", "~/go/pkg/mod")),
    "rust": tuple(Root(p, (".rs",)) for p in ("~/.cargo/registry/src", "/usr/share/cargo/registry",
                                             "~/.rustup/toolchains/*/lib/rustlib/src/rust/library",
                                             "~/.rustup/toolchains/*/share/doc/rust")),
}

# Folders and files that are tests, fixtures or machine-made, in any language.
_TEST_DIRS = {"__tests__", "__mocks__", "testdata", "testing", "fixtures", "e2e", "spec", "specs", "benchmarks"}
_SKIP_FILE = re.compile(r"^test_|_test\.|\.test\.|\.spec\.|Tests?\.(java|cs)$|_tests?\.rs$|\.min\.|\.d\.[mc]?ts$")


def is_project_file(path: Path) -> bool:
    """A file of this checkout itself (not a dependency in node_modules or the virtual environment)."""
    try:
        parts = Path(os.path.abspath(path)).relative_to(REPO).parts
    except ValueError:
        return False
    return bool(parts) and parts[0] not in (".venv", "venv") and "node_modules" not in parts


def _wanted(name: str, size: int, suffixes: Sequence[str]) -> bool:
    return name.endswith(tuple(suffixes)) and not _SKIP_FILE.search(name) and MIN_FILE_CHARS <= size <= MAX_FILE_CHARS


@functools.cache
def _files_on_disk(root: str, suffixes: tuple[str, ...], skip: tuple[str, ...], nested: bool) -> tuple[Path, ...]:
    skipped = (SKIP_DIRS | _TEST_DIRS | set(skip)) - ({"node_modules"} if nested else set())
    found = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in skipped and not d.startswith("."))
        for name in sorted(files):
            path = Path(directory, name)
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if _wanted(name, size, suffixes) and not is_project_file(path):
                found.append(path)
    return tuple(found)


@functools.cache
def _files_in_zip(archive: str, suffixes: tuple[str, ...]) -> tuple[zipfile.Path, ...]:
    try:
        zf = zipfile.ZipFile(archive)
    except (OSError, zipfile.BadZipFile) as error:
        log.debug("skipping %s: %s", archive, error)
        return ()
    skipped = SKIP_DIRS | _TEST_DIRS
    return tuple(zipfile.Path(zf, info.filename) for info in sorted(zf.infolist(), key=lambda i: i.filename)
                 if not info.is_dir() and not skipped.intersection(info.filename.split("/")[:-1])
                 and _wanted(info.filename.rsplit("/", 1)[-1], info.file_size, suffixes))


def root_files(root: Root) -> list[Source]:
    """The wanted files under every existing folder or archive the root's glob names."""
    pattern = os.path.expandvars(os.path.expanduser(root.pattern.replace("{repo}", str(REPO))))
    files: list[Source] = []
    seen: set[str] = set()
    for match in sorted(glob.glob(pattern)):
        real = os.path.realpath(match)
        if real in seen:
            continue
        seen.add(real)
        if os.path.isdir(real):
            files += _files_on_disk(real, root.suffixes, root.skip, root.nested_modules)
        elif os.path.isfile(real) and real.endswith(".zip"):
            files += _files_in_zip(real, root.suffixes)
    return files


def _key(source: Source) -> tuple[str, int]:
    """Name and size: the same file under two toolchains (stable, nightly) or JDKs counts once."""
    if isinstance(source, zipfile.Path):
        return source.name, source.root.getinfo(source.at).file_size
    return source.name, source.stat().st_size


def language_files(language: str, count: int, seed: int,
                   roots: Mapping[str, Sequence[Root]] | None = None) -> list[Source]:
    """Up to ``count`` source files of ``language`` found here, chosen by ``seed``: each root's
    files shuffled, then taken from the roots in turn (so 7,000 system headers do not crowd out
    the 100 example programs). Python without ``roots`` is `default_corpus` (stdlib and packages)."""
    if language not in known_languages(roots):
        raise ValueError(f"no source locations known for {language!r}; choose from "
                         f"{', '.join(known_languages(roots))} (or all)")
    table = LANGUAGE_ROOTS if roots is None else roots
    if language == "python" and "python" not in table:
        return list(default_corpus(count, seed))
    pools, seen = [], set()
    roots_here = table[language]
    for index, root in enumerate(roots_here):
        pool = []
        for source in root_files(root):
            key = _key(source)
            if key not in seen:
                seen.add(key)
                pool.append(source)
        random.Random(f"{seed}:{language}:{index}").shuffle(pool)
        pools.append(pool)
    picked: list[Source] = []
    for layer in range(max((len(p) for p in pools), default=0)):
        for root, pool in zip(roots_here, pools):
            if layer < len(pool) and len(picked) < count and _fits(pool[layer], root):
                picked.append(pool[layer])
        if len(picked) >= count:
            break
    return picked


def known_languages(roots: Mapping[str, Sequence[Root]] | None = None) -> list[str]:
    """The languages ``roots`` (default: this machine's usual places) says where to look for."""
    return sorted({"python", *LANGUAGE_ROOTS} if roots is None else roots)


def _fits(source: Source, root: Root) -> bool:
    if not root.reject:
        return True
    text = read_source(source)
    return text is not None and re.search(root.reject, text, re.MULTILINE) is None


"""Context from beyond the open file: the few pieces of other documents worth a prompt slot.

Two kinds of snippet, chosen at anchor time (engine/text/anchor.py) and rendered by
engine/text/prompt.py as other documents in the model's repository format:

- **definitions** of identifiers used near the cursor, or imported by the file, found by
  tree-sitter in the other documents: a function's signature and the head of its body (the
  docstring), a class's header with its methods' signatures — never whole bodies;
- **similar windows** (Copilot's neighbouring tabs): windows of ``WINDOW_LINES`` lines over the
  other documents, ranked by the Jaccard similarity of their identifier sets to the last
  ``QUERY_LINES`` lines before the cursor.

The context precedes the prefix in the prompt, so a selection that changed at every anchor
would re-prefill the whole prompt. A selection is therefore kept (as copied text) while the
cursor's neighbourhood stays alike (``STICKY_SIMILARITY``): typing at an anchor, or moving on
a few lines, keeps the KV cache. Work is bounded whatever the input: documents, characters
scanned and parsed, windows compared; text with NUL bytes is skipped. Nothing here reads files.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

from engine.text.fim import line_comment
from engine.text.syntax import language_from, parse

log = logging.getLogger(__name__)

WINDOW_LINES = 24
WINDOW_STRIDE = 12
QUERY_LINES = 30  # the code before the cursor that windows are compared with
NEAR_LINES = 12  # identifiers used this close to the cursor come first for definitions
MIN_WINDOW_LINES = 6  # a window cut to fit the budget keeps at least this many lines
MIN_WINDOW_TOKENS = 24
MIN_SIMILARITY = 0.08  # a window sharing less with the cursor's code is noise
MAX_DOCUMENTS = 24  # the caller's order is its relevance: the rest are not looked at
MAX_SCAN_CHARS = 256_000  # of one document, windowed and parsed from its start
MAX_TOTAL_CHARS = 1_500_000  # over all documents of one selection
MAX_WINDOWS = 6_000  # compared per selection
MAX_WINDOW_CHARS = 3_000  # a longer window is minified or data: not context
MAX_QUERY_CHARS = 8_000
MAX_IMPORT_SCAN_CHARS = 20_000  # the head of the prefix where imports are read
DEFINITION_HEAD_LINES = 4  # of a body, after the signature: the docstring's beginning
DEFINITION_MAX_LINES = 16
MAX_METHODS = 12  # signatures listed under a class
SPECIFIC_METHOD_CHARS = 10  # a method whose name is shorter is found through its class only
DEFINITION_SHARE = 0.6  # of the budget: definitions first, windows fill the rest
STICKY_SIMILARITY = 0.6
CHARS_PER_TOKEN = 3  # without a tokenizer: code averages 3–4, so this over-counts
INDEX_CACHE = 64  # documents whose windows and definitions are kept
BINARY_PROBE_CHARS = 16_384

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Words every file of a language shares say nothing about which file is alike.
_COMMON = frozenset(
    "self this def class return if else elif for while in is not and or None True False import from as with try "
    "except finally raise pass break continue lambda yield async await const let var function new null undefined "
    "true false int str bool float void public private protected static final func fn pub mut use struct impl "
    "package type interface let go defer range string char long unsigned include define".split())
_IMPORT_LINE = re.compile(r"^\s*(?:from\s|import\s|use\s|#include|using\s|const\s.*require\()")
# Node types (of the grammars in engine/text/languages.py) that define a name, and those that hold definitions.
_DEFINITION_TYPES = frozenset(
    "function_definition class_definition function_declaration class_declaration method_definition "
    "generator_function_declaration interface_declaration type_alias_declaration enum_declaration "
    "abstract_class_declaration method_declaration type_declaration function_item struct_item enum_item trait_item "
    "type_item function_signature_item constructor_declaration record_declaration struct_specifier class_specifier "
    "struct_declaration".split())
_CONTAINER_TYPES = frozenset(
    "block class_body declaration_list field_declaration_list interface_body enum_body decorated_definition "
    "export_statement template_declaration namespace_definition impl_item".split())
_TYPE_WORDS = ("class", "struct", "interface", "trait", "enum", "record")  # definitions whose members are listed


@dataclass
class Snippet:
    path: str
    line: int  # 0-based first line in its document
    text: str
    score: float
    kind: str  # "definition" | "window"


@dataclass
class _Index:
    """What one document offers: identifier sets per window, definitions by name."""
    lines: list[str]
    windows: list[tuple[int, frozenset[str]]]  # (first line, identifiers)
    definitions: dict[str, list[tuple[int, str]]]  # name → (line, signature and head)


def identifiers(text: str) -> set[str]:
    return {w for w in _IDENT.findall(text) if w not in _COMMON and len(w) > 1}


def jaccard(a: set[str] | frozenset[str], b: set[str] | frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    common = len(a & b)
    return common / (len(a) + len(b) - common)


def usable(text: str) -> bool:
    """Text worth looking at: not empty, not binary."""
    return bool(text.strip()) and "\x00" not in text[:BINARY_PROBE_CHARS]


def _scanned(text: str) -> str:
    """The head of ``text`` within MAX_SCAN_CHARS, ending at a line end."""
    if len(text) <= MAX_SCAN_CHARS:
        return text
    end = text.rfind("\n", 0, MAX_SCAN_CHARS)
    return text[: end + 1 if end > 0 else MAX_SCAN_CHARS]


# -- definitions ----------------------------------------------------------------------------------


def _name_of(node) -> str | None:
    name = node.child_by_field_name("name")
    declarator = node.child_by_field_name("declarator")
    for _ in range(4):  # C and C++ nest the name in declarators: int *(f)(void)
        if name is not None or declarator is None:
            break
        if declarator.type in ("identifier", "field_identifier", "type_identifier"):
            name = declarator
        else:
            name, declarator = declarator.child_by_field_name("name"), declarator.child_by_field_name("declarator")
    if name is None and node.type == "type_declaration":  # Go: type X struct {…}
        spec = next((c for c in node.named_children if c.type == "type_spec"), None)
        name = spec.child_by_field_name("name") if spec is not None else None
    return name.text.decode("utf-8", "replace") if name is not None and name.text else None


def _header_rows(node, lines: list[str]) -> tuple[int, int]:
    """(first, past last) line of a definition's header. Python's body starts at its first statement's
    line, which is not the header's; a brace language's body starts at ``{``, on the header's last line."""
    start = node.start_point[0]
    body = node.child_by_field_name("body")
    if body is None:
        return start, node.end_point[0] + 1
    row, column = body.start_point
    opens_on_header = row < len(lines) and lines[row][:column].strip()
    return start, max(row + 1 if opens_on_header else row, start + 1)


def _docstring_end(node) -> int | None:
    """The line after the docstring that opens a definition's body (Python), or None."""
    body = node.child_by_field_name("body")
    first = body.named_children[0] if body is not None and body.named_children else None
    if first is not None and first.type == "expression_statement" and first.named_children \
            and first.named_children[0].type == "string":
        return first.end_point[0] + 1
    return None


def _head(lines: list[str], node, members: list) -> str:
    """Signature and the head of its docstring, never the code of the body; for a class, its
    members' signatures too."""
    start, body = _header_rows(node, lines)
    text = lines[start: min(body, start + DEFINITION_MAX_LINES)]
    docstring_end = _docstring_end(node)
    if docstring_end is not None:
        text += lines[body: min(docstring_end, body + DEFINITION_HEAD_LINES, start + DEFINITION_MAX_LINES)]
    for member in members[:MAX_METHODS]:
        m_start, m_body = _header_rows(member, lines)
        if m_start >= start + len(text):
            text += lines[m_start: min(m_body, m_start + 3)]
    return "\n".join(text)


def _definitions(language: str | None, text: str, lines: list[str]) -> dict[str, list[tuple[int, str]]]:
    tree = parse(language, text) if language else None
    if tree is None:
        return {}
    found: dict[str, list[tuple[int, str]]] = {}
    budget = [20_000]  # nodes visited: a pathological tree must not cost more than a big normal one

    def visit(node, depth: int) -> list:
        definitions = []
        for child in node.named_children:
            budget[0] -= 1
            if budget[0] < 0:
                break
            if child.type in _DEFINITION_TYPES:
                definitions.append(child)
                # A class's methods are found (and listed under it); a function's insides are not.
                members = visit(child, depth + 1) if depth < 4 and any(w in child.type for w in _TYPE_WORDS) else []
                name = _name_of(child)
                if name:
                    found.setdefault(name, []).append((child.start_point[0], _head(lines, child, members)))
            elif depth < 4 and child.type in _CONTAINER_TYPES:
                definitions += visit(child, depth + 1)
        return definitions

    visit(tree.root_node, 0)
    return found


def build_index(path: str, text: str) -> _Index:
    text = _scanned(text)
    lines = text.split("\n")
    sets = [frozenset(identifiers(line)) for line in lines]
    windows = []
    for start in range(0, max(1, len(lines) - WINDOW_STRIDE), WINDOW_STRIDE):
        chunk = lines[start: start + WINDOW_LINES]
        if sum(len(line) for line in chunk) <= MAX_WINDOW_CHARS:
            windows.append((start, frozenset().union(*sets[start: start + WINDOW_LINES])))
    return _Index(lines, windows, _definitions(language_from(None, path), text, lines))


# -- selection ------------------------------------------------------------------------------------


def _near_names(prefix: str) -> list[str]:
    """Identifiers near the cursor (nearest first), then those the file imports."""
    near = prefix[-MAX_QUERY_CHARS:].split("\n")[-NEAR_LINES:]
    names = [w for line in reversed(near) for w in reversed(_IDENT.findall(line))]
    head = prefix[:MAX_IMPORT_SCAN_CHARS].split("\n")
    names += [w for line in head if _IMPORT_LINE.match(line) for w in _IDENT.findall(line)]
    return [w for w in dict.fromkeys(names) if w not in _COMMON and len(w) > 1]


def _query(prefix: str) -> set[str]:
    return identifiers("\n".join(prefix[-MAX_QUERY_CHARS:].split("\n")[-QUERY_LINES:]))


class CrossFileContext:
    """Chooses other-document snippets for a prompt, and keeps them while the cursor's code stays alike."""

    def __init__(self, count_tokens: Callable[[str], int] | None = None) -> None:
        self.count_tokens = count_tokens or (lambda text: len(text) // CHARS_PER_TOKEN + 1)
        self.enabled = True  # False: other documents are passed through whole (their heads fit the budget)
        self._indexes: OrderedDict[tuple, _Index] = OrderedDict()
        self._kept: dict[str, tuple[set[str], list[tuple[str, str]]]] = {}  # per current path
        self.windows_compared = 0  # of the last selection (tests check the bounds)
        self.chars_scanned = 0

    def forget(self) -> None:
        self._kept.clear()

    def documents(self, path: str | None, prefix: str, documents: Sequence[tuple[str, str]],
                  budget_tokens: int) -> list[tuple[str, str]]:
        """(path, snippet text) pairs for the prompt, least relevant first (the best nearest the cursor)."""
        if budget_tokens <= 0 or not documents:
            return []
        if not self.enabled:
            return list(documents)
        query = _query(prefix)
        open_paths = {p for p, _ in documents}
        kept = self._kept.get(path or "")
        if kept is not None and jaccard(query, kept[0]) >= STICKY_SIMILARITY and \
                all(p in open_paths for p, _ in kept[1]):
            return kept[1]
        # A tenth of slack: the prompt builder counts the rendered text, which tokenizes a little differently.
        chosen = self._render(self.select(path, prefix, documents, budget_tokens * 9 // 10, query))
        self._kept[path or ""] = (query, chosen)
        return chosen

    def select(self, path: str | None, prefix: str, documents: Sequence[tuple[str, str]], budget_tokens: int,
               query: set[str] | None = None) -> list[Snippet]:
        """The snippets that fit ``budget_tokens``, most relevant first."""
        indexes = self._indexes_of(path, documents)
        room = budget_tokens
        chosen: list[Snippet] = []
        definition_room = int(budget_tokens * DEFINITION_SHARE)
        for snippet in self._definition_snippets(prefix, indexes):
            cost = self._cost(snippet)
            # The best-ranked definition may take the whole budget: it is the likeliest to be needed.
            if cost <= (room if not chosen else min(room, definition_room)):
                chosen.append(snippet)
                room -= cost
                definition_room -= cost
        taken = {(s.path, s.line) for s in chosen}
        for snippet in self._window_snippets(query if query is not None else _query(prefix), indexes):
            overlaps = any(p == snippet.path and snippet.line <= line < snippet.line + WINDOW_LINES
                           for p, line in taken)
            if overlaps or room < MIN_WINDOW_TOKENS:
                continue
            snippet, cost = self._fitted(snippet, room)
            if cost <= room:
                chosen.append(snippet)
                taken.add((snippet.path, snippet.line))
                room -= cost
        return chosen

    def _fitted(self, snippet: Snippet, room: int) -> tuple[Snippet, int]:
        """The window, or as many of its first lines as fit ``room`` (a part of the best window
        is worth more than a whole worse one)."""
        cost = self._cost(snippet)
        if cost <= room:
            return snippet, cost
        lines = snippet.text.split("\n")
        keep = len(lines) * room // cost
        if keep < MIN_WINDOW_LINES:
            return snippet, cost
        snippet = Snippet(snippet.path, snippet.line, "\n".join(lines[:keep]), snippet.score, snippet.kind)
        return snippet, self._cost(snippet)

    def _cost(self, snippet: Snippet) -> int:
        return self.count_tokens(snippet.text) + self.count_tokens(snippet.path) + 4  # separators, a marker line

    def _indexes_of(self, path: str | None, documents: Sequence[tuple[str, str]]) -> list[tuple[str, _Index]]:
        out, scanned = [], 0
        for doc_path, text in documents[:MAX_DOCUMENTS]:
            if doc_path == path or not isinstance(text, str) or not usable(text):
                continue
            size = min(len(text), MAX_SCAN_CHARS)
            if scanned + size > MAX_TOTAL_CHARS:
                break
            scanned += size
            out.append((doc_path, self._index(doc_path, text)))
        self.chars_scanned = scanned
        return out

    def _index(self, path: str, text: str) -> _Index:
        head = _scanned(text)
        key = (path, len(head), hashlib.blake2b(head.encode("utf-8", "replace"), digest_size=16).digest())
        index = self._indexes.get(key)
        if index is None:
            try:
                index = build_index(path, head)
            except (RecursionError, ValueError, UnicodeError) as error:  # never let one document break completion
                log.debug("no index of %s: %s", path, error)
                index = _Index([], [], {})
            self._indexes[key] = index
            while len(self._indexes) > INDEX_CACHE:
                self._indexes.popitem(last=False)
        self._indexes.move_to_end(key)
        return index

    @staticmethod
    def _definition_snippets(prefix: str, indexes: list[tuple[str, _Index]]) -> list[Snippet]:
        names = _near_names(prefix)
        snippets = []
        for rank, name in enumerate(names):
            for doc_path, index in indexes:
                for line, text in index.definitions.get(name, [])[:2]:
                    # A method named like a common attribute (get, close, data) is noise more often than
                    # not: methods count by their own name only when it is specific; their class lists them.
                    if text[:1].isspace() and len(name) < SPECIFIC_METHOD_CHARS:
                        continue
                    snippets.append(Snippet(doc_path, line, text, 1.0 / (1 + rank), "definition"))
        return snippets

    def _window_snippets(self, query: set[str], indexes: list[tuple[str, _Index]]) -> list[Snippet]:
        scored = []
        compared = 0
        for doc_path, index in indexes:
            for start, ids in index.windows:
                if compared >= MAX_WINDOWS:
                    break
                compared += 1
                score = jaccard(query, ids)
                if score >= MIN_SIMILARITY:
                    scored.append((score, doc_path, start, index))
        self.windows_compared = compared
        scored.sort(key=lambda item: -item[0])
        return [Snippet(p, start, "\n".join(index.lines[start: start + WINDOW_LINES]), score, "window")
                for score, p, start, index in scored[:32]]

    @staticmethod
    def _render(snippets: list[Snippet]) -> list[tuple[str, str]]:
        """One entry per document, its snippets in line order with a marker between; documents in
        rising order of their best snippet, so the most relevant one sits nearest the cursor."""
        by_path: dict[str, list[Snippet]] = {}
        for snippet in snippets:
            by_path.setdefault(snippet.path, []).append(snippet)
        entries = []
        for doc_path, group in by_path.items():
            marker = f"{line_comment(doc_path)} ...\n"
            group.sort(key=lambda s: s.line)
            text = marker.join(s.text.rstrip("\n") + "\n" for s in group)
            best = max(s.score + (1.0 if s.kind == "definition" else 0.0) for s in group)
            entries.append((best, doc_path, text))
        entries.sort(key=lambda entry: entry[0])
        return [(doc_path, text) for _, doc_path, text in entries]


def tokenizer_counter(tokenizer) -> Callable[[str], int]:
    """Count tokens with the model's tokenizer (the budget is in its tokens)."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

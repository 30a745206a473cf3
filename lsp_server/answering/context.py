"""From an LSP document and cursor to the engine's CompletionRequest.

All position arithmetic happens here, in the client's negotiated encoding (UTF-16 by
default), through pygls's position codec; the engine only ever sees Python strings.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Callable
from urllib.parse import unquote, urlparse

from lsprotocol import types

from engine.completion import CompletionRequest
from engine.modes import multiline_flag
from lsp_server.workspace.settings import Settings

ACCEPT_COMMAND = "quickdraft.accepted"  # an item's command: the user took it

MAX_OTHER_DOCUMENTS = 12
MAX_OTHER_DOCUMENT_CHARS = 200_000  # larger open files are not worth a prompt slot
BINARY_PROBE_CHARS = 16_384
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """Text the tokenizer can encode. JSON (and so an editor) can send lone UTF-16 surrogates,
    which no tokenizer accepts; one such document used to break completions in every file it
    fed. Each becomes U+FFFD: one code point and one UTF-16 unit, so positions do not move."""
    return _SURROGATE.sub("\ufffd", text)


@dataclass
class DocumentCursor:
    """The cursor in one version of an open document, as the client placed it, with the text either
    side. The engine's own `Cursor` (engine/text/cursor.py) is what holds at it: language, line, syntax."""

    uri: str
    version: int | None
    language_id: str | None
    offset: int  # code points into the document text
    prefix: str
    suffix: str
    position: types.Position  # as the client sent it, clamped into the document


def path_of(uri: str) -> str:
    parsed = urlparse(uri)
    return valid_text(unquote(parsed.path) if parsed.scheme in ("file", "") else uri)


def locate(document, position: types.Position) -> DocumentCursor | None:
    """The cursor in `document`, or None when the position is not in it.

    A character past the end of its line means the end of that line (as LSP says);
    a line past the end of the document gets nothing.
    """
    lines = document.lines
    if position.line < 0 or position.character < 0:
        return None
    if position.line >= len(lines):
        if position.line == len(lines) and position.character == 0:  # the empty last line
            text = document.source
            return DocumentCursor(document.uri, document.version, document.language_id, len(text), text, "", position)
        return None
    line_text = lines[position.line].rstrip("\r\n")
    line_units = document.position_codec.client_num_units(line_text)
    position = types.Position(line=position.line, character=min(position.character, line_units))
    offset = document.offset_at_position(position)
    text = document.source
    return DocumentCursor(document.uri, document.version, document.language_id, offset, text[:offset], text[offset:],
                          position)


def staleness(workspace, cursor: DocumentCursor) -> Callable[[], bool]:
    """Whether the document has changed (or closed) since `cursor` was taken."""
    def is_stale() -> bool:
        current = workspace.text_documents.get(cursor.uri)
        return current is None or current.version != cursor.version
    return is_stale


def looks_binary(cursor: DocumentCursor) -> bool:
    near = cursor.prefix[-BINARY_PROBE_CHARS:] + cursor.suffix[:BINARY_PROBE_CHARS]
    return "\x00" in near


def other_documents(workspace, current_uri: str) -> list[tuple[str, str]]:
    """Other documents worth showing the model, most relevant first: the recently edited ones (open,
    or closed since), then the other open ones. The engine picks snippets of them (engine/text/crossfile.py)."""
    recent = list(reversed(getattr(workspace, "recent_edits", {})))
    open_documents = dict(workspace.text_documents)
    closed = getattr(workspace, "closed_documents", {})
    order = [uri for uri in recent if uri in open_documents or uri in closed]
    order += [uri for uri in open_documents if uri not in order]
    documents = []
    for uri in order:
        if len(documents) >= MAX_OTHER_DOCUMENTS:
            break
        if uri == current_uri:
            continue
        text = open_documents[uri].source if uri in open_documents else closed[uri]
        if not text.strip() or len(text) > MAX_OTHER_DOCUMENT_CHARS or "\x00" in text[:BINARY_PROBE_CHARS]:
            continue
        documents.append((path_of(uri), _valid_document(text)))
    return documents


@functools.lru_cache(maxsize=2 * MAX_OTHER_DOCUMENTS)
def _valid_document(text: str) -> str:
    """valid_text of another document, once per text rather than at every request (~1 ms per 200 KB):
    a document's text is one object until it changes, so the look-up is by identity, not a compare."""
    return valid_text(text)


def build_request(cursor: DocumentCursor, settings: Settings, workspace, received_at: float | None = None,
                  budget_ms: float | None = None) -> CompletionRequest:
    """The engine's request at `cursor`; `budget_ms` overrides the setting's (a typing rhythm's cut)."""
    return CompletionRequest(
        prefix=valid_text(cursor.prefix),
        suffix=valid_text(cursor.suffix),
        path=path_of(cursor.uri),
        language=cursor.language_id,
        other_documents=other_documents(workspace, cursor.uri),
        max_new_tokens=settings.max_new_tokens,
        multiline=multiline_flag(settings.multiline),
        budget_ms=settings.budget_ms if budget_ms is None else budget_ms,
        received_at=received_at,
        min_confidence=settings.min_confidence,
    )


def inline_items(document, cursor: DocumentCursor, text: str, replace_after: int,
                 item_id: str) -> types.InlineCompletionList:
    """The LSP answer: one item inserting `text` at the cursor over `replace_after` characters
    after it, whose command tells the server it was accepted."""
    end = document.client_position_at_offset(cursor.offset + replace_after) if replace_after else cursor.position
    item = types.InlineCompletionItem(
        insert_text=text,
        range=types.Range(start=cursor.position, end=end),
        command=types.Command(title="quickdraft: accepted", command=ACCEPT_COMMAND, arguments=[{"id": item_id}]),
    )
    return types.InlineCompletionList(items=[item])

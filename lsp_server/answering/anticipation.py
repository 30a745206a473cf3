"""What the server makes of the user's typing: runs started at an edit, and the typing rhythm.

Editors ask for an inline completion a debounce after the last key (150 ms in the VS Code
extension and the Neovim client by default; the benchmark's typist, like VS Code's own, 75 ms),
so the worker sat idle for that long after every key. When the client has been asking
automatically, the server starts the model run itself at the edit, at the cursor the edit
leaves; the request that follows adopts the run (its budget is the request's: the run's
deadline counts from when the request is expected) instead of starting its own.

A run no request adopts (the user typed on, or the client did not ask) is what a withdrawn
request is: it goes on as a decode the next keys may follow (lsp_server/answering/following.py), and
the next edit's run supersedes it. Only small edits anticipate (typing, Enter, a deletion):
pastes, formatting and whole-document syncs do not.

The rhythm (the median gap between the user's keys) says when the next key is due: the
service ends a request's budget before it (lsp_server/answering/service.py, `budget_s`), since that key
cancels the request and an answer after it is never seen.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

from lsprotocol import types

from lsp_server.answering.context import DocumentCursor
from lsp_server.answering.following import DecodeOn

# The client asked automatically this recently: it asks after edits (an explicit-trigger client,
# or one whose automatic suggestions are off, never starts a run it will not ask for).
ASKING_WINDOW_S = 30.0
MAX_TYPED_CHARS = 80  # a longer insertion is a paste, a snippet or a formatter, not typing
AUTO_PAIRS = ("()", "[]", "{}", '""', "''", "``")  # an editor auto-closes these: the cursor is between
DEBOUNCE_SAMPLES = 8
MAX_DEBOUNCE_S = 0.5  # longer gaps between an edit and its request are not a debounce
RHYTHM_SAMPLES = 16
MIN_RHYTHM_SAMPLES = 4
MAX_KEY_GAP_S = 0.6  # longer gaps between two edits are pauses, not the typing rhythm


@dataclass
class Anticipated:
    """A model run started at an edit."""

    cursor: DocumentCursor
    edited_at: float  # time.monotonic() of the edit
    task: asyncio.Task | None = None  # the run (a ModelRun, lsp_server/answering/model_runs.py): the answer as LSP items
    decode_on: DecodeOn | None = None  # its decode, once the run has started
    asked_at: float | None = None  # when a request adopted it

    def answers(self, cursor: DocumentCursor) -> bool:
        """The run is for this request's document version and position."""
        mine = self.cursor
        return (mine.uri, mine.version, mine.offset) == (cursor.uri, cursor.version, cursor.offset)


class Edit(NamedTuple):
    """A document's last edit."""

    version: int | None
    at: float  # time.monotonic()
    key: bool  # one key's edit (is_keystroke): the rhythm is the gaps between keys


def small_change(params: types.DidChangeTextDocumentParams) -> types.TextDocumentContentChangePartial | None:
    """The didChange's one change if it is the size of typing (no paste, no whole-document sync)."""
    changes = params.content_changes
    if len(changes) != 1 or not isinstance(changes[0], types.TextDocumentContentChangePartial):
        return None
    change = changes[0]
    if len(change.text) > MAX_TYPED_CHARS or change.text.count("\n") > 1:
        return None
    return change


def cursor_after_edit(document, params: types.DidChangeTextDocumentParams) -> types.Position | None:
    """Where the typing cursor is after this didChange: after the text that one small edit put
    in (between an auto-closed pair), or None for any other change. `document` has the edit already."""
    change = small_change(params)
    if change is None:
        return None
    text = change.text
    typed = len(text) - 1 if text in AUTO_PAIRS else len(text)
    try:
        offset = document.offset_at_position(change.range.start) + typed
        if offset > len(document.source):
            return None
        return document.client_position_at_offset(offset)
    except (IndexError, ValueError):  # a range the document does not have
        return None


def is_keystroke(params: types.DidChangeTextDocumentParams) -> bool:
    """One key's edit: typing, Enter, Backspace, a word or a line deleted. After a paste, a
    formatter's rewrite or a deleted block the user is not in the middle of typing: the rhythm
    does not say when the next key comes."""
    change = small_change(params)
    return change is not None and change.range.end.line - change.range.start.line <= 1


class Anticipation:
    """When to start a run at an edit, the runs started so, and the client's debounce."""

    def __init__(self) -> None:
        self.runs: dict[str, Anticipated] = {}  # per document: the run started at its last edit
        self.last_automatic: float | None = None  # the client's last automatic request
        self.edits: dict[str, Edit] = {}  # per document: its last edit
        self.debounces: deque[float] = deque(maxlen=DEBOUNCE_SAMPLES)
        self.key_gaps: deque[float] = deque(maxlen=RHYTHM_SAMPLES)  # seconds between the user's edits, typing

    def client_asks(self, now: float) -> bool:
        return self.last_automatic is not None and now - self.last_automatic <= ASKING_WINDOW_S

    def edited(self, uri: str, version: int | None, now: float, key: bool = True) -> Anticipated | None:
        """An edit: remembers when, and whether it was a key (the rhythm is the gaps between keys);
        hands back the run the previous edit started, if any."""
        last = self.edits.get(uri)
        if key and last is not None and last.key and 0 < now - last.at <= MAX_KEY_GAP_S:
            self.key_gaps.append(now - last.at)
        self.edits[uri] = Edit(version, now, key)
        return self.runs.pop(uri, None)

    def asked(self, cursor: DocumentCursor, now: float, automatic: bool) -> None:
        """A request: an automatic one right after its edit tells the client's debounce."""
        if not automatic:
            return
        self.last_automatic = now
        last = self.edits.get(cursor.uri)
        if last is not None and last.version == cursor.version and 0 <= now - last.at <= MAX_DEBOUNCE_S:
            self.debounces.append(now - last.at)

    def expected_request(self, edited_at: float) -> float:
        """When the request for this edit should arrive: the shortest debounce seen lately, so a
        run's deadline is never later than the request's own."""
        return edited_at + (min(self.debounces) if self.debounces else 0.0)

    def next_key(self, uri: str) -> float | None:
        """When the user's next key in this document is expected: its last key plus the median gap
        between keys lately (the user's rhythm); None while that is not known, or when the last
        edit was no key."""
        last = self.edits.get(uri)
        if last is None or not last.key or len(self.key_gaps) < MIN_RHYTHM_SAMPLES:
            return None
        return last.at + statistics.median(self.key_gaps)

    def started(self, run: Anticipated) -> None:
        self.runs[run.cursor.uri] = run

    def take(self, cursor: DocumentCursor) -> Anticipated | None:
        """The run started for this request, which it adopts; None if there is none for its spot.
        The run stays the document's until the next edit, which withdraws it if it has not answered."""
        run = self.runs.get(cursor.uri)
        if run is None or run.task is None or not run.answers(cursor) or run.task.cancelled():
            return None
        return run

    def forget(self, uri: str) -> None:
        self.runs.pop(uri, None)
        self.edits.pop(uri, None)

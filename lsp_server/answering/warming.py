"""Warming the verifier's KV cache before the user asks.

Without it, the first completion after opening a file or jumping elsewhere pays for a
cold prefill of the whole prompt window (seconds on a CPU). The warmer prefills that
window while the user reads or moves:

- on `quickdraft/didChangeCursor {textDocument: {uri}, position}` from the clients, once the
  cursor has rested for DEBOUNCE_S, and only when it jumped: to another line or document than
  the cache holds, and not by typing on from the last completion (Enter included) — that
  prompt is anchored already, and the decode going on after its answer is still of use;
- on `textDocument/didOpen`, at the document's last known cursor (the start if none), unless
  the client already said where the user works (a cursor notification or a request in a
  document still open): editors open documents in the background too;
- when the server has been idle for IDLE_S (or the models just became ready) and a warm is
  still owed: it was cancelled, went stale, or arrived while the models were loading.

A warm is a background job on the engine's worker: a request elsewhere cancels it
between two decoder layers, keeping the prefill chunks it finished, so that request
feeds only the rest; a request on the warm's own line joins it instead (queues behind
it, answering at its deadline if the warm is still going, then ghost text follows). It runs
the backend's `warm` on the very request a completion at the cursor would make (which also
sets the typing anchor), so it never feeds anything the next request at that spot would not
feed itself. There is one KV cache, so there is one warm
at a time: a newer one supersedes the older.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import asdict, dataclass
from typing import Any

from lsprotocol import types

from engine.text.anchor import Anchor, typed_since
from engine.errors import QuickdraftError
from lsp_server.answering.context import DocumentCursor, build_request, locate, looks_binary
from lsp_server.workspace.documents import canonical_uri
from lsp_server.wire.plain_data import plain_data
from lsp_server.answering.scheduler import Superseded

log = logging.getLogger(__name__)

CURSOR_NOTIFICATION = "quickdraft/didChangeCursor"
WARM_KEY = "warm"  # never a document URI, so a warm never supersedes a completion request
# The cursor must rest this long: arrow keys held down warm once. The editor clients debounce
# their notifications by 100 ms already, so this only merges what other clients send in bursts;
# every millisecond of it is added to the time from a jump to its first ghost text.
DEBOUNCE_S = 0.06
IDLE_S = 1.0  # no request, edit or cursor move for this long: the server is idle
MAX_WARM_CHARS = 1_000_000  # larger documents (generated, minified, logs) are not warmed
MAX_REMEMBERED = 256  # documents whose last cursor is kept, for when they are opened again


@dataclass(frozen=True)
class Spot:
    """Where the cache is, or should be, warm: a line of a document."""

    uri: str
    line: int


@dataclass
class WarmRecord:
    uri: str
    line: int
    trigger: str  # open | cursor | idle | ready
    outcome: str  # warmed | cancelled (by a request, between layers) | superseded (never started) | error
    fed_tokens: int = 0
    ms: float = 0.0


def parse_cursor(params: Any) -> tuple[str, types.Position] | None:
    """(uri, position) from the notification's params; None when they are malformed."""
    data = plain_data(params)
    document = data.get("textDocument") if isinstance(data, dict) else None
    position = data.get("position") if isinstance(data, dict) else None
    uri = document.get("uri") if isinstance(document, dict) else None
    line, character = (position.get("line"), position.get("character")) if isinstance(position, dict) else (None, None)
    if not isinstance(uri, str) or not all(type(v) is int and v >= 0 for v in (line, character)):
        return None
    # A custom notification: the protocol only canonicalises typed params' URIs (documents.py).
    return canonical_uri(uri), types.Position(line=line, character=character)


class Warmer:
    """Decides when and where to warm; the service tells it what the editor and the user do."""

    def __init__(self, service) -> None:
        self.service = service
        self.workspace = None
        self.positions: OrderedDict[str, types.Position] = OrderedDict()  # last known cursor per document
        self.focus: tuple[str, types.Position] | None = None  # where the user is now
        self.focus_source = ""  # what said so: open | cursor | request
        self.covered: Spot | None = None  # what the cache holds: the last finished warm or model request
        self.covered_by_request = False  # ... and it was a request (typing may have gone on from it)
        self.pending: Spot | None = None  # the warm in flight
        self._pending_flag: threading.Event | None = None  # ... and its cancel flag
        self.records: deque[WarmRecord] = deque(maxlen=16)
        self.counts = {"warmed": 0, "cancelled": 0, "superseded": 0, "error": 0, "skipped": 0, "joined": 0}
        self._debounce: asyncio.TimerHandle | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    # -- what happened ----------------------------------------------------------------
    def did_open(self, workspace, uri: str) -> None:
        self.workspace = workspace
        position = self.positions.get(uri, types.Position(line=0, character=0))
        if self._focus_is_known():
            self._remember(uri, position)  # opened in the background: the user works elsewhere
        else:
            self._move(uri, position, "open")

    def did_change_cursor(self, workspace, params: Any) -> None:
        parsed = parse_cursor(params)
        if parsed is None:
            log.debug("ignoring %s with params %r", CURSOR_NOTIFICATION, params)
            return
        self.workspace = workspace
        self._move(*parsed, "cursor")

    def did_change(self) -> None:
        """An edit: not a reason to warm (typing is anchored), but the user is not idle."""
        self._restart_idle()

    def did_close(self, uri: str) -> None:
        if self.focus is not None and self.focus[0] == uri:
            self.focus = None  # its last cursor stays remembered for when it is opened again

    def did_request(self, workspace, uri: str, position: types.Position, *, model: bool) -> None:
        """A completion request; `model` when it runs the engine, which leaves its prompt cached."""
        self.workspace = workspace
        self._remember(uri, position)
        self.focus, self.focus_source = (uri, position), "request"
        if model:
            self.covered, self.covered_by_request = Spot(uri, position.line), True
            self._cancel_debounce()  # the request warms this spot itself
        self._restart_idle()

    def join(self, uri: str, position: types.Position) -> threading.Event | None:
        """The cancel flag of the warm in flight on this line, which a request here should queue
        behind rather than cancel (its prompt starts with what the warm feeds); else None."""
        if self.pending != Spot(uri, position.line) or self._pending_flag is None:
            return None
        self.counts["joined"] += 1
        return self._pending_flag

    def engine_ready(self) -> None:
        """New models: their cache is empty, warm where the user is."""
        self.covered = self.pending = None
        self._schedule(0.0, "ready")

    def stop(self) -> None:
        self._cancel_debounce()
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    # -- deciding -----------------------------------------------------------------------
    def _focus_is_known(self) -> bool:
        """The client said where the user works, in a document that is still open."""
        return (self.focus is not None and self.focus_source != "open"
                and self.focus[0] in self.workspace.text_documents)

    def _move(self, uri: str, position: types.Position, trigger: str) -> None:
        self._remember(uri, position)
        self.focus, self.focus_source = (uri, position), trigger
        self._schedule(DEBOUNCE_S, trigger)
        self._restart_idle()

    def _remember(self, uri: str, position: types.Position) -> None:
        self.positions[uri] = position
        self.positions.move_to_end(uri)
        while len(self.positions) > MAX_REMEMBERED:
            self.positions.popitem(last=False)

    def _schedule(self, delay: float, trigger: str) -> None:
        self._cancel_debounce()
        self._debounce = asyncio.get_running_loop().call_later(delay, self.warm_focus, trigger)

    def _cancel_debounce(self) -> None:
        if self._debounce is not None:
            self._debounce.cancel()
            self._debounce = None

    def _restart_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
        self._idle = asyncio.get_running_loop().call_later(IDLE_S, self.warm_focus, "idle")

    def warm_focus(self, trigger: str) -> asyncio.Task | None:
        """Start warming the cursor's window unless the cache holds it or warming is off."""
        service = self.service
        if self.focus is None or not service.settings.warm or service.state != "ready" or service.backend is None:
            return None
        uri, position = self.focus
        spot = Spot(uri, position.line)
        if spot in (self.covered, self.pending):
            return None
        prepared = self._request(uri, position)
        if prepared is None:
            self.counts["skipped"] += 1
            return None
        cursor, version = prepared
        if self._typing_on(cursor):
            self.covered = spot  # the typing path's requests keep its prompt in the cache
            return None
        # A jump: decoding on after the last answer served the spot the user has left.
        service.scheduler.cancel_background()
        self.pending, self._pending_flag = spot, threading.Event()
        request = build_request(cursor, service.settings, self.workspace)
        self._task = asyncio.ensure_future(self._warm(spot, request, version, trigger, self._pending_flag))
        return self._task

    def _typing_on(self, cursor: DocumentCursor) -> bool:
        """The cursor got here by typing on from the last completion, which is what the cache
        holds (as the engine's anchor sees it: the text typed since, an auto-closed bracket after it)."""
        shown = self.service.shown.get(cursor.uri)
        if shown is None or not self.covered_by_request or self.covered is None or self.covered.uri != cursor.uri:
            return False
        anchor = Anchor(cursor.uri, shown.prefix, shown.suffix, [], [])
        return typed_since(anchor, cursor.uri, cursor.prefix, cursor.suffix) is not None

    def _request(self, uri: str, position: types.Position) -> tuple[DocumentCursor, int] | None:
        """(the cursor, the document version), or None when the document is unknown, switched
        off, huge or binary."""
        document = self.workspace.text_documents.get(uri) if self.workspace is not None else None
        if document is None or not self.service.settings.language_enabled(document.language_id):
            return None
        if len(document.source) > MAX_WARM_CHARS:
            return None
        cursor = locate(document, position)
        if cursor is None or looks_binary(cursor):
            return None
        return cursor, document.version

    # -- warming ------------------------------------------------------------------------
    async def _warm(self, spot: Spot, request, version, trigger: str, cancel: threading.Event) -> None:
        service, backend = self.service, self.service.backend
        started = time.monotonic()
        record = WarmRecord(spot.uri, spot.line, trigger, "warmed")

        def is_stale() -> bool:
            document = self.workspace.text_documents.get(spot.uri)
            return document is None or document.version != version

        def job(cancel):
            fed = backend.warm(request, cancel)
            return fed, cancel.is_set()

        try:
            record.fed_tokens, cancelled = await service.scheduler.run(WARM_KEY, job, is_stale=is_stale,
                                                                       background=True, cancel=cancel)
            if cancelled:
                record.outcome = "cancelled"
        except Superseded:
            record.outcome = "superseded"
        except QuickdraftError as error:
            record.outcome = "error"
            log.warning("warming %s failed: %s", spot.uri, error)
        except Exception:
            record.outcome = "error"
            log.exception("warming failed")
        finally:
            if self.pending == spot:
                self.pending = self._pending_flag = None
        record.ms = (time.monotonic() - started) * 1000
        self.counts[record.outcome] += 1
        self.records.append(record)
        log.info("warm %s:%d (%s): %s, %d tokens fed in %.0f ms", spot.uri, spot.line + 1, trigger,
                 record.outcome, record.fed_tokens, record.ms)
        if record.outcome == "warmed" and backend is service.backend:
            self.covered, self.covered_by_request = spot, False
        elif record.outcome != "error":
            self._restart_idle()  # still owed: try again once the server is idle

    def snapshot(self) -> dict:
        return {"enabled": self.service.settings.warm, "counts": dict(self.counts),
                "covered": asdict(self.covered) if self.covered else None,
                "recent": [asdict(r) for r in self.records]}

"""The typist of `quickdraft bench session`: types one function body back in, key by key, and
records every completion request it makes.

Like VS Code, it asks for an automatic inline completion once the typing pauses for
`debounce_ms`, cancels (`$/cancelRequest`) the request in flight when the next key arrives,
and asks again after `quickdraft/completionReady` if the user is still at that spot. Each
request becomes a SentRequest; lsp_server/bench/session.py runs the typists, one body at a
time, and session_report.py turns their records into figures.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any, Protocol

from lsprotocol import types

from engine.bench.corpus import Hole
from engine.decoding.stops import StopReason
from lsp_server.client import QuickdraftClient, position_after


@dataclass
class SentRequest:
    """One request the typist sent, and what came back."""

    session: str
    file: str
    hole: int
    version: int
    line: int
    character: int
    typed: int  # characters of the hole typed so far
    sent_s: float  # seconds since the session started
    trigger: str = "typing"  # typing | ready (asked again after quickdraft/completionReady)
    answered_s: float | None = None  # seconds since the session started
    status: str = "pending"  # answered | cancelled | error
    latency_ms: float | None = None
    shown: str = ""  # the first item's insertText ("" when the server answered nothing)
    replace_chars: int = 0  # characters after the cursor the item's range replaces
    expected: str = ""  # the rest of the hole: what the user types next
    exact_match: bool = False
    accepted_chars: int = 0
    within_budget: bool | None = None
    server: dict | None = None  # the server's record of this request (quickdraft/stats), if found
    error: str = ""


def judge(shown: str, expected: str) -> tuple[bool, int]:
    """(exact match, accepted characters) of a shown completion against what is typed next.

    Exact: the completion (trailing blanks aside) is a prefix of what the user types next —
    taking it would have been right. Accepted characters: the longest common prefix, what
    word-by-word acceptance keeps.
    """
    accepted = 0
    for a, b in zip(shown, expected):
        if a != b:
            break
        accepted += 1
    body = shown.rstrip()
    return bool(body) and expected.startswith(body), accepted


class TypingSession(Protocol):
    """What the typist uses of the session it types in (SessionRun, lsp_server/bench/session.py);
    a protocol, so this module never imports the one that runs it."""

    config: Any  # SessionBenchConfig: debounce_ms, line_pause_ms, jump_rest_ms, patient, settle_ms, typing_cps
    client: QuickdraftClient
    name: str
    started: float  # time.monotonic() when the typing started
    budget_ms: float
    records: list[SentRequest]
    jumps: list[dict]
    stats_tasks: list[asyncio.Task]
    typed_chars: int
    bar: Any  # the progress bar, or None
    printer: Any  # SessionPrinter, or None

    def print_answer(self, record: SentRequest, uri: str) -> None: ...


class Typist:
    """Types one hole back in and triggers completions the way VS Code does."""

    def __init__(self, session: TypingSession, uri: str, hole: Hole, hole_index: int) -> None:
        self.session = session
        self.uri = uri
        self.hole = hole
        self.hole_index = hole_index
        self.pending: asyncio.Task | None = None  # debounce timer + request in flight
        self.in_flight: tuple[str, SentRequest] | None = None
        self.at: tuple[int, types.Position, int] | None = None  # (version, cursor, characters typed) now

    def ready(self, uri: str, version: int, position: types.Position) -> None:
        """quickdraft/completionReady: ask again, as the editor clients do, if the user is still there."""
        if self.at is None or (uri, version, position) != (self.uri, *self.at[:2]):
            return
        if self.pending is not None and not self.pending.done():
            return  # a request for this spot is on its way already
        self.pending = asyncio.ensure_future(self.trigger(version, self.at[2], trigger="ready"))

    async def interrupt(self) -> None:
        """A key was pressed: drop the debounce timer and cancel the request in flight."""
        if self.in_flight is not None:
            msg_id, record = self.in_flight
            self.session.client.cancel(msg_id)
            record.status = "cancelled"
            self.in_flight = None
        if self.pending is not None and not self.pending.done():
            self.pending.cancel()
            try:
                await self.pending
            except asyncio.CancelledError:
                pass
        self.pending = None

    async def trigger(self, version: int, typed: int, trigger: str = "typing") -> None:
        if trigger == "typing":
            await asyncio.sleep(self.session.config.debounce_ms / 1000)
        session = self.session
        before = self.hole.prefix + self.hole.middle[:typed]
        position = position_after(before)
        record = SentRequest(
            session=session.name, file=self.hole.path, hole=self.hole_index, version=version, line=position.line,
            character=position.character, typed=typed, sent_s=round(time.monotonic() - session.started, 3),
            trigger=trigger, expected=self.hole.middle[typed:],
        )
        session.records.append(record)
        sent = time.monotonic()
        msg_id = str(uuid.uuid4())
        future = asyncio.wrap_future(session.client.send_completion(self.uri, position, msg_id))
        self.in_flight = (msg_id, record)
        # A cancelled request still gets an answer (or an error) later; nobody awaits it then.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            result = await asyncio.shield(future)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # RequestCancelled after $/cancelRequest, or a server error
            if record.status == "pending":
                record.status, record.error = "error", f"{type(error).__name__}: {error}"
            return
        if record.status != "pending":
            return
        self.in_flight = None
        record.latency_ms = round((time.monotonic() - sent) * 1000, 2)
        record.answered_s = round(time.monotonic() - session.started, 3)
        record.status = "answered"
        items = result.items if isinstance(result, types.InlineCompletionList) else (result or [])
        if items:
            item = items[0]
            record.shown = item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value
            if item.range is not None and item.range.end != item.range.start:
                record.replace_chars = item.range.end.character - item.range.start.character
        record.exact_match, record.accepted_chars = judge(record.shown, record.expected)
        record.within_budget = record.latency_ms <= session.budget_ms
        # The server's figures for this request, matched later by version; a task of its own so
        # the next key (which cancels this task) cannot cut it off.
        stats = asyncio.ensure_future(session.client.stats())
        session.stats_tasks.append(stats)
        if session.printer is not None:
            stats.add_done_callback(lambda _: session.print_answer(record, self.uri))

    async def pause(self) -> None:
        """The user stops typing for a moment (or, if patient, until the suggestion arrives)."""
        config = self.session.config
        started = time.monotonic()
        if config.patient:
            await self.settle(started + config.settle_ms / 1000)
        rest = config.line_pause_ms / 1000 - (time.monotonic() - started)
        if rest > 0:
            await asyncio.sleep(rest)

    async def settle(self, until: float) -> None:
        """Wait for the suggestion here: the answer, and when that came empty at its deadline,
        the answer to asking again after quickdraft/completionReady."""
        session = self.session
        while self.pending is not None and time.monotonic() < until:
            task = self.pending
            try:
                await asyncio.wait_for(asyncio.shield(task), until - time.monotonic())
            except asyncio.TimeoutError:
                return
            record = session.records[-1]
            if record.shown or record.status != "answered":
                return
            await session.client.stats()
            server = session.client.server_records.get((self.uri, str(record.version))) or {}
            if server.get("stop_reason") != StopReason.DEADLINE:
                return  # the model's answer here is empty: no notification will come
            while self.pending is task and time.monotonic() < until:
                await asyncio.sleep(0.02)  # until the notification's re-ask starts

    async def type_hole(self, start_version: int) -> int:
        """Delete the hole, then type it back; returns the document's last version."""
        session, hole, config = self.session, self.hole, self.session.config
        version = start_version + 1
        # The user moves the cursor to the body (the editor clients say so: the server warms
        # there) and looks at it for a moment before deleting it.
        session.client.cursor(self.uri, position_after(hole.prefix))
        session.jumps.append({"file": hole.path, "hole": self.hole_index,
                              "jump_s": round(time.monotonic() - session.started, 3)})
        rest_ms = config.line_pause_ms if config.jump_rest_ms is None else config.jump_rest_ms
        await asyncio.sleep(rest_ms / 1000)
        session.client.change(self.uri, version, position_after(hole.prefix), position_after(hole.prefix + hole.middle), "")
        self.at = (version, position_after(hole.prefix), 0)
        # Deleting is an edit too: the editor asks for a suggestion on the empty body.
        self.pending = asyncio.ensure_future(self.trigger(version, 0))
        await self.pause()
        for typed, char in enumerate(hole.middle, start=1):
            await self.interrupt()
            version += 1
            here = position_after(hole.prefix + hole.middle[: typed - 1])
            session.client.change(self.uri, version, here, here, char)
            self.at = (version, position_after(hole.prefix + hole.middle[:typed]), typed)
            self.pending = asyncio.ensure_future(self.trigger(version, typed))
            session.typed_chars += 1
            if session.bar is not None:
                session.bar.update(1)
            line_so_far = hole.middle[:typed].rsplit("\n", 1)[-1]
            next_char = hole.middle[typed:typed + 1]
            if "\n" in hole.middle[:typed] and not line_so_far.strip() and next_char.strip():
                await self.pause()  # at the first character of a new line's code
            else:
                await asyncio.sleep(1 / config.typing_cps)
        self.at = None  # the user moves on: whatever is in flight is cancelled, ready or not
        await self.interrupt()
        return version

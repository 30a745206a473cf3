"""A request's model run, the half of the completion service that starts, answers and follows it.

One run per request that the kept answer and the decode going on do not serve, or per edit that
anticipates its request (lsp_server/answering/anticipation.py): answered at its budget with what is verified
(the event loop answers empty for a job still queued), then decoded on in the background; the
longer text is kept for the next keys, which follow it (lsp_server/answering/following.py) or type through it
(lsp_server/answering/typethrough.py), and the client is told `quickdraft/completionReady` when it is there.
`ModelRuns` is mixed into `CompletionService` (lsp_server/answering/service.py), whose state it uses.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, replace
from typing import Callable

from lsprotocol import types

from engine.errors import QuickdraftError
from lsp_server.answering.anticipation import Anticipated
from lsp_server.answering.context import DocumentCursor, build_request
from lsp_server.answering.following import DecodeOn
from lsp_server.answering.scheduler import Superseded
from lsp_server.answering.typethrough import Shown, type_through

log = logging.getLogger(__name__)

READY_NOTIFICATION = "quickdraft/completionReady"
EMPTY = types.InlineCompletionList(items=[])
# A request the backend has not answered this long before its budget ends is answered empty
# by the event loop: one still queued behind the warm it joined, or a worker slow to switch.
# After the backends' own answer (ANSWER_MARGIN_S, 10 ms: it has what is verified), and enough
# for the reply's trip to the client (at 5 ms, 2 of 21 answers there were 1–2 ms late).
LOOP_ANSWER_MARGIN_S = 0.008
# An answer meant to beat the user's next key leaves it this long, for the trip to the client.
NEXT_KEY_MARGIN_S = 0.015
# A budget cut shorter than this by the next key is not cut: one pass would not fit, and a request
# asked that close to the next key is cancelled whatever it answers.
MIN_TYPING_BUDGET_S = 0.04


@dataclass(frozen=True)
class Unanswered:
    """What the event loop answers when the engine has not by the deadline: nothing yet."""

    text: str = ""
    replace_after: int = 0
    stop_reason: str = "deadline"
    held: None = None


class ModelRuns:
    """The model-run methods of CompletionService."""

    def staleness(self, workspace, cursor: DocumentCursor) -> Callable[[], bool]:
        """Whether the document has changed (or closed) since `cursor` was taken."""
        def is_stale() -> bool:
            current = workspace.text_documents.get(cursor.uri)
            return current is None or current.version != cursor.version
        return is_stale

    def budget_s(self, cursor: DocumentCursor, asked_at: float) -> float:
        """The request's budget: the setting, or less when the user's typing rhythm says the next key,
        which cancels the request, comes sooner: part of an answer shown beats a whole one dropped
        (the decode goes on, and what it writes follows as ghost text)."""
        budget = self.settings.budget_ms / 1000
        next_key = self.anticipation.next_key(cursor.uri) if self.settings.answer_before_next_key else None
        if next_key is None:
            return budget
        until_next_key = next_key - NEXT_KEY_MARGIN_S - asked_at
        return budget if until_next_key < MIN_TYPING_BUDGET_S else min(budget, until_next_key)

    async def run_model(self, workspace, document, cursor: DocumentCursor, started: float,
                        anticipated: Anticipated | None = None) -> types.InlineCompletionList:
        """Run the model for `cursor`: answered within the budget from `started` (when the request
        came, or is expected), with what is verified then; decoding goes on after the answer."""
        uri = cursor.uri
        is_stale = self.staleness(workspace, cursor)
        budget_s = self.budget_s(cursor, started)
        request = build_request(cursor, self.settings, workspace, received_at=started, budget_ms=budget_s * 1000)
        backend = self.backend

        loop = asyncio.get_running_loop()
        self.notify_progress("busy")
        answered: asyncio.Future = loop.create_future()
        cancel = threading.Event()
        decode_on = DecodeOn(cursor.prefix, cursor.suffix, cancel)
        if anticipated is not None:
            anticipated.decode_on = decode_on

        def answer_early(partial) -> None:
            """The budget is spent: answer with what is verified; decoding goes on in the background."""
            self.scheduler.demote(cancel)
            loop.call_soon_threadsafe(self.answer, answered, started, cursor, partial, is_stale, decode_on, anticipated)

        def job(cancel):
            job_started.set()
            result = backend.complete(request, cancel=cancel, on_text=decode_on.stream, on_answer=answer_early)
            # Recorded from here, so runs cut short by $/cancelRequest are counted too.
            loop.call_soon_threadsafe(self.finished, answered, started, cursor, result, is_stale, decode_on, anticipated)
            return result

        run = asyncio.ensure_future(self.scheduler.run(uri, job, is_stale=is_stale, cancel=cancel,
                                                       joins=self.warmer.join(uri, cursor.position)))
        run.add_done_callback(self.job_ended)
        run.add_done_callback(lambda _: self.decode_ended(uri, decode_on))

        def answer_at_deadline() -> None:
            """A job still queued is answered empty now; a running one answers what it verified
            itself (between layers, or as its stream stands), and the loop only at the budget's end."""
            nonlocal at_deadline
            if job_started.is_set() and loop.time() < started + budget_s:
                at_deadline = loop.call_at(started + budget_s, answer_early, Unanswered())
            else:
                answer_early(Unanswered())

        job_started = threading.Event()
        at_deadline = loop.call_at(started + budget_s - LOOP_ANSWER_MARGIN_S, answer_at_deadline)
        try:
            await asyncio.wait({run, answered}, return_when=asyncio.FIRST_COMPLETED)
            result = answered.result() if answered.done() else run.result()
        except asyncio.CancelledError:  # $/cancelRequest, or the next edit for a run started at an edit
            self.withdrawn(run, answered, cursor, cancel, decode_on)
            raise
        except Superseded:  # counted by job_ended
            return EMPTY
        except QuickdraftError as error:
            self.telemetry.count("errors")
            self.log_message(f"quickdraft: {error}", types.MessageType.Warning)
            return EMPTY
        except Exception as error:  # the model failed: say so where the user looks, keep serving
            self.telemetry.count("errors")
            log.exception("completion failed")
            self.error = f"completion failed: {type(error).__name__}: {error}"
            self.send_status("error", self.error)
            return EMPTY
        finally:
            at_deadline.cancel()
        if self.error:
            self.error = ""
            self.send_status("ready", "ready: completions work again")
        if result.stop_reason == "cancelled" or is_stale():
            self.telemetry.count("stale")
            return EMPTY
        if not answered.done():  # an early answer set it already, and decoding on may have extended it
            self.shown[uri] = Shown.of(cursor, result, complete=result.stop_reason not in ("deadline", "cancelled"))
        return self.items(document, cursor, result.text, result.replace_after)

    def job_ended(self, run: asyncio.Future) -> None:
        """Whoever waits for it (if anyone still does): a job that never started is counted here, once."""
        if not run.cancelled() and isinstance(run.exception(), Superseded):
            self.telemetry.count("superseded")

    async def adopt(self, anticipated: Anticipated, asked_at: float) -> types.InlineCompletionList:
        """The request for an edit whose run started at the edit: its answer is the run's."""
        if anticipated.asked_at is None:
            anticipated.asked_at = asked_at
        try:
            return await asyncio.shield(anticipated.task)
        except asyncio.CancelledError:
            if anticipated.task.cancelled() and not asyncio.current_task().cancelling():
                return EMPTY  # a newer edit withdrew the run before it answered (the client cancels this too)
            raise

    def answer(self, answered: asyncio.Future, started: float, cursor: DocumentCursor, partial, is_stale,
               decode_on: DecodeOn, anticipated: Anticipated | None = None) -> None:
        if answered.done():
            self.grew(cursor, partial, is_stale, decode_on)
            return
        answered.set_result(partial)
        self.shown[cursor.uri] = decode_on.on_screen = Shown.of(cursor, partial)
        self.decode_on[cursor.uri] = decode_on  # what the user types next may follow it
        self.record_model(started, cursor, partial, anticipated)
        self.notify_progress("ready")

    def record_model(self, started: float, cursor: DocumentCursor, result, anticipated: Anticipated | None) -> None:
        """A model answer's figures. A run started at an edit counts from when its request came;
        one no request has adopted is work no client waited for (not a request)."""
        if anticipated is None:
            self.record(started, cursor, "model", result=result)
        elif anticipated.asked_at is not None:
            self.record(anticipated.asked_at, cursor, "model", result=result)
        else:
            self.record(anticipated.edited_at, cursor, "anticipated", result=result)

    def withdrawn(self, run: asyncio.Future, answered: asyncio.Future, cursor: DocumentCursor, cancel: threading.Event,
                  decode_on: DecodeOn) -> None:
        """The client cancelled the request: a local engine's job goes on as a decode the next keys
        may follow (lsp_server/answering/following.py); a remote server's stream is closed (shared time)."""
        if self.backend is None or self.backend.shared or answered.done():
            run.cancel()
            return
        answered.cancel()
        self.scheduler.demote(cancel)
        self.shown[cursor.uri] = decode_on.on_screen = Shown(cursor.prefix, cursor.suffix, "", 0)
        if not run.done():  # else its job has ended (or never started): there is no decode to follow
            self.decode_on[cursor.uri] = decode_on

    async def follow(self, decode_on: DecodeOn, document, cursor: DocumentCursor, started: float, is_stale) -> types.InlineCompletionList:
        """The user typed what the decode going on is writing: wait for it, within the budget,
        rather than cancel it and start over (lsp_server/answering/following.py)."""
        until = started + self.settings.budget_ms / 1000 - LOOP_ANSWER_MARGIN_S
        while (kept := type_through(self.shown.get(cursor.uri), cursor)) is None and await decode_on.wait(until):
            pass
        if kept is None and not decode_on.done:
            decode_on.waiting = (cursor, is_stale)  # answered empty: told when its ghost text is there
        self.record(started, cursor, "followed", text=kept.text if kept else "")
        return self.items(document, cursor, kept.text, kept.replace_after) if kept else EMPTY

    def grew(self, cursor: DocumentCursor, partial, is_stale, decode_on: DecodeOn) -> None:
        """Decoding on after the answer, it gained a line (a single-line one: its line is done): worth
        telling of before the rest is decoded; one the gate withheld is kept to type through, untold."""
        kept, grown = self.shown.get(cursor.uri), Shown.of(cursor, partial)
        if not decode_on.takes(kept, grown) or len(grown.text) <= len(kept.text):
            return
        # Kept even when the user typed on: typing through checks it against the text.
        grown = self.shown[cursor.uri] = replace(grown, complete=bool(grown.visible))  # complete: a re-ask needs no model
        if grown.visible and not decode_on.on_screen.visible and not is_stale():
            decode_on.on_screen = grown
            self.notify_ready(cursor)
        decode_on.grew(self.shown.get(cursor.uri), self.notify_ready)

    def finished(self, answered: asyncio.Future, started: float, cursor: DocumentCursor, result, is_stale,
                 decode_on: DecodeOn, anticipated: Anticipated | None = None) -> None:
        if not answered.done() or answered.cancelled():  # answered at its end, or withdrawn by the client
            self.record_model(started, cursor, result, anticipated)
            self.maybe_retune()
            self.notify_progress("ready")
            if not answered.cancelled():
                return
        else:
            self.telemetry.count("continued")
        # Decoded on after its answer (or withdrawn): the longer text serves the next keys; the client,
        # told it is ready, asks again at the spot if the user is still there.
        complete = result.stop_reason not in ("deadline", "cancelled")  # cancelled: the user moved on
        decoded = Shown.of(cursor, result, complete)
        if decode_on.takes(self.shown.get(cursor.uri), decoded):
            self.shown[cursor.uri] = decoded
            if complete and len(decoded.visible) > len(decode_on.on_screen.visible) and not is_stale():
                self.notify_ready(cursor)
        decode_on.grew(self.shown.get(cursor.uri), self.notify_ready)
        self.maybe_retune()

    def decode_ended(self, uri: str, decode_on: DecodeOn) -> None:  # its job ended, or never started
        decode_on.done = True
        if self.decode_on.get(uri) is decode_on:
            del self.decode_on[uri]
        decode_on.grew(self.shown.get(uri), self.notify_ready)  # followers still waiting give up

    def notify_ready(self, cursor: DocumentCursor) -> None:
        self.telemetry.count("ready")
        self.notify(READY_NOTIFICATION, {
            "textDocument": {"uri": cursor.uri, "version": cursor.version},
            "position": {"line": cursor.position.line, "character": cursor.position.character}})

"""One model run, one object: what a run has, from its start to the end of the decode after its answer.

One run per request that the kept answer and the decode going on do not serve, or per edit that
anticipates its request (lsp_server/answering/anticipation.py): answered at its budget with what is verified
(the event loop answers empty for a job still queued), then decoded on in the background; the
longer text is kept for the next keys, which follow it (lsp_server/answering/following.py) or type through it
(lsp_server/answering/typethrough.py), and the client is told `quickdraft/completionReady` when it is there.
What the runs share (the kept answers, the decodes going on, the scheduler, telemetry) is the
completion service's (lsp_server/answering/service.py).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, replace

from lsprotocol import types

from engine.decoding.stops import StopReason
from lsp_server.answering.anticipation import Anticipated
from lsp_server.answering.context import DocumentCursor, build_request, staleness
from lsp_server.answering.following import DecodeOn
from lsp_server.answering.scheduler import Superseded
from lsp_server.answering.typethrough import Shown

READY_NOTIFICATION = "quickdraft/completionReady"
EMPTY = types.InlineCompletionList(items=[])
# A request the backend has not answered this long before its budget ends is answered empty
# by the event loop: one still queued behind the warm it joined, or a worker slow to switch.
# After the backends' own answer (ANSWER_MARGIN_S, 10 ms: it has what is verified), and enough
# for the reply's trip to the client.
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
    stop_reason: StopReason = StopReason.DEADLINE
    held: None = None


class ModelRun:
    """One run of the model at a cursor: answered within the budget from `started` (when the request
    came, or is expected) with what is verified then; decoding goes on after the answer.

    Made on the event loop when the run starts; `work` and `answer_early` run on the worker thread,
    everything else on the loop.
    """

    def __init__(self, service, workspace, document, cursor: DocumentCursor, started: float,
                 anticipated: Anticipated | None = None) -> None:
        self.service = service  # the CompletionService: what all runs share
        self.document = document
        self.cursor = cursor
        self.started = started
        self.anticipated = anticipated  # the edit that started the run, when no request had yet
        self.is_stale = staleness(workspace, cursor)
        self.budget_s = service.budget_s(cursor, started)
        self.request = build_request(cursor, service.settings, workspace, received_at=started,
                                     budget_ms=self.budget_s * 1000)
        self.backend = service.backend  # the one it starts on, whatever is loaded while it runs
        self.loop = asyncio.get_running_loop()
        self.answered: asyncio.Future = self.loop.create_future()  # the answer at the budget
        self.cancel = threading.Event()
        self.decode_on = DecodeOn(cursor.prefix, cursor.suffix, self.cancel)
        self.job_started = threading.Event()
        self.job: asyncio.Future | None = None  # the scheduler's run of `work`
        self.at_deadline: asyncio.TimerHandle | None = None  # the loop's own answer, should the job not answer
        self.provisional = False  # answered with the draft model's text; the job's result is the verdict

    async def run(self) -> types.InlineCompletionList:
        """The answer as LSP items: what is verified by the budget's end, or all of it if the job ends
        sooner; empty when it failed, was superseded or went stale. The decode goes on after it."""
        service, cursor = self.service, self.cursor
        service.notify_progress("busy")
        if self.anticipated is not None:
            self.anticipated.decode_on = self.decode_on
        self.job = asyncio.ensure_future(service.scheduler.run(
            cursor.uri, self.work, is_stale=self.is_stale, cancel=self.cancel,
            joins=service.warmer.join(cursor.uri, cursor.position)))
        self.job.add_done_callback(self.job_ended)
        self.at_deadline = self.loop.call_at(self.started + self.budget_s - LOOP_ANSWER_MARGIN_S,
                                             self.answer_at_deadline)
        try:
            await asyncio.wait({self.job, self.answered}, return_when=asyncio.FIRST_COMPLETED)
            result = self.answered.result() if self.answered.done() else self.job.result()
        except asyncio.CancelledError:  # $/cancelRequest, or the next edit for a run started at an edit
            self.withdrawn()
            raise
        except Superseded:  # counted by job_ended
            return EMPTY
        except Exception as error:
            service.model_failed(error)
            return EMPTY
        finally:
            self.at_deadline.cancel()
        service.model_worked()
        if result.stop_reason == StopReason.CANCELLED or self.is_stale():
            service.telemetry.count("stale")
            return EMPTY
        if not self.answered.done():  # an early answer set it already, and decoding on may have extended it
            complete = result.stop_reason not in (StopReason.DEADLINE, StopReason.CANCELLED)
            service.shown[cursor.uri] = Shown.of(cursor, result, complete=complete)
        return service.items(self.document, cursor, result.text, result.replace_after)

    # -- on the worker thread ----------------------------------------------------------
    def work(self, cancel: threading.Event):
        """The job: the backend decodes, answering early at the budget and going on after it."""
        self.job_started.set()
        result = self.backend.complete(self.request, cancel=cancel, on_text=self.decode_on.stream,
                                       on_answer=self.answer_early)
        # Recorded from here, so runs cut short by $/cancelRequest are counted too.
        self.loop.call_soon_threadsafe(self.finished, result)
        return result

    def answer_early(self, partial) -> None:
        """The budget is spent: answer with what is verified; decoding goes on in the background.
        Also called again as the decode's text grows, and by the loop for a job that has not answered."""
        self.service.scheduler.demote(self.cancel)
        self.loop.call_soon_threadsafe(self.answer, partial)

    # -- on the event loop -------------------------------------------------------------
    def answer_at_deadline(self) -> None:
        """A job still queued is answered empty now; a running one answers what it verified
        itself (between layers, or as its stream stands), and the loop only at the budget's end."""
        deadline = self.started + self.budget_s
        if self.job_started.is_set() and self.loop.time() < deadline:
            self.at_deadline = self.loop.call_at(deadline, self.answer_early, Unanswered())
        else:
            self.answer_early(Unanswered())

    def answer(self, partial) -> None:
        """The answer at the budget; once it is given, the decode's text grown since."""
        service, uri = self.service, self.cursor.uri
        # The draft model's text: first, or after the loop's own empty answer (which has no such flag).
        if getattr(partial, "provisional", False) and not self.provisional:
            self.provisional = True
            service.telemetry.verdicts.provisional += 1
        if self.answered.done():
            self.grew(partial)
            return
        self.answered.set_result(partial)
        service.shown[uri] = self.decode_on.on_screen = Shown.of(self.cursor, partial)
        service.decode_on[uri] = self.decode_on  # what the user types next may follow it
        self.record(partial)
        service.notify_progress("ready")

    def record(self, result) -> None:
        """A model answer's figures. A run started at an edit counts from when its request came;
        one no request has adopted is work no client waited for (not a request)."""
        anticipated, record = self.anticipated, self.service.record
        if anticipated is None:
            record(self.started, self.cursor, "model", result=result)
        elif anticipated.asked_at is not None:
            record(anticipated.asked_at, self.cursor, "model", result=result)
        else:
            record(anticipated.edited_at, self.cursor, "anticipated", result=result)

    def withdrawn(self) -> None:
        """The client cancelled the request: the job goes on as a decode the next keys may follow
        (lsp_server/answering/following.py), unless the backend is shared: then it stops."""
        service, cursor = self.service, self.cursor
        if service.backend is None or service.backend.shared or self.answered.done():
            self.job.cancel()
            return
        self.answered.cancel()
        service.scheduler.demote(self.cancel)
        service.shown[cursor.uri] = self.decode_on.on_screen = Shown(cursor.prefix, cursor.suffix, "", 0)
        if not self.job.done():  # else its job has ended (or never started): there is no decode to follow
            service.decode_on[cursor.uri] = self.decode_on

    def grew(self, partial) -> None:
        """Decoding on after the answer, it gained a line (a single-line one: its line is done): worth
        telling of before the rest is decoded; one the gate withheld is kept to type through, untold."""
        service, cursor, decode_on = self.service, self.cursor, self.decode_on
        kept, grown = service.shown.get(cursor.uri), Shown.of(cursor, partial)
        if not decode_on.takes(kept, grown) or len(grown.text) <= len(kept.text):
            return
        # Kept even when the user typed on: typing through checks it against the text.
        grown = service.shown[cursor.uri] = replace(grown, complete=bool(grown.visible))  # complete: a re-ask needs no model
        if grown.visible and not decode_on.on_screen.visible and not self.is_stale():
            decode_on.on_screen = grown
            service.notify_ready(cursor)
        decode_on.grew(service.shown.get(cursor.uri), service.notify_ready)

    def finished(self, result) -> None:
        """The job has ended: its figures if it ended by the budget (or the client withdrew it), and
        the longer text if it decoded on."""
        service, cursor, decode_on, answered = self.service, self.cursor, self.decode_on, self.answered
        if self.provisional and not answered.cancelled():
            self.verdict(result)
            return
        if not answered.done() or answered.cancelled():  # answered at its end, or withdrawn by the client
            self.record(result)
            service.maybe_retune()
            service.notify_progress("ready")
            if not answered.cancelled():
                return
        else:
            service.telemetry.count("continued")
        # Decoded on after its answer (or withdrawn): the longer text serves the next keys; the client,
        # told it is ready, asks again at the spot if the user is still there.
        complete = result.stop_reason not in (StopReason.DEADLINE, StopReason.CANCELLED)  # cancelled: the user moved on
        decoded = Shown.of(cursor, result, complete)
        if decode_on.takes(service.shown.get(cursor.uri), decoded):
            service.shown[cursor.uri] = decoded
            if complete and len(decoded.visible) > len(decode_on.on_screen.visible) and not self.is_stale():
                service.notify_ready(cursor)
        decode_on.grew(service.shown.get(cursor.uri), service.notify_ready)
        service.maybe_retune()

    def verdict(self, result) -> None:
        """The verifier's verdict on the draft model's answer shown: kept in its place and, where it is not
        the text on screen and the user is still there, the client is told to ask again (and gets it kept)."""
        service, cursor, decode_on = self.service, self.cursor, self.decode_on
        verdicts = service.telemetry.verdicts
        decided = Shown.of(cursor, result, complete=result.stop_reason != StopReason.DEADLINE)
        kept = service.shown.get(cursor.uri)
        if result.stop_reason == StopReason.CANCELLED:
            verdicts.cancelled += 1  # the user moved on first
        elif kept is None or (kept.prefix, kept.suffix) != (decided.prefix, decided.suffix):
            verdicts.moved += 1
        else:
            on_screen = decode_on.on_screen.visible if decode_on.on_screen is not None else ""
            seen = not self.is_stale()
            verdicts.add(on_screen, decided.visible, seen)
            service.shown[cursor.uri] = decided
            if decided.visible != on_screen and seen:
                decode_on.on_screen = decided
                service.notify_ready(cursor)
        decode_on.grew(service.shown.get(cursor.uri), service.notify_ready)
        service.maybe_retune()

    def job_ended(self, job: asyncio.Future) -> None:
        """The job ended, or never started (counted here, once, whoever still waits for it): its
        decode is over, and followers still waiting for it give up."""
        service, uri = self.service, self.cursor.uri
        if not job.cancelled() and isinstance(job.exception(), Superseded):
            service.telemetry.count("superseded")
        self.decode_on.done = True
        if service.decode_on.get(uri) is self.decode_on:
            del service.decode_on[uri]
        self.decode_on.grew(service.shown.get(uri), service.notify_ready)

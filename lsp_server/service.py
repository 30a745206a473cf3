"""The completion service behind the LSP handlers: plain code, testable without a server.

It owns the backend (the local engine, loaded in the background on the single worker, or
a remote inference server), the settings, the scheduler, telemetry and the type-through
cache (its entries and rule: lsp_server/typethrough.py), and turns an inline-completion
request into LSP items. The backend is only ever touched from the worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

from lsprotocol import types

from engine.backends.base import Health
from engine.errors import QuickdraftError
from lsp_server.anticipation import Anticipated, Anticipation, cursor_after_edit
from lsp_server.backends import describe_choice, open_backend
from lsp_server.context import Cursor, build_request, inline_items, locate, looks_binary
from lsp_server.following import DecodeOn
from lsp_server.scheduler import Scheduler, Superseded
from lsp_server.settings import Settings, apply_client_settings
from lsp_server.telemetry import RequestRecord, Telemetry
from lsp_server.typethrough import Shown, type_through
from lsp_server.warming import MAX_WARM_CHARS, Warmer

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


class CompletionService:
    def __init__(self, settings: Settings, notify: Callable[[str, dict], None], log_message: Callable[[str, int], None]):
        self.settings = settings
        self.notify = notify  # custom notifications to the client
        self.log_message = log_message  # window/logMessage
        self.scheduler = Scheduler()
        self.telemetry = Telemetry()
        self.backend = None  # engine.backends: LocalBackend | RemoteBackend
        self.backend_key: tuple | None = None
        self.backend_health: Health | None = None  # a remote server's trouble, when it has some
        self.state = "starting"  # starting | loading | ready | error
        self.error = ""
        self.shown: dict[str, Shown] = {}
        self.decode_on: dict[str, DecodeOn] = {}  # per document: the decode going on after an answer
        self.anticipation = Anticipation()  # runs started at edits, and the user's typing rhythm
        self._ids = itertools.count(1)
        self._load_task: asyncio.Task | None = None
        self.warmer = Warmer(self)

    # -- models ---------------------------------------------------------------------
    def status(self, state: str, message: str) -> None:
        self.state = state
        self.send_status(state, message)

    def send_status(self, state: str, message: str) -> None:
        rate = self.telemetry.draft_acceptance()
        self.notify("quickdraft/status", {"state": state, "message": message, "draftAcceptance": rate})

    @property
    def engine(self):
        """The local engine behind the backend; None for a remote server (tests and debugging)."""
        return getattr(self.backend, "engine", None)

    @property
    def drafter_mode(self) -> str:
        if self.backend is not None and self.backend.kind == "remote":
            return "server"  # the inference server drafts (or not) by its own configuration
        return self.backend.drafter_mode if self.backend is not None else self.settings.drafter

    def start_loading(self) -> None:
        """Load (or reload) models on the worker; the editor is never blocked meanwhile."""
        self._load_task = asyncio.ensure_future(self.load_models())

    async def load_models(self) -> None:
        settings = self.settings
        if self.backend is not None and self.backend_key == settings.model_key():
            if self.backend.kind == "local":
                await self.scheduler.call(lambda: self.backend.set_drafter(settings.drafter))
            return
        self.scheduler.cancel_all()
        self.status("loading", describe_choice(settings))
        loop = asyncio.get_running_loop()

        def on_health(health: Health) -> None:  # called from the backend's threads
            loop.call_soon_threadsafe(self.backend_health_changed, health)

        def load():
            if self.backend is not None:
                self.backend.close()
            self.backend = None  # free the old models before loading new ones
            backend = open_backend(settings, on_health)
            self.apply_budget(backend)
            return backend

        try:
            self.backend = await self.scheduler.call(load)
            self.backend_key = settings.model_key()
            self.shown.clear()
            self.error = ""
            self.status("ready", f"ready: {self.backend.describe()}")
            health = getattr(self.backend, "health", None)
            if health is not None and health.state != "ready":
                self.backend_health_changed(health)
            self.warmer.engine_ready()
        except QuickdraftError as error:
            self.error = str(error)
            self.log_message(f"quickdraft: {error}", types.MessageType.Error)
            self.status("error", str(error))
        except Exception as error:  # a model that fails to load must not take the server down
            log.exception("model loading failed")
            self.error = f"{type(error).__name__}: {error}"
            self.status("error", f"could not load models: {self.error}")

    def configure(self, options) -> None:
        previous = self.settings
        self.settings = apply_client_settings(self.settings, options)
        if self.settings != previous:
            self.shown.clear()  # answers kept under other settings (token limit, budget, context)
        if self.settings.model_key() != previous.model_key() or self.settings.drafter != previous.drafter:
            self.start_loading()
        elif self.backend is not None and previous != self.settings:
            self.apply_budget(self.backend)

    def apply_budget(self, backend) -> None:
        """Context budgets the client set override the backend's defaults."""
        backend.set_context_budget(prefix_tokens=self.settings.prefix_tokens, suffix_tokens=self.settings.suffix_tokens,
                                   other_documents_tokens=self.settings.other_documents_tokens,
                                   cold_prefix_tokens=self.settings.cold_prefix_tokens)

    def backend_health_changed(self, health: Health) -> None:
        """A remote server went away, got slow or came back: tell the user (requests go on)."""
        self.backend_health = None if health.state == "ready" else health
        if self.state == "ready":
            self.send_status(health.state, health.message)

    # -- completions ----------------------------------------------------------------
    async def complete(self, workspace, params: types.InlineCompletionParams) -> types.InlineCompletionList:
        started = time.monotonic()
        uri = params.text_document.uri
        if self.state != "ready" or uri not in workspace.text_documents:
            return EMPTY
        document = workspace.get_text_document(uri)
        if not self.settings.language_enabled(document.language_id):
            return EMPTY
        cursor = locate(document, params.position)
        if cursor is None or looks_binary(cursor):
            self.telemetry.count("empty")
            return EMPTY

        automatic = params.context is not None and params.context.trigger_kind == types.InlineCompletionTriggerKind.Automatic
        self.anticipation.asked(cursor, started, automatic)
        anticipated = self.anticipation.take(cursor)
        typed_through = type_through(self.shown.get(cursor.uri), cursor)
        decode_on = self.decode_on.get(uri)
        follows = typed_through is None and anticipated is None and decode_on is not None and decode_on.leads_to(cursor)
        self.warmer.did_request(workspace, uri, cursor.position, model=typed_through is None and not follows)
        if typed_through is not None:
            source = "kept" if typed_through.prefix == cursor.prefix else "typethrough"
            self.record(started, cursor, source, text=typed_through.text)
            return self.items(document, cursor, typed_through.text, typed_through.replace_after)
        if anticipated is not None:
            return await self.adopt(anticipated, started)
        if follows:
            return await self.follow(decode_on, document, cursor, started, self.staleness(workspace, cursor))
        return await self.run_model(workspace, document, cursor, started)

    def staleness(self, workspace, cursor: Cursor) -> Callable[[], bool]:
        """Whether the document has changed (or closed) since `cursor` was taken."""
        def is_stale() -> bool:
            current = workspace.text_documents.get(cursor.uri)
            return current is None or current.version != cursor.version
        return is_stale

    def budget_s(self, cursor: Cursor, asked_at: float) -> float:
        """The request's budget: the setting, or less when the user's typing rhythm says the next key,
        which cancels the request, comes sooner: part of an answer shown beats a whole one dropped
        (the decode goes on, and what it writes follows as ghost text)."""
        budget = self.settings.budget_ms / 1000
        next_key = self.anticipation.next_key(cursor.uri) if self.settings.answer_before_next_key else None
        if next_key is None:
            return budget
        until_next_key = next_key - NEXT_KEY_MARGIN_S - asked_at
        return budget if until_next_key < MIN_TYPING_BUDGET_S else min(budget, until_next_key)

    async def run_model(self, workspace, document, cursor: Cursor, started: float,
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

    def items(self, document, cursor: Cursor, text: str, replace_after: int) -> types.InlineCompletionList:
        return inline_items(document, cursor, text, replace_after, f"qd-{next(self._ids)}") if text else EMPTY

    def record(self, started: float, cursor: Cursor, source: str, *, result=None, text: str = "") -> None:
        record = RequestRecord(
            id=str(cursor.version), uri=cursor.uri, source=source,
            latency_ms=(time.monotonic() - started) * 1000, budget_ms=self.settings.budget_ms, text_chars=len(text),
        )
        if result is not None:
            record.add_result(result)
        self.telemetry.record(record)

    def answer(self, answered: asyncio.Future, started: float, cursor: Cursor, partial, is_stale,
               decode_on: DecodeOn, anticipated: Anticipated | None = None) -> None:
        if answered.done():
            self.grew(cursor, partial, is_stale, decode_on)
            return
        answered.set_result(partial)
        self.shown[cursor.uri] = decode_on.on_screen = Shown.of(cursor, partial)
        self.decode_on[cursor.uri] = decode_on  # what the user types next may follow it
        self.record_model(started, cursor, partial, anticipated)
        self.notify_progress("ready")

    def record_model(self, started: float, cursor: Cursor, result, anticipated: Anticipated | None) -> None:
        """A model answer's figures. A run started at an edit counts from when its request came;
        one no request has adopted is work no client waited for (not a request)."""
        if anticipated is None:
            self.record(started, cursor, "model", result=result)
        elif anticipated.asked_at is not None:
            self.record(anticipated.asked_at, cursor, "model", result=result)
        else:
            self.record(anticipated.edited_at, cursor, "anticipated", result=result)

    def withdrawn(self, run: asyncio.Future, answered: asyncio.Future, cursor: Cursor, cancel: threading.Event,
                  decode_on: DecodeOn) -> None:
        """The client cancelled the request: a local engine's job goes on as a decode the next keys
        may follow (lsp_server/following.py); a remote server's stream is closed (shared time)."""
        if self.backend is None or self.backend.kind != "local" or answered.done():
            run.cancel()
            return
        answered.cancel()
        self.scheduler.demote(cancel)
        self.shown[cursor.uri] = decode_on.on_screen = Shown(cursor.prefix, cursor.suffix, "", 0)
        self.decode_on[cursor.uri] = decode_on

    async def follow(self, decode_on: DecodeOn, document, cursor: Cursor, started: float, is_stale) -> types.InlineCompletionList:
        """The user typed what the decode going on is writing: wait for it, within the budget,
        rather than cancel it and start over (lsp_server/following.py)."""
        until = started + self.settings.budget_ms / 1000 - LOOP_ANSWER_MARGIN_S
        while (kept := type_through(self.shown.get(cursor.uri), cursor)) is None and await decode_on.wait(until):
            pass
        if kept is None and not decode_on.done:
            decode_on.waiting = (cursor, is_stale)  # answered empty: told when its ghost text is there
        self.record(started, cursor, "followed", text=kept.text if kept else "")
        return self.items(document, cursor, kept.text, kept.replace_after) if kept else EMPTY

    def grew(self, cursor: Cursor, partial, is_stale, decode_on: DecodeOn) -> None:
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

    def finished(self, answered: asyncio.Future, started: float, cursor: Cursor, result, is_stale,
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

    def notify_ready(self, cursor: Cursor) -> None:
        self.telemetry.count("ready")
        self.notify(READY_NOTIFICATION, {
            "textDocument": {"uri": cursor.uri, "version": cursor.version},
            "position": {"line": cursor.position.line, "character": cursor.position.character}})

    def notify_progress(self, state: str) -> None:
        """busy while the engine works, ready after, with the live draft acceptance for status bars;
        while a remote server is in trouble the status keeps saying so."""
        if self.state != "ready":
            return
        trouble = self.backend_health
        if trouble is not None and state == "ready":
            self.send_status(trouble.state, trouble.message)
        else:
            self.send_status(state, state)

    def maybe_retune(self) -> None:
        if not self.settings.adaptive_drafting or self.backend is None or self.backend.kind != "local":
            return
        decision = self.telemetry.retune(self.backend.drafter_mode)
        if decision is None:
            return
        mode, reason = decision
        backend = self.backend
        asyncio.ensure_future(self.scheduler.call(lambda: backend.set_drafter(mode)))
        self.log_message(f"quickdraft: {reason}", types.MessageType.Info)
        self.send_status("ready", reason)

    # -- what the editor tells us -----------------------------------------------------
    def document_changed(self, workspace, params: types.DidChangeTextDocumentParams) -> None:
        """An edit. Where the client asks automatically, the model starts now at the cursor the edit
        leaves, rather than a debounce later when the request comes (lsp_server/anticipation.py)."""
        self.warmer.did_change()
        now = time.monotonic()
        uri = params.text_document.uri
        document = workspace.text_documents.get(uri)
        previous = self.anticipation.edited(uri, document.version if document is not None else None, now)
        if previous is not None and not previous.task.done():
            previous.task.cancel()  # the user typed on: it goes on as a decode the next keys may follow
        if (document is None or not self.settings.anticipate or self.state != "ready" or self.backend is None
                or self.backend.kind != "local" or not self.anticipation.client_asks(now)
                or not self.settings.language_enabled(document.language_id)
                or len(document.source) > MAX_WARM_CHARS):  # generated or minified: not worth a run per key
            return
        position = cursor_after_edit(document, params)
        cursor = locate(document, position) if position is not None else None
        if cursor is None or looks_binary(cursor) or type_through(self.shown.get(uri), cursor) is not None:
            return  # nothing to anticipate, or the request is answered from what is kept
        decodes = (self.decode_on.get(uri), previous.decode_on if previous is not None else None)
        if any(decode is not None and decode.leads_to(cursor) for decode in decodes):
            return  # the request will follow the decode that is writing what was typed
        self.warmer.did_request(workspace, uri, cursor.position, model=True)
        started = self.anticipation.expected_request(now)
        anticipated = Anticipated(cursor, edited_at=now)
        anticipated.task = asyncio.ensure_future(self.run_model(workspace, document, cursor, started, anticipated))
        anticipated.task.add_done_callback(lambda task: task.cancelled() or task.exception())
        self.anticipation.started(anticipated)

    def document_closed(self, uri: str) -> None:
        self.shown.pop(uri, None)
        self.decode_on.pop(uri, None)
        self.anticipation.forget(uri)  # its run, if any, ends with the scheduler's cancel below
        self.scheduler.cancel(uri)  # its request, or the decoding going on after its answer

    def item_shown(self, item_id: str) -> None:
        self.telemetry.did_show(item_id)

    def item_accepted(self, item_id: str) -> None:
        self.telemetry.did_accept(item_id)

    def item_partially_accepted(self, item_id: str, length: int) -> None:
        self.telemetry.did_partially_accept(item_id, length)

    def stats(self) -> dict:
        snapshot = self.telemetry.snapshot(self.drafter_mode)
        snapshot["state"] = self.state
        snapshot["warming"] = self.warmer.snapshot()
        if self.backend is not None:
            snapshot["backend"] = self.backend.stats()
        if self.error:
            snapshot["error"] = self.error
        return snapshot

    def shutdown(self) -> None:
        self.warmer.stop()
        self.scheduler.shutdown()
        if self.backend is not None:
            self.backend.close()

"""The completion service behind the LSP handlers: plain code, testable without a server.

It owns the backend (the local engine, loaded in the background on the single worker, or
a remote inference server), the settings, the scheduler, telemetry and the type-through
cache (its entries and rule: lsp_server/answering/typethrough.py), and turns an inline-completion
request into LSP items: from what is kept, by following the decode going on, or by a model
run (a `ModelRun`, lsp_server/answering/model_runs.py, which keeps its answer and decode here).
The backend is only ever touched from the worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import Callable

from lsprotocol import types

from engine.backends.base import Health
from engine.errors import QuickdraftError
from lsp_server.answering.anticipation import Anticipated, Anticipation, cursor_after_edit, is_keystroke
from lsp_server.workspace.backends import describe_choice, open_backend
from lsp_server.answering.context import DocumentCursor, inline_items, locate, looks_binary, staleness
from lsp_server.answering.following import DecodeOn
from lsp_server.workspace.gc_pauses import Collector
from lsp_server.answering.model_runs import (EMPTY, LOOP_ANSWER_MARGIN_S, MIN_TYPING_BUDGET_S, NEXT_KEY_MARGIN_S,
                                             READY_NOTIFICATION, ModelRun)
from lsp_server.answering.scheduler import Scheduler
from lsp_server.workspace.settings import Settings, apply_client_settings
from lsp_server.workspace.telemetry import RequestRecord, Telemetry
from lsp_server.answering.typethrough import Shown, type_through
from lsp_server.answering.warming import MAX_WARM_CHARS, Warmer

log = logging.getLogger(__name__)


class CompletionService:
    def __init__(self, settings: Settings, notify: Callable[[str, dict], None], log_message: Callable[[str, int], None]):
        self.settings = settings
        self.notify = notify  # custom notifications to the client
        self.log_message = log_message  # window/logMessage
        self.scheduler = Scheduler()
        self.telemetry = Telemetry()
        # Read once, as the machine's defaults were: a stats request then neither imports nor
        # allocates for it (the models' objects are frozen by then; see gc_pauses.py).
        self.calibration = calibration_summary()
        self.backend = None  # engine.backends: LocalBackend | RemoteBackend
        self.backend_key: tuple | None = None
        self.backend_health: Health | None = None  # a remote server's trouble, when it has some
        self.state = "starting"  # starting | loading | ready | error
        self.error = ""
        self.shown: dict[str, Shown] = {}
        self.decode_on: dict[str, DecodeOn] = {}  # per document: the decode going on after an answer
        self.anticipation = Anticipation()  # runs started at edits, and the user's typing rhythm
        self.collector = Collector()  # what the models made is frozen, out of full collections' sight
        self.collector.start()
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
    def drafter_mode(self) -> str:
        return self.backend.drafter_mode if self.backend is not None else self.settings.drafter

    def start_loading(self) -> None:
        """Load (or reload) models on the worker; the editor is never blocked meanwhile."""
        self._load_task = asyncio.ensure_future(self.load_models())

    async def load_models(self) -> None:
        settings = self.settings
        if self.backend is not None and self.backend_key == settings.model_key():
            await self.scheduler.call(lambda: self.backend.set_drafter(settings.drafter))
            return
        self.scheduler.cancel_all()
        self.status("loading", describe_choice(settings))
        loop = asyncio.get_running_loop()

        def on_health(health: Health) -> None:  # called from the backend's threads
            loop.call_soon_threadsafe(self.backend_health_changed, health)

        def load():
            self.collector.thaw()  # the old models' objects can be collected once dropped
            if self.backend is not None:
                self.backend.close()
            self.backend = None  # free the old models before loading new ones
            backend = open_backend(settings, on_health)
            self.apply_budget(backend)
            self.collector.freeze_loaded()  # no full collection scans them again (a quarter-second pause)
            return backend

        try:
            self.backend = await self.scheduler.call(load)
            self.backend_key = settings.model_key()
            self.shown.clear()
            self.error = ""
            self.status("ready", f"ready: {self.backend.describe()}")
            if self.backend.health.state != "ready":
                self.backend_health_changed(self.backend.health)
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
            return await self.follow(decode_on, document, cursor, started, staleness(workspace, cursor))
        return await self.run_model(workspace, document, cursor, started)

    async def run_model(self, workspace, document, cursor: DocumentCursor, started: float,
                        anticipated: Anticipated | None = None) -> types.InlineCompletionList:
        """Answer from a model run at `cursor`, made when the task awaiting it starts (not when an
        edit schedules it): it reads the document and settings as they are then."""
        return await ModelRun(self, workspace, document, cursor, started, anticipated).run()

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

    async def follow(self, decode_on: DecodeOn, document, cursor: DocumentCursor, started: float,
                     is_stale) -> types.InlineCompletionList:
        """The user typed what the decode going on is writing: wait for it, within the budget,
        rather than cancel it and start over (lsp_server/answering/following.py)."""
        until = started + self.settings.budget_ms / 1000 - LOOP_ANSWER_MARGIN_S
        while (kept := type_through(self.shown.get(cursor.uri), cursor)) is None and await decode_on.wait(until):
            pass
        if kept is None and not decode_on.done:
            decode_on.waiting = (cursor, is_stale)  # answered empty: told when its ghost text is there
        self.record(started, cursor, "followed", text=kept.text if kept else "")
        return self.items(document, cursor, kept.text, kept.replace_after) if kept else EMPTY

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

    def items(self, document, cursor: DocumentCursor, text: str, replace_after: int) -> types.InlineCompletionList:
        return inline_items(document, cursor, text, replace_after, f"qd-{next(self._ids)}") if text else EMPTY

    def record(self, started: float, cursor: DocumentCursor, source: str, *, result=None, text: str = "") -> None:
        record = RequestRecord(
            id=str(cursor.version), uri=cursor.uri, source=source,
            latency_ms=(time.monotonic() - started) * 1000, budget_ms=self.settings.budget_ms, text_chars=len(text),
        )
        if result is not None:
            record.add_result(result)
        self.telemetry.record(record)

    def notify_ready(self, cursor: DocumentCursor) -> None:
        self.telemetry.count("ready")
        self.notify(READY_NOTIFICATION, {
            "textDocument": {"uri": cursor.uri, "version": cursor.version},
            "position": {"line": cursor.position.line, "character": cursor.position.character}})

    def model_failed(self, error: Exception) -> None:
        """A model run failed: a reason the user can act on is logged; any other failure is said
        where the user looks (the status), and the server keeps serving."""
        self.telemetry.count("errors")
        if isinstance(error, QuickdraftError):
            self.log_message(f"quickdraft: {error}", types.MessageType.Warning)
            return
        log.error("completion failed", exc_info=error)
        self.error = f"completion failed: {type(error).__name__}: {error}"
        self.send_status("error", self.error)

    def model_worked(self) -> None:
        """A model run answered: a failure the status showed is over."""
        if self.error:
            self.error = ""
            self.send_status("ready", "ready: completions work again")

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
        if not self.settings.adaptive_drafting or self.backend is None:
            return
        # Only a draft model's mode is ever switched: never a remote server's ("server").
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
        leaves, rather than a debounce later when the request comes (lsp_server/answering/anticipation.py)."""
        self.warmer.did_change()
        now = time.monotonic()
        uri = params.text_document.uri
        document = workspace.text_documents.get(uri)
        previous = self.anticipation.edited(uri, document.version if document is not None else None, now,
                                            key=is_keystroke(params))
        if previous is not None and not previous.task.done():
            previous.task.cancel()  # the user typed on: it goes on as a decode the next keys may follow
        if (document is None or not self.settings.anticipate or self.state != "ready" or self.backend is None
                or self.backend.shared or not self.anticipation.client_asks(now)
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
        snapshot["collector"] = self.collector.snapshot()
        if self.backend is not None:
            snapshot["backend"] = self.backend.stats()
        snapshot["calibration"] = self.calibration
        if self.error:
            snapshot["error"] = self.error
        return snapshot

    def shutdown(self) -> None:
        self.collector.stop()
        self.warmer.stop()
        self.scheduler.shutdown()
        if self.backend is not None:
            self.backend.close()


def calibration_summary() -> dict | None:
    """This machine's `doctor --calibrate` record for `quickdraft/stats` as the server started: what
    was measured, what was chosen and why (the CPU's default verifier, unless the user set one)."""
    from engine.bench.calibration import load

    record = load()
    if record is None:
        return None
    measured = [{"name": m["name"], "precision": m["precision"], "passMs": m["pass_ms"], "oneTokenMs": m["one_token_ms"],
                 "promptTokensPerS": m["prompt_tokens_per_s"]} for m in record["measured"]]
    return {"verifier": record["verifier"], "reason": record["reason"], "time": record["time"],
            "budgetMs": record["budget_ms"], "measured": measured}


"""Warming the KV cache ahead of the request (lsp_server/answering/warming.py).

In-process: the real CompletionService, its scheduler and a CompletionEngine on the tiny
float32 model, with a pygls Workspace holding the documents — only the JSON-RPC transport
is left out (tests/server/test_warming_server.py drives the real server over stdio).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import namedtuple
from dataclasses import replace

import pytest
from lsprotocol import types
from pygls.workspace import Workspace

from engine.backends.local import LocalBackend
from engine.completion import CPU_CONTEXT_BUDGET, CompletionEngine, CompletionRequest
from engine.models.loading import load_model
from lsp_server.answering import warming
from lsp_server.answering.service import CompletionService
from lsp_server.workspace.settings import Settings

pytestmark = pytest.mark.timeout(300)

SOURCE = "".join(f"def function_{i}(value, other):\n    total = value * {i} + other\n    return total\n\n\n"
                 for i in range(200))
URI = "file:///w/module.py"
DEEP = types.Position(line=700, character=4)  # far from the start: the prompt window is full
SETTINGS = Settings(drafter="lookup", budget_ms=60_000, max_new_tokens=8, multiline="never")


def cursor(uri: str, position: types.Position) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": position.line, "character": position.character}}


def params(uri: str, position: types.Position) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri), position=position,
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))


@pytest.fixture(scope="module")
def verifier(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32", device="cpu")


def new_engine(verifier) -> CompletionEngine:
    # The whole window cold (no short first window): a warm long enough to land a cancel in.
    return CompletionEngine(verifier, None, drafter="lookup",
                            context_budget=replace(CPU_CONTEXT_BUDGET, cold_prefix_tokens=0))


class Session:
    """The service as the LSP handlers drive it, with the workspace pygls would keep."""

    def __init__(self, service: CompletionService) -> None:
        self.service, self.warmer, self.workspace = service, service.warmer, Workspace(None)

    def open(self, uri: str = URI, text: str = SOURCE) -> None:
        self.workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        self.warmer.did_open(self.workspace, uri)

    def move(self, position: types.Position, uri: str = URI) -> None:
        self.warmer.did_change_cursor(self.workspace, cursor(uri, position))

    def cursor_after_typing(self, at: types.Position, text: str, uri: str = URI) -> types.Position:
        """Insert `text` at `at` as the editor would tell the server; the cursor after it."""
        document = self.workspace.get_text_document(uri)
        self.workspace.update_text_document(
            types.VersionedTextDocumentIdentifier(uri=uri, version=document.version + 1),
            types.TextDocumentContentChangePartial(range=types.Range(at, at), text=text))
        self.warmer.did_change()
        lines = text.split("\n")
        return types.Position(line=at.line + len(lines) - 1,
                              character=(at.character if len(lines) == 1 else 0) + len(lines[-1]))

    async def complete(self, position: types.Position, uri: str = URI):
        await self.service.complete(self.workspace, params(uri, position))
        return self.service.telemetry.recent[-1]

    def warms(self, outcome: str | None = None, line: int | None = None) -> list:
        return [r for r in self.warmer.records
                if (outcome is None or r.outcome == outcome) and (line is None or r.line == line)]

    async def wait_warms(self, count: int, outcome: str = "warmed") -> list:
        return await until(lambda: len(self.warms(outcome)) >= count and self.warms(outcome), f"{count} warm(s)")


@pytest.fixture(autouse=True)
def no_idle_warms(monkeypatch):
    """Only the idle test wants idle warms: elsewhere a slow machine must not add one."""
    monkeypatch.setattr(warming, "IDLE_S", 3600.0)


@pytest.fixture
def session(verifier):
    """A ready service on a fresh engine: a cold cache."""
    service = CompletionService(SETTINGS, notify=lambda method, params: None, log_message=lambda text, kind: None)
    service.backend, service.state = LocalBackend(new_engine(verifier)), "ready"
    yield Session(service)
    service.shutdown()


async def until(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
    return value


async def settle() -> None:
    """Long enough for a debounced warm to have started, had one been due."""
    await asyncio.sleep(warming.DEBOUNCE_S * 3)


def assert_cache_consistent(engine) -> None:
    kv = engine.decoder.kv
    assert all(layer.keys.shape[-2] == len(kv) for layer in kv.cache.layers if layer.is_initialized)


async def test_a_cursor_jump_is_warmed_so_the_next_completion_feeds_one_token(session):
    session.open()
    session.move(DEEP)
    warmed, = await session.wait_warms(1)
    assert (warmed.line, warmed.trigger) == (DEEP.line, "cursor") and warmed.fed_tokens > 300  # the window, cold
    record = await session.complete(DEEP)
    assert record.source == "model"
    assert record.prefill_tokens == 1, record  # the prompt's last token, fed with the first draft
    assert record.reused_tokens == record.prompt_tokens - 1
    # The same jump without a warm pays for the whole window.
    cold = await session.complete(types.Position(line=300, character=4))
    assert cold.prefill_tokens > 300, cold
    await settle()
    assert not session.warms(line=300), "a completion at a spot warms it: no warm needed there"


async def test_only_a_move_to_another_line_or_document_warms(session):
    session.open()
    session.move(DEEP)  # inside didOpen's debounce: replaces its warm at the start
    await session.wait_warms(1)
    for character in (0, 8, 12):  # along the same line: the cache holds it already
        session.move(types.Position(line=DEEP.line, character=character))
        await settle()
    assert len(session.warms()) == 1
    for line in (100, 101, 102, 400):  # moves inside the debounce: one warm, where the cursor rested
        session.move(types.Position(line=line, character=4))
    await session.wait_warms(2)
    await settle()
    assert [(r.line, r.outcome) for r in session.warms()] == [(DEEP.line, "warmed"), (400, "warmed")]


async def test_did_open_warms_at_the_last_known_cursor_else_the_start(session):
    session.open()
    first, = await session.wait_warms(1)
    assert (first.uri, first.line, first.trigger) == (URI, 0, "open")
    await session.complete(DEEP)  # the server now knows where this document's cursor is
    session.warmer.did_close(URI)
    session.open("file:///w/other.py", "x = 1\n" * 50)
    await session.wait_warms(2)
    session.open()  # opened again: warmed where the user left it
    *_, again = await session.wait_warms(3)
    assert (again.uri, again.line, again.trigger) == (URI, DEEP.line, "open")
    assert again.fed_tokens > 300  # the other document had evicted it


async def test_a_document_opened_in_the_background_is_not_warmed(session):
    """Editors open documents the user is not looking at; where the client said the user
    works wins over a guess."""
    session.open()
    session.move(DEEP)
    await session.wait_warms(1)
    session.open("file:///w/peeked.py", "y = 2\n" * 50)
    await settle()
    assert [r.uri for r in session.warms()] == [URI]


async def test_typing_on_to_another_line_is_not_a_jump(session):
    """Enter after a completion moves the cursor to a new line, but the anchored prompt serves
    it, and the decode going on after that completion's answer must not be cut short."""
    session.open()
    await session.wait_warms(1)
    await session.complete(DEEP)
    at = DEEP
    for typed in ("x = 1", "\n", "    y"):  # typed at the cursor, as the editor reports it
        at = session.cursor_after_typing(at, typed)
    assert at.line == DEEP.line + 1
    session.move(at)
    await settle()
    assert len(session.warms()) == 1 and session.warmer.covered.line == at.line
    session.move(types.Position(line=DEEP.line + 40, character=0))  # a jump: warmed
    *_, jump = await session.wait_warms(2)
    assert jump.line == DEEP.line + 40


async def test_a_jump_cancels_decoding_on_for_the_spot_left(session):
    session.open()
    await session.wait_warms(1)
    decoding_on = threading.Event()

    def decode_on(cancel: threading.Event) -> bool:  # stands for the decode going on after an answer
        decoding_on.set()
        return cancel.wait(30)

    job = asyncio.ensure_future(session.service.scheduler.run("file:///w/module.py", decode_on, background=True))
    await until(decoding_on.is_set, "the background job to run")
    session.move(DEEP)
    assert await asyncio.wait_for(job, 30) is True, "cancelled by the warm"
    *_, warmed = await session.wait_warms(2)
    assert warmed.line == DEEP.line


async def test_no_warm_before_the_models_are_ready_then_one_when_they_are(session):
    service = session.service
    service.state = "loading"
    session.open()
    session.move(DEEP)
    await settle()
    assert not session.warms() and len(service.backend.engine.decoder.kv) == 0
    service.state = "ready"
    service.warmer.engine_ready()
    warmed, = await session.wait_warms(1)
    assert (warmed.line, warmed.trigger) == (DEEP.line, "ready")


async def test_a_warm_owed_is_made_when_the_server_goes_idle(session, monkeypatch):
    """A warm that went stale before it started (the user typed) is made once all is quiet."""
    monkeypatch.setattr(warming, "IDLE_S", 0.3)
    release = threading.Event()
    busy = asyncio.ensure_future(session.service.scheduler.call(lambda: release.wait(30)))
    session.open()
    session.move(DEEP)
    await until(lambda: session.warmer.pending, "the warm to be queued")
    session.workspace.update_text_document(
        types.VersionedTextDocumentIdentifier(uri=URI, version=2),
        types.TextDocumentContentChangePartial(range=types.Range(DEEP, DEEP), text="x"))
    session.warmer.did_change()
    release.set()
    await busy
    await until(lambda: session.warms("superseded"), "the stale warm to be dropped")
    warmed, = await session.wait_warms(1)
    assert (warmed.line, warmed.trigger) == (DEEP.line, "idle")


async def test_switched_off_binary_and_huge_documents_are_not_warmed(session):
    service = session.service
    service.settings = Settings(drafter="lookup", warm=False)
    session.open()
    session.move(DEEP)
    await settle()
    assert not session.warms()
    service.settings = SETTINGS
    for name, text in (("blob.py", "abc\x00\x01" * 1000), ("huge.py", "x = 1\n" * (warming.MAX_WARM_CHARS // 6 + 1))):
        session.open(f"file:///w/{name}", text)
        session.move(types.Position(line=0, character=2), uri=f"file:///w/{name}")
        await settle()
    assert not session.warms() and service.warmer.counts["skipped"] == 2
    assert len(service.backend.engine.decoder.kv) == 0


async def test_malformed_cursor_notifications_are_ignored(session):
    session.open()
    await session.wait_warms(1)
    for bad in (None, {}, {"textDocument": {"uri": 3}, "position": {"line": 1, "character": 0}},
                {"textDocument": {"uri": URI}, "position": {"line": -1, "character": 0}},
                {"textDocument": {"uri": URI}, "position": {"line": "2", "character": 0}},
                cursor("file:///w/unknown.py", DEEP), cursor(URI, types.Position(line=10**6, character=0))):
        session.warmer.did_change_cursor(session.workspace, bad)
        await settle()
    assert len(session.warms()) == 1
    assert session.warmer.counts["skipped"] == 2  # the unknown document and the line past its end


class LayerLog:
    """Slows every decoder layer down and logs it, so a warm is long and the moment a request
    starts can be placed between layers."""

    def __init__(self, engine, seconds: float) -> None:
        self.events: list[str] = []
        self.seconds = seconds
        layers = engine.verifier.model.model.layers
        self.handles = [layer.register_forward_pre_hook(self.layer) for layer in layers]
        complete = engine.complete

        def logged_complete(*args, **kwargs):
            self.events.append("request starts")
            return complete(*args, **kwargs)

        engine.complete = logged_complete

    def layer(self, module, args) -> None:
        self.events.append("layer")
        time.sleep(self.seconds)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


async def test_a_real_request_waits_for_at_most_one_layer_of_a_warm(session):
    session.open()
    await session.wait_warms(1)
    log = LayerLog(session.service.backend.engine, seconds=0.05)
    try:
        session.move(DEEP)
        await until(lambda: log.events.count("layer") >= 3, "the warm to be a few layers in")
        log.events.append("request sent")
        record = await session.complete(types.Position(line=300, character=4))
    finally:
        log.remove()
    sent, started = log.events.index("request sent"), log.events.index("request starts")
    assert started > sent and log.events[sent + 1:started].count("layer") <= 1, log.events
    warm, = session.warms(line=DEEP.line)
    assert warm.outcome == "cancelled" and 0 < warm.fed_tokens < 300, warm  # the chunks it finished
    assert record.source == "model" and record.stop_reason != "cancelled"


@pytest.mark.parametrize("where", ["same spot", "elsewhere"])
async def test_a_cancelled_warm_leaves_the_cache_exact(session, verifier, where):
    """The request after a warm cut short between layers decodes exactly what an engine gives
    whose warm ran to its end: what the cancelled pass half-wrote is gone. A request on the
    warm's own line joins it instead (queues behind it): the same text, no work thrown away."""
    session.open()
    await session.wait_warms(1)
    target = DEEP if where == "same spot" else types.Position(line=300, character=4)
    log = LayerLog(session.service.backend.engine, seconds=0.02)
    try:
        session.move(DEEP)
        await until(lambda: log.events.count("layer") >= 3, "the warm to be a few layers in")
        answer = await session.service.complete(session.workspace, params(URI, target))
    finally:
        log.remove()
    assert session.warms(line=DEEP.line)[0].outcome == ("warmed" if where == "same spot" else "cancelled")
    assert session.service.warmer.counts["joined"] == (where == "same spot")
    kv = session.service.backend.engine.decoder.kv
    assert all(layer.keys.shape[-2] == len(kv) for layer in kv.cache.layers if layer.is_initialized)

    reference = new_engine(verifier)
    document = session.workspace.get_text_document(URI)

    def request_at(position: types.Position) -> CompletionRequest:
        offset = document.offset_at_position(position)
        return CompletionRequest(prefix=SOURCE[:offset], suffix=SOURCE[offset:], path="/w/module.py",
                                 language="python", max_new_tokens=SETTINGS.max_new_tokens, multiline=False)

    reference.warm(request_at(types.Position(0, 0)))
    assert reference.warm(request_at(DEEP)) > 300
    expected = reference.complete(request_at(target))
    # The prompt and the output but its last token (then the look-ahead past a finished line, if any).
    assert kv.tokens[:len(reference.decoder.kv)] == reference.decoder.kv.tokens
    assert [item.insert_text for item in answer.items] == ([expected.text] if expected.text else [])


def test_cursor_params_are_parsed_from_dicts_and_pygls_objects():
    Object = namedtuple("Object", ["textDocument", "position"])  # how pygls hands over custom params
    TextDocument, Position = namedtuple("Object", ["uri"]), namedtuple("Object", ["line", "character"])
    position = types.Position(line=3, character=7)
    assert warming.parse_cursor(cursor("file:///a.py", position)) == ("file:///a.py", position)
    assert warming.parse_cursor(Object(TextDocument("file:///a.py"), Position(3, 7))) == ("file:///a.py", position)
    assert warming.parse_cursor(cursor("file:///a.py", position) | {"position": {"line": True, "character": 0}}) is None
    assert warming.parse_cursor("nonsense") is None

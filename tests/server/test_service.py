"""CompletionService in-process: a real workspace, a real tiny model, no server, no subprocess.

What the LSP handlers do in a few lines each is driven here directly: loading, answering,
typing through a shown completion, the editor's accept/show/close events, bad input.
"""

from __future__ import annotations

import pytest
from lsprotocol import types
from pygls.workspace import Workspace

from lsp_server.answering.service import CompletionService
from lsp_server.workspace.settings import Settings

pytestmark = pytest.mark.timeout(300)

URI = "file:///project/calc.py"
TEXT = "def mul(a, b):\n    return \n"


class Editor:
    """The client side of the service: a workspace it edits, and what the service sends it."""

    def __init__(self) -> None:
        self.workspace = Workspace(None)
        self.notifications: list[tuple[str, dict]] = []
        self.messages: list[tuple[str, int]] = []

    def open(self, uri: str, text: str, language_id: str = "python") -> None:
        self.workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text))

    def type(self, uri: str, line: int, character: int, text: str) -> None:
        document = self.workspace.get_text_document(uri)
        here = types.Position(line, character)
        self.workspace.update_text_document(
            types.VersionedTextDocumentIdentifier(uri=uri, version=document.version + 1),
            types.TextDocumentContentChangePartial(range=types.Range(here, here), text=text))

    @staticmethod
    def params(uri: str, line: int, character: int) -> types.InlineCompletionParams:
        return types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic))

    def states(self) -> list[str]:
        return [params["state"] for method, params in self.notifications if method == "quickdraft/status"]


@pytest.fixture
def editor() -> Editor:
    return Editor()


def make_service(editor: Editor, **settings) -> CompletionService:
    base = Settings(draft="none", drafter="lookup", dtype="float32", budget_ms=60_000.0, max_new_tokens=12)
    return CompletionService(Settings(**{**base.__dict__, **settings}),
                             lambda method, params: editor.notifications.append((method, params)),
                             lambda message, kind: editor.messages.append((message, kind)))


@pytest.fixture
async def service(editor, tiny_model_dir):
    service = make_service(editor, verifier=str(tiny_model_dir))
    await service.load_models()
    yield service
    service.shutdown()


async def complete(service: CompletionService, editor: Editor, uri: str, line: int, character: int) -> list:
    return list((await service.complete(editor.workspace, editor.params(uri, line, character))).items)


async def test_loading_reports_its_states_and_answers_with_an_item(service, editor):
    assert editor.states() == ["loading", "ready"] and service.stats()["state"] == "ready"
    editor.open(URI, TEXT)
    [item] = await complete(service, editor, URI, 1, 11)
    assert item.insert_text and item.range.start == item.range.end == types.Position(1, 11)
    assert item.command.command == "quickdraft.accepted" and item.command.arguments[0]["id"].startswith("qd-")
    stats = service.stats()
    assert stats["counts"]["model"] == 1 and stats["recent"][-1]["prompt_tokens"] > 0
    assert "busy" in editor.states() and editor.states()[-1] == "ready"


async def test_typing_through_the_shown_completion_needs_no_model(service, editor):
    editor.open(URI, TEXT)
    [item] = await complete(service, editor, URI, 1, 11)
    text = item.insert_text
    typed = text[0]
    if typed == "\n" or len(text) < 2:
        pytest.skip("the completion starts with a newline or is one character long")
    editor.type(URI, 1, 11, typed)
    [rest] = await complete(service, editor, URI, 1, 12)
    assert rest.insert_text == text[1:] and rest.range.start == types.Position(1, 12)
    counts = service.stats()["counts"]
    assert counts["typethrough"] == 1 and counts["model"] == 1
    # Typing something else is a new request for the model.
    editor.type(URI, 1, 12, "\x7f" if text[1] != "\x7f" else "#")
    await complete(service, editor, URI, 1, 13)
    assert service.stats()["counts"]["model"] == 2


async def test_the_service_keeps_a_withheld_answer_and_shows_it_as_its_start_is_typed(editor, tiny_model_dir):
    """A threshold between the answer's confidence and that of what follows its first tokens."""
    text = "def mul(a, b):\n    return \n"
    service = make_service(editor, verifier=str(tiny_model_dir), min_confidence=0.0, max_new_tokens=12)
    await service.load_models()
    try:
        editor.open(URI, text)
        [item] = await complete(service, editor, URI, 1, 11)
        mean = service.stats()["recent"][-1]["confidence"]
        for factor in (1.02, 1.1, 1.25, 1.5, 2, 3, 4, 6, 8, 12):
            service.configure({"minConfidence": min(mean * factor, 1.0)})
            answer = await complete(service, editor, URI, 1, 11)
            held = service.shown[URI]
            if not answer and held.show_after:
                break
        else:
            pytest.fail(f"no threshold over {mean:.4f} withholds {item.insert_text!r} with a point to show it from")
        assert held.text == item.insert_text and 0 < held.show_after < len(held.text)
        assert service.stats()["recent"][-1]["withheld"] == "low_confidence"
        # Its unsure start typed, the rest shows without the model.
        models = service.stats()["counts"]["model"]
        editor.type(URI, 1, 11, held.text[: held.show_after])
        [rest] = await complete(service, editor, URI, 1, 11 + held.show_after)
        assert rest.insert_text == held.text[held.show_after:]
        assert service.stats()["counts"]["model"] == models
    finally:
        service.shutdown()


async def test_closing_a_document_forgets_its_shown_completion(service, editor):
    editor.open(URI, TEXT)
    [item] = await complete(service, editor, URI, 1, 11)
    assert URI in service.shown
    service.document_closed(URI)
    assert URI not in service.shown
    service.document_closed("file:///never/opened.py")  # harmless


async def test_the_editors_accept_show_and_partial_accept_events(service, editor):
    editor.open(URI, TEXT)
    [item] = await complete(service, editor, URI, 1, 11)
    item_id = item.command.arguments[0]["id"]
    service.item_shown(item_id)
    service.item_partially_accepted(item_id, 2)
    service.item_accepted(item_id)
    stats = service.stats()
    assert (stats["shown"], stats["partiallyAccepted"], stats["accepted"], stats["userAcceptance"]) == (1, 1, 1, 1.0)


async def test_bad_input_gets_an_empty_answer(service, editor):
    assert await complete(service, editor, "file:///not/open.py", 0, 0) == []
    editor.open(URI, TEXT)
    assert await complete(service, editor, URI, 40, 0) == []  # past the last line
    editor.open("file:///blob.py", "abc\x00\x01" * 100)
    assert await complete(service, editor, "file:///blob.py", 0, 3) == []
    editor.open("file:///notes.md", "# notes\n", language_id="markdown")
    service.configure({"disabledLanguages": ["markdown"]})
    assert await complete(service, editor, "file:///notes.md", 1, 0) == []
    assert service.stats()["counts"]["model"] == 0 and service.stats()["counts"]["empty"] == 2


async def test_a_model_that_fails_to_load_is_reported_and_nothing_is_answered(editor, tmp_path):
    service = make_service(editor, verifier=str(tmp_path / "missing-model"))
    try:
        await service.load_models()
        assert editor.states() == ["loading", "error"]
        assert service.stats()["state"] == "error" and "missing-model" in service.stats()["error"]
        assert any("missing-model" in message for message, _ in editor.messages)
        editor.open(URI, TEXT)
        assert await complete(service, editor, URI, 1, 11) == []
    finally:
        service.shutdown()


async def test_a_budget_change_keeps_the_models_and_a_drafter_change_reuses_them(service, editor):
    engine = service.backend.engine
    service.configure({"prefixTokens": 64})
    assert service.backend.engine is engine and engine.context_budget.prefix_tokens == 64
    service.configure({"drafter": "none"})
    await service._load_task
    assert service.backend.engine is engine and engine.drafter_mode == "none"

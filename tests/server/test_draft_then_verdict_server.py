"""The draft shown before the verdict, through the completion service (in-process, tiny float32 pair).

The draft model's answer is the request's; the verifier's verdict is kept in its place and, where it is
not the text on screen, the client is told it is ready and asking again gets it without a model run. A
verdict that is the text shown tells nobody; one that comes after the user typed on is kept, untold.
"""

from __future__ import annotations

import shutil

import pytest

from test_ready import Gate, ready, ready_params, texts, until
from test_service import Editor, complete, make_service

pytestmark = pytest.mark.timeout(300)

URI = "file:///project/calc.py"
TEXT = "def mul(a, b):\n    return \n"
LINE, CHARACTER = 1, 11
SETTINGS = dict(multiline="never", drafter="hybrid", show_draft_first=True)


async def answer_alone(model_dir) -> list[str]:
    editor = Editor()
    service = make_service(editor, verifier=str(model_dir), multiline="never")
    await service.load_models()
    editor.open(URI, TEXT)
    try:
        return texts(await complete(service, editor, URI, LINE, CHARACTER))
    finally:
        service.shutdown()


@pytest.fixture
async def shown_first(tiny_model_dir, tiny_draft_dir):
    editor = Editor()
    service = make_service(editor, verifier=str(tiny_model_dir), draft=str(tiny_draft_dir), **SETTINGS)
    await service.load_models()
    assert service.state == "ready", service.error
    yield service, editor
    service.shutdown()


async def test_the_draft_shows_then_the_verdict_replaces_it_through_the_ready_notification(
        shown_first, tiny_model_dir, tiny_draft_dir):
    service, editor = shown_first
    draft_alone, verifier_alone = await answer_alone(tiny_draft_dir), await answer_alone(tiny_model_dir)
    assert draft_alone != verifier_alone  # else this test could not tell the two apart
    editor.open(URI, TEXT)
    assert texts(await complete(service, editor, URI, LINE, CHARACTER)) == draft_alone
    await until(lambda: ready(editor), "the verdict's ready notification")
    assert ready(editor) == [ready_params(URI, 1, LINE, CHARACTER)]
    models = service.telemetry.counts["model"]
    assert texts(await complete(service, editor, URI, LINE, CHARACTER)) == verifier_alone
    assert service.telemetry.recent[-1].source == "kept" and service.telemetry.counts["model"] == models
    verdicts = service.stats()["verdicts"]
    assert verdicts["provisional"] == 1 and verdicts["replaced"] + verdicts["extended"] == 1
    assert verdicts["unseen"] == 0 and service.stats()["backend"]["shown_first"] == str(tiny_draft_dir)


async def test_a_verdict_that_is_the_text_shown_tells_nobody(tiny_model_dir, tmp_path):
    same = shutil.copytree(tiny_model_dir, tmp_path / "same-weights")  # the verifier's twin as its draft
    editor = Editor()
    service = make_service(editor, verifier=str(tiny_model_dir), draft=str(same), **SETTINGS)
    await service.load_models()
    try:
        editor.open(URI, TEXT)
        shown = texts(await complete(service, editor, URI, LINE, CHARACTER))
        await until(lambda: service.telemetry.verdicts.confirmed, "the verdict")
        assert shown and ready(editor) == [] and service.telemetry.verdicts.replaced == 0
    finally:
        service.shutdown()


async def test_a_verdict_after_the_user_typed_on_is_kept_untold(shown_first):
    service, editor = shown_first
    gate = Gate(service.backend.engine)  # holds the verifier: the verdict waits while the user types
    try:
        editor.open(URI, TEXT)
        await complete(service, editor, URI, LINE, CHARACTER)
        await until(gate.entered.is_set, "the verdict's first forward")
        editor.type(URI, LINE, CHARACTER, "a")
    finally:
        gate.remove()
    await until(lambda: service.telemetry.verdicts.unseen, "the verdict")
    assert ready(editor) == []


async def test_showing_the_draft_first_without_a_draft_model_says_why(tiny_model_dir):
    editor = Editor()
    service = make_service(editor, verifier=str(tiny_model_dir), draft="none", show_draft_first=True)
    await service.load_models()
    try:
        assert service.state == "error" and "needs a draft model" in service.error
        editor.open(URI, TEXT)
        assert await complete(service, editor, URI, LINE, CHARACTER) == []
    finally:
        service.shutdown()


async def test_past_the_budget_the_draft_shows_when_it_is_there_and_the_verdict_after_it(
        tiny_model_dir, tiny_draft_dir):
    """A 1 ms budget: answered empty in time; the draft model's text is told of when it is there,
    then the verdict, each through the ready notification."""
    verifier_alone = await answer_alone(tiny_model_dir)
    editor = Editor()
    service = make_service(editor, verifier=str(tiny_model_dir), draft=str(tiny_draft_dir), budget_ms=1.0,
                           prefix_tokens=2048, cold_prefix_tokens=0, **SETTINGS)
    await service.load_models()
    try:
        editor.open(URI, TEXT)
        assert await complete(service, editor, URI, LINE, CHARACTER) == []
        await until(lambda: service.telemetry.verdicts.replaced + service.telemetry.verdicts.extended, "the verdict")
        assert service.telemetry.verdicts.provisional == 1
        assert ready(editor) and set(map(str, ready(editor))) == {str(ready_params(URI, 1, LINE, CHARACTER))}
        assert texts(await complete(service, editor, URI, LINE, CHARACTER)) == verifier_alone
        assert service.telemetry.recent[-1].source == "kept"
    finally:
        service.shutdown()

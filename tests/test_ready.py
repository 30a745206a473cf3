"""The budget on a cold file: answered in time (empty), then quickdraft/completionReady, then the
kept answer — the very text a request with all the time it wants gets — without a model pass."""

from __future__ import annotations

import asyncio
import time

import pytest

from lsp_server.service import READY_NOTIFICATION
from tests.test_service import Editor, complete, make_service

pytestmark = pytest.mark.timeout(300)

URI = "file:///project/cold.py"
# A long file: its cold prompt takes many prefill chunks, so a 1 ms budget ends inside them.
TEXT = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(60)) + "def mul(a, b):\n    return \n"
LINE, CHARACTER = TEXT.count("\n") - 1, 11


async def until(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def ready(editor: Editor) -> list[dict]:
    return [params for method, params in editor.notifications if method == READY_NOTIFICATION]


@pytest.fixture
async def services(tiny_model_dir):
    """A server with a 1 ms budget and one with a minute, on the same tiny model."""
    made = []
    for budget_ms in (1.0, 60_000.0):
        editor = Editor()
        service = make_service(editor, verifier=str(tiny_model_dir), budget_ms=budget_ms, prefix_tokens=2048)
        await service.load_models()
        made.append((service, editor))
    yield made
    for service, _ in made:
        service.shutdown()


async def test_a_cold_file_is_answered_in_time_then_ready_with_the_late_answers_text(services):
    (quick, editor), (patient, patient_editor) = services
    editor.open(URI, TEXT)
    patient_editor.open(URI, TEXT)
    expected = await complete(patient, patient_editor, URI, LINE, CHARACTER)
    assert expected and expected[0].insert_text

    assert await complete(quick, editor, URI, LINE, CHARACTER) == []  # in time, nothing verified yet
    first = quick.telemetry.recent[-1]
    assert first.source == "model" and first.stop_reason == "deadline"
    await until(lambda: ready(editor), "the ready notification")
    assert ready(editor) == [{"textDocument": {"uri": URI, "version": 1}, "position": {"line": LINE, "character": CHARACTER}}]

    models_before = quick.telemetry.counts["model"]
    again = await complete(quick, editor, URI, LINE, CHARACTER)
    assert [item.insert_text for item in again] == [item.insert_text for item in expected]
    assert quick.telemetry.recent[-1].source == "kept" and quick.telemetry.counts["model"] == models_before


async def test_no_ready_for_a_version_that_changed_or_a_closed_document(services):
    (quick, editor), _ = services
    # Every forward a little slow: the background decode outlasts the edit and the close below.
    slow = quick.engine.verifier.model.model.layers[0].register_forward_pre_hook(lambda *_: time.sleep(0.02))
    try:
        editor.open(URI, TEXT)
        assert await complete(quick, editor, URI, LINE, CHARACTER) == []
        editor.type(URI, LINE, CHARACTER, "a")  # the user typed on while the answer was decoded
        other = "file:///project/closed.py"
        editor.open(other, TEXT)
        assert await complete(quick, editor, other, LINE, CHARACTER) == []
        quick.document_closed(other)
        editor.workspace.remove_text_document(other)
        await until(lambda: not any(quick.scheduler._latest.values()), "the work to end")
    finally:
        slow.remove()
    assert ready(editor) == [] and other not in quick.shown
    assert quick.telemetry.counts.get("ready", 0) == 0
    # A later request is served as usual, and its own ready notification follows.
    assert await complete(quick, editor, URI, LINE, CHARACTER + 1) == []
    await until(lambda: ready(editor), "the ready notification")
    assert ready(editor)[0]["textDocument"] == {"uri": URI, "version": 2}


async def test_fifty_jumps_a_second_warm_once_and_a_request_still_answers(services):
    (quick, editor), _ = services
    editor.open(URI, TEXT)
    for line in range(50):
        quick.warmer.did_change_cursor(editor.workspace, {"textDocument": {"uri": URI},
                                                          "position": {"line": line, "character": 0}})
        await asyncio.sleep(0.02)
    warms = quick.warmer.counts
    await until(lambda: warms["warmed"] + warms["cancelled"] >= 1 and quick.warmer.pending is None, "the warm")
    assert warms["warmed"] + warms["cancelled"] + warms["superseded"] == 1  # the cursor's last rest only
    assert quick.warmer.records[-1].line == 49
    assert await complete(quick, editor, URI, LINE, CHARACTER) == []  # 1 ms: in time, and nothing verified
    await until(lambda: ready(editor), "the ready notification")

"""The budget on a cold file: answered in time (empty), then quickdraft/completionReady, then the
kept answer — the very text a request with all the time it wants gets — without a model pass.

And the bad cases around it: a version that changed or a document closed while the answer was
decoded on (no notification, no stale ghost text), a client that never asks again (nothing
grows), fifty cursor jumps a second (warmed once), a request that joins the warm on its line.

In-process, on the tiny float32 model. Where a test must act while the engine works, a `Gate`
holds the engine's worker inside a forward (at its first decoder layer) until the test lets it
go: no sleeps, no race with the machine's speed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest

from lsp_server.answering import warming
from lsp_server.answering.model_runs import READY_NOTIFICATION
from lsp_server.answering.warming import Spot
from test_service import Editor, complete, make_service

pytestmark = pytest.mark.timeout(300)

URI = "file:///project/cold.py"
OTHER = "file:///project/other.py"
# A long file: its cold prompt takes many prefill chunks, so a 1 ms budget ends inside them.
TEXT = "".join(f"def f{i}(a, b):\n    return a * {i} + b\n\n" for i in range(60)) + "def mul(a, b):\n    return \n"
LINE, CHARACTER = TEXT.count("\n") - 1, 11
PATIENT_MS = 60_000.0


async def until(predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
    return value


def ready(editor: Editor) -> list[dict]:
    return [params for method, params in editor.notifications if method == READY_NOTIFICATION]


def ready_params(uri: str, version: int, line: int, character: int) -> dict:
    return {"textDocument": {"uri": uri, "version": version}, "position": {"line": line, "character": character}}


def cursor(uri: str, line: int, character: int = 0) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


def texts(items) -> list[str]:
    return [item.insert_text for item in items]


class Gate:
    """Holds the engine's worker at the first decoder layer of its next forward (once `when()`
    holds, if given) until released."""

    def __init__(self, engine, when=None) -> None:
        self.entered, self.released = threading.Event(), threading.Event()
        self.forwards = 0  # forwards that reached the first layer
        self.when = when
        self.handle = engine.verifier.model.model.layers[0].register_forward_pre_hook(self.hold)

    def hold(self, module, args) -> None:
        if self.when is not None and not self.when():
            return
        self.forwards += 1
        self.entered.set()
        if not self.released.wait(60):
            raise TimeoutError("the test never released the gate")

    def remove(self) -> None:
        self.released.set()
        self.handle.remove()


class Results:
    """What the engine returned to the service's jobs (background decodes included)."""

    def __init__(self, engine) -> None:
        self.results: list = []
        complete = engine.complete

        def recorded(*args, **kwargs):
            result = complete(*args, **kwargs)
            self.results.append(result)
            return result

        engine.complete = recorded


@pytest.fixture(autouse=True)
def no_idle_warms(monkeypatch):
    """No idle warm may cut a background decode short while a test waits for it."""
    monkeypatch.setattr(warming, "IDLE_S", 3600.0)


@pytest.fixture
async def services(tiny_model_dir):
    """A server with a 1 ms budget and one with a minute, on the same tiny model."""
    made = []
    for budget_ms in (1.0, PATIENT_MS):
        editor = Editor()
        # The whole window cold (no short first window): many prefill chunks for the deadline to land in.
        service = make_service(editor, verifier=str(tiny_model_dir), budget_ms=budget_ms, prefix_tokens=2048,
                               cold_prefix_tokens=0)
        await service.load_models()
        made.append((service, editor))
    yield made
    for service, _ in made:
        service.shutdown()


async def patient_answer(patient, patient_editor: Editor, uri: str, line: int, character: int,
                         edit: tuple[int, int, str] | None = None) -> list[str]:
    """What a request with all the time it wants gets at that spot (after `edit`, if any)."""
    patient_editor.open(uri, TEXT)
    if edit is not None:
        patient_editor.type(uri, *edit)
    expected = texts(await complete(patient, patient_editor, uri, line, character))
    assert patient.telemetry.recent[-1].stop_reason not in ("deadline", "cancelled")
    return expected


async def answered_empty_then_held(quick, editor: Editor) -> tuple["Results", "Gate"]:
    """Open the file, ask (answered empty at the 1 ms deadline), and hold the background decode
    inside its next forward: what the test does then lands while the work is in flight."""
    results, gate = Results(quick.backend.engine), Gate(quick.backend.engine)
    editor.open(URI, TEXT)
    assert await complete(quick, editor, URI, LINE, CHARACTER) == []
    await until(gate.entered.is_set, "the background decode to be in a forward")
    return results, gate


def be_patient(service) -> None:
    """From now on the quick server has all the time it wants (its kept answers stay)."""
    service.settings = replace(service.settings, budget_ms=PATIENT_MS)


async def test_a_multi_line_answer_is_ready_at_its_first_whole_line_then_whole(services):
    (quick, editor), (patient, patient_editor) = services
    for service in (quick, patient):
        service.settings = replace(service.settings, multiline="always", max_new_tokens=40)
    line, character = 20, 0  # a blank line between two functions: the tiny model writes a line, then more
    [expected] = await patient_answer(patient, patient_editor, URI, line, character)
    first_line, rest = expected.split("\n", 1) if "\n" in expected else (expected, "")
    assert first_line.strip() and rest.strip()  # the spot still gets a multi-line answer from the tiny model
    kept_when_told: list[str] = []
    notify = quick.notify

    def told(method: str, params: dict) -> None:
        if method == READY_NOTIFICATION:
            kept_when_told.append(quick.shown[URI].text)
        notify(method, params)

    quick.notify = told

    editor.open(URI, TEXT)
    assert await complete(quick, editor, URI, line, character) == []  # in time, nothing verified yet
    await until(lambda: quick.telemetry.counts.get("continued"), "the background decode to end")
    first, whole = kept_when_told
    assert first.strip() and expected.startswith(first + "\n")  # told at a whole line, before the rest
    assert whole == expected and ready(editor) == [ready_params(URI, 1, line, character)] * 2
    assert texts(await complete(quick, editor, URI, line, character)) == [expected]
    assert quick.telemetry.recent[-1].source == "kept"


async def test_a_cold_file_is_answered_in_time_then_ready_with_the_late_answers_text(services):
    (quick, editor), (patient, patient_editor) = services
    expected = await patient_answer(patient, patient_editor, URI, LINE, CHARACTER)
    assert expected and expected[0]

    editor.open(URI, TEXT)
    assert await complete(quick, editor, URI, LINE, CHARACTER) == []  # in time, nothing verified yet
    first = quick.telemetry.recent[-1]
    assert first.source == "model" and first.stop_reason == "deadline"
    await until(lambda: ready(editor), "the ready notification")
    assert ready(editor) == [ready_params(URI, 1, LINE, CHARACTER)]
    assert quick.telemetry.counts["ready"] == 1

    models_before = quick.telemetry.counts["model"]
    again = await complete(quick, editor, URI, LINE, CHARACTER)
    assert texts(again) == expected  # fp32: the very text of the late answer
    assert quick.telemetry.recent[-1].source == "kept" and quick.telemetry.counts["model"] == models_before
    assert quick.telemetry.counts["kept"] == 1


async def test_no_ready_for_a_version_that_changed_and_a_new_version_unlike_it_runs_the_model(services):
    (quick, editor), (patient, patient_editor) = services
    results, gate = await answered_empty_then_held(quick, editor)
    try:
        editor.type(URI, LINE, CHARACTER, "a")  # the user typed on while the answer was decoded
        gate.released.set()
        await until(lambda: quick.telemetry.counts.get("continued"), "the background decode to end")
    finally:
        gate.remove()
    # It ran to its end and found text (a notification would have been due but for the edit).
    [decoded] = results.results
    assert decoded.stop_reason not in ("deadline", "cancelled") and decoded.text
    assert ready(editor) == [] and quick.telemetry.counts.get("ready", 0) == 0
    # Kept at the answer's spot: typing through checks it against the text, and "a" is not what it says.
    assert quick.shown[URI].text == decoded.text and not decoded.text.startswith("a")

    # The re-ask at the new version is a model request like any other, with the patient one's text.
    be_patient(quick)
    expected = await patient_answer(patient, patient_editor, URI, LINE, CHARACTER + 1, edit=(LINE, CHARACTER, "a"))
    models_before = quick.telemetry.counts["model"]
    again = await complete(quick, editor, URI, LINE, CHARACTER + 1)
    record = quick.telemetry.recent[-1]
    assert (record.source, record.id) == ("model", "2") and record.stop_reason not in ("deadline", "cancelled")
    assert quick.telemetry.counts["model"] == models_before + 1
    assert texts(again) == expected


async def test_typing_what_the_decode_writes_follows_it_instead_of_cancelling_it(services):
    (quick, editor), (patient, patient_editor) = services
    [expected] = await patient_answer(patient, patient_editor, URI, LINE, CHARACTER)
    assert len(expected) > 3
    results = Results(quick.backend.engine)
    written = lambda: getattr(quick.decode_on.get(URI), "text", "")  # noqa: E731
    gate = Gate(quick.backend.engine, when=lambda: len(written()) >= 2)
    editor.open(URI, TEXT)
    try:
        assert await complete(quick, editor, URI, LINE, CHARACTER) == []  # in time, nothing verified yet
        await until(gate.entered.is_set, "the background decode to have written two characters")
        typed = expected[:2]
        assert written().startswith(typed)
        editor.type(URI, LINE, CHARACTER, typed)  # the user types what it writes
        models = quick.telemetry.counts["model"]
        assert await complete(quick, editor, URI, LINE, CHARACTER + 2) == []  # 1 ms: empty, but following it
        assert quick.telemetry.recent[-1].source == "followed" and quick.telemetry.counts["model"] == models
        gate.released.set()
        await until(lambda: quick.telemetry.counts.get("continued"), "the background decode to end")
    finally:
        gate.remove()
    [decoded] = results.results  # one engine run: the follower did not cancel it and start over
    assert decoded.stop_reason not in ("deadline", "cancelled")
    assert ready(editor)[-1] == ready_params(URI, 2, LINE, CHARACTER + 2)  # told at the follower's spot
    again = await complete(quick, editor, URI, LINE, CHARACTER + 2)
    assert texts(again) == [expected[2:]]  # fp32: the rest of the very text a patient request gets
    assert quick.telemetry.recent[-1].source == "typethrough" and quick.telemetry.counts["model"] == models


async def test_a_request_the_client_cancels_decodes_on_for_the_keys_that_follow(services):
    (quick, editor), (patient, patient_editor) = services
    [expected] = await patient_answer(patient, patient_editor, URI, LINE, CHARACTER)
    be_patient(quick)
    results, gate = Results(quick.backend.engine), Gate(quick.backend.engine)
    editor.open(URI, TEXT)
    try:
        first = asyncio.ensure_future(complete(quick, editor, URI, LINE, CHARACTER))
        await until(gate.entered.is_set, "the request to be in a forward")
        first.cancel()  # $/cancelRequest: the user typed on
        with pytest.raises(asyncio.CancelledError):
            await first
        editor.type(URI, LINE, CHARACTER, expected[0])
        follower = asyncio.ensure_future(complete(quick, editor, URI, LINE, CHARACTER + 1))
        await asyncio.sleep(0.05)  # it waits for the decode rather than starting its own
        gate.released.set()
        assert texts(await follower) == [expected[1:]]
    finally:
        gate.remove()
    assert quick.telemetry.recent[-1].source == "followed"
    [decoded] = results.results  # one engine run, for both requests
    assert decoded.text == expected


async def test_a_cancelled_request_that_never_starts_leaves_nothing_to_follow(services):
    (quick, editor), _ = services
    be_patient(quick)
    gate = Gate(quick.backend.engine)
    editor.open(URI, TEXT)
    editor.open(OTHER, TEXT)
    try:
        blocker = asyncio.ensure_future(complete(quick, editor, OTHER, LINE, CHARACTER))
        await until(gate.entered.is_set, "the other document's request to hold the worker")
        queued = asyncio.ensure_future(complete(quick, editor, URI, LINE, CHARACTER))
        await asyncio.sleep(0.05)
        queued.cancel()  # $/cancelRequest while it waits for the worker
        with pytest.raises(asyncio.CancelledError):
            await queued
        assert URI in quick.decode_on  # a decode the next keys may follow, once it runs
        editor.type(URI, LINE, CHARACTER, "x")  # the document moved on: it never will
        gate.released.set()
        await blocker
        await until(lambda: URI not in quick.decode_on, "the job that never started to be let go")
    finally:
        gate.remove()
    await complete(quick, editor, URI, LINE, CHARACTER + 1)
    assert quick.telemetry.recent[-1].source == "model"  # not a follower of a decode that is not there


async def test_closing_the_document_cancels_its_background_decode(services):
    (quick, editor), (patient, patient_editor) = services
    results, gate = await answered_empty_then_held(quick, editor)
    try:
        quick.document_closed(URI)  # what the didClose handler does
        quick.warmer.did_close(URI)
        editor.workspace.remove_text_document(URI)
        gate.released.set()
        # Its figures come from the worker a moment before the scheduler lets the job go: wait for both.
        await until(lambda: quick.telemetry.counts.get("continued") and not quick.scheduler._latest,
                    "the background decode to end")
    finally:
        gate.remove()
    [decoded] = results.results
    assert decoded.stop_reason == "cancelled"
    assert gate.forwards == 1  # stopped inside the forward it was in: no more work for a closed document
    assert ready(editor) == [] and URI not in quick.shown
    assert quick.error == "" and quick.telemetry.counts.get("errors", 0) == 0

    # Another document is served as usual, exactly (the cut prefill left the cache sound).
    be_patient(quick)
    expected = await patient_answer(patient, patient_editor, OTHER, LINE, CHARACTER)
    editor.open(OTHER, TEXT)
    assert texts(await complete(quick, editor, OTHER, LINE, CHARACTER)) == expected
    assert quick.telemetry.recent[-1].source == "model"


async def test_a_client_that_never_asks_again_leaves_nothing_growing(services):
    (quick, editor), (patient, patient_editor) = services
    tasks_before = len(asyncio.all_tasks())
    spots = [(URI, LINE, CHARACTER), (OTHER, LINE, CHARACTER), (URI, LINE - 1, 14), (OTHER, LINE - 3, 21),
             (URI, LINE - 4, 13), (OTHER, LINE - 1, 14)]
    editor.open(URI, TEXT)
    editor.open(OTHER, TEXT)
    for done, (uri, line, character) in enumerate(spots, start=1):
        assert await complete(quick, editor, uri, line, character) == []
        await until(lambda: quick.telemetry.counts.get("continued", 0) == done, "the background decode to end")
    assert ready(editor) and len(ready(editor)) == quick.telemetry.counts["ready"]  # told, and never asked again
    assert set(quick.shown) == {URI, OTHER}  # one kept answer per document, the last one asked there
    assert quick.shown[URI].prefix.endswith("def f59(a, b)") and quick.shown[OTHER].prefix.endswith("def mul(a, b):")
    # The last job's bookkeeping ends just after its result is counted: nothing is left behind.
    await until(lambda: not quick.scheduler._latest and not quick.scheduler._background, "the scheduler to let go")
    assert len(asyncio.all_tasks()) <= tasks_before
    assert len(quick.warmer.positions) == 2

    # A request elsewhere works, exactly as usual.
    be_patient(quick)
    third = "file:///project/third.py"
    expected = await patient_answer(patient, patient_editor, third, LINE, CHARACTER)
    editor.open(third, TEXT)
    assert texts(await complete(quick, editor, third, LINE, CHARACTER)) == expected
    assert set(quick.shown) == {URI, OTHER, third}


async def test_fifty_jumps_a_second_warm_once_and_a_request_still_answers(services):
    (quick, editor), _ = services
    editor.open(URI, TEXT)
    for line in range(50):
        quick.warmer.did_change_cursor(editor.workspace, cursor(URI, line))
        await asyncio.sleep(0.02)  # 50 in a second: never the debounce's rest
    warmer = quick.warmer
    await until(lambda: warmer.records and warmer.records[-1].line == 49 and warmer.pending is None, "the warm")
    warms = warmer.counts
    # The cursor's last rest; a loaded machine that stalls the loop past the debounce once may add one.
    assert warms["warmed"] + warms["cancelled"] + warms["superseded"] <= 2, warms
    assert warmer.records[-1].outcome == "warmed"
    assert await complete(quick, editor, URI, LINE, CHARACTER) == []  # 1 ms: in time, and nothing verified
    await until(lambda: ready(editor), "the ready notification")
    assert ready(editor) == [ready_params(URI, 1, LINE, CHARACTER)]
    assert quick.error == "" and quick.telemetry.counts.get("errors", 0) == 0


async def test_a_request_on_the_warms_line_joins_it_then_ready_follows(services):
    (quick, editor), (patient, patient_editor) = services
    expected = await patient_answer(patient, patient_editor, URI, LINE, CHARACTER)
    gate = Gate(quick.backend.engine)
    try:
        editor.open(URI, TEXT)
        quick.warmer.did_change_cursor(editor.workspace, cursor(URI, LINE, 4))
        await until(gate.entered.is_set, "the warm to be feeding")
        assert quick.warmer.pending == Spot(URI, LINE)
        # The request on that line queues behind the warm, and is answered at its deadline.
        assert await complete(quick, editor, URI, LINE, CHARACTER) == []
        assert quick.telemetry.recent[-1].stop_reason == "deadline"
        assert quick.warmer.counts["joined"] == 1
        gate.released.set()
        await until(lambda: ready(editor), "the ready notification")
    finally:
        gate.remove()
    [warm] = quick.warmer.records
    assert (warm.line, warm.outcome) == (LINE, "warmed") and warm.fed_tokens > 300  # not cancelled: joined
    assert quick.warmer.counts["cancelled"] == 0
    assert ready(editor) == [ready_params(URI, 1, LINE, CHARACTER)]
    again = await complete(quick, editor, URI, LINE, CHARACTER)
    assert texts(again) == expected and quick.telemetry.recent[-1].source == "kept"

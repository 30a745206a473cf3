"""Runs started at an edit, before the client's debounced request, and answers cut to the user's
typing rhythm (lsp_server/answering/anticipation.py, lsp_server/answering/service.py).

In-process, on the tiny float32 model, with the `Gate` of test_ready.py holding the engine's
worker inside a forward wherever a test must act while a run is in flight.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from lsprotocol import types

from lsp_server.answering.anticipation import (MAX_TYPED_CHARS, MIN_RHYTHM_SAMPLES, Anticipation, Edit,
                                     cursor_after_edit, is_keystroke)
from lsp_server.answering.context import locate
from lsp_server.answering.model_runs import MIN_TYPING_BUDGET_S, NEXT_KEY_MARGIN_S
from test_ready import (CHARACTER, LINE, PATIENT_MS, TEXT, URI, Gate, Results, no_idle_warms, patient_answer,  # noqa: F401
                        ready, services, texts, until)
from test_service import Editor, complete

pytestmark = pytest.mark.timeout(300)


def change(uri: str, version: int, start: tuple[int, int], end: tuple[int, int], text: str):
    return types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(*start), types.Position(*end)), text=text)])


def edit(service, editor: Editor, line: int, character: int, text: str, end: tuple[int, int] | None = None):
    """What the server's didChange handler does: the workspace takes the edit, then the service hears of it."""
    document = editor.workspace.get_text_document(URI)
    params = change(URI, document.version + 1, (line, character), end or (line, character), text)
    editor.workspace.update_text_document(params.text_document, params.content_changes[0])
    service.document_changed(editor.workspace, params)


def invoked(uri: str, line: int, character: int) -> types.InlineCompletionParams:
    return types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(line, character),
        context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))


def patient(service) -> None:
    service.settings = replace(service.settings, budget_ms=PATIENT_MS)


# -- where the cursor is after an edit ------------------------------------------------------


def cursor_after(text: str, start, end, typed: str):
    editor = Editor()
    editor.open(URI, text)
    document = editor.workspace.get_text_document(URI)
    params = change(URI, 2, start, end, typed)
    document.apply_change(params.content_changes[0])
    return cursor_after_edit(document, params)


def test_the_cursor_after_typing_enter_a_deletion_and_an_auto_closed_pair():
    text = "def f(a):\n    return a\n"
    assert cursor_after(text, (1, 12), (1, 12), "b") == types.Position(1, 13)
    assert cursor_after(text, (1, 12), (1, 12), "\n    ") == types.Position(2, 4)
    assert cursor_after(text, (1, 4), (1, 12), "") == types.Position(1, 4)  # the line's code deleted
    assert cursor_after(text, (1, 12), (1, 12), "()") == types.Position(1, 13)  # between the pair
    assert cursor_after("x = '😀'\n", (0, 7), (0, 7), "é") == types.Position(0, 8)  # UTF-16 units: 😀 is two


def test_pastes_whole_documents_and_several_changes_are_not_typing():
    text = "def f(a):\n    return a\n"
    assert cursor_after(text, (1, 12), (1, 12), "x" * (MAX_TYPED_CHARS + 1)) is None
    assert cursor_after(text, (1, 12), (1, 12), "a\nb\nc") is None  # two line breaks: a paste
    editor = Editor()
    editor.open(URI, text)
    document = editor.workspace.get_text_document(URI)
    whole = types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=URI, version=2),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text="x")])
    assert cursor_after_edit(document, whole) is None
    two = change(URI, 2, (0, 0), (0, 0), "a")
    two.content_changes.append(two.content_changes[0])
    assert cursor_after_edit(document, two) is None


# -- the user's rhythm --------------------------------------------------------------------


def test_the_rhythm_is_the_median_gap_between_keys_and_pauses_do_not_count():
    rhythm = Anticipation()
    t = 100.0
    for version, gap in enumerate([0.0, 0.15, 0.2, 2.0, 0.1, 0.18], start=1):  # 2.0: a pause
        t += gap
        assert rhythm.next_key(URI) is None or version > MIN_RHYTHM_SAMPLES
        rhythm.edited(URI, version, t)
    assert sorted(rhythm.key_gaps) == pytest.approx([0.1, 0.15, 0.18, 0.2])
    assert rhythm.next_key(URI) == pytest.approx(t + (0.15 + 0.18) / 2)
    assert rhythm.next_key("file:///elsewhere.py") is None
    # A deleted block is no key: no key is due after it, and neither gap around it is the rhythm.
    rhythm.edited(URI, 7, t + 0.1, key=False)
    assert rhythm.next_key(URI) is None
    rhythm.edited(URI, 8, t + 0.3)
    assert len(rhythm.key_gaps) == 4 and rhythm.next_key(URI) == pytest.approx(t + 0.3 + (0.15 + 0.18) / 2)


def test_typing_enter_backspace_and_a_deleted_line_are_keys_a_deleted_block_or_a_paste_is_not():
    def key(start, end, text):
        return is_keystroke(change(URI, 2, start, end, text))

    assert key((1, 12), (1, 12), "b") and key((1, 12), (1, 12), "\n    ") and key((1, 11), (1, 12), "")
    assert key((1, 0), (2, 0), "")  # a whole line deleted
    assert not key((1, 4), (4, 0), "")  # a body of several lines deleted
    assert not key((1, 12), (1, 12), "a\nb\nc") and not key((1, 12), (1, 12), "x" * (MAX_TYPED_CHARS + 1))


def test_the_debounce_is_learned_from_automatic_requests_for_the_edit_they_follow():
    rhythm = Anticipation()
    editor = Editor()
    editor.open(URI, "x = 1\n")
    cursor = locate(editor.workspace.get_text_document(URI), types.Position(0, 5))  # version 1
    assert rhythm.expected_request(10.0) == 10.0 and not rhythm.client_asks(10.0)
    rhythm.edited(URI, 1, 10.0)
    rhythm.asked(cursor, 10.2, automatic=False)  # an explicit trigger says nothing of the debounce
    assert not rhythm.debounces and not rhythm.client_asks(10.2)
    rhythm.asked(cursor, 10.075, automatic=True)
    rhythm.edited(URI, 2, 11.0)
    rhythm.asked(cursor, 11.05, automatic=True)  # version 1 again: not the request for this edit
    assert list(rhythm.debounces) == pytest.approx([0.075])
    assert rhythm.expected_request(20.0) == pytest.approx(20.075) and rhythm.client_asks(11.05)
    assert not rhythm.client_asks(11.05 + 31)


# -- runs started at an edit ----------------------------------------------------------------


async def test_an_edit_starts_the_run_that_its_request_then_adopts(services):
    (quick, editor), (patient_service, patient_editor) = services
    patient(quick)
    editor.open(URI, TEXT)
    await complete(quick, editor, URI, LINE, CHARACTER)  # the client asks automatically
    expected = await patient_answer(patient_service, patient_editor, URI, LINE, CHARACTER + 1,
                                    edit=(LINE, CHARACTER, "\x7f"))
    results, gate = Results(quick.backend.engine), Gate(quick.backend.engine)
    try:
        edit(quick, editor, LINE, CHARACTER, "\x7f")  # nothing the last answer says
        await until(gate.entered.is_set, "the run started at the edit to be in a forward")
        assert quick.anticipation.runs[URI].asked_at is None  # no request yet
        request = asyncio.ensure_future(complete(quick, editor, URI, LINE, CHARACTER + 1))
        await asyncio.sleep(0.05)
        gate.released.set()
        assert texts(await request) == expected  # fp32: what a request that ran itself gets
    finally:
        gate.remove()
    [run] = results.results  # one engine run: the request adopted it
    record = quick.telemetry.recent[-1]
    assert (record.source, record.id) == ("model", "2") and run.text.startswith(expected[0])


async def test_no_run_starts_for_a_client_that_does_not_ask_automatically_or_with_anticipate_off(services):
    (quick, editor), _ = services
    patient(quick)
    results = Results(quick.backend.engine)
    editor.open(URI, TEXT)
    edit(quick, editor, LINE, CHARACTER, "a")  # no request yet: the client may never ask
    await quick.complete(editor.workspace, invoked(URI, LINE, CHARACTER + 1))  # an explicit trigger
    edit(quick, editor, LINE, CHARACTER + 1, "b")
    assert not quick.anticipation.runs and len(results.results) == 1  # the invoked request's own
    await complete(quick, editor, URI, LINE, CHARACTER + 2)  # automatic
    quick.configure({"anticipate": False})
    edit(quick, editor, LINE, CHARACTER + 2, "\x7f")
    assert not quick.anticipation.runs
    await asyncio.sleep(0.2)
    assert len(results.results) == 2


async def test_the_next_edit_withdraws_an_unanswered_run_and_a_key_it_leads_to_follows_it(services):
    (quick, editor), (patient_service, patient_editor) = services
    patient(quick)
    editor.open(URI, TEXT)
    await complete(quick, editor, URI, LINE, CHARACTER)
    [expected] = await patient_answer(patient_service, patient_editor, URI, LINE, CHARACTER + 1,
                                      edit=(LINE, CHARACTER, "\x7f"))
    assert len(expected) > 1 and "\n" not in expected[0]
    results, gate = Results(quick.backend.engine), Gate(quick.backend.engine)
    try:
        edit(quick, editor, LINE, CHARACTER, "\x7f")
        await until(gate.entered.is_set, "the run started at the edit to be in a forward")
        adopting = asyncio.ensure_future(complete(quick, editor, URI, LINE, CHARACTER + 1))
        await asyncio.sleep(0.05)
        edit(quick, editor, LINE, CHARACTER + 1, expected[0])  # the next key, before any answer
        assert await adopting == []  # withdrawn, not an error
        assert quick.anticipation.runs.get(URI) is None  # the run it leads to is followed, no new one
        follower = asyncio.ensure_future(complete(quick, editor, URI, LINE, CHARACTER + 2))
        await asyncio.sleep(0.05)
        gate.released.set()
        assert texts(await follower) == [expected[1:]]
    finally:
        gate.remove()
    assert quick.telemetry.recent[-1].source == "followed"
    [run] = results.results  # one engine run for both keys
    assert run.text == expected


async def test_fifty_edits_a_second_keep_one_run_and_leave_the_service_answering(services):
    (quick, editor), _ = services
    patient(quick)
    editor.open(URI, TEXT)
    await complete(quick, editor, URI, LINE, CHARACTER)
    results = Results(quick.backend.engine)
    requests = quick.telemetry.counts["requests"]
    character = CHARACTER
    for i in range(50):
        edit(quick, editor, LINE, character, "\x7f" if i % 2 else "#")
        character += 1
        assert sum(not run.task.done() for run in quick.anticipation.runs.values()) <= 1
        await asyncio.sleep(0.02)
    # A key may follow the run before it rather than start one, when that run has written nothing yet
    # (following.py); whether it had depends on the machine's speed. A backspace never follows (the
    # cursor is behind every run's spot), so the burst's last edit always starts its own run.
    edit(quick, editor, LINE, character - 1, "", end=(LINE, character))
    character -= 1
    await until(lambda: all(run.task.done() for run in quick.anticipation.runs.values()), "the last run")
    assert len(results.results) <= 51 and quick.telemetry.counts.get("errors", 0) == 0
    # Runs no request adopted are counted as such, not as requests no client made.
    assert quick.telemetry.counts["requests"] == requests and quick.telemetry.counts["anticipated"] >= 1
    await until(lambda: not quick.decode_on, "the decodes going on to end")
    last = quick.anticipation.runs[URI]  # the run the last edit started, answered in its own time
    assert last.cursor.version == editor.workspace.get_text_document(URI).version
    assert texts(await complete(quick, editor, URI, LINE, character)) == texts(last.task.result().items)


async def test_closing_the_document_during_a_run_leaves_nothing_behind(services):
    (quick, editor), _ = services
    patient(quick)
    editor.open(URI, TEXT)
    await complete(quick, editor, URI, LINE, CHARACTER)
    results, gate = Results(quick.backend.engine), Gate(quick.backend.engine)
    try:
        edit(quick, editor, LINE, CHARACTER, "\x7f")
        await until(gate.entered.is_set, "the run started at the edit to be in a forward")
        run = quick.anticipation.runs[URI]
        editor.workspace.remove_text_document(URI)
        quick.document_closed(URI)
        gate.released.set()
        await until(run.task.done, "the run to end")
    finally:
        gate.remove()
    await until(lambda: URI not in quick.decode_on, "its decode to be let go")
    assert URI not in quick.shown and URI not in quick.anticipation.runs and ready(editor) == []
    assert [r.stop_reason for r in results.results] == ["cancelled"]


# -- answers cut to the user's rhythm ----------------------------------------------------------


async def test_a_request_answers_before_the_next_key_is_due_and_its_ghost_text_follows(services):
    (quick, editor), (patient_service, patient_editor) = services
    patient(quick)
    quick.configure({"anticipate": False})  # the request's own run, cut by the rhythm
    expected = await patient_answer(patient_service, patient_editor, URI, LINE, CHARACTER)
    editor.open(URI, TEXT)
    gate = Gate(quick.backend.engine)
    gap = 0.2
    try:
        quick.anticipation.key_gaps.extend([gap] * MIN_RHYTHM_SAMPLES)
        quick.anticipation.edits[URI] = Edit(1, time.monotonic(), True)  # a key just now: the next is due in 0.2 s
        budget = quick.budget_s(locate(editor.workspace.get_text_document(URI), types.Position(LINE, CHARACTER)),
                                time.monotonic())
        assert MIN_TYPING_BUDGET_S <= budget <= gap - NEXT_KEY_MARGIN_S
        # Held in its first forward: with a minute's budget it could only answer now by the rhythm's cut.
        assert await complete(quick, editor, URI, LINE, CHARACTER) == []
        assert quick.telemetry.recent[-1].stop_reason == "deadline"
        gate.released.set()
        await until(lambda: ready(editor), "the ready notification")
    finally:
        gate.remove()
    quick.anticipation.key_gaps.clear()
    assert texts(await complete(quick, editor, URI, LINE, CHARACTER)) == expected
    assert quick.telemetry.recent[-1].source == "kept"


def test_no_cut_without_a_rhythm_past_the_next_key_or_when_switched_off(services):
    (quick, editor), _ = services
    editor.open(URI, TEXT)
    cursor = locate(editor.workspace.get_text_document(URI), types.Position(LINE, CHARACTER))
    now, budget = time.monotonic(), PATIENT_MS / 1000
    patient(quick)
    assert quick.budget_s(cursor, now) == budget  # no rhythm yet
    quick.anticipation.key_gaps.extend([0.2] * MIN_RHYTHM_SAMPLES)
    quick.anticipation.edits[URI] = Edit(1, now - 1.0, True)  # the next key was due long ago: a pause
    assert quick.budget_s(cursor, now) == budget
    quick.anticipation.edits[URI] = Edit(1, now, True)
    assert quick.budget_s(cursor, now) == pytest.approx(0.2 - NEXT_KEY_MARGIN_S)
    quick.anticipation.edits[URI] = Edit(1, now, False)  # a deleted block: the user is not mid-burst
    assert quick.budget_s(cursor, now) == budget
    quick.configure({"answerBeforeNextKey": False})
    assert quick.budget_s(cursor, now) == budget


async def test_a_huge_document_starts_no_run_per_key(services):
    (quick, editor), _ = services
    patient(quick)
    quick.anticipation.last_automatic = time.monotonic()  # the client asks automatically
    editor.open(URI, "x = 1\n" * 200_000)  # 1.2 MB: generated or minified
    edit(quick, editor, 0, 5, "2")
    assert not quick.anticipation.runs
    editor.open(URI, TEXT)
    edit(quick, editor, LINE, CHARACTER, "\x7f")  # the same edit in a file of ordinary size
    await quick.anticipation.runs[URI].task

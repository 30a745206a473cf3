"""The cursor context: worked out once per request, parsed at most once, handed to everything after."""

from __future__ import annotations

import pytest

from engine.completion import CompletionEngine, CompletionRequest
from engine.models.loading import load_model
from engine.text.cursor import Cursor
from engine.text.postprocess import postprocess
from engine.text.prompt import ContextBudget

ABOVE = "import os\n\n\ndef first(path):\n    return os.path.basename(path)\n\n\n"
PREFIX = ABOVE + "def second(path):\n    "
SUFFIX = "\n\n\ndef third(path):\n    return path\n"


def test_the_cursor_knows_its_line_and_its_window():
    cursor = Cursor.at(PREFIX + "x = f(", ")\n" + SUFFIX, "python")
    assert (cursor.line_before, cursor.line_after) == ("    x = f(", ")")
    # From the top-level line above to the first one below: the cursor's function, whole.
    assert cursor.window.head == "def second(path):\n    x = f(" and cursor.window.tail == ")\n\n\n\n"
    assert cursor.window.clean and not cursor.multiline


def test_nothing_is_parsed_until_asked_and_then_once(parsed):
    cursor = Cursor.at(PREFIX, SUFFIX, "python")
    assert parsed == []
    assert cursor.multiline is True  # an empty body
    assert cursor.window.errors is not None and cursor.window.errors.count == 0
    assert parsed == [cursor.window.text]  # the decision and the error count share one parse


def test_a_request_that_says_single_or_multi_line_costs_no_parse(parsed):
    assert Cursor.at(PREFIX, SUFFIX, "python", multiline=False).multiline is False
    assert parsed == []


def test_post_processing_reuses_the_cursors_parse(parsed):
    cursor = Cursor.at(PREFIX, SUFFIX, "python")
    for _ in range(3):  # the budget's answer, a line more, the whole answer: one cursor
        shown = postprocess("return os.path.dirname(path)", cursor, ended=True)
    assert shown.text == "return os.path.dirname(path)"
    assert parsed.count(cursor.window.text) == 1
    assert all(text != cursor.window.text for text in parsed[1:])  # the rest hold the completion


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    return CompletionEngine(verifier, None, drafter="lookup",
                            context_budget=ContextBudget(prefix_tokens=96, suffix_tokens=16, other_documents_tokens=0))


def test_a_request_parses_the_text_around_its_cursor_once(engine, parsed):
    answers = []
    request = CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path="/w/m.py", max_new_tokens=24, budget_ms=60_000)
    result = engine.complete(request, on_answer=answers.append)
    window = Cursor.at(PREFIX, SUFFIX, "python").window.text
    assert result.multiline and parsed.count(window) == 1

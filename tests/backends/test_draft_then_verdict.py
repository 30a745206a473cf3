"""Show the draft, then the verdict (engine/backends/verdict.py), on the tiny float32 pair.

The answer handed over first is exactly the draft model's own answer as the only model, marked
provisional; the result is exactly the verifier's own answer; without anyone to tell of a later
verdict the verifier alone answers; a pair it cannot run is refused with the reason.
"""

from __future__ import annotations

import threading

import pytest

from engine.backends.verdict import DraftThenVerdict, EitherEvent
from engine.completion import CompletionEngine, CompletionRequest
from engine.errors import ModelError

pytestmark = pytest.mark.timeout(300)

SPOTS = [("def mul(a, b):\n    return ", "\n"), ("import os\n\n\ndef main():\n    ", "\n"), ("class Point:\n    def ", "")]


@pytest.fixture(scope="module")
def backend(tiny_model_dir, tiny_draft_dir):
    return DraftThenVerdict.load(str(tiny_model_dir), str(tiny_draft_dir), drafter="hybrid", dtype="float32")


@pytest.fixture(scope="module")
def alone(tiny_model_dir, tiny_draft_dir):
    """Each model as the only one, with all the time it wants."""
    return {role: CompletionEngine.load(str(path), "none", drafter="lookup", dtype="float32")
            for role, path in (("verifier", tiny_model_dir), ("draft", tiny_draft_dir))}


def request(prefix: str, suffix: str, budget_ms: float | None = 60_000) -> CompletionRequest:
    return CompletionRequest(prefix=prefix, suffix=suffix, path="calc.py", max_new_tokens=12, multiline=False,
                             budget_ms=budget_ms)


@pytest.mark.parametrize("prefix, suffix", SPOTS)
def test_the_draft_models_answer_shows_first_and_the_verifiers_is_the_result(backend, alone, prefix, suffix):
    handed = []
    result = backend.complete(request(prefix, suffix), on_answer=handed.append)
    draft_alone = alone["draft"].complete(request(prefix, suffix))
    verifier_alone = alone["verifier"].complete(request(prefix, suffix, budget_ms=None))
    assert [a.text for a in handed] == [draft_alone.text] and handed[0].provisional
    assert result.text == verifier_alone.text and result.token_ids == verifier_alone.token_ids
    assert not result.provisional


def test_the_spots_tell_the_two_models_apart(alone):
    """Else the test above could not fail for a backend that showed the verifier's text first."""
    texts = {role: [engine.complete(request(*spot)).text for spot in SPOTS] for role, engine in alone.items()}
    assert texts["draft"] != texts["verifier"]


def test_without_anyone_to_tell_the_verifier_answers_alone(backend, alone):
    prefix, suffix = SPOTS[0]
    result = backend.complete(request(prefix, suffix))
    assert result.text == alone["verifier"].complete(request(prefix, suffix)).text and not result.provisional


def test_a_cancelled_request_ends_cancelled_without_a_verdict(backend):
    cancel, handed = threading.Event(), []
    cancel.set()
    result = backend.complete(request(*SPOTS[0]), cancel=cancel, on_answer=handed.append)
    assert result.stop_reason == "cancelled"


def test_a_pair_without_a_draft_model_is_refused_with_the_reason(tiny_model_dir, tmp_path):
    with pytest.raises(ModelError, match="needs a draft model"):
        DraftThenVerdict.load(str(tiny_model_dir), "none", drafter="hybrid", dtype="float32")
    with pytest.raises(ModelError, match="other than the verifier"):
        DraftThenVerdict.load(str(tiny_model_dir), str(tiny_model_dir), drafter="hybrid", dtype="float32")


def test_either_event_is_set_by_its_own_set_or_the_others():
    other = threading.Event()
    either = EitherEvent(other)
    assert not either.is_set()
    other.set()
    assert either.is_set()
    mine = EitherEvent(None)
    mine.set()
    assert mine.is_set() and not EitherEvent(None).is_set()


def test_a_warm_reads_the_prompt_for_the_model_that_answers_first(tiny_model_dir, tiny_draft_dir):
    """A request at a warmed spot waits for its warm: the verifier's prompt is read in the verdict."""
    backend = DraftThenVerdict.load(str(tiny_model_dir), str(tiny_draft_dir), drafter="hybrid", dtype="float32")
    fed = backend.warm(request(*SPOTS[1]))
    assert fed > 0 and len(backend.drafts_alone.decoder.kv.tokens) == fed
    assert len(backend.engine.decoder.kv.tokens) == 0

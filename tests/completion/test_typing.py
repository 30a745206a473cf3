"""Typing at the cursor: anchored prompts, one pass per keystroke, decoding on after the answer."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import replace

import pytest
import torch

from engine.completion import LOOKAHEAD_TOKENS, CompletionEngine, CompletionRequest
from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.models.loading import load_model
from engine.text.healing import healing_constraint
from engine.text.prompt import ContextBudget, encode_middle, heal_middle

PREFIX = "".join(f"def function_{i}(value):\n    return value * {i}\n\n" for i in range(12)) + "def typed("
SUFFIX = "\n\ndef after(x):\n    return x\n"
PATH = "/w/typing.py"


@pytest.fixture(scope="module")
def verifier(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32", device="cpu")


def new_engine(verifier, drafter="lookup") -> CompletionEngine:
    return CompletionEngine(verifier, None, drafter=drafter,
                            context_budget=ContextBudget(prefix_tokens=160, suffix_tokens=16, other_documents_tokens=0))


def anchored_ids(engine: CompletionEngine, prefix: str, path: str = PATH) -> list[int]:
    """The anchor's prompt plus the typed text, less its end that token healing leaves to the model."""
    anchor = engine.prompts.anchors[path]
    middle, _ = heal_middle(engine.tokenizer, engine.template, anchor.healed + prefix[len(anchor.prefix):])
    return anchor.token_ids + encode_middle(engine.tokenizer, engine.template, middle)


def fresh_config(engine: CompletionEngine, prefix: str, max_new_tokens: int) -> GenerationConfig:
    """What a fresh decoder needs to decode as the engine does: its stops and its healing constraint."""
    anchor = engine.prompts.anchors[PATH]
    _, healed = heal_middle(engine.tokenizer, engine.template, anchor.healed + prefix[len(anchor.prefix):])
    constraint = healing_constraint(engine.tokenizer, healed, engine.verifier.model.config.vocab_size,
                                    prefix.rsplit("\n", 1)[-1])
    return GenerationConfig(max_new_tokens=max_new_tokens, eos_token_ids=engine.stop_token_ids(engine.template.stop_tokens),
                            constraint=constraint)


def keystrokes(seed: int, count: int) -> list[str]:
    """Prefixes as a user types: mostly characters at the cursor, sometimes a backspace."""
    rng = random.Random(seed)
    prefix, states = PREFIX, []
    for _ in range(count):
        if rng.random() < 0.15 and prefix != PREFIX:
            prefix = prefix[:-1]
        else:
            prefix += rng.choice("abcxyz_,( )=\n    1")
        states.append(prefix)
    return states


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_anchored_output_equals_a_fresh_decoders_on_the_same_tokens(verifier, seed):
    engine = new_engine(verifier)
    for prefix in keystrokes(seed, 12):
        result = engine.complete(CompletionRequest(prefix=prefix, suffix=SUFFIX, path=PATH, max_new_tokens=6,
                                                   multiline=True))
        with torch.inference_mode():
            fresh = SpeculativeDecoder(verifier.model, None).generate(anchored_ids(engine, prefix),
                                                                      fresh_config(engine, prefix, 6))
        assert result.token_ids == fresh.token_ids, prefix


def test_a_keystroke_at_the_anchor_feeds_only_its_own_tokens(verifier):
    engine = new_engine(verifier)
    first = engine.complete(CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=4))
    assert not first.anchored and first.stats.prefill_tokens > 50
    typed = ""
    for char in "value, other":
        typed += char
        result = engine.complete(CompletionRequest(prefix=PREFIX + typed, suffix=SUFFIX, path=PATH, max_new_tokens=4))
        middle = anchored_ids(engine, PREFIX + typed)[len(engine.prompts.anchors[PATH].token_ids):]
        assert result.anchored
        # Only the typed text's tokens (often fewer: the cache holds their common start), never the suffix;
        # at least the prompt's last token, whose logits give the first output (healing may leave the
        # whole typed text to the model, and the middle empty).
        assert 1 <= result.stats.prefill_tokens <= max(1, len(middle)), (typed, result.stats)


def test_an_auto_closed_bracket_keeps_the_anchor(verifier):
    engine = new_engine(verifier)
    engine.complete(CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=2))
    result = engine.complete(CompletionRequest(prefix=PREFIX + "(", suffix=")" + SUFFIX, path=PATH, max_new_tokens=2))
    assert result.anchored and result.stats.prefill_tokens <= 2


@pytest.mark.parametrize("prefix, suffix", [
    (PREFIX[:-3], SUFFIX),  # the cursor moved back out of the anchored span
    (PREFIX + "x", "# changed\n" + SUFFIX),  # an edit after the cursor
    (PREFIX + "y" * 300, SUFFIX),  # the middle outgrew its limit
])
def test_leaving_the_anchor_builds_a_fresh_prompt(verifier, prefix, suffix):
    engine = new_engine(verifier)
    engine.complete(CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=2))
    result = engine.complete(CompletionRequest(prefix=prefix, suffix=suffix, path=PATH, max_new_tokens=2))
    assert not result.anchored
    assert engine.prompts.anchors[PATH].prefix == prefix  # and anchors there


def test_warming_leaves_the_request_only_its_last_token(verifier):
    engine = new_engine(verifier)
    request = CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=4)
    fed = engine.warm(request)
    assert fed > 50
    result = engine.complete(request)
    assert result.stats.prefill_tokens == 1
    assert result.token_ids == new_engine(verifier).complete(request).token_ids


def test_decoding_goes_on_after_the_answer_at_the_budget(verifier):
    engine = new_engine(verifier, drafter="none")
    request = CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=12, multiline=True,
                                budget_ms=1, received_at=time.monotonic() - 1)
    answers = []
    final = engine.complete(request, on_answer=answers.append)
    # The budget was spent before the prompt was read: answered with nothing, before any forward.
    assert len(answers) == 1 and answers[0].stop_reason == "deadline" and answers[0].token_ids == []
    assert answers[0].stats.verifier_passes == 0
    reference = new_engine(verifier, drafter="none").complete(
        CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=12, multiline=True))
    assert final.token_ids == reference.token_ids and len(final.token_ids) > 1


def test_the_next_keystroke_cancels_decoding_after_the_answer(verifier):
    engine = new_engine(verifier, drafter="none")
    cancel = threading.Event()
    request = CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=40, multiline=True,
                                budget_ms=1, received_at=time.monotonic() - 1)
    final = engine.complete(request, cancel=cancel, on_answer=lambda partial: cancel.set())
    assert final.stop_reason == "cancelled" and final.token_ids == []
    # The cache is exact afterwards: the next keystroke's output equals a fresh decoder's.
    again = engine.complete(CompletionRequest(prefix=PREFIX + "v", suffix=SUFFIX, path=PATH, max_new_tokens=8,
                                              multiline=True))
    with torch.inference_mode():
        fresh = SpeculativeDecoder(verifier.model, None).generate(anchored_ids(engine, PREFIX + "v"),
                                                                  fresh_config(engine, PREFIX + "v", 8))
    assert again.anchored and again.token_ids == fresh.token_ids


def looked_ahead_request(prefix: str) -> CompletionRequest:
    return CompletionRequest(prefix=prefix, suffix=SUFFIX, path=PATH, max_new_tokens=64, multiline=False)


# Where the tiny model ends its line within 64 tokens depends on argmax near-ties, which can
# differ between CPUs' kernels: the tests pick their cases from these on the machine they run on.
CANDIDATES = ["", "value", "x", "a, b", "other", "value, n"]


@pytest.fixture(scope="module")
def finished_lines(verifier) -> list[str]:
    """Typed texts after which the model's one-line completion ends at the line's end."""
    engine = new_engine(verifier)
    found = [typed for typed in CANDIDATES
             if engine.complete(looked_ahead_request(PREFIX + typed)).stop_reason == "stop_string"]
    assert found, "the tiny model ends none of the candidate lines"
    return found


def test_a_finished_line_is_answered_at_once_then_the_next_line_is_decoded_as_a_draft(verifier, finished_lines):
    for typed in finished_lines[:2]:
        check_look_ahead(verifier, typed)


def check_look_ahead(verifier, typed: str) -> None:
    engine = new_engine(verifier)
    answers, cache_at_answer = [], []

    def on_answer(completion):
        answers.append(completion)
        cache_at_answer.append(len(engine.decoder.kv))

    final = engine.complete(looked_ahead_request(PREFIX + typed), on_answer=on_answer)
    assert final.stop_reason == "stop_string"  # the tiny model ends these lines within 64 tokens
    assert answers == [final]  # answered when the line was done, before looking ahead
    prompt = anchored_ids(engine, PREFIX + typed)
    assert cache_at_answer[0] <= len(prompt) + len(final.token_ids)
    # What is shown is what the verifier writes without looking ahead.
    assert final.token_ids == new_engine(verifier).complete(looked_ahead_request(PREFIX + typed)).token_ids
    # The look-ahead is the verifier's own next line, kept as the next request's draft.
    config = GenerationConfig(max_new_tokens=LOOKAHEAD_TOKENS, stop_strings=["\n"],
                              eos_token_ids=engine.stop_token_ids(engine.template.stop_tokens))
    with torch.inference_mode():
        ahead = SpeculativeDecoder(verifier.model, None, engine.tokenizer).generate(prompt + final.token_ids, config)
    assert engine.prompts.last_output[PATH] == final.token_ids + ahead.token_ids and ahead.token_ids


def test_the_next_keystroke_cancels_the_look_ahead(verifier, finished_lines):
    engine = new_engine(verifier)
    cancel = threading.Event()
    final = engine.complete(looked_ahead_request(PREFIX + finished_lines[0]), cancel=cancel,
                            on_answer=lambda completion: cancel.set())
    assert final.stop_reason == "stop_string" and engine.prompts.last_output[PATH] == final.token_ids
    again = engine.complete(CompletionRequest(prefix=PREFIX + "v", suffix=SUFFIX, path=PATH, max_new_tokens=8,
                                              multiline=True))
    with torch.inference_mode():
        fresh = SpeculativeDecoder(verifier.model, None).generate(anchored_ids(engine, PREFIX + "v"),
                                                                  fresh_config(engine, PREFIX + "v", 8))
    assert again.token_ids == fresh.token_ids  # the cache is exact after the cancelled look-ahead


def test_no_look_ahead_without_a_caller_waiting_on_the_answer_or_after_a_block(verifier):
    engine = new_engine(verifier)
    alone = engine.complete(looked_ahead_request(PREFIX))
    assert engine.prompts.last_output[PATH] == alone.token_ids
    block = engine.complete(CompletionRequest(prefix=PREFIX, suffix=SUFFIX, path=PATH, max_new_tokens=64,
                                              multiline=True), on_answer=lambda completion: None)
    assert engine.prompts.last_output[PATH] == block.token_ids


# No grammar for a .txt file: the tiny model's nonsense lines are not withheld as broken code.
TEXT_PATH = "/w/typing.txt"


def budgeted_request(typed: str, suffix: str = SUFFIX, budget_ms: float = 60_000,
                     received_at: float | None = None) -> CompletionRequest:
    return CompletionRequest(prefix=PREFIX + typed, suffix=suffix, path=TEXT_PATH, max_new_tokens=64, multiline=False,
                             budget_ms=budget_ms, received_at=received_at if received_at is not None else time.monotonic())


def test_a_line_finished_within_the_budget_shows_the_next_line_too(verifier):
    two_lines = []
    for typed in CANDIDATES:
        request = budgeted_request(typed)
        one = new_engine(verifier).complete(replace(request, budget_ms=None))  # nobody waiting: one line
        engine, answers = new_engine(verifier), []
        final = engine.complete(request, on_answer=answers.append)
        if one.stop_reason != "stop_string":
            assert answers == []  # no early answer: the caller takes the returned result
            continue
        assert answers == [final]  # one answer, once the next line was done
        # The next line is the verifier's own, decoded after the line it finished.
        prompt = anchored_ids(engine, PREFIX + typed, TEXT_PATH)
        config = GenerationConfig(max_new_tokens=LOOKAHEAD_TOKENS, stop_strings=["\n"],
                                  eos_token_ids=engine.stop_token_ids(engine.template.stop_tokens))
        with torch.inference_mode():
            ahead = SpeculativeDecoder(verifier.model, None, engine.tokenizer).generate(prompt + one.token_ids, config)
        assert engine.prompts.last_output[TEXT_PATH] == one.token_ids + ahead.token_ids
        if final.text != one.text:
            assert final.text.startswith(one.text + "\n") and "\n" not in final.text[len(one.text) + 1:]
            assert final.token_ids == one.token_ids + ahead.token_ids and final.multiline
            assert final.stats.verifier_passes == one.stats.verifier_passes + ahead.stats.verifier_passes
            two_lines.append(typed)
    assert two_lines, "no candidate line was followed by a shown next line"


def test_the_next_line_is_not_shown_mid_line_or_past_the_budget(verifier):
    for typed in CANDIDATES:
        for request in (budgeted_request(typed, suffix=" # note" + SUFFIX),  # text after the cursor
                        budgeted_request(typed, budget_ms=50, received_at=time.monotonic() - 1)):  # budget spent
            answers = []
            final = new_engine(verifier).complete(request, on_answer=answers.append)
            assert all("\n" not in answer.text for answer in answers)
            if request.budget_ms == 50:  # answered at the deadline, then once more when its line is done
                assert answers[0].stop_reason == "deadline" and len(answers) <= 2
                if final.stop_reason == "stop_string":
                    assert len(answers) == 2 and answers[1].text == final.text
            else:
                assert len(answers) == 1

"""How decoding ends: cancel flag, deadline, stop strings, EOS, max tokens, bad prompts."""

from __future__ import annotations

import threading
import time

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import make_drafter
from engine.errors import PromptError
from engine.text.text_stream import TextStream
from support.tiny_models import assert_logits_close


class Hook:
    """Wraps a drafter and runs `action` when it is asked for its n-th proposal."""

    def __init__(self, inner, at_call: int, action) -> None:
        self.inner, self.at_call, self.action, self.calls = inner, at_call, action, 0
        self.name = getattr(inner, "name", "hook")

    def start(self, prompt_ids, context_streams=()):
        if self.inner is not None:
            self.inner.start(prompt_ids, context_streams)

    def propose(self, tokens, max_tokens, sampling):
        self.calls += 1
        if self.calls == self.at_call:
            self.action()
        if self.inner is None:
            from engine.drafters import Draft
            return Draft.empty()
        return self.inner.propose(tokens, max_tokens, sampling)

    def observe(self, draft, accepted):
        if self.inner is not None:
            self.inner.observe(draft, accepted)


@pytest.fixture(scope="module")
def text_model(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def test_cancel_stops_the_pass_in_flight_within_a_layer(verifier, draft_models):
    cancel = threading.Event()
    drafter = Hook(make_drafter("hybrid", draft_models["noisy"]), at_call=3, action=cancel.set)
    result = SpeculativeDecoder(verifier, drafter).generate(
        [1, 2, 3, 4], GenerationConfig(max_new_tokens=200), cancel=cancel)
    assert result.stop_reason == "cancelled"
    # The cancel lands while the third pass is being drafted: its forward stops at the first
    # layer, so only the two passes before it count.
    assert result.stats.verifier_passes == 2
    assert len(result.token_ids) < 200


@pytest.mark.parametrize("layers_before_cancel", [0, 1, 2])
def test_a_pass_cancelled_between_layers_leaves_the_cache_exact(verifier, draft_models, layers_before_cancel):
    """Whatever a cancelled pass half-wrote is dropped: the next request equals a fresh decoder's."""
    decoder = SpeculativeDecoder(verifier, make_drafter("hybrid", draft_models["noisy"]))
    decoder.generate([9, 8, 7, 6, 5], GenerationConfig(max_new_tokens=12))
    checks = []

    def cancel_after_some_layers():
        checks.append(1)
        return len(checks) > layers_before_cancel

    cancel = threading.Event()
    cancel.is_set = cancel_after_some_layers  # the decoder polls the flag before every layer
    prompt = [9, 8, 7, 6, 5, 4, 3, 2]
    result = decoder.generate(prompt, GenerationConfig(max_new_tokens=12), cancel=cancel)
    assert result.stop_reason == "cancelled"
    assert decoder.kv.tokens == (prompt + result.token_ids)[: len(decoder.kv)]
    assert all(layer.keys.shape[-2] == len(decoder.kv) for layer in decoder.kv.cache.layers)

    prompt = [9, 8, 7, 6, 5, 4, 1]
    fresh = SpeculativeDecoder(verifier, None).generate(prompt, GenerationConfig(max_new_tokens=20))
    again = decoder.generate(prompt, GenerationConfig(max_new_tokens=20))
    assert again.token_ids == fresh.token_ids


def test_cancel_before_start_does_no_verifier_work(verifier):
    cancel = threading.Event()
    cancel.set()
    result = SpeculativeDecoder(verifier, None).generate([1, 2, 3], GenerationConfig(), cancel=cancel)
    assert result.stop_reason == "cancelled" and result.token_ids == [] and result.stats.verifier_passes == 0


def test_deadline_returns_the_verified_prefix(verifier, draft_models):
    reference = SpeculativeDecoder(verifier, None).generate([5, 6, 7], GenerationConfig(max_new_tokens=100)).token_ids
    config = GenerationConfig(max_new_tokens=100, deadline=time.monotonic() + 3600)
    drafter = Hook(make_drafter("draft", draft_models["noisy"]), at_call=4, action=lambda: None)
    decoder = SpeculativeDecoder(verifier, drafter)
    # Move the deadline into the past at the 4th pass instead of sleeping 30 s.
    drafter.action = lambda: setattr(config, "deadline", time.monotonic() - 1)
    result = decoder.generate([5, 6, 7], config)
    assert result.stop_reason == "deadline"
    assert result.stats.verifier_passes == 3  # the 4th pass stopped at its first layer: none runs late
    assert 3 <= len(result.token_ids) < 100
    assert result.token_ids == reference[: len(result.token_ids)]  # cut at a verified token


def test_a_pass_that_would_end_past_the_deadline_is_not_started(verifier):
    config = GenerationConfig(max_new_tokens=100, deadline=time.monotonic() + 3600)

    def slow_pass_then_tight_deadline():
        # The 3rd pass takes 0.3 s; afterwards 0.2 s remain: not enough for another like it.
        time.sleep(0.3)
        config.deadline = time.monotonic() + 0.2

    drafter = Hook(make_drafter("lookup"), at_call=3, action=slow_pass_then_tight_deadline)
    result = SpeculativeDecoder(verifier, drafter).generate([5, 6, 7], config)
    assert result.stop_reason == "deadline"
    assert result.stats.verifier_passes == 3  # the slow third pass, no more


def test_a_deadline_already_passed_runs_no_forward(verifier):
    config = GenerationConfig(max_new_tokens=10, deadline=time.monotonic() - 1)
    result = SpeculativeDecoder(verifier, None).generate([1, 2], config)
    assert result.stop_reason == "deadline" and result.token_ids == []
    assert result.stats.verifier_passes == 0


def test_a_deadline_inside_a_prefill_stops_it_between_layers_and_keeps_the_chunks(verifier):
    prompt = [(7 * i) % 60 + 1 for i in range(40)]
    decoder = SpeculativeDecoder(verifier, None)
    config = GenerationConfig(max_new_tokens=10, deadline=time.monotonic() + 3600, prefill_chunk=8)
    # The deadline passes inside the third prefill chunk's first layer.
    hook = verifier.model.layers[0].register_forward_pre_hook(
        lambda module, args: setattr(config, "deadline", time.monotonic() - 1) if len(decoder.kv) >= 16 else None)
    try:
        result = decoder.generate(prompt, config)
    finally:
        hook.remove()
    assert result.stop_reason == "deadline" and result.token_ids == [] and result.stats.verifier_passes == 0
    assert len(decoder.kv) == 16  # the two chunks fed before it stay cached for the next request


def test_answered_at_a_deadline_inside_the_prefill_the_decode_goes_on_to_the_same_output(verifier):
    prompt = [(5 * i) % 60 + 1 for i in range(40)]
    reference = SpeculativeDecoder(verifier, None).generate(prompt, GenerationConfig(max_new_tokens=12)).token_ids
    decoder = SpeculativeDecoder(verifier, make_drafter("lookup"))
    config = GenerationConfig(max_new_tokens=12, deadline=time.monotonic() + 3600, prefill_chunk=8)
    answers = []
    hook = verifier.model.layers[1].register_forward_pre_hook(
        lambda module, args: setattr(config, "deadline", time.monotonic() - 1) if len(decoder.kv) >= 8 else None)
    try:
        result = decoder.generate(prompt, config, on_deadline=answers.append)
    finally:
        hook.remove()
    assert len(answers) == 1  # answered once, between two layers of the second chunk
    assert answers[0].token_ids == [] and answers[0].stop_reason == "deadline"
    assert answers[0].stats.verifier_passes == 0
    assert result.stop_reason == "max_new_tokens" and result.token_ids == reference


def test_after_the_deadlines_answer_each_new_line_is_handed_over(text_model):
    model, tokenizer = text_model
    prompt = tokenizer("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
    decoder = SpeculativeDecoder(model, make_drafter("lookup"), tokenizer)
    plain = decoder.generate(prompt, GenerationConfig(max_new_tokens=40))
    assert plain.text.count("\n") >= 2
    answers, lines = [], []
    result = decoder.generate(prompt, GenerationConfig(max_new_tokens=40, deadline=time.monotonic()),
                              on_deadline=answers.append, on_line=lines.append)
    assert result.token_ids == plain.token_ids and result.text == plain.text  # handing over changes nothing
    assert len(answers) == 1 and answers[0].token_ids == [] and lines
    breaks = [line.text.count("\n") for line in lines]
    assert breaks[0] >= 1 and breaks == sorted(set(breaks))  # each hand-over has a line more
    assert all(plain.text.startswith(line.text) and line.stop_reason == "deadline" for line in lines)
    unanswered: list = []  # before the deadline's answer, lines are not handed over
    decoder.generate(prompt, GenerationConfig(max_new_tokens=40), on_deadline=answers.append, on_line=unanswered.append)
    assert unanswered == [] and len(answers) == 1


def test_a_caller_may_end_the_output_at_a_line(text_model):
    model, tokenizer = text_model
    prompt = tokenizer("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
    decoder = SpeculativeDecoder(model, make_drafter("lookup"), tokenizer)
    plain = decoder.generate(prompt, GenerationConfig(max_new_tokens=40))
    asked: list[str] = []
    done = decoder.generate(prompt, GenerationConfig(max_new_tokens=40, done_at_line=lambda text: not asked.append(text)))
    assert done.stop_reason == "stop_string" and asked == [done.text]  # asked once, at the first line
    assert "\n" in done.text and plain.text.startswith(done.text) and len(done.text) < len(plain.text)
    assert done.token_ids == plain.token_ids[: len(done.token_ids)]


def test_stop_string_cuts_the_text_before_it(text_model):
    model, tokenizer = text_model
    prompt = tokenizer("def add(a, b):\n    return", add_special_tokens=False)["input_ids"]
    decoder = SpeculativeDecoder(model, make_drafter("lookup"), tokenizer)
    full = decoder.generate(prompt, GenerationConfig(max_new_tokens=40))
    assert full.stop_reason == "max_new_tokens" and len(full.text) > 10
    stop = full.text[8:11]
    chunks: list[str] = []
    cut = decoder.generate(prompt, GenerationConfig(max_new_tokens=40, stop_strings=[stop]), on_text=chunks.append)
    assert cut.stop_reason == "stop_string"
    assert cut.text == full.text[: full.text.index(stop)]
    assert "".join(chunks) == cut.text  # streamed chunks add up to the answer, stop string never shown


def test_only_what_could_start_a_stop_string_is_held_back(text_model):
    """A multi-line answer's stop is the next line of the file: its first line must stream as
    soon as its next line differs from that, not a stop's length later."""
    _, tokenizer = text_model
    stop = "\n    def next(self):\n"
    ids = tokenizer("    if ready:\n        go()\n    def next(self):\n", add_special_tokens=False)["input_ids"]
    stream, sent = TextStream(tokenizer, [stop]), ""
    for end in range(1, len(ids) + 1):
        sent += stream.update(ids[:end])
        held = stream.text[len(sent):]
        assert stream.text.startswith(sent) and stop.startswith(held), (sent, held)
        if "\n        go" in stream.text:
            assert "\n        g" in sent  # the second line is out once it is not the stop
    assert stream.stopped and sent + stream.finish() == stream.text == "    if ready:\n        go()"


def test_streamed_chunks_add_up_to_the_text(text_model):
    model, tokenizer = text_model
    prompt = tokenizer("class Stack:\n    def push(self, item):\n", add_special_tokens=False)["input_ids"]
    chunks: list[str] = []
    result = SpeculativeDecoder(model, make_drafter("lookup"), tokenizer).generate(
        prompt, GenerationConfig(max_new_tokens=30), on_text=chunks.append)
    assert "".join(chunks) == result.text and len(chunks) > 1


def test_eos_ends_the_output_with_it(verifier):
    reference = SpeculativeDecoder(verifier, None).generate([9, 8, 7], GenerationConfig(max_new_tokens=20)).token_ids
    eos = reference[6]
    first = reference.index(eos)
    result = SpeculativeDecoder(verifier, make_drafter("draft", verifier)).generate(
        [9, 8, 7], GenerationConfig(max_new_tokens=20, eos_token_ids=[eos]))
    assert result.stop_reason == "eos" and result.token_ids == reference[: first + 1]


def test_empty_prompt_is_a_clear_error(verifier):
    with pytest.raises(PromptError, match="empty"):
        SpeculativeDecoder(verifier, None).generate([], GenerationConfig())


def test_overlong_prompt_is_left_truncated(verifier):
    context = verifier.config.max_position_embeddings
    prompt = (list(range(1, 60)) * (context // 50))[: context + 100]
    result = SpeculativeDecoder(verifier, make_drafter("lookup")).generate(prompt, GenerationConfig(max_new_tokens=4))
    assert result.stats.prompt_truncated
    assert result.stats.prompt_tokens == len(prompt) and len(result.token_ids) == 4


def test_prompt_lookup_index_is_incremental():
    from engine.drafters import NgramIndex

    index = NgramIndex(1, 3)
    index.extend([1, 2, 3, 4, 1, 2])
    assert index.continuation([1, 2], 3) == (2, [3, 4, 1])
    index.extend([5])  # "1 2" now last followed by 5: the most recent occurrence wins
    assert index.continuation([9, 1, 2], 3) == (2, [5])
    assert index.continuation([7, 7], 3) == (0, [])


def test_chunked_prefill_is_exact_and_a_cancelled_prefill_is_reused(verifier):
    from engine.decoding.kv import KVCache

    prompt = [(7 * i) % 60 + 1 for i in range(40)]
    whole_logits, whole_fed = KVCache(verifier).prefill(prompt, chunk=None)
    chunked_logits, chunked_fed = KVCache(verifier).prefill(prompt, chunk=7)
    assert whole_fed == chunked_fed == 40
    assert_logits_close(chunked_logits, whole_logits)

    cache = KVCache(verifier)
    logits, fed = cache.prefill(prompt, should_stop=lambda: len(cache) >= 20, chunk=10)
    assert logits is None and fed == 20 and len(cache) == 20  # stopped after two chunks, keeps them
    logits, fed = cache.prefill(prompt, chunk=10)
    assert fed == 20  # the next request feeds the rest
    assert_logits_close(logits, whole_logits)
    # Nothing new to feed still feeds the last token: its logits are the answer.
    assert cache.prefill(prompt)[1] == 1


def test_cancel_during_a_cold_prefill_returns_without_decoding(verifier):
    cancel = threading.Event()
    decoder = SpeculativeDecoder(verifier, None)
    original = decoder.kv.forward

    def forward_then_cancel(tokens, **kwargs):
        cancel.set()  # a newer request arrives while the first chunk is being fed
        return original(tokens, **kwargs)

    decoder.kv.forward = forward_then_cancel
    result = decoder.generate(list(range(1, 60)) * 6, GenerationConfig(max_new_tokens=5), cancel=cancel)
    assert result.stop_reason == "cancelled" and result.stats.verifier_passes == 0
    # The cancel lands before the first chunk's first layer: nothing was fed, nothing is kept.
    assert result.stats.prefill_tokens == 0 and len(decoder.kv) == 0

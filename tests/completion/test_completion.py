"""CompletionEngine: FIM prompts, KV reuse across keystrokes, post-processing, drafter switching."""

from __future__ import annotations

import time

import pytest

from engine.completion import CompletionEngine, CompletionRequest
from engine.errors import ConfigError, PromptError
from engine.models.loading import load_model
from engine.text.prompt import ContextBudget

LONG_PREFIX = "".join(f"def function_{i}(value):\n    return value * {i}\n\n" for i in range(60))


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    return CompletionEngine(verifier, None, drafter="lookup",
                            context_budget=ContextBudget(prefix_tokens=96, suffix_tokens=16, other_documents_tokens=0))


def test_typing_on_a_long_file_reuses_the_prompt_window(engine):
    first = engine.complete(CompletionRequest(prefix=LONG_PREFIX + "def next_one(", path="/w/a.py", max_new_tokens=4))
    assert first.stats.prefill_tokens > 60
    typed = ""
    for char in "value):":
        typed += char
        result = engine.complete(CompletionRequest(prefix=LONG_PREFIX + "def next_one(" + typed, path="/w/a.py",
                                                   max_new_tokens=4))
        # The window's start stays put, so each keystroke feeds only the few changed tokens.
        assert result.stats.prefill_tokens <= 6, (typed, result.stats)


def test_window_jumps_when_the_prefix_outgrows_its_slack(engine):
    base = LONG_PREFIX + "x = "
    engine.complete(CompletionRequest(prefix=base, path="/w/b.py", max_new_tokens=2))
    grown = base + "1\n" + "y = 2\n" * 40  # far past the 25 % slack
    result = engine.complete(CompletionRequest(prefix=grown, path="/w/b.py", max_new_tokens=2))
    assert result.prompt_tokens <= 96 + 16 + 8


def test_the_budget_counts_from_when_the_request_arrived(engine):
    prefix = LONG_PREFIX + "def late("
    fresh = engine.complete(CompletionRequest(prefix=prefix, path="/w/d.py", max_new_tokens=6, budget_ms=60_000))
    # Waited 10 s for the worker with a 1 s budget: answered at once, no forward paid for.
    late = engine.complete(CompletionRequest(prefix=prefix, path="/w/d.py", max_new_tokens=6, budget_ms=1_000,
                                             received_at=time.monotonic() - 10))
    assert late.stop_reason == "deadline" and late.token_ids == [] and late.stats.verifier_passes == 0
    assert fresh.stats.emitted > 1


def test_other_documents_feed_prompt_lookup(engine):
    other = "def helper_function(alpha, beta, gamma):\n    return alpha + beta + gamma\n"
    request = CompletionRequest(prefix="def helper_function(alpha, beta, gamma):\n    return alpha +",
                                path="/w/c.py", other_documents=[("/w/other.py", other)], max_new_tokens=8)
    parts = engine.prompt_for(request)
    streams = [engine.tokenizer.decode(s) for s in parts.token_streams]
    assert any("helper_function" in s for s in streams)


def test_a_new_prompt_budget_or_healing_setting_re_anchors(engine):
    """Anchors keep a prompt while the user types; one cut under other settings is not kept."""
    request = CompletionRequest(prefix=LONG_PREFIX + "def g(x):\n    ret", suffix="\n", path="/w/e.py")
    fresh = engine.prompt_for(request)
    assert fresh.healed == " ret"
    default = engine.context_budget
    try:
        engine.context_budget = ContextBudget(prefix_tokens=48, suffix_tokens=4, other_documents_tokens=0)
        shorter = engine.prompt_for(request)
        assert len(shorter.token_ids) < len(fresh.token_ids) and not shorter.anchored
        engine.context_budget = default
        assert engine.prompt_for(request).token_ids == fresh.token_ids
        engine.heal = False
        unhealed = engine.prompt_for(request)
        assert unhealed.healed == "" and "def g(x):\n    ret" in engine.tokenizer.decode(unhealed.token_ids)
        assert "def g(x):\n    ret" not in engine.tokenizer.decode(fresh.token_ids)
        engine.heal = True
        assert engine.prompt_for(request).token_ids == fresh.token_ids
    finally:
        engine.context_budget, engine.heal = default, True


def test_raw_generate_and_post_processed_complete(engine):
    result = engine.generate("import os\n", max_new_tokens=5)
    assert len(result.token_ids) == 5 and result.stats.emitted == 5
    completion = engine.complete(CompletionRequest(prefix="x = [1, 2", suffix="]\n", max_new_tokens=8, multiline=False))
    assert "\n" not in completion.text and completion.multiline is False


def test_switching_drafters(engine):
    engine.set_drafter("none")
    assert engine.generate("a = 1\n", max_new_tokens=3).stats.drafted == 0
    engine.set_drafter("hybrid")  # no draft model: falls back to lookup
    assert engine.drafter_mode == "lookup"
    with pytest.raises(ConfigError, match="unknown drafter 'telepathy'"):
        engine.set_drafter("telepathy")
    engine.set_drafter("medusa")  # no trained heads for this model: falls back to lookup
    assert engine.drafter_mode == "lookup"
    engine.set_drafter("hybrid-tree")  # no draft model: lookup's tree
    assert engine.drafter_mode == "lookup-tree"


def test_empty_prompt_is_refused(engine):
    with pytest.raises(PromptError):
        engine.generate("")


def test_a_cold_window_starts_short_then_grows_with_its_cache_kept(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    budget = ContextBudget(prefix_tokens=96, suffix_tokens=16, other_documents_tokens=0, cold_prefix_tokens=48)
    engine = CompletionEngine(verifier, None, drafter="lookup", context_budget=budget)
    prefix = LONG_PREFIX + "def next_one("
    cold = engine.complete(CompletionRequest(prefix=prefix, path="/w/c.py", max_new_tokens=2))
    assert cold.prompt_tokens <= 48 + 4  # the short window and the FIM control tokens
    # The cursor moves on (a new anchor), less far than a cold window is long: the window keeps its
    # start and grows, its cache reused.
    prefix += "value):\n    return value\n\ndef after("
    grown = engine.complete(CompletionRequest(prefix=prefix, suffix="\n# end\n", path="/w/c.py", max_new_tokens=2))
    assert grown.prompt_tokens > cold.prompt_tokens + 10
    assert grown.stats.reused_tokens >= cold.prompt_tokens - 2  # all but the tail of the old prompt
    # Past the full budget's slack a fresh window is cut: cold again, so short again.
    prefix += "pass\n" + "y = 2\n" * 40
    recut = engine.complete(CompletionRequest(prefix=prefix, suffix="\n# end\n", path="/w/c.py", max_new_tokens=2))
    assert recut.prompt_tokens <= 48 + 16 + 4
    # Without a cold window the first prompt takes the full budget.
    engine.context_budget = ContextBudget(prefix_tokens=96, suffix_tokens=16, other_documents_tokens=0)
    full = engine.complete(CompletionRequest(prefix=LONG_PREFIX + "def next_one(", path="/w/e.py", max_new_tokens=2))
    assert full.prompt_tokens > 80


def test_a_jump_the_cache_does_not_hold_cuts_a_cold_window_rather_than_feed_the_kept_one(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    budget = ContextBudget(prefix_tokens=160, suffix_tokens=16, other_documents_tokens=0, cold_prefix_tokens=48)
    engine = CompletionEngine(verifier, None, drafter="lookup", context_budget=budget)
    cold_tokens = 48 + 16 + 4  # the short window, the suffix and the FIM control tokens
    prefix = LONG_PREFIX + "def next_one("
    engine.complete(CompletionRequest(prefix=prefix, path="/w/j.py", max_new_tokens=2))
    # A short step on keeps the window: its cache holds all but the step.
    step = prefix + "value):\n    return value\n\ndef after("
    kept = engine.complete(CompletionRequest(prefix=step, suffix="\n# end\n", path="/w/j.py", max_new_tokens=2))
    assert kept.prompt_tokens > cold_tokens and kept.stats.prefill_tokens < cold_tokens / 2
    # A jump further down, inside the kept window's slack: feeding the lines between would cost
    # more than a cold window, so a cold window is cut.
    jump = step + "x):\n    return x\n\n" + "".join(f"z_{i} = {i}\n" for i in range(12)) + "def far("
    far = engine.complete(CompletionRequest(prefix=jump, suffix="):\n    pass\n", path="/w/j.py", max_new_tokens=2))
    assert far.prompt_tokens <= cold_tokens
    # Another file's prompt displaces this one's from the cache; coming back cuts a cold window too.
    engine.complete(CompletionRequest(prefix=LONG_PREFIX + "def elsewhere(", path="/w/other.py", max_new_tokens=2))
    back = engine.complete(CompletionRequest(prefix=jump, suffix="):\n    pass\n", path="/w/j.py", max_new_tokens=2))
    assert back.prompt_tokens <= cold_tokens and back.stats.reused_tokens <= cold_tokens / 4

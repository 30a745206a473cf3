"""The engine's compiled step, compiled in the background at load (engine/decoding/compile_in_background.py).

On the tiny float32 pair: while the compile runs (held on an Event) requests are served on the usual
caches; once it is ready the next request takes the compiled caches up (verifier and draft model) and
its passes run inductor's kernels; the completions are exactly those of an engine without it, before
and after. A model the step cannot run (int8 weights) and a compile that raises leave the engine on
its usual caches, with the reason in the backend's stats. Two graphs per model are compiled here.
"""

from __future__ import annotations

import threading

import pytest
from torch.profiler import ProfilerActivity, profile

from engine.backends.local import LocalBackend
from engine.bench.pass_ops import GENERATED_KERNEL
from engine.completion import CompletionEngine, CompletionRequest
from engine.decoding.compile_in_background import CompilePlan
from engine.decoding.compiled_step import CompiledKVCache
from engine.models.loading import load_model
from engine.text.prompt import ContextBudget

pytestmark = pytest.mark.timeout(600)

PLAN = CompilePlan(sizes=(1, 4), lengths=(256,))  # drafts of ≤ 3 tokens: verifier passes of ≤ 4
BUDGET = ContextBudget(prefix_tokens=96, suffix_tokens=16, other_documents_tokens=0)
SPOTS = [("def add(a, b):\n    return ", "\n"), ("class Stack:\n    def push(self, item):\n        ", ""),
         ("for (let i = 0; i < 10; i++) {\n  ", "\n}")]


def request(prefix: str, suffix: str) -> CompletionRequest:
    return CompletionRequest(prefix=prefix, suffix=suffix, path="calc.py", max_new_tokens=16, multiline=True)


def make_engine(verifier_dir, draft_dir, dtype: str = "float32", **options) -> CompletionEngine:
    """Models of its own: the compiled step lays the weights out anew (the same values)."""
    verifier = load_model(str(verifier_dir), dtype=dtype, device="cpu")
    draft = load_model(str(draft_dir), dtype=dtype, device="cpu")
    return CompletionEngine(verifier, draft, drafter="hybrid", max_draft_tokens=3, context_budget=BUDGET, **options)


def answers(engine: CompletionEngine) -> list[tuple[list[int], str]]:
    return [(result.token_ids, result.text) for result in (engine.complete(request(*spot)) for spot in SPOTS)]


@pytest.fixture(scope="module")
def expected(tiny_model_dir, tiny_draft_dir):
    """The engine without the compiled step, twice through the spots (the second time with warm caches)."""
    engine = make_engine(tiny_model_dir, tiny_draft_dir)
    return answers(engine), answers(engine)


@pytest.fixture
def held_compile(monkeypatch):
    """The compile thread waits at its first graph until the test sets the event."""
    release = threading.Event()
    warm = CompiledKVCache.warm

    def held(cache, *args, **kwargs):
        release.wait()
        return warm(cache, *args, **kwargs)

    monkeypatch.setattr(CompiledKVCache, "warm", held)
    yield release
    release.set()
    for thread in threading.enumerate():  # a test that failed early: its compile ends before the process does
        if thread.name == "quickdraft-compile":
            thread.join()


def test_requests_are_served_while_it_compiles_and_the_answers_match_after_the_switch(
        tiny_model_dir, tiny_draft_dir, expected, held_compile):
    engine = make_engine(tiny_model_dir, tiny_draft_dir, compiled_step=PLAN)
    backend = LocalBackend(engine)
    usual = engine.decoder.kv
    assert answers(engine) == expected[0]  # served on the usual caches: the compile has not started a graph
    assert backend.stats()["compiled_step"]["state"] == "compiling" and engine.decoder.kv is usual

    held_compile.set()
    assert engine.compiled.wait(timeout=600)
    stats = backend.stats()["compiled_step"]
    assert stats["state"].startswith("ready in ") and stats["graphs"] == 4 and not stats["taken_up"]
    assert engine.decoder.kv is usual  # nothing switches until the next request starts

    with profile(activities=[ProfilerActivity.CPU]) as recorded:
        after = answers(engine)
    assert after == expected[1]
    assert isinstance(engine.decoder.kv, CompiledKVCache) and engine.decoder.drafter.parts[-1].kv is engine._draft_cache
    assert isinstance(engine._draft_cache, CompiledKVCache) and backend.stats()["compiled_step"]["taken_up"]
    assert any(GENERATED_KERNEL.match(event.name) for event in recorded.events()), "no compiled pass ran"
    # Only the shapes compiled at load run compiled: none compiled inside a request.
    assert engine.decoder.kv.warmed == {(1, 256), (4, 256)} == engine._draft_cache.warmed

    engine.set_drafter("lookup-tree")  # trees need the usual cache's mask input
    assert engine.decoder.kv is usual and engine.complete(request(*SPOTS[0])).token_ids
    engine.set_drafter("hybrid")
    assert engine.decoder.kv is not usual and answers(engine) == expected[1]


def test_a_model_the_step_cannot_run_leaves_the_usual_caches(tiny_model_dir, tiny_draft_dir):
    engine = make_engine(tiny_model_dir, tiny_draft_dir, dtype="int8", compiled_step=PLAN)
    state = LocalBackend(engine).stats()["compiled_step"]["state"]
    assert state == "failed: ValueError: the static Qwen2 step needs float nn.Linear projections, not Int8Linear"
    usual = engine.decoder.kv
    assert engine.complete(request(*SPOTS[0])).token_ids and engine.decoder.kv is usual


def test_a_compile_that_raises_leaves_the_usual_caches(tiny_model_dir, tiny_draft_dir, expected, monkeypatch):
    def fails(cache, *args, **kwargs):
        raise RuntimeError("inductor could not build a kernel")

    monkeypatch.setattr(CompiledKVCache, "warm", fails)
    engine = make_engine(tiny_model_dir, tiny_draft_dir, compiled_step=PLAN)
    assert engine.compiled.wait(timeout=60)
    assert LocalBackend(engine).stats()["compiled_step"]["state"] == "failed: RuntimeError: inductor could not build a kernel"
    usual = engine.decoder.kv
    assert answers(engine) == expected[0] and engine.decoder.kv is usual


def test_the_plan_covers_a_verifier_pass_and_the_context():
    cpu = CompilePlan.for_engine(8, ContextBudget(prefix_tokens=384, suffix_tokens=16, other_documents_tokens=0))
    assert cpu == CompilePlan(sizes=(1, 2, 4, 8, 16), lengths=(512, 1024))
    assert CompilePlan.for_engine(3, ContextBudget()).lengths == (512, 4096)
    assert CompilePlan.for_engine(3, ContextBudget()).sizes == (1, 2, 4)

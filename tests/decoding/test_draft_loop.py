"""The draft loop (engine/decoding/draft_loop.py) drafts exactly what the per-token draft model drafts.

Two drafters on the same kind of cache, one token by token (`device_loop=False`), one as a device
loop, propose after the same growing sequences (accepted prefixes, a correction, a prompt that
shrinks): the same drafts, and their caches hold the same tokens, in float32, with thresholds that
cut early, never, and always. Host reads are counted with a torch function mode (what `int()`,
`float()`, `.tolist()` call): the loop itself reads nothing, a propose reads once. The decoder's
greedy exactness with the loop is test_static_exact.py's and test_compiled_step.py's suites (their
"draft" and "hybrid" drafters now run it: checked here).
"""

from __future__ import annotations

import functools

import pytest
import torch
from test_compiled_step import quick_draft_shape
from torch.overrides import TorchFunctionMode

from engine.decoding.compiled_step import CompiledKVCache
from engine.decoding.draft_loop import DraftLoop, supports
from engine.decoding.kv import KVCache
from engine.decoding.kv_static import StaticKVCache
from engine.decoding.verify import SamplingParams
from engine.drafters import DrafterConfig, make_drafter
from engine.drafters.draft_model import DraftModelDrafter

CACHES = {
    "bucketed": functools.partial(StaticKVCache, mode="bucketed"),
    "step": functools.partial(CompiledKVCache, compiled=False),
}
HOST_READS = {"tolist", "item", "__int__", "__float__", "__bool__", "__index__", "cpu", "numpy"}


class HostReads(TorchFunctionMode):
    """Records every tensor method that hands a value to the host (on CUDA each one waits for the GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.calls.append(name)
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def models(draft_models):
    """The conftest's tiny Qwen2 (64 tokens) and the quick-draft shape (the bench's draft model)."""
    return {"tiny": draft_models["noisy"], "quick-draft": quick_draft_shape(seed=6)}


def pair(model, cache: str, threshold: float, k: int = 8):
    """The per-token drafter and the device-loop one, each with its own cache of the same kind."""
    def make(loop: bool) -> DraftModelDrafter:
        return DraftModelDrafter(model, max_tokens=k, initial_length=k, confidence_threshold=threshold,
                                 kv_factory=CACHES[cache], device_loop=loop)
    return make(False), make(True)


def sequences(vocab: int, seed: int = 0):
    """What a decode feeds the drafter: a prompt, then each round an accepted prefix and a correction;
    now and then a new prompt sharing part of the old one (a keystroke)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (12,), generator=generator).tolist()
    for round_ in range(10):
        draft = yield tokens
        accepted = int(torch.randint(0, len(draft) + 1, (1,), generator=generator))
        tokens = tokens + draft[:accepted] + torch.randint(0, vocab, (1,), generator=generator).tolist()
        if round_ == 6:
            tokens = tokens[:9] + [3]


@pytest.mark.parametrize("threshold", [0.0, 0.6, 0.95, 1.1])
@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("name", ["tiny", "quick-draft"])
def test_the_loop_drafts_what_the_per_token_drafter_drafts(models, name, cache, threshold):
    model = models[name]
    today, loop = pair(model, cache, threshold)
    assert today.loop is None and loop.loop is not None
    feed = sequences(model.config.vocab_size)
    tokens, lengths = next(feed), []
    try:
        while True:
            budget = today.length.value
            expected = today.propose(tokens, 8, SamplingParams())
            drafted = loop.propose(tokens, 8, SamplingParams())
            assert drafted.tokens == expected.tokens and drafted.probs is None
            assert loop.kv.tokens == today.kv.tokens  # the tokens fed past the cut are forgotten
            lengths.append((len(expected.tokens), budget))
            for drafter in (today, loop):
                drafter.observe(expected, len(expected.tokens) // 2)  # the adaptive length: k changes
            tokens = feed.send(expected.tokens)
    except StopIteration:
        pass
    if threshold == 0:
        assert all(n == budget for n, budget in lengths)  # never cut
    if threshold > 1:
        assert all(n == 1 for n, _ in lengths) and max(b for _, b in lengths) > 1  # cut after the first token


def test_the_compiled_loop_drafts_what_the_per_token_drafter_drafts(models):
    """The compiled step (inductor on this machine), fed by the loop's device tokens: the same drafts."""
    model = models["quick-draft"]
    compiled = functools.partial(CompiledKVCache, buckets=(1, 8))
    today = DraftModelDrafter(model, max_tokens=8, initial_length=8, confidence_threshold=0.5, kv_factory=compiled,
                              device_loop=False)
    loop = DraftModelDrafter(model, max_tokens=8, initial_length=8, confidence_threshold=0.5, kv_factory=compiled)
    assert loop.loop is not None
    prompt = torch.randint(0, model.config.vocab_size, (20,), generator=torch.Generator().manual_seed(1)).tolist()
    for tokens in (prompt, prompt + [5], prompt[:15] + [7, 8]):
        assert loop.propose(tokens, 8, SamplingParams()).tokens == today.propose(tokens, 8, SamplingParams()).tokens
        assert loop.kv.tokens == today.kv.tokens


@pytest.mark.parametrize("cache", sorted(CACHES))
def test_the_loop_reads_nothing_back_and_a_propose_reads_once(models, cache):
    model = models["tiny"]
    today, loop = pair(model, cache, threshold=0.0)
    tokens = [5, 9, 2, 7, 1, 3]
    with HostReads() as reads:
        loop.propose(tokens, 8, SamplingParams())
    assert reads.calls == ["tolist"]  # the k tokens and their probabilities, together
    with HostReads() as reads:
        today.propose(tokens, 8, SamplingParams())
    assert len(reads.calls) == 2 * 8 - 1  # the per-token loop: a token and its probability each (what it replaces)
    logits = loop.kv.forward([4])[-1]
    start = len(loop.kv.tokens)
    with HostReads() as reads:
        out = loop.loop.run(logits, torch.arange(start, start + 7), tuple(range(start + 1, start + 8)))
    assert reads.calls == [] and out.shape == (2, 8) and out.device == logits.device


def test_sampling_keeps_the_per_token_path(models):
    model = models["tiny"]
    today, loop = pair(model, "bucketed", threshold=0.0)
    params = SamplingParams(temperature=0.8)
    for drafter in (today, loop):
        drafter.generator = torch.Generator().manual_seed(3)
    expected, drafted = (d.propose([1, 2, 3, 4], 6, params) for d in (today, loop))
    assert drafted.tokens == expected.tokens and torch.equal(drafted.probs, expected.probs)


def test_bad_k_and_caches_without_device_steps(models):
    model = models["tiny"]
    cache = StaticKVCache(model, mode="bucketed", capacity=32)
    loop = DraftLoop(cache)
    logits = cache.forward(list(range(1, 11)))[-1]
    with pytest.raises(ValueError, match="at least one token"):
        loop.draft(logits, 0)
    assert cache.tokens == list(range(1, 11))
    # Past the buffers: the cache grows, as a pass would make it, and the drafts stay exact.
    drafted, _ = loop.draft(logits, 15)
    assert cache.capacity > 32 and len(drafted) == 15 and len(cache.tokens) == 10 + 14
    reference = StaticKVCache(model, mode="bucketed")
    expected = [int(reference.forward(list(range(1, 11)))[-1].argmax())]
    for _ in range(14):
        expected.append(int(reference.forward(expected[-1:])[-1].argmax()))
    assert drafted == expected
    # Past the model's context: the error a pass gives.
    cache.crop(model.config.max_position_embeddings - 2)
    cache.tokens += [0] * (model.config.max_position_embeddings - 2 - len(cache.tokens))
    with pytest.raises(ValueError, match="context"):
        loop.draft(logits, 8)
    for no_steps in (KVCache(model), StaticKVCache(model, mode="eager"), CompiledKVCache(model, compiled=False,
                                                                                        buckets=(8,))):
        assert not supports(no_steps)
        with pytest.raises(ValueError, match="device steps"):
            DraftLoop(no_steps)
    with pytest.raises(ValueError, match="device_loop needs"):
        DraftModelDrafter(model, device_loop=True)  # the dynamic cache
    assert DraftModelDrafter(model).loop is None  # the CPU default: token by token, as before
    with pytest.raises(ValueError, match="CUDA"):
        DraftLoop(StaticKVCache(model, mode="bucketed"), capture=True)


@pytest.mark.parametrize("mode", ["draft", "hybrid"])
def test_the_exactness_suites_drafters_run_the_loop(models, mode):
    """test_static_exact.py and test_compiled_step.py build their drafters like this: they check the loop."""
    for factory in CACHES.values():
        drafter = make_drafter(mode, models["tiny"], DrafterConfig(max_draft_tokens=4), kv_factory=factory)
        model_drafter = drafter if mode == "draft" else drafter.parts[-1]
        assert model_drafter.loop is not None

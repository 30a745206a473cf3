"""Token healing: where the prompt is cut, which tokens may retype the cut, and exactness.

The cut is checked with Qwen2.5-Coder's real tokenizer (when pulled) and a StarCoder-style
one (GPT-2 pre-tokenizer, toy vocabulary); the decoding under the constraint is checked
token for token against Hugging Face `generate` with the same mask as a logits processor.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import LogitsProcessor, LogitsProcessorList

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.tiny_models import noisy_copy, random_feature_head, random_heads  # noqa: E402
from support.toy_tokenizers import make_tokenizer  # noqa: E402

from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder  # noqa: E402
from engine.decoding.draft import Draft  # noqa: E402
from engine.drafters import DrafterConfig, make_drafter  # noqa: E402
from engine.text.fim import detect_fim_template  # noqa: E402
from engine.text.healing import (  # noqa: E402
    HealingConstraint,
    after_healed,
    healing_constraint,
    skip_chars,
    stops_outside,
    vocabulary,
)
from engine.models.tiny import build_model, build_tokenizer  # noqa: E402
from engine.modes import DRAFTER_MODES  # noqa: E402
from engine.text.prompt import _Encoder, build_prompt  # noqa: E402
from engine.decoding.tree import TokenTree  # noqa: E402

QWEN_DIR = Path(os.environ.get("QUICKDRAFT_HOME") or Path.home() / ".cache" / "quickdraft") / "models" / "qwen2.5-coder-0.5b"


@functools.cache
def _qwen():
    if not (QWEN_DIR / "tokenizer.json").exists():  # real_model tests: make test pulls it first
        pytest.fail("the real Qwen2.5-Coder tokenizer is not pulled (quickdraft models pull qwen2.5-coder-0.5b)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN_DIR))


@pytest.fixture(scope="module", params=[pytest.param("qwen", marks=pytest.mark.real_model), "starcoder"])
def tokenizer(request):
    return _qwen() if request.param == "qwen" else make_tokenizer("starcoder")


def healed(tok, prefix: str) -> str:
    return build_prompt(tok, detect_fim_template(tok), prefix, "\n", heal=True).healed


def encode(tok, text: str) -> list[int]:
    return _Encoder(tok, detect_fim_template(tok).stop_tokens).encode(text)


# -- where the prompt is cut --------------------------------------------------------------------

INDENTED = "def f(xs):\n    for x in xs:\n        "

CUT_TABLE = [
    # (prefix, what follows the cursor, healed text with Qwen's tokenizer, with StarCoder's)
    (INDENTED, "print(x)", " ", " "),  # the last blank of the run joins the word: "       " + " print"
    ("def add(a, b):\n    ret", "urn a + b", " ret", " ret"),  # a partial identifier
    ("total = a +", "= 1", " +", " +"),  # a partial operator: " +" + "=" is " +="
    ("print(", "x)", "(", "("),  # "(" joins what follows
    ("x = ", "1", " ", " "),
    ("def f():", "\n    pass", "():", "():"),  # "():" + "\n" or "." is one token
    ("def f():\n", "    pass", "", "\n"),  # StarCoder folds the newline into the indentation
    ("", "x = 1", "", ""),
]


@pytest.mark.parametrize("prefix, rest, qwen, starcoder", CUT_TABLE)
def test_the_prompt_is_cut_at_the_last_stable_token_boundary(tokenizer, prefix, rest, qwen, starcoder):
    cut = healed(tokenizer, prefix)
    assert cut == (qwen if tokenizer.vocab_size > 100_000 else starcoder)
    # What stays in the prompt is how the finished text is tokenized: the cut is a real boundary.
    kept = encode(tokenizer, prefix[: len(prefix) - len(cut)])
    assert encode(tokenizer, prefix + rest)[: len(kept)] == kept


@pytest.mark.real_model
def test_without_healing_qwen_ends_on_a_token_the_finished_text_does_not_have():
    """The issue's case: the whole indentation run is one token the finished line never has."""
    tok = _qwen()
    whole = encode(tok, INDENTED)
    assert encode(tok, INDENTED + "print(x)")[: len(whole)] != whole


def test_a_long_partial_word_is_left_alone(tokenizer):
    prefix = "value = " + "a" * 40
    assert healed(tokenizer, prefix) == ""
    assert build_prompt(tokenizer, detect_fim_template(tokenizer), prefix, "", heal=False).healed == ""


def test_healing_keeps_the_prompt_otherwise_unchanged(tokenizer):
    template = detect_fim_template(tokenizer)
    plain = build_prompt(tokenizer, template, INDENTED, "\n", heal=False)
    cut = build_prompt(tokenizer, template, INDENTED, "\n", heal=True)
    assert cut.prefix == plain.prefix == INDENTED  # the window kept, cut text included
    assert cut.text == plain.text.replace(INDENTED, INDENTED[:-1])
    assert cut.token_ids == tokenizer(cut.text, add_special_tokens=False)["input_ids"]


# -- which tokens may come next ------------------------------------------------------------------


def texts(tok, mask: torch.Tensor) -> set[str]:
    return {tok.decode([i]) for i in mask.nonzero().flatten().tolist()}


def test_allowed_tokens_retype_the_cut_then_anything():
    tok = make_tokenizer("starcoder")
    constraint = healing_constraint(tok, " ret", len(tok))
    first = texts(tok, constraint.allowed([]))
    assert {" return", " r", " "} <= first
    assert all(t.startswith(" ret") or " ret".startswith(t) for t in first)
    assert "<|endoftext|>" not in first and "" not in first  # no control token while retyping
    after_r = texts(tok, constraint.allowed([tok.convert_tokens_to_ids("Ġr")]))
    assert "e" in after_r and all(t.startswith("et") or "et".startswith(t) for t in after_r)
    ret = tok.encode(" return", add_special_tokens=False)
    assert len(ret) == 1 and constraint.allowed(ret) is None  # covered: free


def test_at_an_indentation_the_first_character_after_the_cursor_is_code():
    tok = make_tokenizer("starcoder")
    constraint = healing_constraint(tok, " ", len(tok), line_before="        ")
    first = texts(tok, constraint.allowed([]))
    assert " " in first and "  " not in first  # " " then code, never a deeper blank run
    assert all(t == " " or (t.startswith(" ") and t[1] not in " \t\n\r\x0b\x0c") for t in first)
    space = tok.convert_tokens_to_ids("Ġ")
    then = constraint.allowed([space])  # the blank retyped on its own: the next token starts the code
    assert then is not None and not any(t[:1] in " \t\n\r\x0b\x0c" for t in texts(tok, then) if t)
    assert bool(then[tok.eos_token_id])  # ending here is allowed
    word = tok.convert_tokens_to_ids("Ġreturn")
    assert constraint.allowed([word]) is None and constraint.allowed([space, word]) is None
    # Mid-line, no removed text: nothing to constrain.
    assert healing_constraint(tok, "", len(tok), line_before="x = ") is None
    assert healing_constraint(tok, "", len(tok), line_before="    ") is not None


def test_masks_cover_the_logits_width_and_padding_rows_stay_off():
    tok = make_tokenizer("starcoder")
    constraint = healing_constraint(tok, "(", len(tok) + 7)  # models pad their vocabulary
    mask = constraint.allowed([])
    assert mask.dtype == torch.bool and mask.shape == (len(tok) + 7,) and not mask[len(tok):].any()


@pytest.mark.real_model
def test_the_real_qwen_vocabulary_is_read_byte_for_byte():
    tok = _qwen()
    vocab = vocabulary(tok)
    assert vocabulary(tok) is vocab  # built once per tokenizer
    for text in (" return", "       ", "\n", "é", "<|fim_prefix|>"):
        ids = tok.encode(text, add_special_tokens=False)
        assert b"".join(vocab.token_bytes[i] or b"" for i in ids) == (b"" if text.startswith("<|") else text.encode())
    multibyte = tok.encode("→", add_special_tokens=False)  # a character split over byte tokens
    constraint = healing_constraint(tok, "→", 151936)
    assert bool(constraint.allowed([])[multibyte[0]])


def test_helpers():
    assert after_healed(" return x", " ret") == "urn x"
    assert after_healed(" re", " ret") == ""  # stopped before the cursor
    assert stops_outside(["\n", ", b)"], "\n       ") == [", b)"]  # a newline folded into the cut text
    assert stops_outside(["\n", "else"], " ") == ["\n", "else"]
    seen: list[str] = []
    forward = skip_chars(seen.append, 4)
    for delta in (" r", "et", "urn", " x"):
        forward(delta)
    assert "".join(seen) == "urn x"
    assert skip_chars(None, 3) is None
    with pytest.raises(ValueError):
        HealingConstraint(vocabulary(make_tokenizer("starcoder")), "", 10)


# -- exactness: the decoder under the constraint is `generate` under the same mask ------------------

class MaskProcessor(LogitsProcessor):
    def __init__(self, constraint, prompt_length: int) -> None:
        self.constraint, self.prompt_length = constraint, prompt_length

    def __call__(self, input_ids, scores):
        mask = self.constraint.allowed(input_ids[0, self.prompt_length:].tolist())
        return scores if mask is None else scores.masked_fill(~mask, float("-inf"))


@pytest.fixture(scope="module")
def healing_models():
    tok = build_tokenizer()
    verifier = build_model(len(tok), seed=5)
    return tok, verifier, {"noisy": noisy_copy(verifier, seed=6, scale=0.3), "identical": verifier}


def masked_generate(model, prompt: list[int], constraint, max_new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                         logits_processor=LogitsProcessorList([MaskProcessor(constraint, len(prompt))]),
                         eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


PREFIXES = [INDENTED, "def add(a, b):\n    ret", "x = [1, 2, 3]\ntotal = a +", "print(", "for i in range(10):\n\t",
            "self.items.app", "x = 1"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.sampled_from(PREFIXES), mode=st.sampled_from(DRAFTER_MODES),
       draft=st.sampled_from(["noisy", "identical"]), k=st.sampled_from([1, 3, 8]), max_new_tokens=st.integers(1, 12))
def test_healed_decoding_equals_masked_generate(healing_models, prefix, mode, draft, k, max_new_tokens):
    """Every drafting mode, chains and token trees (Medusa with random heads) alike."""
    tok, verifier, drafts = healing_models
    parts = build_prompt(tok, detect_fim_template(tok), prefix, "\n    return total\n", heal=True)
    line_before = prefix.rsplit("\n", 1)[-1]
    constraint = healing_constraint(tok, parts.healed, verifier.config.vocab_size, line_before)
    heads = random_heads(verifier, seed=k) if mode == "medusa" else None
    feature_head = random_feature_head(verifier, seed=k) if mode == "feature" else None
    drafter = make_drafter(mode, None if mode in ("medusa", "feature") else drafts[draft],
                           DrafterConfig(max_draft_tokens=k), verifier=verifier, heads=heads, feature_head=feature_head)
    decoder = SpeculativeDecoder(verifier, drafter, tok)
    config = GenerationConfig(max_new_tokens=max_new_tokens, max_draft_tokens=k, constraint=constraint)
    with torch.inference_mode():  # as CompletionEngine runs it (the decoder masks its logits in place)
        result = decoder.generate(parts.token_ids, config)
    reference = masked_generate(verifier, parts.token_ids, constraint, max_new_tokens) if constraint else None
    if constraint is None:
        assert not parts.healed
    else:
        assert result.token_ids == reference
        decoded = tok.decode(result.token_ids)
        assert decoded.startswith(parts.healed) or parts.healed.startswith(decoded)


class TwoBranchTree:
    """A tree drafter that offers, at every step, the rest of two fixed outputs as two branches."""

    name = "two-branch"

    def __init__(self, *outputs: list[int]) -> None:
        self.outputs, self.prompt_length = outputs, 0

    def start(self, prompt_ids, context_streams=()) -> None:
        self.prompt_length = len(prompt_ids)

    def propose(self, tokens, max_tokens, sampling) -> Draft:
        done = len(tokens) - self.prompt_length
        tree = TokenTree()
        for output in self.outputs:
            tree.add_path(output[done:done + max_tokens])
        return Draft(list(tree.tokens), None, self.name, tree)

    def observe(self, draft, accepted) -> None:
        pass


def test_a_token_tree_is_verified_under_the_constraint(healing_models):
    """While the first tokens are constrained the tree is still used, and its rows are masked:
    the branch the unconstrained verifier would take is refused, the constrained one accepted."""
    tok, verifier, _ = healing_models
    parts = build_prompt(tok, detect_fim_template(tok), INDENTED, "\n    return total\n", heal=True)
    constraint = healing_constraint(tok, parts.healed, verifier.config.vocab_size, INDENTED.rsplit("\n", 1)[-1])
    healed = masked_generate(verifier, parts.token_ids, constraint, 8)
    free = masked_generate(verifier, parts.token_ids, AllowAll(), 8)
    assert free[0] != healed[0]  # the constraint matters here
    decoder = SpeculativeDecoder(verifier, TwoBranchTree(free, healed), tok)
    with torch.inference_mode():
        result = decoder.generate(parts.token_ids, GenerationConfig(max_new_tokens=8, max_draft_tokens=8,
                                                                    constraint=constraint))
    assert result.token_ids == healed
    assert result.stats.verifier_passes == 1  # the whole constrained branch accepted in one pass


class AllowAll:
    def allowed(self, emitted):
        return None


def test_completion_engine_heals_and_shows_only_what_follows_the_cursor(tiny_model_dir):
    from engine.completion import CompletionEngine, CompletionRequest
    from engine.models.loading import load_model

    engine = CompletionEngine(load_model(str(tiny_model_dir), dtype="float32", device="cpu"), None, drafter="lookup")
    for prefix in (INDENTED, "def add(a, b):\n    ret"):
        parts = engine.prompt_for(CompletionRequest(prefix=prefix, suffix="\n"))
        assert parts.healed
        result = engine.complete(CompletionRequest(prefix=prefix, suffix="\n", max_new_tokens=6, multiline=False))
        output = engine.tokenizer.decode(result.token_ids, skip_special_tokens=True)
        assert output.startswith(parts.healed)  # the model retyped the cut
        assert output[len(parts.healed):].startswith(result.raw_text)  # and only the rest is shown
        if prefix == INDENTED:
            assert result.raw_text[:1] not in (" ", "\t")  # code right at the typed indentation

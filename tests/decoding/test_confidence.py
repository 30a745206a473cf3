"""The verifier's log-probs of emitted tokens, answer confidence, the gate, and its setting."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import pytest
import torch

from engine.completion import CompletionEngine, CompletionRequest
from engine.decoding.confidence import LOW_CONFIDENCE, Confidence, Judged, gate, judge, shown_chars
from engine.decoding.decoder import GenerationConfig, SpeculativeDecoder
from engine.drafters import DrafterConfig, make_drafter
from engine.models.loading import load_model
from engine.text.prompt import ContextBudget
from lsp_server.cli import main as cli_main
from lsp_server.workspace.settings import Settings, apply_client_settings
from lsp_server.workspace.telemetry import RequestRecord, Telemetry

from support.tiny_models import TINY_VOCAB

PROMPT = [5, 9, 12, 5, 9, 12, 7, 5, 9, 12, 3, 5, 9]  # repeats: lookup has drafts to propose


def reference_logprobs(verifier, prompt: list[int], output: list[int]) -> torch.Tensor:
    """A plain forward over prompt + output: log_softmax at each emitted token's position."""
    with torch.inference_mode():
        logits = verifier(torch.tensor([prompt + output])).logits[0].float()
    rows = logits[len(prompt) - 1: len(prompt) - 1 + len(output)].log_softmax(dim=-1)
    return rows.gather(1, torch.tensor(output).view(-1, 1)).view(-1)


@pytest.mark.parametrize("mode", ["none", "lookup", "lookup-tree", "draft", "draft-tree"])
def test_logprobs_are_the_verifiers_for_every_emitted_token(verifier, draft_models, mode):
    drafter = None if mode == "none" else make_drafter(mode, draft_models["noisy"], DrafterConfig(max_draft_tokens=4))
    decoder = SpeculativeDecoder(verifier, drafter)
    with torch.inference_mode():
        result = decoder.generate(PROMPT, GenerationConfig(max_new_tokens=20, max_draft_tokens=4, eos_token_ids=[7]))
    assert len(result.logprobs) == len(result.token_ids) > 0
    expected = reference_logprobs(verifier, PROMPT, result.token_ids)
    # Several-token passes and a one-shot forward sum in different orders: a few float32 ulps of
    # logits that reach ~|30|, times the log-sum-exp over the vocabulary.
    tolerance = 64 * torch.finfo(torch.float32).eps * max(1.0, float(expected.abs().max())) * math.log(TINY_VOCAB)
    assert torch.allclose(torch.tensor(result.logprobs), expected, atol=tolerance, rtol=0)
    assert all(lp <= 0 for lp in result.logprobs)


def test_shown_chars_follow_the_raw_text_to_the_shown_texts_last_character():
    assert shown_chars("return x + 1\n    y = 2", "return x + 1") == len("return x + 1")
    assert shown_chars("if a:\n        b()", "if a:\n    b()") == len("if a:\n        b()")  # blanks dropped at line starts
    assert shown_chars("f(a", "f(a)") == 3  # a closer re-appended past the raw text
    assert shown_chars("abc", "") == 0


class CharTokenizer:
    """One character per token id (chr), enough to place tokens in the text."""

    def decode(self, ids, skip_special_tokens=True):
        return "".join(chr(i) for i in ids)


@dataclass
class Decoded:
    """What judge() reads of a GenerationResult."""

    text: str
    token_ids: list[int]
    logprobs: list[float]


def decoded(text: str, probabilities: list[float]) -> Decoded:
    return Decoded(text, [ord(c) for c in text], [math.log(p) for p in probabilities])


def test_confidence_counts_the_tokens_of_the_text_shown():
    result = decoded("ab\ncd", [0.9, 0.5, 0.01, 0.01, 0.01])
    confidence = judge(CharTokenizer(), result, "ab").confidence()  # "ab" shown, the rest cut
    assert confidence.tokens == 2
    assert confidence.mean == pytest.approx(math.sqrt(0.9 * 0.5))
    assert confidence.min == pytest.approx(0.5)
    assert judge(CharTokenizer(), result, "ab\ncd").confidence().min == pytest.approx(0.01)
    assert judge(CharTokenizer(), result, "") is None


def test_the_healed_characters_count_but_are_not_the_users_to_type():
    # "x" retypes the end of the prefix; the shown text is what follows it.
    judged = judge(CharTokenizer(), decoded("xabc", [0.2, 0.3, 0.9, 0.9]), "abc", healed="x")
    assert judged.starts == (-1, 0, 1, 2) and judged.confidence().tokens == 4
    assert judged.confidence(1).mean == pytest.approx(0.9)


def test_a_withheld_answer_shows_after_its_unsure_start_is_typed():
    tokenizer = CharTokenizer()
    result = decoded("for x in y:", [0.01] + [0.8] * 10)
    judged = judge(tokenizer, result, result.text)
    assert judged.confidence().mean < 0.6  # the start drags the whole below the gate
    assert judged.show_after(0.6, len(result.text)) == 1  # typed "f", the rest is sure
    assert judged.show_after(0.95, len(result.text)) is None  # nothing left would pass
    assert Judged((0, 1), (math.log(0.1), math.log(0.9)), typed_alike=0).show_after(0.6, 2) is None  # differs at once
    # The gate keeps the text and where it may show; the answer itself shows nothing.
    completion = Gated("for x in y:", 2, judged.confidence())
    withheld = gate(completion, 0.6, judged)
    assert (withheld.text, withheld.replace_after, withheld.withheld) == ("", 0, LOW_CONFIDENCE)
    assert (withheld.held.text, withheld.held.replace_after, withheld.held.show_after) == ("for x in y:", 2, 1)
    assert gate(completion, 0.95, judged).held is None
    assert gate(completion, 0.3, judged) is completion


@dataclass(frozen=True)
class Gated:
    """The fields of a CompletionResult the gate reads and replaces."""

    text: str
    replace_after: int
    confidence: Confidence
    withheld: str = ""
    held: object = None


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    verifier = load_model(str(tiny_model_dir), dtype="float32", device="cpu")
    return CompletionEngine(verifier, None, drafter="lookup",
                            context_budget=ContextBudget(prefix_tokens=96, suffix_tokens=16, other_documents_tokens=0))


def request(min_confidence: float | None, path: str) -> CompletionRequest:
    return CompletionRequest(prefix="def total(values):\n    return sum(", suffix=")\n", path=path, language="python",
                             max_new_tokens=8, multiline=False, min_confidence=min_confidence)


def test_the_gate_withholds_with_a_reason_and_never_changes_text(engine):
    off = engine.complete(request(0.0, "/w/off.py"))
    assert off.text and off.withheld == "" and off.confidence is not None
    assert 0 < off.confidence.min <= off.confidence.mean <= 1
    high = engine.complete(request(1.0, "/w/high.py"))  # a random model is never certain
    assert high.text == "" and high.replace_after == 0 and high.withheld == LOW_CONFIDENCE
    # Judged the same, only withheld (another path reuses other cached rows: float32 rounding differs).
    assert high.raw_text == off.raw_text and high.confidence.mean == pytest.approx(off.confidence.mean, rel=1e-4)
    at = engine.complete(request(off.confidence.mean * (1 - 1e-3), "/w/at.py"))  # just under: shown as it was
    assert (at.text, at.replace_after, at.withheld) == (off.text, off.replace_after, "")


def test_the_setting_is_validated_not_crashed_on(caplog):
    assert apply_client_settings(Settings(), {"minConfidence": 0.4}).min_confidence == 0.4
    assert apply_client_settings(Settings(), {"quickdraft": {"minConfidence": 1}}).min_confidence == 1.0
    with caplog.at_level(logging.WARNING):
        for bad in (1.5, -0.1, "high", True, None, [0.3]):
            assert apply_client_settings(Settings(min_confidence=0.2), {"minConfidence": bad}).min_confidence == 0.2
    assert sum("minConfidence" in m for m in caplog.messages) == 6


@pytest.mark.parametrize("bad", ["2", "-0.5", "sure"])
def test_the_serve_flag_says_what_it_expects(bad, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["serve", "--min-confidence", bad])
    assert exit_.value.code == 2 and "expected a number from 0 to 1" in capsys.readouterr().err


def test_telemetry_counts_withheld_answers():
    telemetry = Telemetry()
    telemetry.record(RequestRecord("1", "file:///a.py", "model", 120.0, 200.0, withheld=LOW_CONFIDENCE, confidence=0.2))
    telemetry.record(RequestRecord("2", "file:///a.py", "model", 120.0, 200.0))
    assert telemetry.snapshot("lookup")["counts"]["withheld"] == 1


def test_confidence_dict_is_plain_data():
    assert Confidence(0.5, 0.25, 3).to_dict() == {"mean": 0.5, "min": 0.25, "tokens": 3}


def test_an_unset_threshold_is_the_verifiers_measured_default(engine, monkeypatch):
    from engine.decoding import confidence

    assert confidence.default_min_confidence("qwen2.5-coder-0.5b") == 0.5
    assert engine.complete(request(None, "/w/default.py")).withheld == ""  # no threshold measured for a tiny model
    monkeypatch.setitem(confidence.DEFAULT_MIN_CONFIDENCE, engine.verifier.name, 1.0)
    assert engine.complete(request(None, "/w/default.py")).withheld == LOW_CONFIDENCE
    assert engine.complete(request(0.0, "/w/default.py")).withheld == ""  # the user's 0 turns it off

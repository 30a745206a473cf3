"""One request's output as the editor sees it: the decoder's text past the healed part, post-processed,
gated on confidence (`CompletionResult`), and the answers handed over before the decode ends (`Answers`)."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from engine.decoding.confidence import Confidence, Held, gate, judge
from engine.decoding.decoder import GenerationResult
from engine.decoding.stops import StopReason
from engine.stats import DecodeStats
from engine.text.cursor import Cursor
from engine.text.document_prompts import Prompt
from engine.text.healing import after_healed
from engine.text.postprocess import postprocess


@dataclass
class CompletionResult:
    text: str  # what the editor inserts at the cursor
    replace_after: int  # characters after the cursor, on its line, that `text` replaces
    raw_text: str  # the verifier's output before post-processing
    token_ids: list[int]
    stop_reason: str
    multiline: bool
    prompt_tokens: int
    stats: DecodeStats = field(default_factory=DecodeStats)
    anchored: bool = False  # the prompt continued an anchor (typed text in the middle)
    confidence: Confidence | None = None  # of the text shown (before the gate); None: nothing to judge
    withheld: str = ""  # why nothing is shown although the model answered (confidence.LOW_CONFIDENCE)
    held: Held | None = None  # a withheld answer that shows once the user types its start
    provisional: bool = False  # the draft model's, shown before the verifier's verdict (engine/backends/verdict.py)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["stats"] = self.stats.to_dict()
        return data


@dataclass
class Answers:
    """One request's decoder output as the editor sees it (past the healed text, post-processed,
    gated on confidence), and the answers handed to `on_answer` before the decode ends."""

    tokenizer: object
    cursor: Cursor
    prompt: Prompt
    min_confidence: float
    on_answer: Callable[[CompletionResult], None] | None
    answered: bool = False  # on_answer was called

    def shown(self, result: GenerationResult, multiline: bool | None = None) -> CompletionResult:
        multiline = self.cursor.multiline if multiline is None else multiline
        text = after_healed(result.text, self.prompt.healed)  # what follows the cursor
        shown = postprocess(text, self.cursor, multiline=multiline, cut_short=result.stop_reason == StopReason.MAX_NEW_TOKENS,
                            ended=result.stop_reason in (StopReason.EOS, StopReason.STOP_STRING))
        judged = judge(self.tokenizer, result, shown.text, self.prompt.healed)
        return gate(CompletionResult(
            text=shown.text, replace_after=shown.replace_after, raw_text=text,
            token_ids=result.token_ids, stop_reason=result.stop_reason, multiline=multiline,
            prompt_tokens=len(self.prompt.token_ids), stats=copy.deepcopy(result.stats), anchored=self.prompt.anchored,
            confidence=judged.confidence() if judged is not None else None,
        ), self.min_confidence, judged)

    def answer(self, completion: CompletionResult) -> None:
        self.answered = True
        self.on_answer(completion)

    def answer_so_far(self, partial: GenerationResult) -> None:
        """The decoder's hand-over: at the deadline, and after it each time the text gains a line."""
        self.answer(self.shown(partial))

    def with_next_line(self, line: GenerationResult, one_line: CompletionResult,
                       look: GenerationResult) -> CompletionResult:
        """A finished line shown with the next one decoded so far, where the two show as one."""
        two_lines = self.shown(self._two_lines(line, look), multiline=True)
        # Only past a line shown whole: one that post-processing cut or withheld stays so.
        grows = two_lines.text.startswith(one_line.text + "\n") and two_lines.replace_after == one_line.replace_after
        return two_lines if grows else replace(one_line, stats=two_lines.stats)

    def _two_lines(self, line: GenerationResult, look: GenerationResult) -> GenerationResult:
        """A finished line and the next one (so far) as one output."""
        ids = line.token_ids + look.token_ids
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        head = line.text + "\n"
        next_line = text[len(head):].split("\n", 1)[0] if text.startswith(head) else ""
        stats = copy.deepcopy(line.stats)
        stats.add(look.stats)
        return GenerationResult(ids, head + next_line, look.stop_reason, stats, line.logprobs + look.logprobs)

"""Each request's prompt, and what is kept per document to build it so the KV cache is reused.

Per document: the anchor that typing continues (engine/text/anchor.py), where its prefix
window starts, and the last completion's tokens (the likeliest draft for what follows).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Sequence

from engine.text.anchor import Anchor, typed_since
from engine.text.crossfile import CrossFileContext, tokenizer_counter
from engine.text.cursor import Cursor
from engine.text.fim import FimTemplate, detect_fim_template
from engine.text.prompt import ContextBudget, PromptParts, build_prompt, encode_middle, heal_middle

LOOKUP_DOCUMENT_CHARS = 32_000  # of each other document, tokenized for prompt lookup only


@dataclass
class Prompt:
    token_ids: list[int]
    token_streams: list[Sequence[int]]  # worth copying from: prompt lookup indexes them
    anchored: bool  # typed text was appended to an anchor's prompt
    healed: str = ""  # text before the cursor the prompt leaves out, for the model to retype


class DocumentPrompts:
    def __init__(self, tokenizer, budget: ContextBudget | None = None) -> None:
        self.tokenizer = tokenizer
        self.default_budget = budget or ContextBudget()
        self._budget = self.default_budget
        self._heal = True  # token healing (engine/text/healing.py); the quality bench turns it off to compare
        self.crossfile = CrossFileContext(tokenizer_counter(tokenizer))  # other documents' snippets
        self._window_starts: dict[str, int] = {}  # per document path: where its prefix window begins
        self.anchors: dict[str, Anchor] = {}  # per document path: the prompt typing continues
        self.last_output: dict[str, list[int]] = {}  # per document path: the last completion's tokens
        self._template: FimTemplate | None = None

    @property
    def template(self) -> FimTemplate:
        if self._template is None:
            self._template = detect_fim_template(self.tokenizer)
        return self._template

    @property
    def budget(self) -> ContextBudget:
        return self._budget

    @budget.setter
    def budget(self, budget: ContextBudget) -> None:
        if budget != self._budget:
            self.forget()
        self._budget = budget

    @property
    def heal(self) -> bool:
        return self._heal

    @heal.setter
    def heal(self, on: bool) -> None:
        if on != self._heal:
            self.forget()
        self._heal = on

    def forget(self) -> None:
        """Anchors and prefix windows were cut under other prompt settings: the next prompts start afresh."""
        self.anchors.clear()
        self._window_starts.clear()
        self.crossfile.forget()

    def prompt(self, cursor: Cursor, path: str | None, other_documents: Sequence[tuple[str, str]] = ()) -> Prompt:
        """The anchored prompt while the user types at the anchor; else a fresh one, which anchors."""
        key = path or ""
        anchor = self.anchors.get(key)
        typed = typed_since(anchor, key, cursor.prefix, cursor.suffix) if anchor is not None else None
        if typed is None:
            parts = self.fresh(cursor, path, other_documents)
            anchor = Anchor(key, cursor.prefix, cursor.suffix, parts.token_ids, parts.token_streams, parts.healed)
            self.anchors[key] = anchor
            typed = ""
        # The middle so far is what healing cut off the anchor's prefix plus what was typed since;
        # its own end is healed in turn (engine/text/healing.py).
        middle, healed = heal_middle(self.tokenizer, self.template, anchor.healed + typed) if self.heal else (typed, "")
        ids = anchor.token_ids + encode_middle(self.tokenizer, self.template, middle)
        # The last completion at this spot is the likeliest draft for what follows the typed text.
        streams = [*anchor.token_streams, self.last_output.get(key, [])]
        return Prompt(ids, streams, anchored=bool(typed), healed=healed)

    def fresh(self, cursor: Cursor, path: str | None, other_documents: Sequence[tuple[str, str]] = ()) -> PromptParts:
        """Build the FIM prompt, keeping the prefix window's start where it was if it still fits.

        A window cut fresh at every anchor would start one token later each time the
        prefix outgrows its budget, and a prompt that changes at its start reuses no KV
        cache at all. So the start sticks (up to 25 % over budget), and moves in jumps.
        A window cut fresh is cold: it gets `cold_prefix_tokens`, and grows from there.
        """
        budget, prefix, key = self.budget, cursor.prefix, path or ""
        documents = self.crossfile.documents(path, prefix, other_documents, budget.other_documents_tokens)
        start = self._window_starts.get(key)
        if start is not None and 0 < start <= len(prefix):
            stretched = replace(budget, prefix_tokens=budget.prefix_tokens * 5 // 4)
            parts = build_prompt(self.tokenizer, self.template, prefix[start:], cursor.suffix, path=path,
                                 other_documents=documents, budget=stretched, heal=self.heal)
            if not parts.prefix_truncated:
                return self._with_lookup_streams(parts, path, other_documents)
        if budget.cold_prefix_tokens:  # a new window: no cache holds it
            budget = replace(budget, prefix_tokens=min(budget.prefix_tokens, budget.cold_prefix_tokens))
        parts = build_prompt(self.tokenizer, self.template, prefix, cursor.suffix, path=path,
                             other_documents=documents, budget=budget, heal=self.heal)
        if parts.prefix_truncated:
            self._window_starts[key] = len(prefix) - len(parts.prefix)
        else:
            self._window_starts.pop(key, None)
        return self._with_lookup_streams(parts, path, other_documents)

    def _with_lookup_streams(self, parts: PromptParts, path: str | None,
                             other_documents: Sequence[tuple[str, str]]) -> PromptParts:
        """Other documents that did not fit the prompt are still worth copying from."""
        in_prompt = {doc_path for doc_path, _ in parts.other_documents}
        for doc_path, text in other_documents:
            if doc_path not in in_prompt and doc_path != path:
                parts.token_streams.append(_lookup_stream(self.tokenizer, text[:LOOKUP_DOCUMENT_CHARS]))
        return parts


@functools.lru_cache(maxsize=32)
def _lookup_stream(tokenizer, text: str) -> tuple[int, ...]:
    """Another document's tokens, once per text: every fresh prompt copies from the same few. The
    same object each time, so prompt lookup keeps its index of them too (engine/drafters/prompt_lookup.py)."""
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

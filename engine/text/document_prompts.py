"""Each request's prompt, and what is kept per document to build it so the KV cache is reused.

Per document: the anchor that typing continues (engine/text/anchor.py), where its prefix
window starts, and the last completion's tokens (the likeliest draft for what follows).
"""

from __future__ import annotations

import functools
import os
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

    def prompt(self, cursor: Cursor, path: str | None, other_documents: Sequence[tuple[str, str]] = (),
               cached: Sequence[int] | None = None) -> Prompt:
        """The anchored prompt while the user types at the anchor; else a fresh one, which anchors.

        `cached`: the tokens the model's KV cache holds (the engine passes them; None: not known,
        and a kept window start always sticks).
        """
        key = path or ""
        anchor = self.anchors.get(key)
        typed = typed_since(anchor, key, cursor.prefix, cursor.suffix) if anchor is not None else None
        if typed is None:
            parts = self.fresh(cursor, path, other_documents, cached)
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

    def fresh(self, cursor: Cursor, path: str | None, other_documents: Sequence[tuple[str, str]] = (),
              cached: Sequence[int] | None = None) -> PromptParts:
        """Build the FIM prompt, keeping the prefix window's start where it was if it still fits.

        A window cut fresh at every anchor would start one token later each time the
        prefix outgrows its budget, and a prompt that changes at its start reuses no KV
        cache at all. So the start sticks (up to 25 % over budget), and moves in jumps.
        A window cut fresh is cold: it gets `cold_prefix_tokens`, and grows from there.
        A kept start pays only while the cache holds its window: where the cache lacks more
        of it than of a window cut afresh (a jump far down the file, or back to a file whose
        window another file's prompt has displaced), the fresh window is cut.
        """
        budget, prefix, key = self.budget, cursor.prefix, path or ""
        documents = self.crossfile.documents(path, prefix, other_documents, budget.other_documents_tokens)
        if budget.cold_prefix_tokens:  # a new window: no cache holds it
            budget = replace(budget, prefix_tokens=min(budget.prefix_tokens, budget.cold_prefix_tokens))
        cut = build_prompt(self.tokenizer, self.template, prefix, cursor.suffix, path=path, language=cursor.language,
                           other_documents=documents, budget=budget, heal=self.heal)
        start = self._window_starts.get(key)
        if start is not None and 0 < start <= len(prefix):
            stretched = replace(self.budget, prefix_tokens=self.budget.prefix_tokens * 5 // 4)
            kept = build_prompt(self.tokenizer, self.template, prefix[start:], cursor.suffix, path=path,
                                language=cursor.language, other_documents=documents, budget=stretched,
                                heal=self.heal)
            if not kept.prefix_truncated and (cached is None or _to_feed(kept, cached) <= _to_feed(cut, cached)):
                return self._with_lookup_streams(kept, path, other_documents)
        if cut.prefix_truncated:
            self._window_starts[key] = len(prefix) - len(cut.prefix)
        else:
            self._window_starts.pop(key, None)
        return self._with_lookup_streams(cut, path, other_documents)

    def _with_lookup_streams(self, parts: PromptParts, path: str | None,
                             other_documents: Sequence[tuple[str, str]]) -> PromptParts:
        """Other documents that did not fit the prompt are still worth copying from."""
        in_prompt = {doc_path for doc_path, _ in parts.other_documents}
        for doc_path, text in other_documents:
            if doc_path not in in_prompt and doc_path != path:
                parts.token_streams.append(_lookup_stream(self.tokenizer, text[:LOOKUP_DOCUMENT_CHARS]))
        return parts


def _to_feed(parts: PromptParts, cached: Sequence[int]) -> int:
    """Prompt tokens a model whose cache holds `cached` would still have to read."""
    return len(parts.token_ids) - len(os.path.commonprefix([list(cached), parts.token_ids]))  # any sequences


@functools.lru_cache(maxsize=32)
def _lookup_stream(tokenizer, text: str) -> tuple[int, ...]:
    """Another document's tokens, once per text: every fresh prompt copies from the same few. The
    same object each time, so prompt lookup keeps its index of them too (engine/drafters/prompt_lookup.py)."""
    return tuple(tokenizer(text, add_special_tokens=False)["input_ids"])

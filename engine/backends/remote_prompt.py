"""quickdraft's FIM prompt for a model that runs on another server.

With the model's tokenizer here (a preset, a directory, a .gguf, or a hub id already in
the local cache), the prompt is built as the local engine builds it and sent as token
ids: the server sees the same tokens, user text can never become a control token, and
the server's prompt cache (llama.cpp cache_prompt, vLLM/SGLang prefix caching) keeps
matching — the prefix window's start sticks, and while the user types at the cursor the
typed text goes after the middle token of an anchored prompt (engine/text/anchor.py), so a
keystroke adds only its own tokens at the end. Without a tokenizer, the template is
rendered as text with character budgets, control-token look-alikes in the user's text
defused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.text.anchor import Anchor, typed_since
from engine.text.crossfile import CrossFileContext, tokenizer_counter
from engine.errors import ModelError
from engine.text.fim import FimTemplate, detect_fim_template
from engine.text.prompt import ContextBudget, build_prompt, encode_middle, end_cut_suffix_cleanly

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 3  # code averages 3-4 characters a token: a budget in characters errs short
# The control tokens each family's template may use, so a template can be had without a tokenizer.
FAMILY_TOKENS = {
    "qwen2.5-coder": ("<|endoftext|>", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
                      "<|repo_name|>", "<|file_sep|>", "<|im_start|>", "<|im_end|>"),
    "starcoder": ("<|endoftext|>", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<fim_pad>", "<repo_name>",
                  "<file_sep>", "<filename>"),
    "deepseek-coder": ("<｜end▁of▁sentence｜>", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", "<|EOT|>"),
    "codellama": ("</s>", "▁<PRE>", "▁<SUF>", "▁<MID>", "▁<EOT>"),
}
FAMILY_HINTS = (("starcoder", "starcoder"), ("deepseek", "deepseek-coder"), ("codellama", "codellama"),
                ("code-llama", "codellama"), ("qwen", "qwen2.5-coder"))


class _NamedTokens:
    """The vocabulary `detect_fim_template` looks at, for a family known only by name."""

    def __init__(self, family: str) -> None:
        tokens = FAMILY_TOKENS[family]
        self.eos_token = tokens[0]
        self._vocab = {token: i for i, token in enumerate(tokens)}

    def get_vocab(self) -> dict[str, int]:
        return self._vocab


def family_for(model_name: str | None) -> str:
    name = (model_name or "").lower()
    for hint, family in FAMILY_HINTS:
        if hint in name:
            return family
    log.warning("FIM format of %r unknown; using Qwen2.5-Coder's (set backendTokenizer to be sure)", model_name)
    return "qwen2.5-coder"


def load_tokenizer(spec: str):
    """A tokenizer only (no weights, no torch): a preset, a model directory, a .gguf file or a cached hub id."""
    from engine.models import presets, store

    path = store.installed_path(spec) if spec in presets.PRESETS else Path(spec).expanduser()
    try:
        if path is not None and path.is_file() and path.suffix == ".gguf":
            from transformers import AutoTokenizer

            return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        from transformers import PreTrainedTokenizerFast

        if path is not None and path.is_dir():
            return PreTrainedTokenizerFast.from_pretrained(str(path))
        return PreTrainedTokenizerFast.from_pretrained(spec, local_files_only=True)  # never the network
    except Exception as error:  # noqa: BLE001 - any loader failure means the same to the user
        raise ModelError(f"could not load the tokenizer {spec!r} for the backend ({type(error).__name__}: "
                         f"{str(error)[:200]}); pass a preset, a model directory or a .gguf file, or none") from error


@dataclass
class RemotePrompt:
    prompt: list[int] | str  # token ids when rendered with the model's tokenizer, else text
    suffix: str  # the suffix as it went into the prompt
    prompt_tokens: int  # exact with a tokenizer, estimated without
    stop_token_ids: list[int] = field(default_factory=list)
    anchored: bool = False  # typed text continues an anchored prompt


class PromptRenderer:
    def __init__(self, tokenizer=None, family: str = "qwen2.5-coder") -> None:
        self.tokenizer = tokenizer
        self.template: FimTemplate = detect_fim_template(tokenizer if tokenizer is not None else _NamedTokens(family))
        self.default_budget = ContextBudget()
        self.context_budget = self.default_budget
        self._window_starts: dict[str, int] = {}  # per document: where its prefix window begins
        self._anchors: dict[str, Anchor] = {}  # per document: the prompt typing continues
        self.crossfile = CrossFileContext(tokenizer_counter(tokenizer) if tokenizer is not None else None)

    def render(self, request, language: str | None = None) -> RemotePrompt:
        """The request's prompt; `language` (the cursor's) says where the suffix may end (engine/text/prompt.py)."""
        if self.tokenizer is None:
            return self._as_text(request, language)
        key = request.path or ""
        anchor = self._anchors.get(key)
        typed = typed_since(anchor, key, request.prefix, request.suffix) if anchor is not None else None
        if typed is None:
            parts = self._sticky_prompt(request, language)
            anchor = self._anchors[key] = Anchor(key, request.prefix, request.suffix, parts.token_ids, [])
        ids = anchor.token_ids + encode_middle(self.tokenizer, self.template, typed or "")
        stops = {self.tokenizer.convert_tokens_to_ids(t) for t in self.template.stop_tokens}
        stops.discard(getattr(self.tokenizer, "unk_token_id", None))
        return RemotePrompt(ids, request.suffix, len(ids), sorted(t for t in stops if isinstance(t, int)),
                            anchored=bool(typed))

    def _sticky_prompt(self, request, language: str | None):
        """As the local engine does: the prefix window's start stays put while it fits (25 % slack),
        so the server's prompt cache (llama.cpp cache_prompt, vLLM prefix caching) keeps matching."""
        key = request.path or ""
        start = self._window_starts.get(key)
        args = dict(path=request.path, language=language, other_documents=self._documents(request))
        if start is not None and 0 < start <= len(request.prefix):
            stretched = replace(self.context_budget, prefix_tokens=self.context_budget.prefix_tokens * 5 // 4)
            parts = build_prompt(self.tokenizer, self.template, request.prefix[start:], request.suffix,
                                 budget=stretched, **args)
            if not parts.prefix_truncated:
                return parts
        parts = build_prompt(self.tokenizer, self.template, request.prefix, request.suffix,
                             budget=self.context_budget, **args)
        if parts.prefix_truncated:
            self._window_starts[key] = len(request.prefix) - len(parts.prefix)
        else:
            self._window_starts.pop(key, None)
        return parts

    def _documents(self, request) -> list[tuple[str, str]]:
        """Snippets of the other documents chosen for the cursor, as the local engine's (engine/text/crossfile.py)."""
        return self.crossfile.documents(request.path, request.prefix, request.other_documents,
                                        self.context_budget.other_documents_tokens)

    def windows(self, request, language: str | None = None) -> tuple[str, str, list[tuple[str, str]]]:
        """Prefix, suffix and other documents cut to the budget in characters (no tokenizer here);
        a suffix cut short ends as the local engine's does (engine/text/prompt.py)."""
        budget = self.context_budget
        prefix = _tail_lines(request.prefix, budget.prefix_tokens * CHARS_PER_TOKEN)
        suffix = _head_lines(request.suffix, budget.suffix_tokens * CHARS_PER_TOKEN)
        if len(suffix) < len(request.suffix):
            suffix = end_cut_suffix_cleanly(suffix, language)
        documents, room = [], budget.other_documents_tokens * CHARS_PER_TOKEN
        for path, text in self._documents(request):
            kept = _head_lines(text, room - len(path) - 2)
            if path != request.path and kept.strip():
                documents.append((path, kept))
                room -= len(path) + 2 + len(kept)
        return prefix, suffix, documents

    def _as_text(self, request, language: str | None) -> RemotePrompt:
        prefix, suffix, documents = self.windows(request, language)
        text = self.template.render(self._defuse(prefix), self._defuse(suffix), path=request.path,
                                    other_documents=[(path, self._defuse(doc)) for path, doc in documents])
        return RemotePrompt(text, suffix, len(text) // CHARS_PER_TOKEN)

    def _defuse(self, text: str) -> str:
        """The server parses control tokens in a text prompt: a file that contains one gets a
        zero-width space after its first character instead (the local engine encodes it as text)."""
        for token in self.template.stop_tokens + (self.template.prefix_token, self.template.suffix_token,
                                                  self.template.middle_token):
            plain = token.removeprefix("▁")
            if plain in text:
                text = text.replace(plain, plain[0] + "\u200b" + plain[1:])
        return text


def _tail_lines(text: str, chars: int) -> str:
    if len(text) <= chars:
        return text
    cut = len(text) - max(chars, 0)
    newline = text.find("\n", cut)
    return text[newline + 1:] if newline != -1 and newline + 1 - cut <= chars // 2 else text[cut:]


def _head_lines(text: str, chars: int) -> str:
    if chars <= 0:
        return ""
    if len(text) <= chars:
        return text
    newline = text.rfind("\n", 0, chars)
    return text[:newline + 1] if newline + 1 >= chars // 2 else text[:chars]

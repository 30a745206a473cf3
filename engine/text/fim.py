"""Fill-in-the-middle (FIM) prompt templates per model family.

A template knows the family's control tokens and lays out prefix, suffix and other
documents between them. It renders either a plain string (``render``) or a list of
``Segment``s (``segments``), which ``engine.text.prompt`` tokenizes piece by piece so that
user text can never turn into control tokens.

The family is chosen from the special tokens in the tokenizer's vocabulary
(``detect_fim_template``), never from a model name: a renamed or converted model
(GGUF, fine-tune) keeps its tokens.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

from engine.errors import PromptError

log = logging.getLogger(__name__)

FAMILIES = ("qwen2.5-coder", "starcoder", "deepseek-coder", "codellama")


@dataclass(frozen=True)
class Segment:
    """One piece of a rendered prompt.

    ``special`` segments are control tokens: ``token`` is the vocabulary entry and
    ``text`` how it reads in the rendered string (they differ only for CodeLlama,
    whose tokens carry a SentencePiece space: ``▁<SUF>`` reads `` <SUF>``).
    ``role`` tags user text ("prefix", "suffix", "document") so the prompt builder can
    return it as a token stream for prompt-lookup drafting.
    """

    text: str
    special: bool = False
    token: str = ""
    role: str = ""


def _special(token: str, text: str | None = None) -> Segment:
    return Segment(text=token if text is None else text, special=True, token=token)


def _text(text: str, role: str = "") -> Segment:
    return Segment(text=text, role=role)


# Line-comment leaders by file extension, for families without repository tokens:
# other documents go in front of the prefix as "<comment> <path>" headers (the layout
# DeepSeek-Coder's README uses for repository-level completion).
_HASH_COMMENT = {".py", ".pyi", ".sh", ".bash", ".rb", ".pl", ".r", ".yaml", ".yml", ".toml", ".jl", ".nim"}
_DASH_COMMENT = {".lua", ".sql", ".hs", ".elm"}


def line_comment(path: str | None) -> str:
    ext = os.path.splitext(path or "")[1].lower()
    if ext in _HASH_COMMENT:
        return "#"
    if ext in _DASH_COMMENT:
        return "--"
    return "//"


def _with_newline(text: str) -> str:
    # Each document ends with exactly one newline before the next separator, so a
    # file that already ends with "\n" does not get an extra blank line.
    return text if text.endswith("\n") else text + "\n"


@dataclass(frozen=True)
class FimTemplate:
    family: str  # one of FAMILIES
    prefix_token: str
    suffix_token: str
    middle_token: str
    stop_tokens: tuple[str, ...]  # special tokens that end a completion
    repo_name_token: str | None = None  # repository-level format, where the model has it
    file_sep_token: str | None = None
    add_bos: bool = False  # the model expects BOS in front of the FIM prompt

    @property
    def has_repo_format(self) -> bool:
        return self.file_sep_token is not None

    def segments(
        self,
        prefix: str,
        suffix: str,
        *,
        path: str | None = None,
        other_documents: Sequence[tuple[str, str]] = (),
        repo_name: str | None = None,
    ) -> list[Segment]:
        """The prompt as special and text segments (BOS not included)."""
        if self.family == "qwen2.5-coder":
            return self._qwen(prefix, suffix, path, other_documents, repo_name)
        if self.family == "starcoder":
            return self._starcoder(prefix, suffix, path, other_documents, repo_name)
        if self.family == "deepseek-coder":
            return self._deepseek(prefix, suffix, path, other_documents)
        if self.family == "codellama":
            return self._codellama(prefix, suffix, path, other_documents)
        raise PromptError(f"unknown FIM family {self.family!r}; expected one of {', '.join(FAMILIES)}")

    def render(self, prefix: str, suffix: str, **options) -> str:
        """The prompt as one string; `options` as for `segments`."""
        return "".join(s.text for s in self.segments(prefix, suffix, **options))

    # -- families -------------------------------------------------------------------

    def _prefix_suffix_middle(self, prefix: str, suffix: str, *lead: Segment) -> list[Segment]:
        """<prefix-token> lead… prefix <suffix-token> suffix <middle-token>: all families but CodeLlama."""
        return [_special(self.prefix_token), *lead, _text(prefix, "prefix"), _special(self.suffix_token),
                _text(suffix, "suffix"), _special(self.middle_token)]

    def _qwen(self, prefix, suffix, path, other_documents, repo_name) -> list[Segment]:
        fim = self._prefix_suffix_middle(prefix, suffix)
        if not other_documents or not self.has_repo_format:
            return fim
        # Qwen2.5-Coder repository-level FIM (tech report / README):
        # <|repo_name|>{repo}\n<|file_sep|>{path}\n{text}\n ... <|file_sep|>{path}\n<|fim_prefix|>...
        segs: list[Segment] = []
        if self.repo_name_token:
            segs += [_special(self.repo_name_token), _text(f"{repo_name or 'repo'}\n")]
        for doc_path, doc_text in other_documents:
            segs += [_special(self.file_sep_token), _text(f"{doc_path}\n"), _text(_with_newline(doc_text), "document")]
        segs += [_special(self.file_sep_token), _text(f"{path or 'untitled'}\n")]
        return segs + fim

    def _starcoder(self, prefix, suffix, path, other_documents, repo_name) -> list[Segment]:
        if not other_documents or not self.has_repo_format:
            return self._prefix_suffix_middle(prefix, suffix)
        # StarCoder2 repository-level FIM (paper §5.1): no newline after the repo name,
        # the FIM file's path sits right after <fim_prefix>:
        # <repo_name>r<file_sep>p0\ncode0<file_sep><fim_prefix>p1\npre<fim_suffix>suf<fim_middle>
        segs: list[Segment] = []
        if self.repo_name_token:
            segs += [_special(self.repo_name_token), _text(repo_name or "repo")]
        for doc_path, doc_text in other_documents:
            segs += [_special(self.file_sep_token), _text(f"{doc_path}\n"), _text(_with_newline(doc_text), "document")]
        return [*segs, _special(self.file_sep_token),
                *self._prefix_suffix_middle(prefix, suffix, _text(f"{path or 'untitled'}\n"))]

    def _commented_documents(self, path, other_documents) -> list[Segment]:
        comment = line_comment(path)
        segs: list[Segment] = []
        for doc_path, doc_text in other_documents:
            segs += [_text(f"{comment} {doc_path}\n"), _text(_with_newline(doc_text), "document")]
        return segs

    def _deepseek(self, prefix, suffix, path, other_documents) -> list[Segment]:
        return self._prefix_suffix_middle(prefix, suffix, *self._commented_documents(path, other_documents))

    def _codellama(self, prefix, suffix, path, other_documents) -> list[Segment]:
        # Meta's reference infilling: [BOS, ▁<PRE>] + encode(prefix) + [▁<SUF>] +
        # encode_infilling(suffix) + [▁<MID>]. encode() gives the prefix SentencePiece's
        # leading space; the suffix gets none. Read as text: "<PRE> {prefix} <SUF>{suffix} <MID>".
        pre_text = self.prefix_token.removeprefix("▁")
        docs = self._commented_documents(path, other_documents)
        lead = " "
        if docs:
            docs = [Segment(text=lead + docs[0].text, role=docs[0].role), *docs[1:]]
            lead = ""
        return [
            _special(self.prefix_token, pre_text),
            *docs,
            _text(lead + prefix, "prefix"),
            _special(self.suffix_token, " " + self.suffix_token.removeprefix("▁")),
            _text(suffix, "suffix"),
            _special(self.middle_token, " " + self.middle_token.removeprefix("▁")),
        ]


class _Vocab:
    """Membership test for token strings, without building a 150k-entry set when the
    tokenizer has a Rust backend (detection then costs microseconds, not 0.3 s)."""

    def __init__(self, tokenizer):
        self._backend = getattr(tokenizer, "backend_tokenizer", None)
        self._set: set[str] | None = None
        if self._backend is None:
            self._set = set(tokenizer.get_vocab())
            for attr in ("added_tokens_encoder", "all_special_tokens"):
                self._set.update(getattr(tokenizer, attr, None) or ())

    def __contains__(self, token: str) -> bool:
        if self._set is not None:
            return token in self._set
        return self._backend.token_to_id(token) is not None

    def has_all(self, *tokens: str) -> bool:
        return all(t in self for t in tokens)


def _present(vocab: _Vocab, *candidates: str) -> str | None:
    return next((c for c in candidates if c in vocab), None)


def _stops(vocab: _Vocab, tokenizer, candidates: Sequence[str]) -> tuple[str, ...]:
    found = [c for c in candidates if c in vocab]
    eos = getattr(tokenizer, "eos_token", None)
    if isinstance(eos, str) and eos and eos not in found:
        found.insert(0, eos)
    return tuple(found)


# Families whose FIM tokens are fixed strings, in order of preference: (family, prefix, suffix,
# middle, repository tokens (repo name, file separator) or None, stop tokens, add_bos).
_FIXED_TOKEN_FAMILIES = (
    ("qwen2.5-coder", "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", ("<|repo_name|>", "<|file_sep|>"),
     ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>",
      "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|im_start|>", "<|im_end|>"), False),
    ("starcoder", "<fim_prefix>", "<fim_suffix>", "<fim_middle>", ("<repo_name>", "<file_sep>"),
     ("<|endoftext|>", "<file_sep>", "<repo_name>", "<filename>", "<fim_pad>",
      "<fim_prefix>", "<fim_suffix>", "<fim_middle>"), False),
    ("deepseek-coder", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", None,
     ("<｜end▁of▁sentence｜>", "<|EOT|>", "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"), True),
)


def _fixed_token_template(vocab: _Vocab, tokenizer) -> FimTemplate | None:
    for family, prefix, suffix, middle, repo, stops, add_bos in _FIXED_TOKEN_FAMILIES:
        if vocab.has_all(prefix, suffix, middle):
            repo_name, file_sep = (_present(vocab, token) for token in repo) if repo else (None, None)
            return FimTemplate(family=family, prefix_token=prefix, suffix_token=suffix, middle_token=middle,
                               repo_name_token=repo_name, file_sep_token=file_sep,
                               stop_tokens=_stops(vocab, tokenizer, stops), add_bos=add_bos)
    return None


def _codellama_template(vocab: _Vocab, tokenizer) -> FimTemplate | None:
    pre = _present(vocab, "▁<PRE>", "<PRE>")
    if pre is None:
        return None

    def pick(name: str) -> str:
        tok = _present(vocab, f"▁<{name}>", f"<{name}>")
        if tok is None:
            raise PromptError(f"tokenizer has {pre} but no <{name}> token; cannot build a CodeLlama FIM prompt")
        return tok

    eot = _present(vocab, "▁<EOT>", "<EOT>")
    return FimTemplate(family="codellama", prefix_token=pre, suffix_token=pick("SUF"), middle_token=pick("MID"),
                       add_bos=True, stop_tokens=_stops(vocab, tokenizer, tuple(t for t in (eot, "</s>") if t)))


def detect_fim_template(tokenizer) -> FimTemplate:
    """Pick the FIM template from the control tokens in the tokenizer's vocabulary."""
    vocab = _Vocab(tokenizer)
    template = _fixed_token_template(vocab, tokenizer) or _codellama_template(vocab, tokenizer)
    if template is None:
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise PromptError(
            f"model tokenizer {name!r} has no fill-in-the-middle tokens (looked for Qwen2.5-Coder "
            "<|fim_prefix|>, StarCoder <fim_prefix>, DeepSeek-Coder <｜fim▁begin｜>, CodeLlama <PRE>); "
            "use a code model trained for FIM, e.g. quickdraft models pull qwen2.5-coder-1.5b"
        )
    log.debug("FIM template %s (repo format: %s)", template.family, template.has_repo_format)
    return template

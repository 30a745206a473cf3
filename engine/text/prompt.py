"""Build a token-budgeted FIM prompt: prefix, suffix and other documents.

The prefix is cut from the LEFT at a line boundary, the suffix from the RIGHT (at a line end,
and never right after a block header it cuts off: ``end_cut_suffix_cleanly``), other documents
are trimmed (their head is kept) or dropped to fit their budget. Tokens are counted with the
model's tokenizer, but only over a character window around the cursor (about
``CHARS_PER_TOKEN`` characters per budgeted token), so a 5 MB document costs no more than a
small one.

User text is tokenized with special-token matching off: a file that contains
"<|fim_prefix|>" gets the characters of that string, never the control token. The
template's control tokens are spliced in by id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.errors import PromptError
from engine.text.fim import FimTemplate, Segment
from engine.text.healing import heal_point
from engine.text.syntax import language_from, line_opens_block

log = logging.getLogger(__name__)

CHARS_PER_TOKEN = 8  # generous: code averages 3-4 chars/token, so the window rarely under-fills
MIN_WINDOW_CHARS = 256
MIN_DOCUMENT_TOKENS = 32  # a document squeezed below this is noise; drop it instead
# Text put in front of a piece and then dropped, so a SentencePiece tokenizer spends its
# dummy leading space on it (as Meta's encode_infilling does): one rare character that
# does not merge with what follows.
_MARK = "☺"


@dataclass
class ContextBudget:
    prefix_tokens: int = 1024
    suffix_tokens: int = 256
    other_documents_tokens: int = 1024
    # The prefix window of a prompt the cache does not hold yet (a jump, a file just opened):
    # short enough to prefill before the user looks away. Its start then sticks, so the window
    # grows with what the user types, its cache kept, up to `prefix_tokens`. None or 0: no limit.
    cold_prefix_tokens: int | None = None


@dataclass
class PromptParts:
    text: str  # the rendered prompt, BOS included where the family wants it
    token_ids: list[int]  # what the model is fed; authoritative over ``text``
    # Extra streams for prompt-lookup drafting: index 0 is the suffix, then one per
    # other document kept in the prompt (in prompt order).
    token_streams: list[list[int]]
    prefix_truncated: bool
    suffix_truncated: bool = False
    prefix: str = ""  # the prefix window and the suffix kept for the prompt
    suffix: str = ""
    # Token healing: the end of ``prefix`` left out of the prompt text, at the last token
    # boundary before the cursor; the model retypes it (see engine.text.healing).
    healed: str = ""
    other_documents: list[tuple[str, str]] = field(default_factory=list)  # kept (path, trimmed text)


class _Encoder:
    """Tokenizes user text safely (no control tokens) and counts tokens with offsets."""

    def __init__(self, tokenizer, control_tokens: Sequence[str]):
        self.tok = tokenizer
        self.control_ids = {self._token_id(t) for t in control_tokens}
        self.dummy_prefix = self._adds_dummy_prefix()

    def _token_id(self, token: str) -> int:
        tid = self.tok.convert_tokens_to_ids(token)
        unk = getattr(self.tok, "unk_token_id", None)
        if tid is None or (unk is not None and tid == unk and token != getattr(self.tok, "unk_token", None)):
            raise PromptError(f"token {token!r} is not in the model's vocabulary; the FIM template does not fit this model")
        return int(tid)

    def _raw(self, text: str, offsets: bool = False):
        return self.tok(
            text,
            add_special_tokens=False,
            split_special_tokens=True,  # "<|fim_prefix|>" in a file stays plain text
            return_offsets_mapping=offsets,
        )

    def _adds_dummy_prefix(self) -> bool:
        # SentencePiece-style tokenizers put "▁" in front of every encoded string; text
        # in the middle of a prompt must not get that extra space.
        ids = self._raw("a")["input_ids"]
        if not ids:
            return False
        first = self.tok.convert_ids_to_tokens(ids[0])
        return isinstance(first, str) and first.startswith("▁")

    def _plain(self, text: str) -> list[int]:
        # Fallback when an added (non-special) token still matched inside user text:
        # run normalizer, pre-tokenizer and model directly, bypassing added tokens.
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is None:
            raise PromptError("user text tokenized into control tokens and the tokenizer has no backend to avoid it")
        if backend.normalizer is not None:
            text = backend.normalizer.normalize_str(text)
        splits = [text]
        if backend.pre_tokenizer is not None:
            splits = [s for s, _ in backend.pre_tokenizer.pre_tokenize_str(text)]
        return [t.id for s in splits for t in backend.model.tokenize(s)]

    def encode(self, text: str) -> list[int]:
        """Token ids of user text, never containing a control token."""
        if not text:
            return []
        if self.dummy_prefix:
            ids = self._raw(_MARK + text)["input_ids"]
            mark = self._raw(_MARK)["input_ids"]
            ids = ids[len(mark):] if ids[: len(mark)] == mark else self._raw(text)["input_ids"]
        else:
            ids = self._raw(text)["input_ids"]
        if self.control_ids.intersection(ids):
            log.debug("user text matched a non-special added token; encoding without added tokens")
            ids = self._plain(text)
        return list(ids)

    def chunk_ends(self, text: str) -> set[int] | None:
        """Where the pre-tokenizer splits ``text`` (BPE never merges across a split)."""
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is None or backend.pre_tokenizer is None:
            return None
        return {end for _, (_, end) in backend.pre_tokenizer.pre_tokenize_str(text)}

    def heal_point(self, text: str) -> int:
        """Characters to back off the end of ``text`` to a stable token boundary."""
        has_splits = self.chunk_ends("a") is not None
        return heal_point(self.encode, text, self.chunk_ends if has_splits else None)

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character span of each token of ``text`` (for counting and cutting)."""
        if not text:
            return []
        try:
            return [tuple(o) for o in self._raw(text, offsets=True)["offset_mapping"]]
        except (NotImplementedError, TypeError, ValueError, KeyError):
            # Tokenizers without offsets: count per line and pretend each line's tokens
            # span the line evenly. Only the cut position gets coarser.
            spans: list[tuple[int, int]] = []
            pos = 0
            for line in text.splitlines(keepends=True):
                n = max(1, len(self._raw(line)["input_ids"]))
                step = len(line) / n
                spans += [(pos + int(i * step), pos + int((i + 1) * step)) for i in range(n)]
                pos += len(line)
            return spans


def _keep_tail(enc: _Encoder, text: str, budget: int) -> tuple[str, bool]:
    """The longest tail of ``text`` within ``budget`` tokens, starting at a line start."""
    if budget <= 0 or not text:
        return "", bool(text)
    window = max(budget * CHARS_PER_TOKEN, MIN_WINDOW_CHARS)
    while True:
        start = max(0, len(text) - window)
        piece = text[start:]
        spans = enc.offsets(piece)
        if len(spans) >= budget or start == 0 or window >= 16 * budget * CHARS_PER_TOKEN:
            break
        window *= 2  # very token-dense text (long runs of spaces): widen and count again
    if len(spans) > budget:
        # End of the last token left out (not the start of the first kept one): a
        # character split over several byte tokens then goes out whole.
        cut = spans[len(spans) - budget - 1][1]
        at_line_start = piece[cut - 1] == "\n" if cut > 0 else (start == 0 or text[start - 1] == "\n")
    elif start > 0:
        cut = 0  # everything in the window fits; the window start is the cut
        at_line_start = text[start - 1] == "\n"
    else:
        return text, False
    if not at_line_start:
        # Snap forward to the next line start, unless that throws away most of what
        # fits (one enormous line): then keep the mid-line cut at a token boundary.
        nl = piece.find("\n", cut)
        if nl != -1 and nl + 1 - cut <= (len(piece) - cut) // 2:
            cut = nl + 1
    return piece[cut:], True


def _keep_head(enc: _Encoder, text: str, budget: int) -> tuple[str, bool]:
    """The longest head of ``text`` within ``budget`` tokens, ending at a line end."""
    if budget <= 0 or not text:
        return "", bool(text)
    window = max(budget * CHARS_PER_TOKEN, MIN_WINDOW_CHARS)
    while True:
        piece = text[:window]
        spans = enc.offsets(piece)
        if len(spans) >= budget or len(piece) == len(text) or window >= 16 * budget * CHARS_PER_TOKEN:
            break
        window *= 2
    if len(spans) > budget:
        end = spans[budget][0]  # start of the first token left out (see _keep_tail)
    elif len(piece) < len(text):
        end = len(piece)
    else:
        return text, False
    at_line_end = end < len(piece) and piece[end] == "\n"
    if not at_line_end:
        # Snap back to just after the last newline, unless that loses most of what fits.
        nl = piece.rfind("\n", 0, end)
        if nl != -1 and nl + 1 >= end // 2:
            end = nl + 1
    return piece[:end], True


def end_cut_suffix_cleanly(kept: str, language: str | None) -> str:
    """A suffix cut short by a budget, ended where a FIM model has no line to go on writing: at a
    line end (the rest of the cursor's own line is kept, whole or cut, never dropped), and not
    after a line that opens a block, or a decorator, whose body the cut leaves out.

    A small model continues a suffix that ends mid-thought: a suffix ending on the next function's
    header makes it write that function's docstring at the cursor (docs/benchmarks.md, "Where the
    suffix ends")."""
    if "\n" not in kept:
        return kept
    cursor_line, *below = kept[: kept.rfind("\n")].split("\n")
    while below and (line_opens_block(below[-1], language) or below[-1].lstrip().startswith("@")):
        below.pop()
    return "".join(line + "\n" for line in [cursor_line, *below])


def _encode_segments(enc: _Encoder, segments: Sequence[Segment]) -> list[int]:
    # Adjacent text segments are encoded as one run, the way the model saw text in
    # training; control tokens are spliced in by id.
    ids: list[int] = []
    run: list[str] = []
    for seg in segments:
        if seg.special:
            ids += enc.encode("".join(run))
            run = []
            ids.append(enc._token_id(seg.token))
        else:
            run.append(seg.text)
    ids += enc.encode("".join(run))
    return ids


def _fit_other_documents(enc: "_Encoder", other_documents: Sequence[tuple[str, str]], path: str | None,
                         budget: int) -> list[tuple[str, str]]:
    """The other documents that fit `budget` tokens, in order, each trimmed to its head; the
    current file and empty ones are left out."""
    docs: list[tuple[str, str]] = []
    remaining = budget
    for doc_path, doc_text in other_documents:
        if (path is not None and doc_path == path) or not doc_text.strip():
            continue
        header = len(enc.encode(f"{doc_path}\n")) + 2  # path line plus separator tokens
        room = remaining - header
        if room < MIN_DOCUMENT_TOKENS:
            log.debug("dropping %s from the prompt: %d tokens left", doc_path, remaining)
            continue
        kept, _ = _keep_head(enc, doc_text, room)
        if not kept.strip():
            continue
        docs.append((doc_path, kept))
        remaining -= header + len(enc.offsets(kept))
    return docs


def build_prompt(
    tokenizer,
    template: FimTemplate,
    prefix: str,
    suffix: str,
    *,
    path: str | None = None,
    other_documents: Sequence[tuple[str, str]] = (),
    budget: ContextBudget | None = None,
    repo_name: str | None = None,
    heal: bool = False,
    language: str | None = None,
) -> PromptParts:
    """Render and tokenize a FIM prompt within ``budget``.

    ``other_documents`` are (path, text) pairs, most relevant first; those that do not
    fit are trimmed to their head or dropped, from the end of the list. ``heal`` backs the
    prompt up to the last token boundary before the cursor (``PromptParts.healed``).
    ``language`` (else the path's) says which lines open a block, where the suffix must not end.
    """
    budget = budget or ContextBudget()
    control = {template.prefix_token, template.suffix_token, template.middle_token, *template.stop_tokens}
    control |= {t for t in (template.repo_name_token, template.file_sep_token) if t}
    enc = _Encoder(tokenizer, sorted(control))

    kept_prefix, prefix_truncated = _keep_tail(enc, prefix, budget.prefix_tokens)
    kept_suffix, suffix_truncated = _keep_head(enc, suffix, budget.suffix_tokens)
    if suffix_truncated:
        kept_suffix = end_cut_suffix_cleanly(kept_suffix, language or language_from(None, path))

    docs = _fit_other_documents(enc, other_documents, path, budget.other_documents_tokens)
    healed = kept_prefix[len(kept_prefix) - enc.heal_point(kept_prefix):] if heal else ""
    in_prompt = kept_prefix[: len(kept_prefix) - len(healed)]
    segments = template.segments(in_prompt, kept_suffix, path=path, other_documents=docs, repo_name=repo_name)
    token_ids = _encode_segments(enc, segments)
    text = "".join(s.text for s in segments)
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if template.add_bos and bos_id is not None:
        token_ids.insert(0, int(bos_id))
        text = (tokenizer.bos_token or "") + text

    streams = [enc.encode(kept_suffix)]
    streams += [enc.encode(s.text) for s in segments if s.role == "document"]
    if not any(s.role == "document" for s in segments):
        docs = []  # the family has no place for them

    return PromptParts(
        text=text,
        token_ids=token_ids,
        token_streams=streams,
        prefix_truncated=prefix_truncated,
        suffix_truncated=suffix_truncated,
        prefix=kept_prefix,
        suffix=kept_suffix,
        healed=healed,
        other_documents=docs,
    )


def _middle_encoder(tokenizer, template: FimTemplate) -> _Encoder:
    control = {template.prefix_token, template.suffix_token, template.middle_token, *template.stop_tokens}
    return _Encoder(tokenizer, sorted(control))


def encode_middle(tokenizer, template: FimTemplate, text: str) -> list[int]:
    """Token ids of text that follows the prompt's middle token (typed at an anchor)."""
    return _middle_encoder(tokenizer, template).encode(text)


def heal_middle(tokenizer, template: FimTemplate, text: str) -> tuple[str, str]:
    """(what of the middle goes into the prompt, what is left for the model to retype)."""
    cut = _middle_encoder(tokenizer, template).heal_point(text)
    return text[: len(text) - cut], text[len(text) - cut:]

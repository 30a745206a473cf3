"""Token healing: the prompt stops at a token boundary, the model retypes what was cut.

A cursor usually splits a token. Qwen's tokenizer, for one, writes an indented ``for``
as ``"       " + " for"`` (the last space of the run joins the word), so a prompt that
ends in all eight spaces ends on a token the model rarely saw there, and it answers as
if a deeper line had begun. The same happens mid-identifier (``ret|``) and
mid-operator (``x +|=``).

Healing backs the prompt up to the last boundary that the text's own tokenization
would have whatever comes next (``heal_point``), and a ``HealingConstraint`` makes the
first generated tokens retype exactly the characters cut off: a token is allowed if its
text starts with what remains to retype, or is itself a start of it (the next token
then covers the rest). Once covered, generation is free. The decoder applies the
constraint as a mask on the verifier's logits, so the output is still exactly the
verifier's own decoding under that mask.
"""

from __future__ import annotations

import bisect
import functools
import logging
import re
import weakref
from collections.abc import Callable, Sequence

import numpy as np
import torch

log = logging.getLogger(__name__)

# Continuations tried after the cursor: a boundary that holds for all of them is one the
# tokenizer keeps whatever the user writes next. After a typed indentation only code may
# follow (the point of healing there is a line of code, not more blanks), elsewhere
# indentation too (a StarCoder-style tokenizer folds a newline into the next line's
# indentation). Not a newline: Qwen writes "):\n\n" as one token, and backing up over
# every line end for the rare blank line would cost a token each time.
CODE_PROBES = ("x", "X", "_", "1", "(", ".", "=", '"', "#")
BLANK_PROBES = (" ", "\t")
MAX_HEAL_CHARS = 24  # a longer partial token (a huge identifier) is left as it is
TAIL_CHARS = 256  # tokenize only this much before the cursor: tokenization is local
WHITESPACE = b" \t\n\r\x0b\x0c"


# -- where to cut ---------------------------------------------------------------------------


def probes_for(text: str) -> tuple[str, ...]:
    """The continuations to try after ``text``: code only after a typed indentation."""
    line = text[text.rfind("\n") + 1:]
    return CODE_PROBES if line and not line.strip() else CODE_PROBES + BLANK_PROBES


def heal_point(
    encode: Callable[[str], list[int]], text: str, chunk_ends: Callable[[str], set[int]] | None = None
) -> int:
    """How many characters at the end of ``text`` to back off (0: none).

    The cut is the last point p (within ``MAX_HEAL_CHARS`` of the end) such that for every
    probe continuation c, tokenizing ``text + c`` starts with exactly the tokens of
    ``text[:p]``: the prompt then ends the way the finished text will be tokenized.
    ``encode`` tokenizes user text as the prompt builder does. ``chunk_ends`` (where the
    tokenizer's pre-tokenizer splits a string) also requires p to be a split point for
    every probe: inside a split, merges depend on letters no probe can foresee
    (``" ret" + "x"`` stays two tokens, ``" ret" + "urn"`` becomes one).
    """
    if not text:
        return 0
    start = max(0, len(text) - TAIL_CHARS)
    line = text.find("\n", start, len(text) - MAX_HEAL_CHARS) if start > 0 else -1
    tail = text[line + 1 if line != -1 else start:]  # from a line start where one is near
    probes = [tail + probe for probe in probes_for(text)]
    probe_ids = [encode(p) for p in probes]
    splits = set.intersection(*(chunk_ends(p) for p in probes)) if chunk_ends is not None else None
    for cut in range(len(tail), max(0, len(tail) - MAX_HEAL_CHARS) - 1, -1):
        if splits is not None and cut not in splits and cut > 0:
            continue
        ids = encode(tail[:cut])
        if all(p[: len(ids)] == ids for p in probe_ids):
            return len(tail) - cut
    return 0


# -- token texts ------------------------------------------------------------------------------


_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _byte_level_table() -> dict[int, str]:
    """str.translate table from GPT-2's byte-level characters back to the bytes (as latin-1)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {ord(char): chr(byte) for byte, char in bytes_to_unicode().items()}


def _piece_bytes(piece: str, byte_level: dict[int, str] | None) -> bytes:
    if byte_level is not None:
        try:
            return piece.translate(byte_level).encode("latin-1")
        except UnicodeEncodeError:  # not a byte-level piece after all
            return piece.encode("utf-8")
    match = _BYTE_PIECE.fullmatch(piece)  # SentencePiece byte fallback
    return bytes([int(match.group(1), 16)]) if match else piece.replace("▁", " ").encode("utf-8")


def _token_bytes_table(tokenizer) -> list[bytes | None]:
    """The bytes each token id writes; None for control tokens (never allowed while healing)."""
    size = len(tokenizer)
    added = dict(getattr(tokenizer, "added_tokens_decoder", None) or {})
    special = set(getattr(tokenizer, "all_special_ids", ()) or ())
    special |= {i for i, t in added.items() if getattr(t, "special", False)}
    backend = getattr(tokenizer, "backend_tokenizer", None)
    table: list[bytes | None] = [None] * size
    if backend is None:  # a slow tokenizer: decode one by one
        for i in range(size):
            table[i] = None if i in special else tokenizer.decode([i]).encode("utf-8")
        return table
    byte_level = _byte_level_table() if "ByteLevel" in repr(backend.decoder) else None
    for piece, i in backend.get_vocab(with_added_tokens=False).items():
        if 0 <= i < size:
            table[i] = _piece_bytes(piece, byte_level)
    for i, token in added.items():  # added tokens are plain text, unless special
        if 0 <= i < size:
            table[i] = None if i in special else str(token).encode("utf-8")
    for i in special:
        if 0 <= i < size:
            table[i] = None
    return table


def _successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class TokenVocabulary:
    """Token texts (as bytes) indexed for 'which tokens fit this text' questions.

    Masks are built with numpy: on a busy CPU a small multi-threaded torch op can wait
    tens of milliseconds for its threads.
    """

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        self.token_bytes = list(token_bytes)
        order = sorted((i for i, b in enumerate(self.token_bytes) if b), key=self.token_bytes.__getitem__)
        self._sorted = [self.token_bytes[i] for i in order]
        self._sorted_ids = np.array(order, dtype=np.int64)
        self._ids_of: dict[bytes, list[int]] = {}
        for i in order:
            self._ids_of.setdefault(self.token_bytes[i], []).append(i)
        self.mask = functools.lru_cache(maxsize=256)(self._mask)
        # Every token but those that start with whitespace (control tokens stay: EOS may end it).
        self.code_start_mask = functools.lru_cache(maxsize=4)(self._code_start_mask)

    def compatible(self, rest: bytes) -> np.ndarray:
        """Ids of tokens that start with ``rest`` or are a (non-empty) start of it."""
        shorter = [i for k in range(1, len(rest)) for i in self._ids_of.get(rest[:k], ())]
        return np.concatenate([self._range(rest), np.array(shorter, dtype=np.int64)])

    def _range(self, prefix: bytes) -> np.ndarray:
        """Ids of the tokens that start with ``prefix``."""
        lo = bisect.bisect_left(self._sorted, prefix)
        upper = _successor(prefix)
        hi = len(self._sorted) if upper is None else bisect.bisect_left(self._sorted, upper)
        return self._sorted_ids[lo:hi]

    def _mask(self, rest: bytes, width: int, code_follows: bool = False) -> torch.Tensor:
        ids = self.compatible(rest)
        mask = np.zeros(width, dtype=bool)
        mask[ids[ids < width]] = True
        if code_follows:  # nor may a token go on past ``rest`` with a blank
            for blank in WHITESPACE:
                ids = self._range(rest + bytes([blank]))
                mask[ids[ids < width]] = False
        return torch.from_numpy(mask)

    def _code_start_mask(self, width: int) -> torch.Tensor:
        mask = np.ones(width, dtype=bool)
        for blank in WHITESPACE:
            ids = self._range(bytes([blank]))
            mask[ids[ids < width]] = False
        return torch.from_numpy(mask)


_VOCABULARIES: "weakref.WeakKeyDictionary[object, TokenVocabulary]" = weakref.WeakKeyDictionary()


def vocabulary(tokenizer) -> TokenVocabulary:
    """The tokenizer's vocabulary index, built once per tokenizer (≈0.3 s for Qwen's 151k)."""
    try:
        return _VOCABULARIES[tokenizer]
    except (KeyError, TypeError):
        pass
    vocab = TokenVocabulary(_token_bytes_table(tokenizer))
    try:
        _VOCABULARIES[tokenizer] = vocab
    except TypeError:
        log.debug("tokenizer %r cannot be weakly referenced; its vocabulary index is not cached", tokenizer)
    return vocab


# -- the constraint ----------------------------------------------------------------------------


class HealingConstraint:
    """The decoder's ``TokenConstraint``: the first tokens must retype ``removed``.

    ``allowed(emitted)`` is a bool mask over the verifier's logits (``width`` entries) for
    the token after ``emitted`` (this request's output so far), or None when free. With
    ``code_follows`` (the cursor ends an indentation the user typed) the first character
    after the cursor must not be whitespace either: more blanks there would start a line
    deeper than the one the user is on. Masks are cached, so drafted rows cost a lookup.
    """

    def __init__(self, vocab: TokenVocabulary, removed: str, width: int, *, code_follows: bool = False) -> None:
        if not removed and not code_follows:
            raise ValueError("nothing to constrain: no removed text and code_follows is off")
        self.vocab = vocab
        self.removed = removed
        self._removed_bytes = removed.encode("utf-8")
        self.width = width
        self.code_follows = code_follows

    def _covered(self, emitted: Sequence[int]) -> tuple[int, int]:
        """(bytes of ``removed`` the output has retyped, tokens that took)."""
        covered = used = 0
        for token in emitted:
            if covered >= len(self._removed_bytes):
                break
            piece = self.vocab.token_bytes[token] if 0 <= token < len(self.vocab.token_bytes) else None
            covered += len(piece or b"")
            used += 1
        return covered, used

    def allowed(self, emitted: Sequence[int]) -> torch.Tensor | None:
        covered, used = self._covered(emitted)
        if covered < len(self._removed_bytes):
            return self.vocab.mask(self._removed_bytes[covered:], self.width, self.code_follows)
        if self.code_follows and covered == len(self._removed_bytes) and used == len(emitted):
            return self.vocab.code_start_mask(self.width)  # the first token after the cursor
        return None


def healing_constraint(tokenizer, removed: str, width: int, line_before: str = "") -> HealingConstraint | None:
    """The constraint for a prompt that left ``removed`` out (None when there is nothing to do).

    ``line_before`` is the cursor's line up to the cursor: blanks only there mean the user
    typed the indentation, and the completion must start with code.
    """
    code_follows = bool(line_before) and not line_before.strip()
    if not removed and not code_follows:
        return None
    return HealingConstraint(vocabulary(tokenizer), removed, width, code_follows=code_follows)


def after_healed(text: str, removed: str) -> str:
    """The part of a healed output that follows the cursor.

    The output retypes ``removed`` first; output that stopped before covering it (a
    deadline, a cancel) has nothing after the cursor yet.
    """
    return text[len(removed):] if text.startswith(removed) else ""


def stops_outside(stop_strings: Sequence[str], removed: str) -> list[str]:
    """Stop strings that cannot match inside the retyped text.

    The decoder looks for stop strings in its whole output, which starts with ``removed``;
    one that could match there (a newline a StarCoder-style tokenizer folded into an
    indentation token) would end the completion before the cursor. Those are left to
    post-processing, which sees only the text after the cursor.
    """
    kept = []
    for stop in stop_strings:
        clash = any(removed[i:].startswith(stop) or stop.startswith(removed[i:]) for i in range(len(removed)))
        if not clash:
            kept.append(stop)
    return kept


def skip_chars(on_text: Callable[[str], None] | None, count: int) -> Callable[[str], None] | None:
    """Wrap a streaming callback so that it never sees the first ``count`` characters."""
    if on_text is None or count == 0:
        return on_text
    skipped = 0

    def forward(delta: str) -> None:
        nonlocal skipped
        cut = min(len(delta), count - skipped)
        skipped += cut
        if delta[cut:]:
            on_text(delta[cut:])

    return forward

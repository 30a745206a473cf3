"""Anchored fill-in-the-middle: while the user types at the cursor, the typed text is the
beginning of the middle.

Qwen's FIM prompt is prefix, suffix, middle, so an edit at the end of the prefix would
invalidate the suffix's KV cache and every keystroke would re-feed the whole suffix.
Instead the prompt's prefix and suffix stay as they were when the cursor got there (the
anchor), and what was typed since is appended after the middle token — what the model
would have seen had it written those characters itself. A keystroke then feeds only
its own tokens. The anchor moves (a normal prompt is built) when the cursor leaves the
anchored span, an edit lands outside it, the middle grows past a limit, or the suffix
changes — except for the closing brackets and quotes an editor inserts after the cursor.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_MIDDLE_CHARS = 240  # typed text past this re-anchors: a fresh prompt sees it as prefix again
AUTO_CLOSERS = set(")]}>\"'`")
MAX_AUTO_CLOSED = 3


@dataclass
class Anchor:
    path: str
    prefix: str  # the document before the cursor when the anchor was set
    suffix: str  # and after it
    token_ids: list[int]  # the rendered FIM prompt, ending at the middle token
    token_streams: list  # lookup streams of that prompt (suffix, other documents)
    healed: str = ""  # the end of the prefix left out of the prompt (token healing): the middle starts with it


def typed_since(anchor: Anchor, path: str, prefix: str, suffix: str) -> str | None:
    """What was typed at the anchor since it was set, or None when the anchor no longer holds."""
    if path != anchor.path or not prefix.startswith(anchor.prefix):
        return None
    typed = prefix[len(anchor.prefix):]
    if len(typed) > MAX_MIDDLE_CHARS:
        return None
    if suffix != anchor.suffix:
        # An editor that auto-closes brackets and quotes inserts them right after the cursor;
        # post-processing sees the real suffix, the model may keep the anchor's.
        inserted = suffix[: len(suffix) - len(anchor.suffix)] if suffix.endswith(anchor.suffix) else None
        if not inserted or len(inserted) > MAX_AUTO_CLOSED or not set(inserted) <= AUTO_CLOSERS:
            return None
    return typed

"""The type-through cache's entry and its one rule: what of the last answer still fits the cursor.

The service keeps one `Shown` per document (lsp_server/answering/service.py); typing through it, or
asking again at the spot of a complete one, is answered from here without the model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lsp_server.answering.context import DocumentCursor


@dataclass
class Shown:
    """The last completion answered for a document: typing through it needs no model, and
    once `complete` (its decode ended by itself, not by a deadline or a cancel, or it has the
    first line the client was told of) asking again at the same spot needs none either."""

    prefix: str
    suffix: str
    text: str
    replace_after: int
    complete: bool = False
    # Characters the user must type before any of it shows: the confidence gate withheld it as
    # unsure until its start is typed (engine/decoding/confidence.py, `Held`). 0: on screen.
    show_after: int = 0

    @classmethod
    def of(cls, cursor: DocumentCursor, answer, complete: bool = False) -> "Shown":
        """What an answer at the cursor keeps: its text, or the withheld text it holds."""
        held = answer.held
        if held is not None:
            return cls(cursor.prefix, cursor.suffix, held.text, held.replace_after, complete, held.show_after)
        return cls(cursor.prefix, cursor.suffix, answer.text, answer.replace_after, complete)

    @property
    def visible(self) -> str:
        return "" if self.show_after else self.text


def extends(old: Shown, new: Shown) -> bool:
    """A later answer at the same spot may replace the one kept: it goes on from its text and
    does not hide what was on screen."""
    return ((new.prefix, new.suffix) == (old.prefix, old.suffix) and new.text.startswith(old.text)
            and (new.show_after == 0 or not old.visible))


def type_through(shown: Shown | None, cursor: DocumentCursor) -> Shown | None:
    """When the user typed the start of the completion on screen, the rest is still right;
    at the very spot of a complete answer (a client asking again after the ready
    notification), all of it is. A withheld answer shows once its unsure start is typed."""
    if shown is None or not shown.text or cursor.suffix != shown.suffix:
        return None
    if not cursor.prefix.startswith(shown.prefix):
        return None
    typed = cursor.prefix[len(shown.prefix):]
    if len(typed) < shown.show_after:
        return None
    if not typed:
        return shown if shown.complete else None
    if not shown.text.startswith(typed) or len(typed) >= len(shown.text):
        return None
    return replace(shown, text=shown.text[len(typed):], show_after=0)

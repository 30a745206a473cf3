"""Following the decode that goes on after an answer, instead of cancelling it.

On a CPU a request has time for a few passes, so most ghost text comes from the decode that
goes on after the answer (the rest of the line, the next lines). While the user types what
that decode is writing, a request per key that cancelled it would start the same work over,
only to be cancelled by the next key in turn. So a request at a spot the decode is writing
towards follows it instead (lsp_server/answering/service.py): it waits, within its own budget, for
the kept answer to reach the cursor (lsp_server/answering/typethrough.py); if the budget ends first,
it answers empty and the client is told `quickdraft/completionReady` at that spot once the
ghost text is there.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Callable

from lsp_server.answering.context import DocumentCursor
from lsp_server.answering.typethrough import Shown, extends, type_through


@dataclass
class DecodeOn:
    """A request's decode going on after its answer: where it started and what it has written."""

    prefix: str
    suffix: str
    cancel: threading.Event
    text: str = ""  # what the model wrote after the cursor so far, raw (the worker appends to it)
    done: bool = False
    on_screen: Shown | None = None  # what the client has at the answer's spot: the answer, or what it was told of since
    # A follower that answered empty, and whether its document has changed since: it is told
    # when its ghost text is there.
    waiting: tuple[DocumentCursor, Callable[[], bool]] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def stream(self, delta: str) -> None:
        """The engine's on_text, on the worker thread."""
        self.text += delta

    def leads_to(self, cursor: DocumentCursor) -> bool:
        """The user typed on from the answer's spot, and what they typed is what this decode
        wrote (it is ahead), or the start of its line so far (it is catching up), or it has
        written nothing yet (still reading the prompt: a new request would read the same)."""
        if self.done or self.cancel.is_set() or cursor.suffix != self.suffix or not cursor.prefix.startswith(self.prefix):
            return False
        typed, text = cursor.prefix[len(self.prefix):], self.text
        if not typed:
            return False
        if len(typed) < len(text):
            return text.startswith(typed)
        return typed.startswith(text) and "\n" not in typed[len(text):]

    def takes(self, kept: Shown | None, new: Shown) -> bool:
        """`new`, from this decode, may replace the document's kept answer: that is still at this
        decode's spot, and `new` goes on from what the client has there."""
        return (kept is not None and self.on_screen is not None and (kept.prefix, kept.suffix) == (new.prefix, new.suffix)
                and extends(self.on_screen, new))

    def grew(self, kept: Shown | None, notify_ready: Callable[[DocumentCursor], None]) -> None:
        """The kept answer changed, or the decode ended: followers waiting look again, and one
        that answered empty is told if its ghost text is there now."""
        self.changed.set()
        self.changed = asyncio.Event()
        if self.waiting is None:
            return
        cursor, is_stale = self.waiting
        if is_stale():
            self.waiting = None
        elif type_through(kept, cursor) is not None:
            self.waiting = None
            notify_ready(cursor)

    async def wait(self, until: float) -> bool:
        """Until the kept answer changes (True) or `until`, loop time, passes or the decode has ended (False)."""
        timeout = until - asyncio.get_running_loop().time()
        if self.done or timeout <= 0:
            return False
        try:
            await asyncio.wait_for(self.changed.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

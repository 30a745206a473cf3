"""When a request follows the decode going on instead of cancelling it (lsp_server/answering/following.py)."""

from __future__ import annotations

import threading

from lsp_server.answering.context import DocumentCursor
from lsp_server.answering.following import DecodeOn

URI = "file:///project/calc.py"


def cursor(prefix: str, suffix: str = "\n") -> DocumentCursor:
    return DocumentCursor(uri=URI, version=2, language_id="python", offset=len(prefix), prefix=prefix, suffix=suffix,
                          position=None)


def decode(text: str) -> DecodeOn:
    decode_on = DecodeOn("x = ", "\n", threading.Event())
    decode_on.stream(text)
    return decode_on


def test_typing_what_the_decode_wrote_or_will_write_follows_it():
    assert decode("foo(bar)\ny = 1").leads_to(cursor("x = fo"))  # it is ahead
    assert decode("foo(bar)\ny = 1").leads_to(cursor("x = foo(bar)\ny"))  # ahead, on its next line
    assert decode("fo").leads_to(cursor("x = foo("))  # catching up on the same line
    assert decode("").leads_to(cursor("x = f"))  # still reading its prompt


def test_anything_else_starts_over():
    assert not decode("foo(bar)").leads_to(cursor("x = fa"))  # typed something else
    assert not decode("foo").leads_to(cursor("x = foo\nbar"))  # typed past its line: unknown ground
    assert not decode("").leads_to(cursor("x = \nf"))
    assert not decode("foo").leads_to(cursor("x = "))  # at its own spot: the kept answer serves that
    assert not decode("foo").leads_to(cursor("x = f", suffix=")\n"))  # the text after the cursor changed
    assert not decode("foo").leads_to(cursor("y = f"))  # elsewhere
    done, cancelled = decode("foo"), decode("foo")
    done.done = True
    cancelled.cancel.set()
    assert not done.leads_to(cursor("x = f")) and not cancelled.leads_to(cursor("x = f"))

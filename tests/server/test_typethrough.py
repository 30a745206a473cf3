"""The type-through rule, and answers the confidence gate withheld until their start is typed."""

from __future__ import annotations

from lsp_server.answering.context import DocumentCursor
from lsp_server.answering.typethrough import Shown, extends, type_through

URI = "file:///project/calc.py"


def cursor(prefix: str, suffix: str = "\n") -> DocumentCursor:
    return DocumentCursor(uri=URI, version=1, language_id="python", offset=len(prefix), prefix=prefix, suffix=suffix,
                          position=None)


def test_a_withheld_answer_shows_once_its_unsure_start_is_typed():
    held = Shown("x = ", "\n", "foo(bar)", 0, complete=True, show_after=3)
    assert held.visible == ""
    assert type_through(held, cursor("x = ")) is None  # at the spot: still withheld, even complete
    assert type_through(held, cursor("x = fo")) is None  # two of the three characters
    rest = type_through(held, cursor("x = foo"))
    assert (rest.text, rest.show_after, rest.visible) == ("(bar)", 0, "(bar)")
    assert type_through(held, cursor("x = fox")) is None  # typed something else
    shown = Shown("x = ", "\n", "foo(bar)", 0, complete=True)
    assert type_through(shown, cursor("x = ")).text == "foo(bar)" and type_through(shown, cursor("x = f")).text == "oo(bar)"


def test_a_later_answer_replaces_the_kept_one_only_if_it_hides_nothing_that_was_shown():
    shown = Shown("a", "b", "foo", 0)
    held_longer = Shown("a", "b", "foo(bar)", 0, show_after=1)
    assert extends(shown, Shown("a", "b", "foo(bar)", 0))
    assert not extends(shown, held_longer)  # the gate doubts the longer one: keep what was on screen
    assert extends(Shown("a", "b", "foo", 0, show_after=2), held_longer)
    assert extends(Shown("a", "b", "", 0), held_longer)  # nothing was on screen
    assert extends(held_longer, Shown("a", "b", "foo(bar)", 0, complete=True))
    assert not extends(shown, Shown("a", "b", "fob", 0)) and not extends(shown, Shown("ab", "b", "foo(", 0))

"""The stop strings a cursor gives the decoder."""

from __future__ import annotations

import pytest

from engine.text.cursor import Cursor
from engine.text.text_stream import stop_strings_for

STOP_TABLE = [
    # (suffix, multiline, expected)
    ("", False, ["\n"]),
    (")\n", False, ["\n"]),  # closers only: nothing distinctive
    (", b)\nfoo()", False, ["\n", ", b)"]),
    ("ab)", False, ["\n"]),  # too short to be distinctive
    (" else y\n", False, ["\n", " else y"]),  # leading blank kept: the completion ends before it
    ("\n    return x\n", True, ["\n    return x\n"]),
    ("\n\n}", True, ["\n}"]),  # last line of the document: no trailing newline required
    ("", True, []),
    ("}\nfoo();\n", True, ["\nfoo();\n"]),
]


@pytest.mark.parametrize("suffix, multiline, expected", STOP_TABLE)
def test_stop_strings_for(suffix, multiline, expected):
    assert stop_strings_for(Cursor.at("", suffix, None, multiline)) == expected

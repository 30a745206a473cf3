"""Post-processing: one table per filter (the whole chain: test_postprocess_chain.py).

Every filter is called as the chain calls it, ``(text, Context)``.
"""

from __future__ import annotations


import pytest

from engine.text.cursor import Cursor
from engine.text.postprocess import (
    Context,
    cut_at_unprintable,
    cut_line_suffix_overlap,
    cut_suffix_lines_overlap,
    drop_repeated_lines,
    drop_unfinished_line,
    drop_whitespace_only,
    keep_first_line,
    postprocess,
    start_at_cursor_indentation,
    trim_to_scope,
    trim_to_scope_by_indentation,
    trim_trailing_blanks,
)
from engine.text.range_correction import PostprocessedCompletion, correct_range

CURSOR = "║"


def ctx(prefix: str = "", suffix: str = "", language: str | None = "python", multiline: bool = True,
        cut_short: bool = False) -> Context:
    return Context(Cursor.at(prefix, suffix, language), multiline, cut_short)


def shown(completion: str, *, prefix: str, suffix: str, language: str | None, multiline: bool, **flags):
    """postprocess at the cursor between `prefix` and `suffix`."""
    return postprocess(completion, Cursor.at(prefix, suffix, language, multiline), **flags)

# -- single line ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [("a + b", "a + b"), ("a + b\nc = 1", "a + b"), ("\nfoo()", ""), ("", "")],
)
def test_keep_first_line(text, expected):
    assert keep_first_line(text, ctx(multiline=False)) == expected
    assert keep_first_line(text, ctx(multiline=True)) == text


def test_drop_unfinished_line():
    cut = ctx("def f():\n    ", "\n", "python", multiline=True, cut_short=True)
    assert drop_unfinished_line("x = 1\n    y = f(a,", cut) == "x = 1"
    assert drop_unfinished_line("x = 1\n", cut) == "x = 1"
    assert drop_unfinished_line("y = f(a,", cut) == "y = f(a,"  # one line: all there is
    assert drop_unfinished_line("x = 1\n    if x:\n        y", cut) == "x = 1"  # the header's body was cut
    finished = ctx("def f():\n    ", "\n", "python", multiline=True)
    assert drop_unfinished_line("x = 1\n    y = 2", finished) == "x = 1\n    y = 2"
    allman = ctx("void F()\n{\n    ", "\n}", "csharp", multiline=True, cut_short=True)
    assert drop_unfinished_line("a();\n    if (x)\n    {\n        b", allman) == "a();"  # the header goes with its `{`
    assert drop_unfinished_line("a();\n    b();\n    {\n        c", allman) == "a();\n    b();"  # a bare block
    single = ctx("x = ", "\n", "python", multiline=False, cut_short=True)
    assert drop_unfinished_line("f(a,\nb", single) == "f(a,\nb"


# -- reproducing the rest of the line --------------------------------------------------------

LINE_OVERLAP_TABLE = [
    # (completion, rest of the line after the cursor, expected)
    ("a, b)", ", b)", "a"),  # python: foo(|, b)
    ("a, b", ", b)", "a"),  # stopped half-way through the reproduction
    ("a, b) + c", ", b)", "a"),  # reproduced, then went on
    (", b)", ", b)", ""),  # nothing but the reproduction
    ("a, c)", ", b)", "a, c)"),  # different: keep
    ("x", " else y", "x"),
    ("a if c else y", " else y", "a if c"),  # python conditional
    ("user.name", ".name;", "user"),  # js: |.name;
    ("ctx, req)", "req)", "ctx, "),  # go: handle(|req)
    ("a)", ")", "a)"),  # closers only: left to the range correction
    ("anything", "", "anything"),
    ("a, b)\nnext()", ", b)", "a"),  # the lines after the reproduction go too
]


@pytest.mark.parametrize("completion, line_after, expected", LINE_OVERLAP_TABLE)
def test_cut_line_suffix_overlap(completion, line_after, expected):
    assert cut_line_suffix_overlap(completion, ctx(suffix=line_after + "\nnext_line()\n")) == expected


# -- repeating the lines below the cursor -------------------------------------------------------

SUFFIX_LINES_TABLE = [
    # (completion, line before the cursor, suffix, expected)
    (  # python: the body ends where the existing return begins
        "result = []\n    for x in xs:\n        result.append(x)\n    return result",
        "    ",
        "\n    return result\n",
        "result = []\n    for x in xs:\n        result.append(x)",
    ),
    ("return result", "    ", "\n    return result\n", ""),  # blank line: the first line counts
    ("a();\n}", "  ", "\n}\n", "a();"),  # js: the closing brace is already there
    (  # an inner "  }" is not the outer "}" below
        "if (x) {\n    a();\n  }",
        "  ",
        "\n}\n",
        "if (x) {\n    a();\n  }",
    ),
    (  # js: the suffix's "  }" closes the else the completion opened
        "a();\n  } else {\n    b();\n  }",
        "    ",
        "\n  }\n}\n",
        "a();\n  } else {\n    b();",
    ),
    ("x := 1\n\treturn x", "\t", "\n\treturn x\n}", "x := 1"),  # go
    ("let y = 2;\n    y\n}", "    ", "\n    y\n}\n", "let y = 2;"),  # rust: two lines match
    ("let y = 2;\n    y + 1", "    ", "\n    y\n}\n", "let y = 2;\n    y + 1"),  # different: keep
    ("foo()", "x = ", "\nfoo()\n", "foo()"),  # first line of a non-blank line never counts
    ("a\nb", "", "", "a\nb"),  # nothing below
]


@pytest.mark.parametrize("completion, line_before, suffix, expected", SUFFIX_LINES_TABLE)
def test_cut_suffix_lines_overlap(completion, line_before, suffix, expected):
    assert cut_suffix_lines_overlap(completion, ctx("header\n" + line_before, suffix)) == expected


# -- repetition -----------------------------------------------------------------------------------

REPEAT_TABLE = [
    # (completion, line before the cursor, expected)
    ("pass\n    pass\n    pass\n    pass", "    ", "pass"),
    ("x = 1\nx = 1\nx = 1\ny = 2", "", "x = 1"),
    ("x = 1\nx = 1\ny = 2", "", "x = 1\nx = 1\ny = 2"),  # twice is fine
    ("a()\nb()\na()\nb()\na()\nb()", "", "a()\nb()"),  # a repeated block
    ("  }\n}\n}\n}", "", "  }\n}\n}\n}"),  # brackets never count
    ("log(1)\nlog(2)\nlog(3)", "", "log(1)\nlog(2)\nlog(3)"),
    ('fmt.Println("x")\n\tfmt.Println("x")\n\tfmt.Println("x")', "\t", 'fmt.Println("x")'),  # go, tabs
]


@pytest.mark.parametrize("completion, line_before, expected", REPEAT_TABLE)
def test_drop_repeated_lines(completion, line_before, expected):
    assert drop_repeated_lines(completion, ctx("header\n" + line_before)) == expected


# -- syntactic scope by indentation (fallback) ---------------------------------------------------

INDENT_SCOPE_TABLE = [
    # (completion, line before the cursor, language, expected)
    ("\n    return 1\n\ndef h():\n    pass", "def f():", "python", "\n    return 1\n"),
    ("return 1\n\ndef h():\n    pass", "    ", "python", "return 1\n"),
    ("x = 1\n    return x", "    ", "python", "x = 1\n    return x"),
    ("\n    a()\nelse:\n    b()\nc()", "if x:", "python", "\n    a()\nelse:\n    b()"),  # else continues
    ("):\n    return a\n\ndef g():", "def f(a, b", "python", "):\n    return a\n"),
    ("\n  return 1;\n}\n\nfunction g() {}", "function f() {", "javascript", "\n  return 1;\n}"),
    ("\n  a();\n} else {\n  b();\n}\nc();", "if (x) {", "javascript", "\n  a();\n} else {\n  b();\n}"),
    ("a();\n}\nfunction g() {}", "  ", "javascript", "a();\n}"),
    ("\n\tx := 1\n}\n\nfunc g() {}", "func f() {", "go", "\n\tx := 1\n}"),
    ("\n    let x = 1;\n}\nfn g() {}", "fn f() {", "rust", "\n    let x = 1;\n}"),
    ("\n    let x = 1;\n}\nfn g() {}", "fn f() {", None, "\n    let x = 1;\n}"),
    # brace languages: `case` at the switch's indentation (Go, Linux C) and Allman `else` continue it
    ("\n\tcase 1:\n\t\treturn a\n\tdefault:\n\t\treturn b\n\t}\n\tx++", "\tswitch n {", "go",
     "\n\tcase 1:\n\t\treturn a\n\tdefault:\n\t\treturn b\n\t}"),
    ("\n        a();\n    }\n    else\n    {\n        b();\n    }\n    c();", "    if (x) {", "csharp",
     "\n        a();\n    }\n    else\n    {\n        b();\n    }"),
    ("\n  a();\n}\nexport default f;", "function f() {", "javascript", "\n  a();\n}"),
    ("\n  a();\n}\ncatch_all();", "try {", "java", "\n  a();\n}"),  # a word that starts like `catch` is not one
    ("x = 1\ny = 2", "", "python", "x = 1\ny = 2"),  # top level: nothing to leave
    ("\n\n", "x", "python", "\n\n"),
]


@pytest.mark.parametrize("completion, line_before, language, expected", INDENT_SCOPE_TABLE)
def test_trim_to_scope_by_indentation(completion, line_before, language, expected):
    assert trim_to_scope_by_indentation(completion, ctx("\n" + line_before, language=language)) == expected


TREE_SCOPE_TABLE = [
    # (prefix, completion, suffix, language, expected)
    ("def f():\n    ", "return 1\n\ndef h():\n    pass", "\n", "python", "return 1"),
    ("def f():", "\n    return 1\n\nclass C:\n    pass", "", "python", "\n    return 1"),
    ("function f() {\n  ", "a();\n}\nfunction g() {}", "\n}\n", "javascript", "a();\n}"),
    ("if (x) {", "\n  a();\n} else {\n  b();\n}", "", "typescript", "\n  a();\n}"),
    ("func f() {\n\t", "x := 1\n}\n\nfunc g() {}", "", "go", "x := 1\n}"),
    ("fn f() {\n    ", "let x = 1;\n}\nfn g() {}", "", "rust", "let x = 1;\n}"),
    ("def f():\n    ", "x = 1\n    return x", "", "python", "x = 1\n    return x"),
    ("x = 1\n", "y = 2\nz = 3", "", "python", "y = 2\nz = 3"),  # top level
    ("fn f() {\n    ", "let x = 1;\n}\nfn g() {}", "", None, "let x = 1;\n}"),  # no grammar: indentation
    ("class A {\n  int f() {\n    ", "return 1;\n  }\n  int g() {}", "\n}\n", "java", "return 1;\n  }"),
    ("int\nmain(void)\n{\n\t", "return 0;\n}\n\nint other;", "", "c", "return 0;\n}"),
    ("template <typename T>\nT twice(T x) {\n  ", "return x + x;\n}\nint y;", "", "cpp", "return x + x;\n}"),
    ("class A\n{\n    void F()\n    {\n        ", "G();\n    }\n    void H() { }", "\n}\n", "csharp", "G();\n    }"),
]


@pytest.mark.parametrize("prefix, completion, suffix, language, expected", TREE_SCOPE_TABLE)
def test_trim_to_scope(prefix, completion, suffix, language, expected):
    assert trim_to_scope(completion, ctx(prefix, suffix, language)) == expected
    assert trim_to_scope(completion, ctx(prefix, suffix, language, multiline=False)) == completion


# -- whitespace ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("return x\n\tpass", "return x\n\tpass"),  # tabs and newlines are code
    ("abc\x00def", "abc"),
    ("x = 1\x1b[31m", "x = 1"),
    ("name = 'caf\ufffd", "name = 'caf"),  # half of a multi-byte character
    ("\x01", ""),
])
def test_cut_at_unprintable(text, expected):
    assert cut_at_unprintable(text, ctx()) == expected


@pytest.mark.parametrize("text, expected", [("", ""), ("  \n\t\n", ""), (" x ", " x ")])
def test_drop_whitespace_only(text, expected):
    assert drop_whitespace_only(text, ctx()) == expected


TRAILING_TABLE = [
    # (completion, rest of the line after the cursor, multiline, expected)
    ("1 ", "", False, "1"),  # the end of a line: no trailing blanks
    ("a()\n\n", "\n", True, "a()"),
    ("\n  a();\n\n\n", "}", True, "\n  a();\n"),  # "}" moves below: one newline stays
    ("\n  a();\n  ", "}", True, "\n  a();\n  "),  # with the indentation the model chose
    ("x ", ", y)", False, "x "),  # mid-line, blanks are part of the code
]


@pytest.mark.parametrize("completion, line_after, multiline, expected", TRAILING_TABLE)
def test_trim_trailing_blanks(completion, line_after, multiline, expected):
    assert trim_trailing_blanks(completion, ctx("x = ", line_after, multiline=multiline)) == expected


INDENTATION_TABLE = [
    # (completion, line before the cursor, multiline, expected)
    ("    for x in xs:", "        ", False, "for x in xs:"),  # the model wrote a deeper line
    ("\tif x:", "\t", False, "if x:"),  # go, tabs
    ("for x in xs:", "        ", False, "for x in xs:"),
    ("  x = 1", "x =", False, "  x = 1"),  # mid-line blanks are code
    ("    x = 1", "", False, "    x = 1"),  # column 0: the indentation is the completion's
    ("    total = 0\n        for x in xs:\n            total += x\n    return 1", "    ", True,
     "total = 0\n    for x in xs:\n        total += x\n    return 1"),  # the block keeps its shape
    ("\n    x = 1", "    ", True, "\n    x = 1"),  # a first line break is not indentation
]


@pytest.mark.parametrize("completion, line_before, multiline, expected", INDENTATION_TABLE)
def test_start_at_cursor_indentation(completion, line_before, multiline, expected):
    assert start_at_cursor_indentation(completion, ctx("def f(xs):\n" + line_before, multiline=multiline)) == expected


# -- range correction ----------------------------------------------------------------------------

RANGE_TABLE = [
    # (completion, rest of the line after the cursor, expected text, expected replace_after)
    ("a, b)", ")", "a, b)", 1),  # foo(|) → completion retypes ")"
    ("a, b", ")", "a, b", 0),  # leaves ")" alone: plain insert
    ("a, b):", ")", "a, b):", 1),
    ("bar(1)", ")", "bar(1)", 0),  # its ")" closes its own "(": not ours
    ("bar(1))", ")", "bar(1))", 1),
    ('hello")', '")', 'hello")', 2),  # print("|")
    ('hello"', '")', 'hello")', 2),  # typed the quote only: ")" is re-appended
    ("it's fine", '")', "it's fine", 0),  # an apostrophe inside a string
    ('a", "b")', '")', 'a", "b")', 2),
    ("x);", ");", "x);", 2),
    ("x)", ");", "x);", 2),
    ("\n  a();\n}", "}", "\n  a();\n}", 1),  # {|} multi-line
    ("\n  a();\n", "}", "\n  a();\n", 0),
    ("ntln", "nt(x)", "ntln", 2),  # pri|nt → println
    ("e", "nt(x)", "e", 0),
    ("abc", "", "abc", 0),
    ("x]", "])", "x])", 2),  # go/rust index inside a call: a[|])
    ("vec![1, 2]", "];", "vec![1, 2]", 0),
]


@pytest.mark.parametrize("completion, line_after, text, replace_after", RANGE_TABLE)
def test_correct_range(completion, line_after, text, replace_after):
    assert correct_range(completion, line_after) == PostprocessedCompletion(text, replace_after)

"""Post-processing: one table per filter, the whole chain in golden files, then properties.

Every filter is called as the chain calls it, ``(text, Context)``. The chain's cases live in
tests/golden/postprocess/*.txt: a header (language, multiline, replaces, cut_short, ended), the document with
``║`` at the cursor, the raw completion and what the editor shows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.text.cursor import Cursor
from engine.text.postprocess import (
    FILTERS,
    Context,
    cut_at_unprintable,
    cut_line_suffix_overlap,
    cut_suffix_lines_overlap,
    drop_repeated_lines,
    drop_unfinished_line,
    drop_whitespace_only,
    keep_first_line,
    keep_the_file_parsing,
    left_its_block,
    postprocess,
    run_filters,
    start_at_cursor_indentation,
    trim_to_scope,
    trim_to_scope_by_indentation,
    trim_trailing_blanks,
)
from engine.text.range_correction import PostprocessedCompletion, correct_range
from engine.text.syntax_check import first_that_parses
from engine.text.text_stream import stop_strings_for

GOLDEN = Path(__file__).parents[1] / "golden" / "postprocess"
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


# -- the whole chain: golden files ---------------------------------------------------------------


def load_golden(path: Path) -> dict:
    """A golden case: header lines (``key: value``, ``#`` comments), then ``=== document``,
    ``=== completion`` and ``=== shown`` sections. A section is taken verbatim, less the
    newline before the next ``===`` line (so a section ending in a newline has a blank line)."""
    head, *sections = path.read_text(encoding="utf-8").split("\n=== ")
    case = {"replaces": "0", "cut_short": "false", "ended": "false"}
    for line in head.splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(":")
            case[key.strip()] = value.strip()
    for section in sections:
        title, _, body = section.partition("\n")
        case[title.split()[0]] = body.removesuffix("\n")
    prefix, _, suffix = case["document"].partition(CURSOR)
    assert CURSOR in case["document"], f"{path.name}: no {CURSOR} in the document"
    language = None if case["language"] == "none" else case["language"]
    return dict(prefix=prefix, suffix=suffix, language=language, multiline=case["multiline"] == "true",
                completion=case["completion"], shown=case["shown"], replaces=int(case["replaces"]),
                cut_short=case["cut_short"] == "true", ended=case["ended"] == "true")


GOLDEN_CASES = sorted(GOLDEN.glob("*.txt"))


def test_there_are_golden_cases_for_every_language():
    languages = {load_golden(p)["language"] for p in GOLDEN_CASES}
    assert {"python", "javascript", "typescript", "go", "rust", "java", "c", "cpp", "csharp"} <= languages


@pytest.mark.parametrize("path", GOLDEN_CASES, ids=[p.stem for p in GOLDEN_CASES])
def test_postprocess_golden(path):
    case = load_golden(path)
    got = shown(case["completion"], prefix=case["prefix"], suffix=case["suffix"], language=case["language"],
                      multiline=case["multiline"], cut_short=case["cut_short"], ended=case["ended"])
    trace = run_filters(case["completion"], ctx(case["prefix"], case["suffix"], case["language"], case["multiline"],
                                                case["cut_short"]))
    steps = "\n".join(f"  {name}: {text!r}" for name, text in trace)
    assert (got.text, got.replace_after) == (case["shown"], case["replaces"]), f"{path.name}, step by step:\n{steps}"


def test_filters_have_one_signature_and_unique_names():
    names = [name for name, _ in FILTERS]
    assert len(set(names)) == len(names) and all(step.__name__ == name for name, step in FILTERS)
    c = ctx("def f():\n    ", "\n    return 1\n")
    assert all(isinstance(step("x = 1\n", c), str) for _, step in FILTERS)


def test_empty_and_whitespace_only_completions_show_nothing():
    for completion in ("", "   \n "):
        assert shown(completion, prefix="x = ", suffix="\n", language="python", multiline=True) == \
            PostprocessedCompletion("", 0)


BODY = "def total(xs):\n    t = 0\n    for x in xs:\n        "
BELOW = "\n        t += x\n    return t\n"


@pytest.mark.parametrize("prefix, completion, suffix, language, multiline, expected", [
    # A statement where a statement belongs: kept.
    (BODY, "print(x)", BELOW, "python", False, "print(x)"),
    # A block header with nothing indented under it: CPython rejects the file (tree-sitter does not).
    (BODY, "if x > 0:", BELOW, "python", False, ""),
    # A call closed too early or left open: the file no longer parses.
    (BODY, "t = max(t, x", BELOW, "python", False, ""),
    # Multi-line: cut back to the last whole line that keeps the file parsing.
    (BODY, "if x:\n            t += 1\n        y = (", BELOW, "python", True, "if x:\n            t += 1"),
    # The line the user is writing was broken already: finishing a header is no new error.
    ("def total(xs):\n    for x in ", "xs:", "\n\ndef other():\n    pass\n", "python", False, "xs:"),
    # A closing bracket the completion retypes is replaced, not doubled.
    ("def f(a):\n    return g(", "a)", ")\n", "python", False, "a)"),
    # Brace languages: a block opened where the file has a statement.
    ("function f(a) {\n  ", "if (a) {", "\n  return a;\n}\n", "javascript", False, ""),
    ("function f(a) {\n  ", "a += 1;", "\n  return a;\n}\n", "javascript", False, "a += 1;"),
    # The lines below continue a bracket the missing line opens: the completion must open it.
    ("OPTIONS = [\n    ('a', 'b', 'c'),\n    ", "('x', 'y', 'z'),", "\n     'more'),\n]\n", "python", False, ""),
    ("OPTIONS = [\n    ('a', 'b', 'c'),\n    ", "('x', 'y',", "\n     'more'),\n]\n", "python", False, "('x', 'y',"),
    # The block below closes one the missing line opens: a plain statement leaves its brace unmatched.
    ("function f(specs) {\n  ", "return specs.length;", "\n    if (spec) {\n      return true;\n    }\n  });\n}\n",
     "javascript", False, ""),
    ("function f(specs) {\n  ", "return specs.some(spec => {",
     "\n    if (spec) {\n      return true;\n    }\n  });\n}\n", "javascript", False, "return specs.some(spec => {"),
    # A function still being written (its brace not closed yet) above others: completions stay.
    ("function f(a) {\n  const x = ", "a + 1;", "\n\nfunction g() {\n  return 2;\n}\n", "javascript", False,
     "a + 1;"),
    # A header finished while typing a body: its own body comes with the next keystrokes.
    ("class G:\n    def f(self, lines):\n        for line in lines[:-1", "]:", "\n\n    def g(self):\n        pass\n",
     "python", False, "]:"),
    ("def f(x):\n    if x:\n        return 1\n    ", "else:", "\n", "python", False, "else:"),
    ("def f(x):\n    for y in x:\n        ", "if y:", "\n\ndef g():\n    pass\n", "python", False, "if y:"),
    # What is broken in another function below is none of this completion's business.
    ("def f(x):\n    ", "return x", "\n\ndef g(:\n    pass\n", "python", False, "return x"),
    ("def f(x):\n    return x, ", "x + 1", "\n\n\nSTRING = '''unterminated\n", "python", False, "x + 1"),
    # C: a macro tree-sitter cannot read below (BAD_CAST) is no line the completion must repair...
    ("int sign(const char *key_file) {\n    int res = -1;\n    ", "res = 0;",
     "\n    if (set_name(key, BAD_CAST key_file) < 0) {\n        return res;\n    }\n    return res;\n}\n", "c", False,
     "res = 0;"),
    # ... but a block below that closes what the missing line opens is.
    ("int f(int x) {\n    int y = 2;\n    ", "y = 3;", "\n        return y;\n    }\n    return 0;\n}\n", "c", False, ""),
    ("int f(int x) {\n    int y = 2;\n    ", "if (x) {", "\n        return y;\n    }\n    return 0;\n}\n", "c", False,
     "if (x) {"),
    # C#: Allman braces, a statement where one belongs.
    ("class A\n{\n    void F()\n    {\n        ", "G();", "\n        H();\n    }\n}\n", "csharp", False, "G();"),
    # No grammar: no verdict, the completion stays.
    ("x = (", "1 +", "\n", "cobol", False, "1 +"),
])
def test_keep_the_file_parsing(prefix, completion, suffix, language, multiline, expected):
    got = shown(completion, prefix=prefix, suffix=suffix, language=language, multiline=multiline, ended=True)
    assert got.text == expected


def test_an_answer_cut_short_is_not_judged_by_syntax():
    """The budget's answer is the start of a completion: an open call is what it looks like."""
    got = shown("t = max(t, x", prefix=BODY, suffix=BELOW, language="python", multiline=False, ended=False)
    assert got.text == "t = max(t, x"


def test_keep_the_file_parsing_tries_only_whole_lines_then_nothing():
    broken = PostprocessedCompletion("y = (\n        z = [", 0)
    assert keep_the_file_parsing(broken, ctx(BODY, BELOW, "python", True)) == PostprocessedCompletion("", 0)


# -- properties ---------------------------------------------------------------------------------------

snippet = st.lists(
    st.sampled_from(list("ab_(){}[]:;=,.'\"` \t\n") + ["def ", "if x:", "return ", "    ", "\n    ", "\n}", "else"]),
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    completion=snippet,
    prefix=snippet,
    suffix=snippet,
    language=st.sampled_from(["python", "javascript", "typescript", "go", "rust", "java", "c", "cpp", "csharp", None]),
    multiline=st.booleans(),
    ended=st.booleans(),
)
def test_postprocess_properties(completion, prefix, suffix, language, multiline, ended):
    got = shown(completion, prefix=prefix, suffix=suffix, language=language, multiline=multiline, ended=ended)
    line_after = suffix.split("\n", 1)[0]
    assert got.text == "" or got.text.strip(), "never whitespace only"
    if ended and got.text:
        assert first_that_parses(Cursor.at(prefix, suffix, language), [(got.text, got.replace_after)]) == 0, \
            "adds no parse error"
    assert 0 <= got.replace_after <= len(line_after)
    if got.text == "":
        assert got.replace_after == 0
    if not multiline:
        assert "\n" not in got.text
    line_before = prefix.rsplit("\n", 1)[-1]
    if line_before and not line_before.strip():
        assert got.text[:1] not in (" ", "\t"), "at a typed indentation, code comes first"
    # The completion cut short (less blanks at line starts), plus at most closers already on the line.
    replaced = line_after[: got.replace_after]
    assert any(
        unindented(completion).startswith(unindented(got.text[:k])) and replaced.endswith(got.text[k:])
        for k in range(len(got.text) + 1)
    )


def unindented(text: str) -> str:
    return "\n".join(line.lstrip(" \t") for line in text.split("\n"))


def test_huge_document_is_only_parsed_near_the_cursor(parsed):
    from engine.text.parse_window import WINDOW_PREFIX_CHARS, WINDOW_SUFFIX_CHARS

    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(120_000))  # ~3.5 MB each side
    got = shown("return 1\n\ndef h():\n    pass", prefix=body + "def g():\n    ", suffix="\n\n" + body,
                      language="python", multiline=True, ended=True)
    assert got.text == "return 1"
    assert parsed and max(map(len, parsed)) <= WINDOW_PREFIX_CHARS + WINDOW_SUFFIX_CHARS + 100
    assert stop_strings_for(Cursor.at("", "\n\n" + body, "python", True)) == ["\ndef f0(x):\n"]


@settings(max_examples=100, deadline=None)
@given(
    cursor_indent=st.sampled_from(["", "    ", "        ", "\t"]),
    line_indent=st.sampled_from(["", "    ", "        ", "            ", "\t\t"]),
    extra=st.sampled_from(["", "    ", "  "]),
    line=st.sampled_from(["if idx != idx2:", "return total", "for x in xs:", "total += x"]),
    multiline=st.booleans(),
)
def test_never_repeats_the_suffix_first_line_at_another_indentation(cursor_indent, line_indent, extra, line, multiline):
    prefix = "def f(xs):\n    total = 0\n" + cursor_indent
    suffix = "\n" + line_indent + line + "\n    return xs\n"
    completions = [extra + line, f"x = 1\n{line_indent}{line}"] if multiline else [extra + line]
    for completion in completions:
        got = shown(completion, prefix=prefix, suffix=suffix, language="python", multiline=multiline)
        assert line not in [shown.strip() for shown in got.text.split("\n")], (completion, got)


def test_a_try_block_being_typed_may_grow_before_its_except():
    prefix = "def fetch(c, spos):\n    try:\n        if spos is None:\n            return c.popleft()\n        "
    suffix = "\n\n    while c:\n        pass\n"
    got = shown("elif spos == len(c):", prefix=prefix, suffix=suffix, language="python", multiline=False,
                      ended=True)
    assert got.text == "elif spos == len(c):"


@pytest.mark.parametrize("completion, done", [
    ("x = 1\n        return x\n", False),
    ("x = 1\n        return x\n\n    def h(self):\n", True),  # a whole line past the method's body
    ("x = 1\n        return x\n\n    def h(se", False),  # that line is not finished yet
    ("if x:\n            y()\n        elif z:\n", False),  # the statement goes on
    ("x = 1\n", False),
])
def test_a_multi_line_completion_is_done_once_it_left_its_block(completion, done):
    prefix, suffix = "class A:\n    def f(self):\n        ", "\n\n    def g(self):\n        pass\n"
    assert left_its_block(completion, Cursor.at(prefix, suffix, "python")) is done

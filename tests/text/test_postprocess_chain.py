"""Post-processing as a whole: the chain in golden files, the syntax check, then properties.

The chain's cases live in tests/golden/postprocess/*.txt: a header (language, multiline, replaces,
cut_short, ended), the document with ``║`` at the cursor, the raw completion and what the editor
shows. The filters one by one are in test_postprocess.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.text.cursor import Cursor
from engine.text.postprocess import (
    FILTERS,
    keep_the_file_parsing,
    left_its_block,
    run_filters,
)
from engine.text.range_correction import PostprocessedCompletion
from engine.text.syntax_check import first_that_parses
from engine.text.text_stream import stop_strings_for


from test_postprocess import CURSOR, ctx, shown

GOLDEN = Path(__file__).parents[1] / "golden" / "postprocess"


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

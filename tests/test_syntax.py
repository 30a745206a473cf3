"""Language detection, parsers, the single- vs multi-line decision, syntactic scope."""

from __future__ import annotations

import pytest

import engine.syntax as syntax
from engine.syntax import decide_multiline, get_parser, language_from, scope_end, window_start


@pytest.mark.parametrize(
    "language_id, path, expected",
    [
        ("python", None, "python"),
        ("typescriptreact", "a.tsx", "tsx"),
        ("javascriptreact", None, "javascript"),
        ("Go", None, "go"),
        (None, "src/lib.rs", "rust"),
        (None, "x/a.mjs", "javascript"),
        (None, "x/a.ts", "typescript"),
        (None, "x/A.PY", "python"),
        ("java", "A.java", "java"),  # no grammar, but the language is still known
        (None, "notes.txt", None),
        (None, None, None),
    ],
)
def test_language_from(language_id, path, expected):
    assert language_from(language_id, path) == expected


@pytest.mark.parametrize("language", ["python", "javascript", "typescript", "tsx", "go", "rust"])
def test_parsers_are_cached_and_parse(language):
    parser = get_parser(language)
    assert parser is not None and get_parser(language) is parser
    assert syntax.parse(language, "x").root_node is not None


def test_no_grammar_no_parser():
    assert get_parser("cobol") is None and get_parser(None) is None


# (prefix, suffix, language, multi-line?)
MULTILINE_TABLE = [
    # Python
    ("def f():", "", "python", True),
    ("class A(B):", "\n", "python", True),
    ("    if x > 1:", "\n    return 2", "python", True),
    ("else:", "", "python", True),
    ("def f(", ")", "python", False),  # inside brackets
    ("def f(a, ", "b):", "python", False),  # text after the cursor
    ("x = {'a':", "}", "python", False),  # a dict colon is no block
    ("f = lambda x:", "", "python", False),
    ("def f(x:", ")", "python", False),  # an annotation
    ("def f(x:", ")", None, False),
    ("if x:  # why", "", "python", False),  # end of a comment: finish the comment
    ("x = 1", "", "python", False),
    ("pri", "nt(x)", "python", False),  # inside a word
    ('s = "abc:', '"', "python", False),  # inside a string
    ("def f():\n    ", "", "python", True),  # empty body at EOF
    ("def f():\n    ", "\n\ndef g(): pass", "python", True),  # empty body, next def dedented
    ("def f():\n    ", "\n    return 1", "python", False),  # body already there
    ("def f():\n    x = 1\n    ", "\n", "python", False),  # inside a non-empty body
    ("", "", "python", True),  # empty document
    # JavaScript / TypeScript
    ("function f() {", "}", "javascript", True),
    ("function f() {", "", "javascript", True),
    ("function f() {\n  ", "\n}", "javascript", True),
    ("if (x) {\n  ", "\n}\nfoo();", "javascript", True),
    ("foo(", ")", "javascript", False),
    ("const a = [", "];", "javascript", False),
    ("// note {", "", "javascript", False),
    ('const s = "{', '";', "javascript", False),
    ("const s = `${a} {", "`", "javascript", False),
    ("interface Foo {", "}", "typescript", True),
    ("const x: number = ", ";", "typescript", False),
    ("return <div>{", "}</div>", "tsx", False),  # "</div>" is text after the cursor
    ("export function App() {", "}", "tsx", True),
    # Go
    ("func main() {", "\n}", "go", True),
    ("func main() {\n\t", "\n}", "go", True),
    ("\tfmt.Println(", ")", "go", False),
    ("\tx := ", "", "go", False),
    # Rust
    ("fn main() {", "}", "rust", True),
    ("impl Foo {\n    ", "\n}", "rust", True),
    ("    let v = vec![", "];", "rust", False),
    ("    // TODO {", "", "rust", False),
    # No grammar: indentation/bracket heuristics
    ("fn main() {", "}", None, True),
    ("def f():", "", None, True),
    ("void f() {\n  ", "\n}", "java", True),
    ("foo(", ")", "java", False),
    ('print("{', '")', "java", False),
]


@pytest.mark.parametrize("prefix, suffix, language, expected", MULTILINE_TABLE)
def test_decide_multiline(prefix, suffix, language, expected):
    assert decide_multiline(prefix, suffix, language) is expected


def test_decide_multiline_parses_only_a_window(monkeypatch):
    seen: list[int] = []
    real = syntax.parse

    def spy(language, text):
        seen.append(len(text))
        return real(language, text)

    monkeypatch.setattr(syntax, "parse", spy)
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(120_000))  # ~3.5 MB
    assert len(body) > 3_000_000
    assert decide_multiline(body + "def g():", "\n" + body, "python") is True
    assert seen and max(seen) <= syntax.WINDOW_PREFIX_CHARS + syntax.WINDOW_SUFFIX_CHARS


@pytest.mark.parametrize(
    "prefix, expected_line",
    [
        ("a = 1\ndef f():\n    x = 1\n    y", "def f():"),
        ("    x = 1\n    y", None),  # no top-level line: the whole prefix
        ("class A:\n    def f(self):\n        pass\n    def g(self):\n        ", "class A:"),
        ("fn a() {\n}\nfn b() {\n    let x = 1;\n    ", "fn b() {"),
    ],
)
def test_window_start_is_a_top_level_line(prefix, expected_line):
    start = window_start(prefix)
    if expected_line is None:
        assert start == 0
    else:
        assert prefix[start:].startswith(expected_line)


# (prefix, completion, suffix, language, expected end offset in completion or None)
SCOPE_TABLE = [
    # leaves the function body: the dedented def ends it
    ("def f():\n    ", "return 1\n\ndef h():\n    pass", "\n", "python", len("return 1")),
    ("class A:\n    def f(self):\n        ", "pass\n\n    def g(self):\n        pass", "", "python", len("pass")),
    # stays inside the body
    ("def f():\n    ", "x = 1\n    return x", "\n", "python", len("x = 1\n    return x")),
    # closes the block with its own brace, then goes on
    ("function f() {\n  ", "a();\n}\nfunction g() {}", "\n}\n", "javascript", len("a();\n}")),
    ("func main() {\n\t", "x := 1\n}\n\nfunc other() {}", "", "go", len("x := 1\n}")),
    ("fn main() {\n    ", "let x = 1;\n}\n\nfn other() {}", "", "rust", len("let x = 1;\n}")),
    # the brace below is the suffix's: the block ends after the completion
    ("function f() {\n  ", "a();\n  b();", "\n}\n", "typescript", len("a();\n  b();")),
    # top level: no block to leave → no opinion
    ("", "x = 1\ny = 2", "", "python", None),
    # no grammar → no opinion
    ("{\n  ", "a\n}\nb", "", None, None),
]


@pytest.mark.parametrize("prefix, completion, suffix, language, expected", SCOPE_TABLE)
def test_scope_end(prefix, completion, suffix, language, expected):
    assert scope_end(prefix, completion, suffix, language) == expected


def test_scope_end_non_ascii():
    prefix = "def f():\n    s = 'héllo → wörld'\n    "
    completion = "t = 'ünïcode'\n\ndef g():\n    pass"
    assert scope_end(prefix, completion, "", "python") == len("t = 'ünïcode'")


# -- properties ---------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

snippet = st.lists(
    st.sampled_from(list("ab_(){}[]:;=,.'\"`#/ \t\n") + ["def ", "if x:", "fn ", "func ", "    ", "\n}", "é"]),
    max_size=60,
).map("".join)
languages = st.sampled_from(["python", "javascript", "typescript", "tsx", "go", "rust", "java", None])


@settings(max_examples=200, deadline=None)
@given(prefix=snippet, suffix=snippet, language=languages)
def test_decide_multiline_never_raises(prefix, suffix, language):
    assert decide_multiline(prefix, suffix, language) in (True, False)


@settings(max_examples=200, deadline=None)
@given(prefix=snippet, completion=snippet, suffix=snippet, language=languages)
def test_scope_end_is_within_the_completion(prefix, completion, suffix, language):
    end = scope_end(prefix, completion, suffix, language)
    assert end is None or 0 <= end <= len(completion)

"""Language detection, parsers, the single- vs multi-line decision, syntactic scope."""

from __future__ import annotations

import pytest

import engine.text.syntax as syntax
from engine.text.cursor import Cursor, decide_multiline
from engine.text.parse_window import WINDOW_PREFIX_CHARS, WINDOW_SUFFIX_CHARS, window_end, window_start
from engine.text.syntax import get_parser, language_from


def scope_end(prefix: str, completion: str, suffix: str, language: str | None) -> int | None:
    """Where `completion`, put in at the cursor between `prefix` and `suffix`, leaves its block."""
    return Cursor.at(prefix, suffix, language, multiline=True).scope_end(completion)


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
        ("java", "A.java", "java"),
        ("cpp", "a.h", "cpp"),  # the languageId wins over the extension
        ("csharp", None, "csharp"),
        ("cs", "Program.cs", "csharp"),  # Neovim's filetype
        ("C", None, "c"),
        (None, "src/Main.java", "java"),
        (None, "lib/zlib.h", "c"),
        (None, "src/vec.cc", "cpp"),
        (None, "include/vec.HPP", "cpp"),
        (None, "App/Program.cs", "csharp"),
        ("kotlin", "A.kt", "kotlin"),  # no grammar, but the language is still known
        (None, "notes.txt", None),
        (None, None, None),
    ],
)
def test_language_from(language_id, path, expected):
    assert language_from(language_id, path) == expected


@pytest.mark.parametrize("language", ["python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp",
                                      "csharp"])
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
    # Java
    ("    public int size() {", "\n    }", "java", True),
    ("void f() {\n  ", "\n}", "java", True),
    ("foo(", ")", "java", False),
    ('print("{', '")', "java", False),
    ("    int[] xs = {", "};", "java", True),  # an array initializer is a block of lines
    ("    // see {", "", "java", False),
    ("    /** Returns {@code", "\n     */", "java", False),  # inside a Javadoc comment
    ("    char c = '{", "';", "java", False),
    # C
    ("int main(void) {", "\n}", "c", True),
    ("static int\nadd(int a, int b)\n{\n\t", "\n}\n", "c", True),  # a brace on its own line, empty body
    ("struct point {", "\n};", "c", True),
    ('\tprintf("%d {', '\\n", x);', "c", False),
    ("\tif (x) {\n\t\ty = 1;\n\t", "\n\treturn y;\n}", "c", False),  # inside a body that has code
    # C++
    ("namespace util {", "\n}", "cpp", True),
    ("class Stack {\n  ", "\n};", "cpp", True),
    ("class Stack {\n public:\n  int size() const {", "}\n};", "cpp", True),
    ("  std::vector<int> v = {", "};", "cpp", True),
    ('  auto s = R"(raw {', ')";', "cpp", False),
    ("  auto f = [](int x) {", "};", "cpp", True),
    # C#
    ("    public void Run()\n    {\n        ", "\n    }", "csharp", True),  # Allman braces
    ("    public int Count { get", "; }", "csharp", False),
    ('        var s = $"{name} {', '}";', "csharp", False),  # inside an interpolated string
    ("namespace App\n{", "\n}", "csharp", True),
    # No grammar: indentation/bracket heuristics
    ("fn main() {", "}", None, True),
    ("def f():", "", None, True),
    ("fun f() {\n  ", "\n}", "kotlin", True),
    ("foo(", ")", "kotlin", False),
    ('print("{', '")', "kotlin", False),
]


@pytest.mark.parametrize("prefix, suffix, language, expected", MULTILINE_TABLE)
def test_decide_multiline(prefix, suffix, language, expected):
    assert decide_multiline(prefix, suffix, language) is expected


def test_decide_multiline_parses_only_a_window(parsed):
    body = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(120_000))  # ~3.5 MB
    assert len(body) > 3_000_000
    assert decide_multiline(body + "def g():", "\n" + body, "python") is True
    assert parsed and max(map(len, parsed)) <= WINDOW_PREFIX_CHARS + WINDOW_SUFFIX_CHARS


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


@pytest.mark.parametrize(
    "prefix, language, expected_line",
    [
        # GNU/BSD C: the return type on the line above the name, the brace on its own line.
        ("#include <stdio.h>\n\nstatic int\nadd(int a, int b)\n{\n\treturn ", "c", "static int"),
        ("int x;\nint\nmain(void)\n{\n\t", "c", "int\nmain"),
        # C#: `{` under `namespace App` is not where the namespace starts.
        ("using System;\n\nnamespace App\n{\n    class A\n    {\n        void F()\n        {\n            ", "csharp",
         "namespace App"),
        # Rust: a `where` clause at column 0 belongs to the impl above it.
        ("impl<T> Show for Wrap<T>\nwhere\n    T: Debug,\n{\n    fn show(&self) {\n        ", "rust", "impl<T>"),
        # C++: a namespace whose contents are not indented: the window starts at the namespace,
        # or its closing brace below would be unmatched.
        ("#include <x>\n\nnamespace util {\n\nint twice(int x) {\n  return ", "cpp", "namespace util {"),
        ("namespace a {\nint x;\n}  // namespace a\n\nint twice(int x) {\n  return ", "cpp", "int twice"),
        ('extern "C" {\n\nstatic int\ntwice(int x)\n{\n\treturn ', "c", 'extern "C" {'),
        # Python keeps the nearest top-level line.
        ("a = 1\ndef f():\n    x = 1\n    y", "python", "def f():"),
    ],
)
def test_window_start_skips_split_declarations(prefix, language, expected_line):
    assert prefix[window_start(prefix, language=language):].startswith(expected_line)
    tree = syntax.parse(language, prefix[window_start(prefix, language=language):] + "x;\n}\n}\n")
    assert tree.root_node.child_count > 0


@pytest.mark.parametrize(
    "suffix, language, expected_rest",
    [
        ("\n{\n\treturn 0;\n}\n\nstatic void\nnext(void)\n", "c", "static void"),  # not the body's `{`
        ("\n    return 0;\n}\n\nfn next() {}\n", "rust", "fn next"),
        ("\n{\n  a = 1\n}\nb = 2\n", None, "{"),  # without the rule: the first top-level line
    ],
)
def test_window_end_skips_a_brace_on_its_own_line(suffix, language, expected_rest):
    end, clean = window_end(suffix, language=language)
    assert clean and suffix[end:].startswith(expected_rest)


def test_window_end_out_of_reach_cuts_after_a_member():
    """A Java class is the whole file: without a top-level line in reach, the cut goes after the
    last member's closing brace, not into the Javadoc below it."""
    member = "    int f{i}() {{\n        return {i};\n    }}\n\n    /**\n     * Docs for {i}.\n     */\n"
    suffix = "\n" + "".join(member.format(i=i) for i in range(200)) + "}\n"
    end, clean = window_end(suffix, max_chars=1000, language="java")
    assert not clean and end <= 1000 and suffix[:end].endswith("\n    }\n")
    body = "\n" + "    x = 1\n" * 400  # nothing to go by: the last whole line in reach
    end, clean = window_end(body, max_chars=1000, language="python")
    assert not clean and body[:end].endswith("    x = 1\n") and end > 985


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
    ("class A {\n    int f() {\n        ", "return 1;\n    }\n\n    int g() {\n        return 2;\n    }", "\n}\n",
     "java", len("return 1;\n    }")),
    ("int\nmain(void)\n{\n\t", "return 0;\n}\n\nint\nother(void)\n{\n}", "", "c", len("return 0;\n}")),
    ("namespace n {\nint f() {\n  ", "return 1;\n}\nint g() { return 2; }", "\n}  // namespace n\n", "cpp",
     len("return 1;\n}")),
    ("class A\n{\n    void F()\n    {\n        ", "G();\n    }\n\n    void H()\n    {\n    }", "\n}\n", "csharp",
     len("G();\n    }")),
    ("enum Color {\n  ", "RED,\n  GREEN\n};\nint x;", "", "c", len("RED,\n  GREEN\n}")),
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
languages = st.sampled_from(["python", "javascript", "typescript", "tsx", "go", "rust", "java", "c", "cpp", "csharp",
                             None])


@settings(max_examples=200, deadline=None)
@given(prefix=snippet, suffix=snippet, language=languages)
def test_decide_multiline_never_raises(prefix, suffix, language):
    assert decide_multiline(prefix, suffix, language) in (True, False)


@settings(max_examples=200, deadline=None)
@given(prefix=snippet, completion=snippet, suffix=snippet, language=languages)
def test_scope_end_is_within_the_completion(prefix, completion, suffix, language):
    end = scope_end(prefix, completion, suffix, language)
    assert end is None or 0 <= end <= len(completion)

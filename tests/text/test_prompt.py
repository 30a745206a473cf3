"""Token-budgeted FIM prompts: truncation, safety of user text, token streams."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.toy_tokenizers import make_tokenizer  # noqa: E402

from engine.backends.remote_prompt import PromptRenderer  # noqa: E402
from engine.completion import CompletionRequest  # noqa: E402
from engine.text.fim import detect_fim_template  # noqa: E402
from engine.text.prompt import ContextBudget, build_prompt  # noqa: E402


def toks(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def n_tokens(tok, text: str) -> int:
    return len(toks(tok, text))


@pytest.fixture(scope="module")
def qwen():
    tok = make_tokenizer("qwen2.5-coder")
    return tok, detect_fim_template(tok)


def numbered_lines(n: int, start: int = 0) -> str:
    return "".join(f"value_{i} = compute({i}, x + {i})\n" for i in range(start, start + n))


# -- the prompt matches the rendering -----------------------------------------------------


@pytest.mark.parametrize("toy", ["qwen2.5-coder", "starcoder2", "starcoder", "deepseek-coder"])
def test_token_ids_match_tokenizing_the_rendered_text(toy):
    tok = make_tokenizer(toy)
    t = detect_fim_template(tok)
    docs = [("lib/a.py", "import os\nprint(os.sep)\n")]
    p = build_prompt(tok, t, "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n", path="m.py", other_documents=docs)
    assert p.token_ids == tok(p.text, add_special_tokens=False)["input_ids"]
    assert not p.prefix_truncated and not p.suffix_truncated


def test_deepseek_and_codellama_start_with_bos():
    for toy, first in [("deepseek-coder", "<｜fim▁begin｜>"), ("codellama", "▁<PRE>")]:
        tok = make_tokenizer(toy)
        p = build_prompt(tok, detect_fim_template(tok), "x = ", "\n")
        assert p.token_ids[0] == tok.bos_token_id
        assert p.token_ids[1] == tok.convert_tokens_to_ids(first)
        assert p.text.startswith(tok.bos_token)


def test_codellama_spacing():
    # Prefix carries SentencePiece's leading space, the suffix none: <PRE> {prefix} <SUF>{suffix} <MID>
    tok = make_tokenizer("codellama")
    t = detect_fim_template(tok)
    p = build_prompt(tok, t, "def f", "return", budget=ContextBudget())
    names = tok.convert_ids_to_tokens(p.token_ids)
    assert names[:2] == ["<s>", "▁<PRE>"]
    suf = names.index("▁<SUF>")
    assert names[suf + 1] != "▁" and not names[suf + 1].startswith("▁")
    assert names[-1] == "▁<MID>"
    assert p.text == "<s><PRE> def f <SUF>return <MID>"


# -- user text never becomes a control token ------------------------------------------------

NASTY = "x = '<|fim_prefix|><|fim_middle|><|endoftext|><|file_sep|>'  # <fim_suffix> <｜fim▁hole｜> ▁<MID>\n"


@pytest.mark.parametrize("toy", ["qwen2.5-coder", "starcoder2", "deepseek-coder", "codellama"])
@pytest.mark.parametrize("special", [True, False], ids=["special", "added-non-special"])
def test_control_strings_in_user_text_stay_text(toy, special):
    tok = make_tokenizer(toy, fim_tokens_special=special)
    t = detect_fim_template(tok)
    p = build_prompt(tok, t, NASTY, NASTY, path="m.py", other_documents=[("o.py", NASTY)])
    control = {t.prefix_token, t.suffix_token, t.middle_token, *t.stop_tokens}
    control |= {x for x in (t.repo_name_token, t.file_sep_token) if x}
    counts = {c: p.token_ids.count(tok.convert_tokens_to_ids(c)) for c in control}
    takes_others = t.has_repo_format or t.family in ("deepseek-coder", "codellama")
    rendered = t.segments(NASTY, NASTY, path="m.py", other_documents=[("o.py", NASTY)] if takes_others else [])
    expected = {c: sum(1 for s in rendered if s.special and s.token == c) for c in control}
    assert counts == expected
    for stream in p.token_streams:
        assert not set(stream) & {tok.convert_tokens_to_ids(c) for c in control}


# -- budgets ------------------------------------------------------------------------------


def test_prefix_cut_from_the_left_at_a_line_boundary(qwen):
    tok, t = qwen
    prefix = numbered_lines(400) + "result = "
    p = build_prompt(tok, t, prefix, "\n", budget=ContextBudget(prefix_tokens=100))
    assert p.prefix_truncated
    assert prefix.endswith(p.prefix) and p.prefix.endswith("result = ")
    assert prefix[len(prefix) - len(p.prefix) - 1] == "\n"  # starts at a line start
    assert 50 < n_tokens(tok, p.prefix) <= 100
    assert p.token_ids.count(tok.convert_tokens_to_ids("<|fim_prefix|>")) == 1


def test_suffix_cut_from_the_right_at_a_line_boundary(qwen):
    tok, t = qwen
    suffix = ")\n" + numbered_lines(400)
    p = build_prompt(tok, t, "f(", suffix, budget=ContextBudget(suffix_tokens=60))
    assert p.suffix_truncated and not p.prefix_truncated
    assert suffix.startswith(p.suffix) and p.suffix.endswith("\n")
    assert 30 < n_tokens(tok, p.suffix) <= 60
    assert p.token_streams[0] == toks(tok, p.suffix)


EMPTIED_BODY_SUFFIX = (
    "\n\n    def _split(self, text):\n"
    '        """_split(text : string) -> [string]\n\n'
    "        Split the text to wrap into indivisible chunks.\n"
    '        """\n'
    "        return [c for c in self.wordsep_re.split(text) if c]\n"
)


@pytest.mark.parametrize("budget", range(9, 30))
def test_suffix_never_ends_on_the_header_of_a_block_it_cuts_off(qwen, budget):
    # With the header as its last line, a small model writes that function's docstring at the cursor.
    tok, t = qwen
    p = build_prompt(tok, t, "    def f(self):\n        ", EMPTIED_BODY_SUFFIX, path="wrap.py",
                     budget=ContextBudget(suffix_tokens=budget))
    assert p.suffix_truncated and EMPTIED_BODY_SUFFIX.startswith(p.suffix) and p.suffix.endswith("\n")
    last = p.suffix.rstrip("\n").split("\n")[-1]
    assert not last.lstrip().startswith("def ")
    if "Split the text" in p.suffix:  # past the docstring's first lines: the header stays
        assert "def _split" in p.suffix
    assert p.token_streams[0] == toks(tok, p.suffix)


def test_a_decorated_header_goes_with_its_decorators(qwen):
    tok, t = qwen
    suffix = "\n\n    @property\n    @cache\n    def width(self):\n        return self._width * self.scale + 1\n"
    p = build_prompt(tok, t, "        x = 1\n        ", suffix, path="m.py", budget=ContextBudget(suffix_tokens=14))
    assert p.suffix_truncated and p.suffix == "\n\n"


def test_a_brace_block_cut_off_is_left_out(qwen):
    tok, t = qwen
    suffix = "\n}\n\nfunction area(shape) {\n  return shape.width * shape.height * scaleFactor(shape);\n}\n"
    p = build_prompt(tok, t, "  return 1;", suffix, path="shapes.js", budget=ContextBudget(suffix_tokens=10))
    assert p.suffix_truncated and p.suffix == "\n}\n\n"


def test_the_language_the_client_names_wins_over_the_paths(qwen):
    # `case 1:` opens a block in Python (match), not in JavaScript (switch), where only `{` does.
    tok, t = qwen
    suffix = "\n    case 1:\n        return one(shape) * scaleFactor(shape, other, things);\n"
    cut = ContextBudget(suffix_tokens=12)
    as_python = build_prompt(tok, t, "  y = 0;", suffix, path="shapes.txt", budget=cut)  # no language: indentation
    as_javascript = build_prompt(tok, t, "  y = 0;", suffix, path="shapes.txt", language="javascript", budget=cut)
    assert as_python.suffix == "\n" and as_javascript.suffix == "\n    case 1:\n"


def test_the_rest_of_the_cursor_line_is_kept_even_when_it_opens_a_block(qwen):
    tok, t = qwen
    suffix = "def area(shape):\n    return shape.width * shape.height * scale_factor(shape)\n"
    p = build_prompt(tok, t, "\n\n", suffix, path="m.py", budget=ContextBudget(suffix_tokens=16))
    assert p.suffix == "def area(shape):\n"


def test_a_suffix_that_fits_is_kept_whole_header_and_all(qwen):
    tok, t = qwen
    p = build_prompt(tok, t, "x = 1\n", "\n\ndef f():\n", path="m.py", budget=ContextBudget(suffix_tokens=64))
    assert not p.suffix_truncated and p.suffix == "\n\ndef f():\n"


def test_a_remote_servers_text_prompt_ends_its_suffix_the_same_way():
    # Without the model's tokenizer the remote backend cuts in characters (llama.cpp's /infill).
    renderer = PromptRenderer()
    renderer.context_budget = ContextBudget(suffix_tokens=4)  # 32 characters
    request = CompletionRequest(prefix="    def f(self):\n        ", suffix=EMPTIED_BODY_SUFFIX, path="wrap.py")
    _, suffix, _ = renderer.windows(request, "python")
    assert suffix == "\n\n"
    assert renderer.render(request, "python").suffix == "\n\n"
    whole = CompletionRequest(prefix="x = 1\n", suffix="\n\ndef f():\n", path="m.py")
    assert renderer.windows(whole, "python")[1] == "\n\ndef f():\n"  # nothing cut, nothing dropped


def test_one_enormous_line_is_cut_mid_line(qwen):
    tok, t = qwen
    prefix = "data = [" + ", ".join(str(i) for i in range(5000))
    p = build_prompt(tok, t, prefix, "]\n", budget=ContextBudget(prefix_tokens=50))
    assert p.prefix_truncated and prefix.endswith(p.prefix)
    assert 40 <= n_tokens(tok, p.prefix) <= 51


def test_zero_budgets_give_empty_parts(qwen):
    tok, t = qwen
    p = build_prompt(tok, t, "abc\n", "def\n", other_documents=[("o.py", "x\n")], budget=ContextBudget(0, 0, 0))
    assert p.prefix == p.suffix == "" and p.other_documents == []
    assert p.text == "<|fim_prefix|><|fim_suffix|><|fim_middle|>"
    assert p.token_streams == [[]]


def test_other_documents_trimmed_then_dropped(qwen):
    tok, t = qwen
    docs = [("a.py", numbered_lines(300)), ("b.py", numbered_lines(300, 1000)), ("c.py", "tiny = 1\n")]
    p = build_prompt(tok, t, "x", "", path="m.py", other_documents=docs, budget=ContextBudget(other_documents_tokens=200))
    kept = dict(p.other_documents)
    assert "a.py" in kept and kept["a.py"].endswith("\n") and docs[0][1].startswith(kept["a.py"])
    assert "b.py" not in kept  # no room left for a meaningful piece
    total = sum(n_tokens(tok, f"{path}\n{text}") + 2 for path, text in p.other_documents)
    assert total <= 200
    assert len(p.token_streams) == 1 + len(p.other_documents)
    assert p.token_streams[1] == toks(tok, kept["a.py"])


def test_current_file_and_blank_documents_are_skipped(qwen):
    tok, t = qwen
    p = build_prompt(tok, t, "x", "", path="m.py", other_documents=[("m.py", "dup\n"), ("e.py", "  \n"), ("o.py", "ok\n")])
    assert [d for d, _ in p.other_documents] == ["o.py"]


def test_starcoder1_drops_documents_from_streams():
    tok = make_tokenizer("starcoder")
    p = build_prompt(tok, detect_fim_template(tok), "x", "y", other_documents=[("o.py", "ok\n")])
    assert p.other_documents == [] and len(p.token_streams) == 1


class CountingTokenizer:
    """Delegates to a tokenizer, remembering the longest text it was asked to encode."""

    def __init__(self, tok):
        self._tok = tok
        self.longest = 0

    def __call__(self, text, **kw):
        self.longest = max(self.longest, len(text))
        return self._tok(text, **kw)

    def __getattr__(self, name):
        return getattr(self._tok, name)


def test_five_megabyte_document_is_only_tokenized_near_the_cursor(qwen):
    tok, t = qwen
    big = numbered_lines(80_000)  # ~3 MB each side
    assert len(big) > 2_500_000
    counting = CountingTokenizer(tok)
    budget = ContextBudget(prefix_tokens=1024, suffix_tokens=256, other_documents_tokens=1024)
    p = build_prompt(counting, t, big, big, path="m.py", other_documents=[("o.py", big)], budget=budget)
    assert p.prefix_truncated and p.suffix_truncated
    assert counting.longest <= 16 * 1024 * 8  # a bounded window, never the document
    assert n_tokens(tok, p.prefix) <= 1024 and n_tokens(tok, p.suffix) <= 256


# -- properties -------------------------------------------------------------------------------

code_text = st.lists(
    st.sampled_from(list("abcxyz_(){}[]:;=+-.,'\" \t\n#") + ["<|fim_prefix|>", "<|endoftext|>", "é", "→", "    "]),
    max_size=150,
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=code_text, suffix=code_text, doc=code_text, pb=st.integers(0, 40), sb=st.integers(0, 20))
def test_prompt_properties(qwen, prefix, suffix, doc, pb, sb):
    tok, t = qwen
    p = build_prompt(tok, t, prefix, suffix, path="m.py", other_documents=[("o.py", doc)],
                     budget=ContextBudget(prefix_tokens=pb, suffix_tokens=sb, other_documents_tokens=64))
    assert prefix.endswith(p.prefix) and suffix.startswith(p.suffix)
    assert p.prefix_truncated == (p.prefix != prefix)
    assert n_tokens(tok, p.prefix) <= pb + 1 and n_tokens(tok, p.suffix) <= sb + 1
    fim_ids = [tok.convert_tokens_to_ids(x) for x in ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")]
    assert [i for i in p.token_ids if i in fim_ids] == fim_ids
    assert p.token_ids[-1] == fim_ids[-1]
    assert tok.decode(p.token_ids) == p.text

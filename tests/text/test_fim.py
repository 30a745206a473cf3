"""FIM templates: detection from the tokenizer's vocabulary and exact rendering."""

from __future__ import annotations

import glob
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from support.toy_tokenizers import make_tokenizer  # noqa: E402

from engine.errors import PromptError  # noqa: E402
from engine.text.fim import detect_fim_template, line_comment  # noqa: E402

PRE, SUF = "def f(x):\n    ", "\n    return y\n"
DOCS = [("lib/util.py", "def helper():\n    pass\n"), ("README.md", "# Title")]


@pytest.mark.parametrize(
    "toy, family, repo_format",
    [
        ("qwen2.5-coder", "qwen2.5-coder", True),
        ("starcoder2", "starcoder", True),
        ("starcoder", "starcoder", False),
        ("deepseek-coder", "deepseek-coder", False),
        ("codellama", "codellama", False),
    ],
)
def test_detects_family_from_vocab(toy, family, repo_format):
    t = detect_fim_template(make_tokenizer(toy))
    assert t.family == family
    assert t.has_repo_format is repo_format
    assert t.stop_tokens, "every family has at least its end-of-text token"


def test_stop_tokens_per_family():
    qwen = detect_fim_template(make_tokenizer("qwen2.5-coder")).stop_tokens
    for tok in ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|fim_prefix|>", "<|fim_middle|>", "<|repo_name|>"):
        assert tok in qwen
    sc = detect_fim_template(make_tokenizer("starcoder2")).stop_tokens
    assert {"<|endoftext|>", "<file_sep>", "<fim_prefix>"} <= set(sc)
    ds = detect_fim_template(make_tokenizer("deepseek-coder")).stop_tokens
    assert {"<｜end▁of▁sentence｜>", "<|EOT|>", "<｜fim▁begin｜>"} <= set(ds)
    cl = detect_fim_template(make_tokenizer("codellama")).stop_tokens
    assert {"▁<EOT>", "</s>"} <= set(cl)
    # Only tokens the vocabulary has: the decoder turns them into ids.
    assert "<repo_name>" not in detect_fim_template(make_tokenizer("starcoder")).stop_tokens


def test_no_fim_tokens_is_a_clear_error():
    with pytest.raises(PromptError, match="no fill-in-the-middle tokens.*quickdraft models pull"):
        detect_fim_template(make_tokenizer("plain"))


# (toy tokenizer, other documents, expected rendering)
RENDER_TABLE = [
    ("qwen2.5-coder", (), f"<|fim_prefix|>{PRE}<|fim_suffix|>{SUF}<|fim_middle|>"),
    (
        "qwen2.5-coder",
        DOCS,
        "<|repo_name|>myrepo\n"
        "<|file_sep|>lib/util.py\ndef helper():\n    pass\n"
        "<|file_sep|>README.md\n# Title\n"
        "<|file_sep|>src/main.py\n"
        f"<|fim_prefix|>{PRE}<|fim_suffix|>{SUF}<|fim_middle|>",
    ),
    ("starcoder", (), f"<fim_prefix>{PRE}<fim_suffix>{SUF}<fim_middle>"),
    ("starcoder", DOCS, f"<fim_prefix>{PRE}<fim_suffix>{SUF}<fim_middle>"),  # no repo tokens: docs dropped
    (
        "starcoder2",
        DOCS,
        "<repo_name>myrepo"
        "<file_sep>lib/util.py\ndef helper():\n    pass\n"
        "<file_sep>README.md\n# Title\n"
        f"<file_sep><fim_prefix>src/main.py\n{PRE}<fim_suffix>{SUF}<fim_middle>",
    ),
    ("deepseek-coder", (), f"<｜fim▁begin｜>{PRE}<｜fim▁hole｜>{SUF}<｜fim▁end｜>"),
    (
        "deepseek-coder",
        DOCS,
        "<｜fim▁begin｜># lib/util.py\ndef helper():\n    pass\n# README.md\n# Title\n"
        f"{PRE}<｜fim▁hole｜>{SUF}<｜fim▁end｜>",
    ),
    ("codellama", (), f"<PRE> {PRE} <SUF>{SUF} <MID>"),
]


@pytest.mark.parametrize("toy, docs, expected", RENDER_TABLE)
def test_render_exact(toy, docs, expected):
    t = detect_fim_template(make_tokenizer(toy))
    assert t.render(PRE, SUF, path="src/main.py", other_documents=docs, repo_name="myrepo") == expected


def test_qwen_repo_defaults_without_names():
    t = detect_fim_template(make_tokenizer("qwen2.5-coder"))
    out = t.render("a", "b", other_documents=[("x.py", "1\n")])
    assert out.startswith("<|repo_name|>repo\n<|file_sep|>x.py\n1\n<|file_sep|>untitled\n<|fim_prefix|>a")


def test_segments_tag_user_text():
    t = detect_fim_template(make_tokenizer("qwen2.5-coder"))
    segs = t.segments("P", "S", path="m.py", other_documents=[("d.py", "D")])
    roles = {s.role: s.text for s in segs if s.role}
    assert roles == {"prefix": "P", "suffix": "S", "document": "D\n"}
    assert all(s.token for s in segs if s.special)


@pytest.mark.parametrize("path, comment", [("a.py", "#"), ("a.ts", "//"), ("a.go", "//"), ("a.lua", "--"), (None, "//")])
def test_line_comment(path, comment):
    assert line_comment(path) == comment


def _real_qwen_dir() -> str | None:
    home = os.environ.get("QUICKDRAFT_HOME") or os.path.expanduser("~/.cache/quickdraft")
    d = os.path.join(home, "models", "qwen2.5-coder-0.5b")
    return d if os.path.isdir(d) else None


@pytest.mark.real_model
@pytest.mark.skipif(_real_qwen_dir() is None, reason="real Qwen2.5-Coder 0.5B not pulled")
def test_real_qwen_tokenizer_is_detected_and_renders():
    from transformers import AutoTokenizer

    d = _real_qwen_dir()
    if glob.glob(os.path.join(d, "tokenizer*.json")):
        tok = AutoTokenizer.from_pretrained(d)
    else:
        ggufs = sorted(glob.glob(os.path.join(d, "*.gguf")))
        if not ggufs:
            pytest.skip("no tokenizer files or .gguf in the model directory")
        tok = AutoTokenizer.from_pretrained(d, gguf_file=os.path.basename(ggufs[0]))
    t = detect_fim_template(tok)
    assert t.family == "qwen2.5-coder" and t.has_repo_format
    assert {"<|endoftext|>", "<|fim_pad|>", "<|file_sep|>"} <= set(t.stop_tokens)

    from engine.text.prompt import build_prompt

    parts = build_prompt(tok, t, "def add(a, b):\n    ", "\n", path="m.py")
    ids = parts.token_ids
    assert ids[0] == tok.convert_tokens_to_ids("<|fim_prefix|>")
    assert ids[-1] == tok.convert_tokens_to_ids("<|fim_middle|>")
    assert tok.decode(ids) == "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>"
    # User text spelling a control token stays text.
    parts = build_prompt(tok, t, "s = '<|fim_middle|>'\n", "", path="m.py")
    assert parts.token_ids.count(tok.convert_tokens_to_ids("<|fim_middle|>")) == 1


class _NoBackend:
    """A tokenizer without a Rust backend: detection falls back to get_vocab()."""

    def __init__(self, tok):
        self._tok = tok

    def __getattr__(self, name):
        if name == "backend_tokenizer":
            raise AttributeError(name)
        return getattr(self._tok, name)


def test_detection_without_a_rust_backend():
    t = detect_fim_template(_NoBackend(make_tokenizer("deepseek-coder")))
    assert t.family == "deepseek-coder" and "<|EOT|>" in t.stop_tokens

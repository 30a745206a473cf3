"""The architecture's rules, read from the source: no import circles, the engine never imports the
server, and the server's own modules never touch tensors (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "lsp_server")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path) -> set[str]:
    """Every module named by an import in `path`, type-checking-only and function-local ones included."""
    named = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named.add(node.module)
            named.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
    return named


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: {other for other in imports(path) if other in known and other != name}
            for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_circle_finder_finds_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_the_engine_never_imports_the_server():
    offenders = {name: sorted(other for other in imports(path) if other.split(".")[0] == "lsp_server")
                 for name, path in modules().items() if name.startswith("engine")}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_the_servers_own_modules_never_import_torch():
    # The command line's diagnostics (cli/) and the benchmarks (bench/) may; the server may not.
    server = {name: path for name, path in modules().items()
              if name.startswith("lsp_server") and not name.startswith(("lsp_server.cli", "lsp_server.bench"))}
    assert server and {name for name, path in server.items() if "torch" in {n.split(".")[0] for n in imports(path)}} == set()

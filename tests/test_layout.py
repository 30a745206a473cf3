"""The architecture's rules, read from the source: no import circles, the engine never imports the
server, the server's own modules never touch tensors, and no two classes share a name
(docs/architecture.md)."""

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


# Lower layers never import higher ones; a layer may import itself. engine/__init__.py holds no code.
ENGINE_LAYERS = (
    ("engine.errors", "engine.modes", "engine.stats"),  # names every layer shares
    ("engine.kernels",),
    ("engine.models",),
    ("engine.text",),
    ("engine.decoding",),
    ("engine.medusa",),
    ("engine.drafters",),
    ("engine.answers",),
    ("engine.completion",),
    ("engine.backends",),
    ("engine.bench",),
)


def layer_of(module: str) -> int | None:
    for level, packages in enumerate(ENGINE_LAYERS):
        if any(module == package or module.startswith(package + ".") for package in packages):
            return level
    return None


def test_every_engine_module_has_a_layer():
    assert {name for name in modules() if name.startswith("engine.") and layer_of(name) is None} == set()


def test_lower_engine_layers_never_import_higher_ones():
    upward = {}
    for name, others in import_graph().items():
        level = layer_of(name)
        if level is None:
            continue
        higher = sorted(other for other in others if (layer_of(other) or 0) > level)
        if higher:
            upward[name] = higher
    assert upward == {}


def test_the_engines_root_holds_the_front_door_and_shared_names():
    root = sorted(path.stem for path in (ROOT / "engine").glob("*.py"))
    assert root == ["__init__", "answers", "completion", "errors", "modes", "stats"]  # answers: the front door's result



def test_the_servers_root_holds_the_handlers_and_the_client_and_rooms_say_their_job():
    # Everything else lives in a room (wire/, answering/, workspace/, cli/, bench/) whose docstring says its job.
    server = ROOT / "lsp_server"
    assert sorted(path.stem for path in server.glob("*.py")) == ["__init__", "client", "server"]
    rooms = [path for path in server.iterdir() if (path / "__init__.py").is_file()]
    assert {room.name for room in rooms} >= {"wire", "answering", "workspace", "cli", "bench"}
    assert [room.name for room in rooms if not ast.get_docstring(ast.parse((room / "__init__.py").read_text()))] == []

def source_files() -> list[Path]:
    files = [path for package in PACKAGES for path in (ROOT / package).rglob("*.py")]
    clients = ROOT / "editor-clients"
    files += list((clients / "neovim").rglob("*.lua")) + list((clients / "vscode" / "src").rglob("*.ts"))
    return files


def test_no_source_file_is_over_400_lines():
    # The tests too: a test file that long holds two subjects.
    long = {str(path.relative_to(ROOT)): n for path in [*source_files(), *(ROOT / "tests").rglob("*.py")]
            if (n := len(path.read_text().splitlines())) > 400}
    assert source_files() and long == {}



def test_a_function_over_60_lines_says_why_in_a_comment_above_it():
    unexplained = []
    for name, path in modules().items():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
                above = lines[first - 1].strip() if first > 0 else ""
                if not (above.startswith("#") and "Long" in "\n".join(lines[max(0, first - 3):first])):
                    unexplained.append(f"{name}.{node.name}")
    assert unexplained == []

def test_the_cursor_context_alone_works_out_what_holds_at_the_cursor():
    # engine/text/cursor.py derives the cursor line's parts and the syntax window; nothing else does.
    derivers = {"current_line_parts", "window_start", "window_end", "decide_multiline"}
    callers = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called in derivers:
                    callers.add(name)
    assert callers <= {"engine.text.cursor", "engine.text.parse_window"}


def classes_by_name(files: dict[str, Path]) -> dict[str, list[str]]:
    """Every class defined in `files` (module name → path), nested ones too: name → the modules defining it."""
    found: dict[str, list[str]] = {}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(module)
    return found


def test_no_two_classes_share_a_name():
    # One name, one thing: a reader (or an import) never has to ask which `Cursor` is meant.
    shared = {name: where for name, where in classes_by_name(modules()).items() if len(where) > 1}
    assert shared == {}


def test_the_shared_name_finder_finds_one(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "m.py").write_text("class Cursor:\n    class Inner:\n        pass\n")
    found = classes_by_name({"a.m": tmp_path / "a" / "m.py", "b.m": tmp_path / "b" / "m.py"})
    assert found == {"Cursor": ["a.m", "b.m"], "Inner": ["a.m", "b.m"]}


def kind_comparisons(tree: ast.AST) -> list[str]:
    """Comparisons that read a backend's `.kind` (`backend.kind`, `self.backend.kind`, ...), as source
    text; other things' kinds (the heads command's `--kind`, a setting's type) are not asked here."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Attribute) and o.attr == "kind" and ast.unparse(o.value).split(".")[-1] == "backend"
                   for o in operands):
                found.append(ast.unparse(node))
    return found


def test_the_server_never_asks_which_backend_it_holds():
    # The Backend protocol (engine/backends/base.py) says what differs; `kind` is for figures only.
    asked = {name: found for name, path in modules().items() if name.startswith("lsp_server")
             if (found := kind_comparisons(ast.parse(path.read_text())))}
    assert asked == {}


def test_the_kind_finder_finds_one():
    source = "if self.backend.kind != 'local' or args.kind == 'feature' or spec.kind is bool:\n    pass\n"
    assert kind_comparisons(ast.parse(source)) == ["self.backend.kind != 'local'"]

"""The layers of the README's Architecture section: each imports only from those below it;
Prefect (and prefect-dask) only in ``memkiln/flows/``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memkiln"

#: layer -> the memkiln layers it must not import
FORBIDDEN = {
    "transforms": (
        "memkiln.io",
        "memkiln.llm",
        "memkiln.pipeline",
        "memkiln.flows",
        "memkiln.cli",
    ),
    "io": ("memkiln.llm", "memkiln.pipeline", "memkiln.flows", "memkiln.cli"),
    "llm": ("memkiln.pipeline", "memkiln.flows", "memkiln.cli"),
    "pipeline": ("memkiln.flows", "memkiln.cli"),
    "flows": ("memkiln.cli",),
}

#: The packages of the orchestrator, imported only by ``memkiln/flows/``.
ORCHESTRATOR = ("prefect", "prefect_dask")


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_only_from_the_layers_below(layer: str) -> None:
    wrong = {
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in imported(path)
        if name.startswith(FORBIDDEN[layer])
    }
    assert not wrong, sorted(wrong)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from memkiln.flows.run import run_flow\n", encoding="utf-8")
    assert "memkiln.flows.run" in imported(module)


def _orchestrator_imports(path: Path) -> set[str]:
    return {n for n in imported(path) if n.split(".")[0] in ORCHESTRATOR}


def test_prefect_is_imported_only_in_flows() -> None:
    # every module outside memkiln/flows/, function-level imports included
    wrong = {
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (PACKAGE / "flows") not in path.parents
        for name in _orchestrator_imports(path)
    }
    assert not wrong, sorted(wrong)


def test_the_checker_sees_prefect_imported(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import prefect.server.api.server as s\n"
        "def f():\n    from prefect_dask.task_runners import DaskTaskRunner\n",
        encoding="utf-8",
    )
    assert _orchestrator_imports(module) == {
        "prefect.server.api.server",
        "prefect_dask.task_runners",
    }


#: The layers, lowest first: a module imports only from its own layer and those below
#: (function-level imports included); ``memkiln`` itself is the package's public API.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("memkiln.constants", "memkiln.errors"),
    ("memkiln.transforms",),
    ("memkiln.io",),
    ("memkiln.settings",),
    ("memkiln.llm",),
    ("memkiln.pipeline",),
    ("memkiln.flows",),
    ("memkiln.cli", "memkiln"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def memkiln_imports(path: Path, modules: set[str]) -> set[str]:
    """The memkiln modules ``path`` imports, anywhere in it (``from memkiln.io import store``
    is ``memkiln.io.store``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    names = set(paths)
    return {name: memkiln_imports(path, names) - {name} for name, path in paths.items()}


def layer_of(module: str) -> int:
    best, rank = -1, -1
    for i, layer in enumerate(LAYERS):
        for prefix in layer:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in import_graph() if layer_of(m) < 0] == []


def test_the_import_graph_has_no_circle() -> None:
    assert circles(import_graph()) == []


def test_no_import_goes_back_up_a_layer() -> None:
    graph = import_graph()
    up = sorted(
        f"{a} imports {b}" for a, deps in graph.items() for b in deps if layer_of(b) > layer_of(a)
    )
    assert up == []


def test_the_graph_checks_see_a_circle_and_an_arrow_up() -> None:
    graph = {"memkiln.io.a": {"memkiln.io.b"}, "memkiln.io.b": {"memkiln.io.a", "memkiln.cli"}}
    assert circles(graph) == [["memkiln.io.a", "memkiln.io.b"]]
    assert layer_of("memkiln.cli") > layer_of("memkiln.io.b") > layer_of("memkiln.transforms.x")

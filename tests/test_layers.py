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

"""The layers of the README's Architecture section: each imports only from those below it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "memkiln"

#: layer -> the memkiln layers it must not import
FORBIDDEN = {
    "transforms": ("memkiln.io", "memkiln.llm", "memkiln.flows", "memkiln.cli"),
    "io": ("memkiln.llm", "memkiln.flows", "memkiln.cli"),
    "llm": ("memkiln.flows", "memkiln.cli"),
    "flows": ("memkiln.cli",),
}


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

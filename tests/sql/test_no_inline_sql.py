"""Every SQL statement lives in a file under ``memkiln/sql/``: no Python string holds one,
outside ``io/store.py``'s loader (which attaches the store and runs transactions)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "memkiln"
ALLOWED = {PACKAGE / "io" / "store.py"}

STATEMENT = re.compile(
    r"^\s*(select\s.+\sfrom\s|insert\s+(or\s+(replace|ignore)\s+)?into\s|update\s+\w+\s+set\s|delete\s+from\s"
    r"|create\s+(or\s+replace\s+)?(table|view|index|macro)\s|alter\s+table\s|drop\s+(table|view)\s"
    r"|set\s+\w+\s*=|with\s+\w+\s+as\s*\(|copy\s|pragma\s|checkpoint\b|attach\s|comment\s+on\s)",
    re.IGNORECASE | re.DOTALL,
)


def sql_strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = {  # docstrings, and the pieces of f-strings (read as a whole below)
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    } | {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) in skipped:
                continue
            text = node.value
        else:
            continue
        if STATEMENT.match(text):
            found.append(f"{path.name}:{node.lineno}: {text[:60]!r}")
    return found


def test_no_sql_statement_is_written_in_python() -> None:
    found = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in ALLOWED
        for hit in sql_strings(path)
    ]
    assert not found, found


def test_the_check_finds_a_statement_in_a_string_and_an_f_string(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""select the docstring from here: not a statement"""\n'
        'a = "select rollout_id from rollouts where x = $x"\n'
        'b = f"update runs set status = {s}"\n'
        'c = "set PREFECT_HOME or MEMKILN_HOME to a writable directory"\n'
        'd = "insert or replace into consolidation_jobs values ($k)"\n',
        encoding="utf-8",
    )
    hits = sql_strings(module)
    assert len(hits) == 3, hits


def test_the_checkpoint_query_names_the_store_catalog() -> None:
    from memkiln.io.store import STORE_CATALOG, sql

    assert sql("checkpoint_store").splitlines()[-1] == f"checkpoint {STORE_CATALOG}"

"""The house keeps its shape: no import cycles, and only the kinds' packages know a
database (its name, its driver, its package)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dblog_worker"
# dblog_worker.lake: the lake formats, which know their catalogs' databases (a JDBC URL).
KIND_PACKAGES = ("dblog_worker.pg", "dblog_worker.mysql", "dblog_worker.lake")
DRIVERS = ("psycopg", "psycopg_pool", "pymysql", "pymysqlreplication")
KIND_NAMES = {"postgresql", "postgres", "mysql", "mariadb"}
REGISTRY = {"dblog_worker.kinds"}  # the one place that names the kinds' packages


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _generic_files() -> list[Path]:
    files = [p for p in PACKAGE.rglob("*.py")
             if not _module(p).startswith(KIND_PACKAGES) and _module(p) not in REGISTRY]
    for front_end in ("plugins", "dags", "spark"):
        files += sorted((ROOT / front_end).rglob("*.py"))
    return sorted(files)


def _runtime_imports(tree: ast.Module, module: str) -> Iterator[str]:
    """Modules imported when ``module`` is (not those under ``if TYPE_CHECKING``)."""
    def walk(nodes: list[ast.stmt]) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                yield from walk(node.orelse)
                continue
            if isinstance(node, ast.Import):
                yield from (alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = module.split(".")[: -node.level]
                    base = ".".join([*package, *([base] if base else [])])
                yield base
                yield from (f"{base}.{alias.name}" for alias in node.names)
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    yield from walk([c for c in children if isinstance(c, ast.stmt)])
                    for handler in children:
                        if isinstance(handler, ast.ExceptHandler):
                            yield from walk(handler.body)
    yield from walk(tree.body)


def _top_level_imports(tree: ast.Module, module: str) -> set[str]:
    """Imports run at import time (module level, outside functions and TYPE_CHECKING)."""
    top = ast.Module(body=[n for n in tree.body
                           if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef
                                             | ast.ClassDef)], type_ignores=[])
    return set(_runtime_imports(top, module))


def test_no_import_cycles() -> None:
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {
        name: {m for m in _top_level_imports(ast.parse(path.read_text()), name)
               if m in modules and m != name}
        for name, path in modules.items()
    }
    # a package's __init__ is imported with each of its modules: not an edge of a cycle
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for following in sorted(graph[node]):
            if state.get(following) == 1:
                cycles.append([*trail[trail.index(following):], following])
            elif following not in state:
                visit(following, [*trail, following])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("path", _generic_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_generic_code_knows_no_database(path: Path) -> None:
    tree = ast.parse(path.read_text())
    module = _module(path)
    imported = set(_runtime_imports(tree, module))
    wrong = sorted(m for m in imported
                   if m.startswith(KIND_PACKAGES) or m.split(".")[0] in DRIVERS)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    named = sorted({node.value for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and node.value.lower() in KIND_NAMES})
    assert not wrong and not named, (
        f"{module} imports {wrong} and names the kinds {named}: database-specific code "
        "belongs in dblog_worker/pg/ or dblog_worker/mysql/ (asked through dialect.py)")

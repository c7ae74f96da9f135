"""The house keeps its shape: imports point down the layers of docs/architecture.md, no two
modules import each other (not even for type checking), and only the kinds' packages know a
database (its name, its driver, its package)."""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dblog_worker"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
# dblog_worker.lake: the lake formats, which know their catalogs' databases (a JDBC URL).
KIND_PACKAGES = ("dblog_worker.pg", "dblog_worker.mysql", "dblog_worker.lake")
DRIVERS = ("psycopg", "psycopg_pool", "pymysql", "pymysqlreplication")
FRONT_ENDS = ("dblog_airflow", "dblog_dags", "dblog_spark")  # above the whole package
KIND_NAMES = {"postgresql", "postgres", "mysql", "mariadb"}
REGISTRY = {"dblog_worker.kinds"}  # the one place that names the kinds' packages

Graph = dict[str, set[str]]


def _module(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _generic_files() -> list[Path]:
    files = [p for p in PACKAGE.rglob("*.py")
             if not _module(p).startswith(KIND_PACKAGES) and _module(p) not in REGISTRY]
    for front_end in ("plugins", "dags", "spark"):
        files += sorted((ROOT / front_end).rglob("*.py"))
    return sorted(files)


def _imports(tree: ast.Module, module: str, *, type_checking: bool = True) -> Iterator[str]:
    """Every module ``module`` imports, anywhere in it: at the top, inside functions, and
    (unless ``type_checking`` is False) under ``if TYPE_CHECKING``. ``from a import b`` gives
    ``a`` and ``a.b`` (``b`` may be a module)."""
    hidden = set() if type_checking else {
        id(inner) for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body for inner in ast.walk(statement)}
    for node in ast.walk(tree):
        if id(node) in hidden:
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


def import_graph(root: Path, package: str) -> Graph:
    """Module → the package's modules it imports. A package's ``__init__`` that imports
    nothing (a docstring) is no node: importing a module of it is no edge to it."""
    trees = {_module(p, root): ast.parse(p.read_text()) for p in (root / package).rglob("*.py")}
    nodes = {name for name, tree in trees.items()
             if not (tree.body and _is_empty_init(root, name, tree))}
    return {name: {m for m in _imports(trees[name], name) if m in nodes and m != name}
            for name in sorted(nodes)}


def _is_empty_init(root: Path, name: str, tree: ast.Module) -> bool:
    is_package = (root / name.replace(".", "/") / "__init__.py").exists()
    return is_package and not any(isinstance(n, ast.Import | ast.ImportFrom) for n in tree.body)


def read_layers(markdown: str) -> list[tuple[str, list[str]]]:
    """The layers, top first, of the first code block after "## Layers and seams": a line
    ``<layer name>  <path> <path> ...`` (paths relative to dblog_worker/: ``x.py``,
    ``pkg/x.py``, ``pkg/`` for a whole package), indented lines going on with the layer
    above; words that are no path (a comment in parentheses) are left out."""
    section = markdown.split("## Layers and seams", 1)[1]
    block = section.split("```", 2)[1]
    layers: list[tuple[str, list[str]]] = []
    for line in block.splitlines()[1:]:
        words = line.split()
        paths = [w for w in words if re.fullmatch(r"[\w/]+(\.py|/)", w)]
        if not paths:
            continue
        if line[0].isspace():
            layers[-1][1].extend(paths)
        else:
            layers.append((line[: line.index(paths[0])].strip(), paths))
    return layers


def place(modules: set[str], layers: list[tuple[str, list[str]]],
          package: str) -> tuple[dict[str, int], list[str]]:
    """Each module's layer (its index, 0 the top) and the problems: a module in no layer or
    in two, a path that names no module. A file's own line wins over its package's."""
    found: dict[str, int] = {}
    problems: list[str] = []
    folders: list[tuple[str, int]] = []
    for index, (_, paths) in enumerate(layers):
        for path in paths:
            if path.endswith("/"):
                folders.append((package + "." + path.rstrip("/").replace("/", "."), index))
                continue
            name = package + "." + path.removesuffix(".py").replace("/", ".")
            if name not in modules:
                problems.append(f"{path} is in no module of {package}")
            elif name in found:
                problems.append(f"{path} is in two layers")
            found[name] = index
    for folder, index in folders:
        matched = [m for m in modules if m == folder or fnmatch.fnmatch(m, folder + ".*")]
        if not matched:
            problems.append(f"{folder} is in no package of {package}")
        for name in matched:
            found.setdefault(name, index)
    problems += [f"{m} is in no layer" for m in sorted(modules - found.keys())]
    return found, problems


def back_imports(graph: Graph, layer: dict[str, int]) -> list[str]:
    """The imports that run up a layer."""
    return [f"{name} imports {imported}" for name, imports in sorted(graph.items())
            for imported in sorted(imports)
            if name in layer and imported in layer and layer[imported] < layer[name]]


def cycles(graph: Graph) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for following in sorted(graph[node]):
            if state.get(following) == 1:
                found.append([*trail[trail.index(following):], following])
            elif following not in state:
                visit(following, [*trail, following])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


@functools.cache  # parsed once for the tests below
def _layers() -> tuple[Graph, dict[str, int], list[str]]:
    graph = import_graph(ROOT, "dblog_worker")
    layer, problems = place(set(graph), read_layers(ARCHITECTURE.read_text()), "dblog_worker")
    return graph, layer, problems


def test_every_module_is_in_one_layer_of_the_architecture() -> None:
    _, _, problems = _layers()
    assert not problems, ("docs/architecture.md's layers (## Layers and seams) and the "
                          "package disagree: " + "; ".join(problems))


def test_imports_point_down_the_layers() -> None:
    graph, layer, _ = _layers()
    wrong = back_imports(graph, layer)
    assert not wrong, ("imports up a layer of docs/architecture.md (move the shared part "
                       "down, or hand the upper part in): " + "; ".join(wrong))


def test_no_import_cycles_not_even_for_type_checking() -> None:
    found = cycles(_layers()[0])
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_package_imports_no_front_end() -> None:
    wrong = sorted(f"{_module(p)} imports {m}" for p in PACKAGE.rglob("*.py")
                   for m in _imports(ast.parse(p.read_text()), _module(p))
                   if m.split(".")[0] in FRONT_ENDS)
    assert not wrong, "; ".join(wrong)


def test_the_checks_find_a_planted_back_import_and_a_type_checking_cycle(
        tmp_path: Path) -> None:
    """The checks above on a module tree of their own: clean, then with one import planted
    up a layer, then with a cycle that only type checking closes."""
    files = {
        "__init__.py": '"""root"""\n',
        "top.py": "from app.low import base\n",
        "work/__init__.py": '"""a package of two layers"""\n',
        "work/mid.py": "from app import low\n",
        "work/helper.py": "import app.low\n",
        "low.py": "base = 1\n",
    }
    for name, text in files.items():
        (tmp_path / "app" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "app" / name).write_text(text)
    doc = ("# x\n## Layers and seams\n```\ntop layer   top.py  (and more)\n"
           "middle      work/\n            work/helper.py\nbottom      low.py\n```\n")
    layers = read_layers(doc)
    assert layers == [("top layer", ["top.py"]), ("middle", ["work/", "work/helper.py"]),
                      ("bottom", ["low.py"])]
    graph = import_graph(tmp_path, "app")
    assert "app.work" not in graph  # an empty package init is no layer's
    layer, problems = place(set(graph), layers, "app")
    assert problems == []
    assert layer == {"app.top": 0, "app.work.mid": 1, "app.work.helper": 1, "app.low": 2}
    assert back_imports(graph, layer) == []
    assert cycles(graph) == []
    # planted: an import up a layer, inside a function (where it is no less an import)
    (tmp_path / "app" / "work" / "mid.py").write_text(
        "from app import low\n\ndef f() -> None:\n    from app.top import base\n")
    assert back_imports(import_graph(tmp_path, "app"), layer) == ["app.work.mid imports app.top"]

    (tmp_path / "app" / "work" / "mid.py").write_text("from app import low\n")
    (tmp_path / "app" / "low.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app.work import mid\n")
    graph = import_graph(tmp_path, "app")
    assert cycles(graph) == [["app.low", "app.work.mid", "app.low"]]
    assert back_imports(graph, layer) == ["app.low imports app.work.mid"]
    (tmp_path / "app" / "stray.py").write_text("")
    _, problems = place(set(import_graph(tmp_path, "app")), layers, "app")
    assert problems == ["app.stray is in no layer"]


@pytest.mark.parametrize("path", _generic_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_generic_code_knows_no_database(path: Path) -> None:
    tree = ast.parse(path.read_text())
    module = _module(path)
    imported = set(_imports(tree, module, type_checking=False))
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

"""No import circles in src/: every module's imports (top level, inside functions, under TYPE_CHECKING,
relative and absolute), read with `ast`, form a graph with no cycle.

A circle works only by import order (or by hiding one side in a function) and makes two modules one
thing to understand; design.md asks that dependencies point one way.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package) for every .py file under `root`."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _known(name: str, known: dict) -> str | None:
    """`name` or its nearest enclosing module that is in the tree (a.b.func -> a.b); None for outside code."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the tree's modules it imports. `from pkg import sub` counts as importing pkg.sub when sub is
    a module (that is what Python binds), else as importing pkg."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in known.items():
        package = name if is_package else name.rpartition(".")[0]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(filter(None, (_known(a.name, known) for a in node.names)))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                for alias in node.names:
                    sub = f"{origin}.{alias.name}"
                    deps.update(filter(None, [sub if sub in known else _known(origin, known)]))
        deps.discard(name)
        graph[name] = deps
    return graph


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected groups of two or more modules, each sorted."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen, todo = set(), [start]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        reach[start] = seen
    groups = {tuple(sorted({v} | {w for w in reach[v] if v in reach[w]})) for v in graph}
    return {g for g in groups if len(g) > 1}


def test_no_import_circle_in_src():
    assert circles(import_graph(SRC)) == set(), "import circle in src/: move the shared piece to one side"


def test_finds_circles_through_functions_relative_and_package_imports(tmp_path):
    """The scanner sees what a circle hides behind: an import inside a function, a relative import,
    `from pkg import sub`, TYPE_CHECKING; and it does not call a one-way chain a circle."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    files = {
        "__init__.py": "from p.a import f\n",
        "a.py": "def f():\n    from .b import g\n    return g\n",
        "b.py": "from p import c\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import f\n",
        "d.py": "import p.a\nfrom . import e\n",
        "e.py": "import os\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["p.a"] == {"p.b"} and graph["p.b"] == {"p.c"} and graph["p.d"] == {"p.a", "p.e"}
    assert circles(graph) == {("p.a", "p.b", "p.c")}

"""The direction rule of the layout, checked from the source with the standard library's ast.

placement/ -> heuristics/ -> formulations/ -> solvers/: a module may import its own floor or a
lower one, never a higher one; there are no import circles between modules (imports inside
functions count too); and no project module is loaded by name (importlib / __import__), so the
path from `solve` to every algorithm can be read in the code. Run it alone with
``python -m pytest tests/test_layout.py``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("placement", "heuristics", "formulations", "solvers")  # bottom to top


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for floor in FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved against ``module``)."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> tuple[nx.DiGraph, list[str]]:
    """Edges module -> project module it imports; and every load of a project module by name."""
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    by_name: list[str] = []

    def target(name: str) -> str | None:
        """The project module ``name`` refers to (a package's attribute import maps to the module)."""
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path, node)
                names = [f"{base}.{alias.name}" for alias in node.names] or [base]
                if f"{base}.{node.names[0].name}" not in modules:
                    names = [base]
            elif isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in ("import_module", "__import__"):
                    by_name.append(f"{module}:{node.lineno}")
            for name in names:
                dep = target(name)
                if dep is not None and dep != module:
                    graph.add_edge(module, dep)
    return graph, by_name


def _floor(module: str) -> int:
    return FLOORS.index(module.split(".")[0])


def test_imports_point_down_only() -> None:
    graph, _ = import_graph()
    upward = [f"{a} -> {b}" for a, b in graph.edges if _floor(b) > _floor(a)]
    assert not upward, "upward imports: " + "; ".join(sorted(upward))


def test_no_import_circles() -> None:
    graph, _ = import_graph()
    # A package's __init__ re-exporting its own modules is not a circle of dependencies.
    def same_package(a: str, b: str) -> bool:
        return b.startswith(a + ".") or a.startswith(b + ".")

    plain = nx.DiGraph((a, b) for a, b in graph.edges if not same_package(a, b))
    cycles = [c for c in nx.simple_cycles(plain)]
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:5])


def test_no_module_loaded_by_name() -> None:
    _, by_name = import_graph()
    assert not by_name, "modules loaded by name at: " + ", ".join(by_name)


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The walker resolves relative imports and finds an upward one (guards the guard)."""
    mod = ast.parse("from ..solvers import methods\nfrom .x import y\n")
    nodes = [n for n in ast.walk(mod) if isinstance(n, ast.ImportFrom)]
    fake = ROOT / "heuristics" / "pardnn" / "graph.py"
    assert _resolve("heuristics.pardnn.graph", fake, nodes[0]) == "heuristics.solvers"
    assert _resolve("heuristics.pardnn.graph", fake, nodes[1]) == "heuristics.pardnn.x"
    init = ROOT / "heuristics" / "pardnn" / "__init__.py"
    assert _resolve("heuristics.pardnn", init, nodes[1]) == "heuristics.pardnn.x"
    assert _floor("solvers.cli") > _floor("heuristics.portfolio")

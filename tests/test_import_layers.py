"""The shared package's modules import in one direction: no circles, and the plumbing of one run
never imports the experiment tooling built on it (sweeps, recipes, results, plots)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "cleanrl_style"
RUN_PLUMBING = {"run", "checkpoint", "logger", "progress", "cli", "provenance", "episodes", "video", "evaluate"}
EXPERIMENT_TOOLING = {"sweep", "recipes", "results", "plot"}


def module_name(path: Path) -> str:
    """``cleanrl_style/plot/stats.py`` -> ``plot.stats``; a package's ``__init__`` is the package."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The cleanrl_style modules a file imports, at any depth (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("cleanrl_style"):
            base = node.module.removeprefix("cleanrl_style").lstrip(".")
            if base:
                found.add(base)
            else:  # from cleanrl_style import provenance, ...
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("cleanrl_style.") for a in node.names if a.name.startswith("cleanrl_style."))
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py") if module_name(p)}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = {t for t in imports_of(path) if t in modules and t != name}
        # a package imports its own submodules to re-export them: not an edge of the layering
        edges[name] = {t for t in targets if not t.startswith(name + ".")}
    return edges


def test_the_graph_is_read_from_the_sources():
    edges = graph()
    assert "evaluate" in edges["run"] and "cli" in edges["evaluate"]
    assert "plot.stats" in edges["plot.curves"]


def test_no_module_of_the_package_imports_in_a_circle():
    edges = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*path, node, nxt]
                raise AssertionError("import circle: " + " -> ".join(cycle[cycle.index(nxt) :]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [])


def test_the_run_plumbing_never_imports_the_experiment_tooling():
    edges = graph()
    for module in RUN_PLUMBING:
        upward = {t for t in edges[module] if t.split(".")[0] in EXPERIMENT_TOOLING}
        assert not upward, f"cleanrl_style.{module} imports the experiment tooling {sorted(upward)}"

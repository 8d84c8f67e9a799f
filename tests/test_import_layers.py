"""The shared package's rooms import in one direction (CONTRIBUTING, "Layout"): the building blocks
import no other room, the plumbing of one run imports only the blocks, and the experiment tooling and
the language-model plumbing build on both and never on each other. No module imports in a circle,
and a control agent imports everything it uses from ``cleanrl_style`` itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "cleanrl_style"
# the rooms each room may import (its own included)
ALLOWED = {
    "blocks": {"blocks"},
    "runs": {"blocks", "runs"},
    "experiments": {"blocks", "runs", "experiments"},
    "llm": {"blocks", "runs", "llm"},
}
LLM_AGENTS = {"grpo", "rc_grpo", "turnsight"}


def module_name(path: Path) -> str:
    """``cleanrl_style/experiments/plot/stats.py`` -> ``experiments.plot.stats``; a package's
    ``__init__`` is the package (the top-level one is "")."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """The cleanrl_style modules and packages a file imports, at any depth (function-level imports
    included), as dotted names under the package ("" for ``cleanrl_style`` itself)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "cleanrl_style":
            base = node.module.removeprefix("cleanrl_style").lstrip(".")
            found.add(base)
            # from cleanrl_style.runs import provenance: the module runs.provenance too
            found.update(f"{base}.{a.name}".lstrip(".") for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "cleanrl_style":
                    found.add(alias.name.removeprefix("cleanrl_style").lstrip("."))
    return found


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def graph() -> dict[str, set[str]]:
    found = modules()
    edges: dict[str, set[str]] = {}
    for name, path in found.items():
        targets = {t for t in imports_of(path) if t in found and t != name}
        # a package imports its own submodules to re-export them: not an edge of the layering
        edges[name] = {t for t in targets if not t.startswith(name + ".") and name != ""}
    return edges


def room(module: str) -> str:
    return module.split(".")[0]


def test_the_graph_is_read_from_the_sources():
    edges = graph()
    assert "runs.evaluate" in edges["runs.run"] and "runs.cli" in edges["runs.evaluate"]
    assert "experiments.plot.stats" in edges["experiments.plot.curves"]
    assert "runs.provenance" in edges["runs.run"]  # from cleanrl_style.runs import provenance
    assert "runs.cli" in edges["runs.checkpoint"] and "runs.logger" in edges["experiments.plot.data"]
    assert set(ALLOWED) == {room(m) for m in modules() if "." in m}, "a room is missing from ALLOWED"


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


def test_every_room_imports_only_the_rooms_below_it():
    for module, targets in graph().items():
        if module == "":
            continue  # cleanrl_style/__init__.py re-exports what the agents use, from every room
        assert "" not in targets, f"cleanrl_style.{module} imports the top-level package; import the module itself"
        upward = {t for t in targets if room(t) not in ALLOWED[room(module)]}
        assert not upward, (
            f"cleanrl_style.{module} imports {sorted(upward)}, outside the rooms {sorted(ALLOWED[room(module)])}"
        )


@pytest.mark.parametrize("agent", sorted(p.stem for p in (REPO / "agents").glob("*.py")))
def test_an_agent_imports_the_shared_code_from_one_place(agent):
    imported = imports_of(REPO / "agents" / f"{agent}.py")
    # what `from cleanrl_style import X` adds besides the package itself is the names X
    rooms_used = {room(t) for t in imported if t and room(t) in ALLOWED}
    allowed = {"llm"} if agent in LLM_AGENTS else set()
    assert "" in imported and rooms_used <= allowed, (
        f"agents/{agent}.py imports from {sorted(rooms_used - allowed)}: take it from `cleanrl_style` "
        "(add it to cleanrl_style/__init__.py)"
    )

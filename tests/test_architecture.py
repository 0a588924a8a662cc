"""The layout is the design (docs/ARCHITECTURE.md): no import cycle between modules or between
packages, only the shared basics loose in app/, the product (app/, ui/) never importing the research
tools (tools/), and app/ and tools/ typed (mypy). import-linter checks the layer order; this checks
what its contracts cannot express."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LOOSE_APP_MODULES = 6


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("app", "ui", "tools", include_external_packages=False)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return found


def _package_of(module: str) -> str:
    """app.engine.session -> app.engine; loose modules (app.paths) stand for themselves."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_module_import_cycle(graph: grimp.ImportGraph) -> None:
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def test_no_package_import_cycle(graph: grimp.ImportGraph) -> None:
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        source = _package_of(module)
        for imported in graph.find_modules_directly_imported_by(module):
            target = _package_of(imported)
            if target != source and target not in ("app", "ui", "tools"):
                edges.setdefault(source, set()).add(target)
    assert _cycles(edges) == []


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_app_keeps_few_loose_modules() -> None:
    loose = sorted(p.name for p in (ROOT / "app").glob("*.py") if p.name != "__init__.py")
    assert len(loose) <= MAX_LOOSE_APP_MODULES, loose
    ui_loose = sorted(p.name for p in (ROOT / "ui").glob("*.py") if p.name != "__init__.py")
    assert ui_loose == []


def test_the_product_never_imports_the_research_tools(graph: grimp.ImportGraph) -> None:
    """tools/ is not shipped (docs/PACKAGING.md), so nothing in app/ or ui/ may import it, even inside a function."""
    product = [m for m in graph.modules if m.split(".")[0] in ("app", "ui")]
    found = [(m, t) for m in product for t in graph.find_modules_directly_imported_by(m) if t.split(".")[0] == "tools"]
    assert found == []
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert any(c["type"] == "forbidden" and set(c["source_modules"]) == {"app", "ui"} and c["forbidden_modules"] ==
               ["tools"] for c in contracts), "import-linter's contract app/ui -> tools is gone"


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is a dev extra (bootstrap.py test has it)")
def test_app_and_tools_typecheck() -> None:
    """mypy on pyproject.toml's packages (app, tools): the engine typed against TargetContext, the research
    replays' stand-in target checked against it with no `type: ignore`."""
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["packages"]
    assert {"app", "tools"} <= set(packages)
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]

"""The package reads like its data flow: stage subpackages, each importing only from its own stage or earlier
ones, no import cycle anywhere (package ``__init__`` files included), and few modules at the top level."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "acceptance"

#: Stages in data-flow order, by the first part of the name below ``acceptance``; a module may import from its own
#: stage and earlier ones only.
STAGES: list[tuple[str, ...]] = [
    ("errors", "version"),  # failures every stage may name; the version
    ("records",),  # the record types every stage fills
    ("wording", "device"),  # sentences shared by the verdict and the reporters; the test device
    ("formats",),  # dtypes, GGML block formats, input-range presets, layouts
    ("numerics",),  # metrics, statistics, emulation, oracles
    ("spec",),  # specs -> validated cases and their rules; deterministic inputs
    ("cache",),  # the reference cache's entries, keys and store
    ("protocols",),  # the extension points
    ("isolation",),  # where the code under test runs, and how tensors get there
    ("measure",),  # the trial engine, one case measured
    ("decide",),  # every decision
    ("report",),  # reporters, from Results alone
    ("session",),  # the one run and the library calls built on it
    ("cli", "pytest_plugin", "docgen", "__main__", "__init__"),  # the edges
]
STAGE_OF = {name: k for k, names in enumerate(STAGES) for name in names}

#: Most modules directly in ``acceptance/`` (packages aside).
TOP_LEVEL_MODULES = 12


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def module_name(path: Path) -> str:
    """``acceptance.measure.case`` for ``measure/case.py``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


NAMES = {module_name(p): p for p in modules()}


def stage(name: str) -> int:
    """Stage of ``acceptance.<top>...`` by its top-level part (``acceptance`` itself: its ``__init__``)."""
    parts = name.split(".")
    return STAGE_OF[parts[1] if len(parts) > 1 else "__init__"]


def imported(path: Path) -> list[str]:
    """The modules of the package a file imports, anywhere in it (function-level and TYPE_CHECKING imports too):
    ``from a.b import c`` names ``a.b.c`` when that is a module, else ``a.b``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "acceptance":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.append(sub if sub in NAMES else node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "acceptance"]
    return sorted(set(out))


GRAPH = {name: [m for m in imported(path) if m != name] for name, path in NAMES.items()}


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_stage():
    unknown = [name for name in NAMES if name != "acceptance" and name.split(".")[1] not in STAGE_OF]
    assert unknown == []


def test_imports_name_modules_that_exist():
    missing = sorted({m for targets in GRAPH.values() for m in targets if m not in NAMES})
    assert missing == []


@pytest.mark.parametrize("name", sorted(NAMES))
def test_no_import_from_a_later_stage(name):
    own = stage(name)
    later = [m for m in GRAPH[name] if stage(m) > own]
    assert later == [], f"{name} (stage {own}) imports later stages: {later}"


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_cycles():
    """The check above can fail: a cycle through a package's ``__init__`` is one."""
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"p": ["p.x"], "p.x": ["p.y"], "p.y": []}) == []
    assert cycles({"p": ["p.x"], "p.x": ["p"]}) == [["p", "p.x"]]


def test_few_modules_at_the_top_level():
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_LEVEL_MODULES, top


def test_the_trial_loop_and_the_verdict_live_in_one_place_each():
    """Only the engine calls the roles trial after trial; only the verdict module sets a verdict."""
    sources = {name: path.read_text(encoding="utf-8") for name, path in NAMES.items()}
    trial_loop = re.compile(r"for _?t in range\(trials\)|for trial in range\(")
    loops = [m for m, s in sources.items() if trial_loop.search(s)]
    assert loops == ["acceptance.measure.engine"]
    sets_a_verdict = re.compile(r'verdict"?\s*[:=]\s*"(pass|fail|error|skip)"')
    deciders = [m for m, s in sources.items() if sets_a_verdict.search(s)]
    assert deciders == ["acceptance.decide.verdict"]

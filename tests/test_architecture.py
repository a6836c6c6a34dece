"""The package reads like its data flow: each module imports only from its own stage or earlier ones, and no module
grows past the size where one concern becomes several."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "acceptance"

#: Stages in data-flow order; a module may import from its own stage and earlier ones only.
STAGES: list[tuple[str, ...]] = [
    ("errors", "dtypes", "device", "quant", "quant_kernels", "presets", "layouts", "timing", "cache"),  # facts, formats, failures
    ("records", "metrics", "wording"),                    # record types, the metric math, sentences
    ("oracle", "emulate", "emulation"),                   # reference callables (float64, mpmath, emulated)
    ("spec", "adapters"),                                 # specs -> validated cases and their rules; callable kinds
    ("inputs",),                                          # deterministic inputs
    ("transport", "serve", "workers", "forkserver", "importcheck"),               # where the code under test runs, how tensors get there
    ("engine", "diagnose", "peers", "determinism"),       # the trial loop, per-element diagnostics, peer gates
    ("stats",),                                           # dual-delta statistics
    ("verdict",),                                         # every decision
    ("results", "regression", "proposal"),                # results.json; comparing runs, proposing thresholds
    ("runner", "provenance", "dualdelta", "faithful", "sanitize", "tuning", "tunewrite", "bench", "assertions", "waivers", "references", "memo", "parallel"),  # orchestration: spec runs, the library calls
    ("report",),                                          # reporters
    ("cli", "cli_tune", "cli_bench", "cli_cache", "progress", "__main__", "docgen", "__init__", "pytest_plugin"),  # the edges
]
STAGE_OF = {name: k for k, names in enumerate(STAGES) for name in names}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def stage(path_or_name: str) -> int:
    """Stage of ``acceptance.<top>...`` by its top-level part."""
    parts = path_or_name.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return STAGE_OF[top]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] if len(parts) > 2 else parts
    return ".".join(parts)


def imported(path: Path) -> list[str]:
    """Every ``acceptance...`` module imported anywhere in the file (function-level imports too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "acceptance":
            if node.module == "acceptance":
                out += [f"acceptance.{a.name}" for a in node.names]
            else:
                out.append(node.module)
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "acceptance"]
    return out


def test_every_module_has_a_stage():
    unknown = [module_name(p) for p in modules() if module_name(p).split(".")[1] not in STAGE_OF]
    assert unknown == []


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_from_a_later_stage(path):
    own = stage(module_name(path))
    later = [m for m in imported(path) if m != "acceptance" and stage(m) > own]
    assert later == [], f"{module_name(path)} (stage {own}) imports later stages: {later}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_over_500_lines(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500


def test_the_trial_loop_and_the_verdict_live_in_one_place_each():
    """Only the engine calls the roles trial after trial; only the verdict module sets a verdict."""
    sources = {module_name(p): p.read_text(encoding="utf-8") for p in modules()}
    loops = [m for m, s in sources.items() if "for t in range(trials)" in s or "for trial in range(" in s]
    assert loops == ["acceptance.engine"]
    sets_a_verdict = re.compile(r'verdict"?\s*[:=]\s*"(pass|fail|error|skip)"')
    deciders = [m for m, s in sources.items() if sets_a_verdict.search(s)]
    assert deciders == ["acceptance.verdict"]

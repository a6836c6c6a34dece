"""Case axes beyond the written cases: input-range presets, edge sizes of the shape symbols, and seeds.

* ``preset: [r0, r1, r4, r5]`` in a case gives one case per preset, in that
  order; every input whose ``dist`` is a ``preset`` takes the case's preset
  (``preset: r4`` gives one case).
* ``edges: true`` (or ``edges: {max: N}``) in a case adds, for each shape
  symbol in turn (the others kept), the sizes of
  :func:`acceptance.formats.layouts.edge_values`: 1, the prime nearest the written
  value, ``8k+1``, ``16k-1``, ``32k+3`` and the largest size that fits the
  budget (``max``, or the largest value up to :data:`EDGE_CAP` for which the
  case's inputs hold at most :data:`EDGE_ELEMENTS` elements in all).
* :func:`with_seeds` runs every case under several spec seeds.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from acceptance.formats import presets
from acceptance.formats.layouts import edge_values
from acceptance.spec.expr import value_of
from acceptance.spec.model import Case, CaseSpec, Dist, InputSpec, Preset, Sparse, Specials, Uniform

if TYPE_CHECKING:
    from acceptance.spec.kinds import JSONValue
    from acceptance.spec.schema import _CaseModel, _EdgesModel

#: Element budget of the edge sweep's largest size: all inputs of a case together.
EDGE_ELEMENTS = 1 << 22
#: Largest size the edge sweep proposes without an explicit ``max``.
EDGE_CAP = 1 << 16


def _elements(inputs: list[InputSpec], symbols: dict[str, int]) -> int:
    try:
        return sum(math.prod(max(0, int(value_of(d, symbols))) for d in inp.shape) for inp in inputs)
    except Exception:  # an expression undefined for this value (e.g. a division by zero)
        return EDGE_ELEMENTS + 1


def largest_fitting(inputs: list[InputSpec], symbols: dict[str, int], name: str) -> int:
    """The largest ``v <= EDGE_CAP`` with the inputs at ``name = v`` holding at most :data:`EDGE_ELEMENTS`
    elements (binary search; sizes grow with a symbol). At least 1."""
    lo, hi = 1, EDGE_CAP
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _elements(inputs, {**symbols, name: mid}) <= EDGE_ELEMENTS:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _edge_symbols(symbols: dict[str, int], edges: bool | _EdgesModel, inputs: list[InputSpec]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for name, value in symbols.items():
        if value < 1:
            continue
        top = edges.max if not isinstance(edges, bool) else largest_fitting(inputs, symbols, name)
        for v in edge_values([value], max_value=max(top, 1)):
            candidate = {**symbols, name: v}
            if v != value and candidate not in out:
                out.append(candidate)
    return out


def case_specs(
    models: list[_CaseModel],
    inputs: list[InputSpec],
    role_params: Callable[[_CaseModel], dict[str, dict[str, JSONValue]]] = lambda c: {},
) -> list[CaseSpec]:
    """The cases of a spec from its validated ``cases`` entries: presets and edge sizes expanded, in order
    (each written case, then its edge variants; a preset list multiplies both); ``role_params`` gives an
    entry's ``<role>_params``."""
    out: list[CaseSpec] = []
    for c in models:
        symbols, params = dict(c.model_extra or {}), dict(c.params)
        variants = [symbols] + (_edge_symbols(symbols, c.edges, inputs) if c.edges else [])
        presets = [c.preset] if isinstance(c.preset, str) or c.preset is None else list(c.preset)
        for syms in variants:
            for p in presets:
                out.append(CaseSpec(dict(syms), params, len(out), p, role_params(c)))
    return out


def with_seeds(cases: list[Case], seeds: int) -> list[Case]:
    """Every case under ``seeds`` spec seeds: the case itself, then copies with spec seed ``seed + k`` and
    id ``<id>@seed+k`` (k = 1 .. seeds-1), so each seed is its own verdict and the run passes only if all do."""
    if seeds <= 1:
        return list(cases)
    out: list[Case] = []
    for case in cases:
        out.append(case)
        for k in range(1, seeds):
            spec = dataclasses.replace(case.spec, seed=case.spec.seed + k)
            out.append(dataclasses.replace(case, spec=spec, id=f"{case.id}@seed+{k}"))
    return out


def _dist_of(mapping: dict) -> Dist:
    """A distribution from the spec-form mapping :func:`acceptance.formats.presets.preset` returns."""
    if "uniform" in mapping:
        return Uniform(*map(float, mapping["uniform"]))
    if "sparse" in mapping:
        return Sparse(mapping["sparse"]["density"], _dist_of(mapping["sparse"]["of"]))
    sp = mapping["specials"]
    return Specials(sp["fraction"], tuple(float(v) for v in sp["values"]), _dist_of(sp["of"]))


def preset_dist(dist: Dist, case: Case) -> Dist:
    """``dist`` with a :class:`Preset` resolved for ``case``: the case's preset if it has one, else the
    input's, as the distribution :func:`acceptance.formats.presets.preset` gives for the case's dtype."""
    if not isinstance(dist, Preset):
        return dist
    return _dist_of(presets.preset(case.preset or dist.name, case.dtype))

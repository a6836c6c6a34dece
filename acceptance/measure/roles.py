"""A case's roles as references, and what the runner adds to a case for device-faithful testing.

* :func:`role_refs`: (impl, baseline, oracle) of a spec as role references
  (:class:`acceptance.formats.roleref.RoleRef`) with the defaults filled in;
  :func:`resolve_roles`: the same references resolved in this process.
* :func:`wrap_roles`: the impl gets its inputs in the layouts the spec asks
  for (:class:`acceptance.formats.layouts.LayoutRef`); the baseline (and, for
  flushed inputs, the oracle) run under the spec's emulation for the case's
  dtype (:class:`acceptance.numerics.emulate.roles.EmulatedRef`). A worker
  resolves the references it is sent; the in-process path resolves them here
  (:func:`resolved`).
* :class:`Extras`: folds every trial into the impl's and baseline's
  run-to-run determinism (:mod:`acceptance.measure.determinism`) and counts where the
  oracle leaves the test dtype's range (:func:`acceptance.formats.presets.range_counts`);
  :meth:`Extras.fields` gives the :class:`~acceptance.records.MeasuredCase`
  fields, :meth:`Extras.error` a varying baseline's spec error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict, cast

from acceptance.formats import presets
from acceptance.formats.layouts import LayoutRef
from acceptance.formats.roleref import RoleRef, fresh
from acceptance.isolation import grad
from acceptance.isolation.adapters import AdapterRef, default_roles
from acceptance.measure import determinism
from acceptance.measure.engine import Trial
from acceptance.numerics.emulate import roles as emulation
from acceptance.numerics.oracle import DEFAULT_DPS, Float64Ref, MpmathRef
from acceptance.records import Determinism
from acceptance.spec import CallableRef, Case, OperatorSpec

if TYPE_CHECKING:
    from acceptance.spec.kinds import JSONValue

#: Impl runs per trial where the impl must be deterministic (else :func:`impl_repeats`).
IMPL_RUNS = determinism.DETERMINISM_RUNS
#: Baseline runs on the first trial.
BASELINE_RUNS = 2


def impl_repeats(case: Case) -> int:
    """Further impl runs per trial on the same inputs (:func:`acceptance.measure.determinism.impl_runs`)."""
    s = case.spec
    return determinism.impl_runs(s.category, s.deterministic, s.reruns, s.atomic_runs) - 1


def layouts(case: Case) -> dict[str, str]:
    """Input name -> layout, for inputs the impl gets in a non-contiguous layout."""
    return {inp.name: inp.layout for inp in case.spec.inputs if inp.layout not in (None, "contiguous")}


def wrap_roles(impl: RoleRef, baseline: RoleRef, oracle: RoleRef, case: Case) -> tuple[RoleRef, ...]:
    """(impl, baseline, oracle) references of ``case`` with its gradients
    (:func:`acceptance.isolation.grad.wrap_roles`), layouts and emulation applied."""
    impl, baseline, oracle = grad.wrap_roles(impl, baseline, oracle, case)
    if layouts(case):
        impl = LayoutRef(impl, tuple(inp.layout for inp in case.spec.inputs))
    return emulation.wrap_roles(impl, baseline, oracle, case.spec.emulate.get(case.dtype))


def _declared(spec: OperatorSpec) -> bool:
    """Whether a role of the spec is a declaration (a mapping run by :mod:`acceptance.isolation.adapters`)."""
    return any(isinstance(r, dict) and "mpmath" not in r for r in (spec.impl, spec.baseline, spec.oracle))


def _ref_of(decl: str | dict[str, JSONValue] | None, spec: OperatorSpec, role: str) -> RoleRef | None:
    """The reference of one role's value in a spec: a declaration, an mpmath oracle section or ``module:attr``."""
    if isinstance(decl, dict):
        if "mpmath" not in decl:
            return AdapterRef.of(decl, spec.path, role)
        # the spec's schema checked the section: a function name and an int of digits
        return MpmathRef(cast(str, decl["mpmath"]), cast(int, decl.get("dps", DEFAULT_DPS)))
    return CallableRef(decl, str(spec.path)) if decl else None


def role_refs(spec: OperatorSpec) -> tuple[RoleRef, RoleRef, RoleRef]:
    """(impl, baseline, oracle) of an :class:`~acceptance.spec.model.OperatorSpec` as role references.

    The baseline defaults to the impl callable (run on the CPU), the oracle to
    the baseline on float64 copies of the inputs (:class:`acceptance.numerics.oracle.Float64Ref`); an
    ``oracle:`` mapping selects an mpmath oracle. A role declared as a mapping becomes an
    :class:`acceptance.isolation.adapters.AdapterRef` (defaults: :func:`acceptance.isolation.adapters.default_roles`).
    """
    values = (spec.impl, spec.baseline, spec.oracle)
    decls = default_roles(*values) if _declared(spec) else values
    impl, baseline, oracle = (
        _ref_of(d, spec, role) for d, role in zip(decls, ("impl", "baseline", "oracle"), strict=True)
    )
    assert impl is not None, f"{spec.path}: a spec without an impl"
    baseline = baseline if baseline is not None else impl
    return impl, baseline, oracle if oracle is not None else Float64Ref(baseline)


def resolved(refs: tuple[RoleRef, ...]) -> tuple[Callable, ...]:
    """``refs`` resolved in this process, each afresh (imports the code under test)."""
    return tuple(fresh(r) for r in refs)


def resolve_roles(spec: OperatorSpec) -> tuple[Callable, ...]:
    """(impl, baseline, oracle) of a spec as callables of this process (:func:`role_refs`, resolved).
    Raises :class:`~acceptance.errors.SpecError` or ``ValueError``."""
    return resolved(role_refs(spec))


class ExtraFields(TypedDict):
    """The fields of a measured case that :class:`Extras` fills in."""

    determinism: Determinism
    emulation: str | None
    oracle_range: str | None
    layouts: dict[str, str]


class Extras:
    """Determinism of impl and baseline and the oracle's range over the trials of one case."""

    def __init__(self, case: Case):
        self.case = case
        self.impl = determinism.RunToRun()
        self.baseline = determinism.RunToRun()
        self.counts: dict[str, list[int]] = {}

    def add(self, t: Trial) -> None:
        self.impl.add(t.impl, t.repeats)
        self.baseline.add(t.baseline, t.baseline_repeats)
        for b, o in zip(t.baseline, t.oracle or (), strict=False):
            dtype = str(b.dtype).removeprefix("torch.")
            if not b.is_floating_point() or dtype not in presets._FLOAT_DTYPES:
                continue
            c = presets.range_counts(o, dtype)
            old = self.counts.setdefault(dtype, [0] * 5)
            self.counts[dtype] = [x + y for x, y in zip(old, c[1:], strict=False)]

    def oracle_range(self) -> str | None:
        # overflow and underflow only: the dtype cannot hold the true result at all (subnormal results it can)
        lines = [presets.range_text(presets.RangeCounts(dt, c[0], c[1], c[2], 0, 0)) for dt, c in self.counts.items()]
        return "; ".join(line for line in lines if line) or None

    def error(self) -> str | None:
        return determinism.baseline_error(self.baseline)

    def fields(self) -> ExtraFields:
        spec = self.case.spec
        em = spec.emulate.get(self.case.dtype)
        must = determinism.required(spec.category, spec.deterministic)
        return ExtraFields(
            determinism=determinism.record(self.impl, self.baseline, must=must),
            emulation=em.describe() if em is not None else None,
            oracle_range=self.oracle_range(),
            layouts=layouts(self.case),
        )

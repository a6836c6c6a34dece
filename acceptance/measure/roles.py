"""What the runner adds to a case for device-faithful testing: the roles' wrappers and the run-to-run record.

* :func:`wrap_roles`: the impl gets its inputs in the layouts the spec asks
  for (:func:`acceptance.formats.layouts.with_layouts`); the baseline (and, for
  flushed inputs, the oracle) run under the spec's emulation for the case's
  dtype (:mod:`acceptance.numerics.emulate.roles`). Works on callables and on worker
  references alike.
* :class:`Extras`: folds every trial into the impl's and baseline's
  run-to-run determinism (:mod:`acceptance.measure.determinism`) and counts where the
  oracle leaves the test dtype's range (:func:`acceptance.formats.presets.range_counts`);
  :meth:`Extras.fields` gives the :class:`~acceptance.records.MeasuredCase`
  fields, :meth:`Extras.error` a varying baseline's spec error.
"""

from __future__ import annotations

from typing import Any

from acceptance.formats import presets
from acceptance.measure import determinism
from acceptance.measure.engine import Trial
from acceptance.numerics.emulate import roles as emulation
from acceptance.spec import Case

#: Impl runs per trial where an impl is not atomic_add (atomic_add uses the spec's ``atomic_runs``).
IMPL_RUNS = 2
#: Baseline runs on the first trial.
BASELINE_RUNS = 2


def impl_repeats(case: Case) -> int:
    """Further impl runs per trial on the same inputs."""
    runs = max(case.spec.atomic_runs, 2) if case.spec.category == "atomic_add" else IMPL_RUNS
    return runs - 1


def layouts(case: Case) -> dict[str, str]:
    """Input name -> layout, for inputs the impl gets in a non-contiguous layout."""
    return {inp.name: inp.layout for inp in case.spec.inputs if inp.layout not in (None, "contiguous")}


def wrap_roles(impl: Any, baseline: Any, oracle: Any, case: Case, *, refs: bool) -> tuple:
    """(impl, baseline, oracle) of ``case`` with its layouts and emulation applied; ``refs``: the roles are
    worker references (:data:`acceptance.isolation.worker.Ref`)."""
    if layouts(case):
        wanted = tuple(inp.layout for inp in case.spec.inputs)
        if refs:
            impl = ("layout", impl, wanted)
        else:
            from acceptance.formats.layouts import with_layouts

            impl = with_layouts(impl, wanted)
    return emulation.wrap_roles(impl, baseline, oracle, case.spec.emulate.get(case.dtype), refs=refs)


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

    def fields(self) -> dict[str, Any]:
        spec = self.case.spec
        em = spec.emulate.get(self.case.dtype)
        must = determinism.required(spec.category, spec.deterministic)
        return dict(
            determinism=determinism.record(self.impl, self.baseline, must=must),
            emulation=em.describe() if em is not None else None,
            oracle_range=self.oracle_range(),
            layouts=layouts(self.case),
        )

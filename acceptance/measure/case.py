"""Run cases: measure each one through the trial engine, then decide every verdict after the run's statistics.

Per case, :func:`measure` runs the trials (:mod:`acceptance.measure.engine`) and
keeps, per output, the worst-over-trials metrics of impl against baseline,
the diff4 counts, the per-element diagnostics (:mod:`acceptance.measure.diagnose`)
and, where the case has a dual-delta analysis, the per-trial errors of impl
and baseline against the oracle with their statistics
(:func:`acceptance.numerics.stats.analyze`). A case whose run breaks (a callable
raises, returns something unusable or times out) is measured as an error and
the run goes on.

The run measures every case this way (:mod:`acceptance.session.executors`), then corrects the dual-delta
p-values for multiplicity over the whole run (Holm) and only then decides each verdict
(:mod:`acceptance.decide.run`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict, cast, overload

import numpy as np
import torch

from acceptance.errors import CaseError
from acceptance.formats import dtypes
from acceptance.isolation.split import RoleWorkers
from acceptance.isolation.worker import Worker
from acceptance.measure import determinism, engine
from acceptance.measure import roles as faithful
from acceptance.measure.determinism import Reruns
from acceptance.measure.diagnose import (
    BiasSums,
    Diagnosis,
    abs_error,
    bit_mismatches,
    constant,
    element_worsts,
    flush_changes_nothing,
    ulp_elements_over,
    ulp_flush,
)
from acceptance.measure.memo import memo_for
from acceptance.measure.peers import Peers
from acceptance.measure.references import RunReferences
from acceptance.numerics import invariants, metrics
from acceptance.numerics.metrics import registry
from acceptance.records import (
    CriterionWorst,
    Diff4Counts,
    DualDeltaRecord,
    MeasuredCase,
    MetricValue,
    OutputMeasurement,
    Timing,
    UlpStats,
)
from acceptance.records.base import JSON
from acceptance.spec import Case, Rules, backward
from acceptance.spec.defaults import DualDeltaSettings
from acceptance.spec.inputs import Recipe

#: What measures a case's callables in worker processes: its roles' workers, or one worker for every role.
Workers = RoleWorkers | Worker

# ----------------------------------------------------------------------------- one output over trials


#: Metrics whose worse value is the smaller (scores); every other metric's is the larger.
_SCORES = frozenset(m.name for m in registry.REGISTRY if m.kind == "score")


def _worse(old: float, new: float, score: bool) -> float:
    """The worse of two values of a metric: NaN wins, else the smaller for a ``score`` and the larger otherwise,
    ``old`` kept on a tie (as ``min(old, new)`` and ``max(old, new)``)."""
    if old != old or new != new:
        return math.nan
    return new if ((new < old) if score else (new > old)) else old


def _fold(worst: dict[str, MetricValue], m: Mapping[str, registry.Value]) -> None:
    """Fold one trial's metrics into the worst values so far (diff4 and the counts are kept elsewhere)."""
    for name, value in m.items():
        if name in ("diff4", "above", "below"):
            continue
        old = worst.get(name)
        score = name in _SCORES
        if isinstance(value, tuple):
            pair = [float(v) for v in value]
            worst[name] = pair if old is None else [_worse(a, b, score) for a, b in zip(_pair(old), pair, strict=False)]
        else:
            scalar = float(value)
            worst[name] = scalar if old is None else _worse(cast(float, old), scalar, score)


def _pair(value: MetricValue) -> list[float]:
    """A pair metric's worst value so far (the metric's kind fixes it as a list)."""
    return cast(list[float], value)


@dataclass
class _Output:
    """What one output of one case accumulates over trials."""

    dtype: str
    worst: dict[str, MetricValue] = field(default_factory=dict)
    impl_oracle: dict[str, MetricValue] = field(default_factory=dict)
    baseline_oracle: dict[str, MetricValue] = field(default_factory=dict)
    ulp: UlpStats = field(default_factory=UlpStats)
    impl_ulp: dict[str, list[float]] = field(default_factory=lambda: {"max": [], "mean": []})
    diff4: Diff4Counts = field(default_factory=Diff4Counts)
    bias: BiasSums = field(default_factory=BiasSums)
    bits: int = 0
    delta_impl: dict[str, list[float]] = field(default_factory=dict)
    delta_baseline: dict[str, list[float]] = field(default_factory=dict)
    free: dict[str, list[float]] = field(default_factory=dict)
    constant: bool = True
    oracle_constant: bool = True
    element_worst: dict[str, CriterionWorst] = field(default_factory=dict)
    invariant: str | None = None
    forward: bool = True  # the op's own output: its invariants hold; a gradient (``grad[x]``) has none
    elements: int | None = None  # the fewest elements of this output in a trial

    def __post_init__(self) -> None:
        self.diagnosis = Diagnosis(self.dtype)

    def add(self, t: engine.Trial, out: int, rules: Rules, dd_metrics: tuple[str, ...], peers: Peers) -> None:
        """Fold in one trial of this output: impl against baseline, and both against the oracle."""
        e, b, o = t.impl[out], t.baseline[out], cast(engine.Tensors, t.oracle)[out]  # measured with the oracle
        self.elements = e.numel() if self.elements is None else min(self.elements, e.numel())
        batch = metrics.Batch()  # each of e, b, o and the rounded oracle is read once for every pair below
        eb = batch.compute(e, b, dtype=self.dtype)
        self.diff4.above += eb["above"]
        self.diff4.below += eb["below"]
        _fold(self.worst, eb)
        eo, bo, free, rounded = engine.against_oracle(e, b, o, batch=batch, free=bool(dd_metrics))
        self.diff4.baseline_above += bo["above"]
        self.diff4.baseline_below += bo["below"]
        _fold(self.impl_oracle, batch.compute(e, rounded.to(e.device), dtype=self.dtype))
        _fold(self.baseline_oracle, batch.compute(b, rounded, dtype=self.dtype))
        for name in dd_metrics:
            self.delta_impl.setdefault(name, []).append(float(eo[name]))
            self.delta_baseline.setdefault(name, []).append(float(bo[name]))
            self.free.setdefault(name, []).append(float(free[name]))
        if rules.ulp_check or rules.floor_max is not None or rules.floor_mean is not None:
            (e_max, e_mean), (b_max, b_mean), at_subnormal = self._ulp(e, b, o, eo, bo, batch)
            over, worst_over = ulp_elements_over(t.index, out, e, b, o, self.dtype, rules.floor_max)
            held = self.element_worst.get("ulp_over")
            if worst_over is not None and (held is None or worst_over.error > held.error):
                self.element_worst["ulp_over"] = worst_over
            self.impl_ulp["max"].append(e_max)
            self.impl_ulp["mean"].append(e_mean)
            self.ulp = UlpStats(
                impl_max=max(self.ulp.impl_max, e_max),
                impl_mean=max(self.ulp.impl_mean, e_mean),
                baseline_max=max(self.ulp.baseline_max, b_max),
                baseline_mean=max(self.ulp.baseline_mean, b_mean),
                subnormal_unit=self.ulp.subnormal_unit + at_subnormal,
                elements_over=self.ulp.elements_over + over,
            )
        if rules.diff4:
            self.bias.add(e, b, o, self.dtype, batch.float64)
        if rules.bit_exact:
            self.bits += bit_mismatches(e, b, rounded)
        self.diagnosis.add(t.index, out, e, b, o, rules.element_tolerance, batch.float64)
        for measure, w in element_worsts(t.index, out, e, b, o, rounded, self.dtype).items():
            held = self.element_worst.get(measure)
            if held is None or w.error > held.error:
                self.element_worst[measure] = w
        peers.add(t.index, out, e, b, eo, bo, batch.float64)
        if self.forward and self.invariant is None and rules.invariants.any():
            x = t.inputs[0] if len(t.inputs) == 1 else None
            found = invariants.first_violation(rules.invariants, e, o, self.dtype, x)
            self.invariant = f"trial {t.index}: {found}" if found else None
        self.constant = self.constant and constant(e)  # once varying, varying: not looked at again
        self.oracle_constant = self.oracle_constant and constant(o)

    def _ulp(
        self,
        e: torch.Tensor,
        b: torch.Tensor,
        o: torch.Tensor,
        eo: Mapping[str, object],
        bo: Mapping[str, object],
        batch: metrics.Batch,
    ) -> tuple[tuple[float, float], tuple[float, float], int]:
        """(max, mean) ULP errors of e and of b against the oracle with a flush forgiven (:func:`ulp_flush`), and
        the impl's elements measured in the smallest subnormal spacing."""
        names = ["max_ulp", "mean_ulp"]

        def pair(m: Mapping[str, object]) -> tuple[float, float]:
            return float(cast(float, m["max_ulp"])), float(cast(float, m["mean_ulp"]))

        if dtypes.lookup(b.dtype) is dtypes.lookup(self.dtype) and all(
            flush_changes_nothing(batch.float64(x), self.dtype) for x in (e, b, o)
        ):  # no value below the smallest normal but zeros: the pairs are (e, o) and (b, o), the kernel's values
            return pair(eo), pair(bo), ulp_flush(e, o, self.dtype)[2]
        fe, foe, at_subnormal = ulp_flush(e, o, self.dtype)
        fb, fob, _ = ulp_flush(b, o, self.dtype)
        ue = batch.compute(fe, foe, dtype=self.dtype, names=names)
        return pair(ue), pair(batch.compute(fb, fob, dtype=self.dtype, names=names)), at_subnormal

    def record(self, rules: Rules) -> OutputMeasurement:
        """The output's measurement: the worst metrics (with diff4 from the counts summed over trials) against
        the baseline and against the rounded oracle, the ULP stats (``rules.ulp_check``), the bias, the bit
        mismatches (``rules.bit_exact``) and the diff4 counts."""
        return OutputMeasurement(
            metrics={**self.worst, "diff4": list(metrics.diff4_value(self.diff4.above, self.diff4.below))},
            impl_oracle=self.impl_oracle,
            baseline_oracle=self.baseline_oracle,
            ulp=self.ulp if rules.ulp_check else None,
            bias=self.bias.record(),
            bit_mismatches=self.bits if rules.bit_exact else None,
            diff4=self.diff4,
            worst=self.element_worst,
            invariant=self.invariant,
        )


# ----------------------------------------------------------------------------- one case


class _Identity(TypedDict):
    """The fields of :class:`MeasuredCase` that name a case, whatever its run did."""

    id: str
    operator: str
    category: str
    spec_file: str
    dtype: str
    params: dict[str, JSON]
    trials: int
    seed: int
    waiver: str | None
    description: str


def _identity(case: Case, trials: int) -> _Identity:
    spec = case.spec
    return _Identity(
        id=case.id,
        operator=spec.name,
        category=spec.category,
        spec_file=str(spec.path),
        dtype=case.dtype,
        params={**case.symbols, **({"params": case.case_params} if case.case_params else {})},
        trials=trials,
        seed=spec.seed,
        waiver=case.waiver,
        description=spec.description,
    )


def error_result(case: Case, rules: Rules, trials: int | None, message: str) -> MeasuredCase:
    """The measurement of a case whose run broke before it could be measured: its identity and ``message``."""
    return MeasuredCase(**_identity(case, trials_of(case, rules, trials)), error=message)


def trials_of(case: Case, rules: Rules, trials: int | None = None) -> int:
    """Trials of a case: the command line's, else the spec's dual-delta trials, else the spec's trials."""
    return trials or (rules.dual_delta and rules.dual_delta.trials) or case.spec.trials


def _compared(outputs: list[_Output]) -> int:
    """Elements compared over all outputs and trials: the sum of each output's metric ``n`` (a count)."""
    return sum(int(cast(float, acc.worst.get("n", 0))) for acc in outputs)


def _vacuous(outputs: list[_Output]) -> str | None:
    """Why a case would pass without having shown anything, or ``None``."""
    compared = _compared(outputs)
    if not outputs or compared == 0:
        return "no finite element was compared (every output empty or non-finite on both sides)"
    trivial = [k for k, acc in enumerate(outputs) if acc.constant and not acc.oracle_constant]
    if trivial:
        return f"output {trivial[0]} of the impl is constant in every trial while the oracle's varies"
    return None


def _floor_of(metric: str, rules: Rules) -> float | None:
    return rules.floor_max if registry.get(metric).worst_case else rules.floor_mean


@dataclass
class Begun:
    """A case ready to be measured: its callables resolved, its references found, its trials planned (the
    first perhaps already sent to the worker, see :func:`begin`)."""

    case: Case
    identity: _Identity
    timing: Timing
    started: float
    executor: Workers | engine.InProcess
    trials: engine.TrialRun


@overload
def begin(
    case: Case,
    device: torch.device,
    rules: Rules,
    *,
    trials: int | None = None,
    worker: Workers | None = None,
    references: RunReferences | None = None,
    ahead: Literal[False] = False,
) -> Begun | MeasuredCase: ...


@overload
def begin(
    case: Case,
    device: torch.device,
    rules: Rules,
    *,
    trials: int | None = None,
    worker: Workers | None = None,
    references: RunReferences | None = None,
    ahead: bool,
) -> Begun | MeasuredCase | None: ...


def begin(
    case: Case,
    device: torch.device,
    rules: Rules,
    *,
    trials: int | None = None,
    worker: Workers | None = None,
    references: RunReferences | None = None,
    ahead: bool = False,
) -> Begun | MeasuredCase | None:
    """Get ``case`` ready for :func:`measure` (its error, as a result, when its callables cannot be resolved).

    ``ahead``: the worker may be answering another case meanwhile, so nothing may call it now: ``None`` when
    getting ready needs a call (a callable's fingerprint not known yet, a role set up on trial 0's inputs);
    else the case's first trial is sent, to run while the other case is still being measured."""
    n_trials = trials_of(case, rules, trials)
    identity = _identity(case, n_trials)
    timing = Timing()
    started = time.perf_counter()
    try:
        roles = roles_of(case, refs=worker is not None)
    except Exception as exc:
        return None if ahead else MeasuredCase(**identity, error=f"cannot resolve callables: {exc}")
    if ahead and (engine.needs_setup(roles, True) or (references is not None and not references.known(roles, worker))):
        return None
    spec = case.spec
    executor = worker if worker is not None else engine.InProcess()
    refs = references.for_case(case, roles, worker) if references is not None else None
    # read from the cache or made where they are used (in the worker: overlapped with measuring the previous trial)
    make: Callable[[int], engine.Made] = refs.recipe(case, n_trials) if refs is not None else Recipe(case)
    run = engine.run_trials(
        roles,
        make,
        n_trials,
        device=device,
        params=case.params,
        references=refs,
        oracle=True,
        repeats=faithful.impl_repeats(case),
        baseline_repeats=faithful.BASELINE_RUNS - 1,
        timeout=spec.timeout,
        baseline_timeout=spec.baseline_timeout,
        oracle_timeout=spec.oracle_timeout,
        timing=timing,
        executor=executor,
        names=[inp.name for inp in spec.inputs],
        role_params=case.role_params,
        extendable=_sequential(case, rules),
    )
    if ahead:
        run.start()
    return Begun(case, identity, timing, started, executor, run)


def _sequential(case: Case, rules: Rules) -> bool:
    """Whether the case's trials may take more impl runs once read (the sequential reruns): the impl may vary
    run to run, runs more than once per trial, and the case has a dual-delta analysis."""
    varies = not determinism.required(case.spec.category, case.spec.deterministic)
    return varies and faithful.impl_repeats(case) > 0 and bool(rules.dual_delta and rules.dual_delta.metrics)


def roles_of(case: Case, *, refs: bool) -> engine.Roles:
    """The callables of ``case`` as it runs them (layouts and emulation applied): worker references
    (``refs``) or those references resolved in this process."""
    wrapped = faithful.wrap_roles(*faithful.role_refs(case.spec), case)
    return engine.Roles(*(wrapped if refs else faithful.resolved(wrapped)))


def known_roles(cases: Iterable[Case]) -> list[engine.Roles]:
    """The worker references of each case whose callables can be named (the others report it in their turn)."""
    out = []
    for case in cases:
        try:
            out.append(roles_of(case, refs=True))
        except Exception:
            pass
    return out


def measure(
    case: Case,
    device: torch.device,
    rules: Rules,
    *,
    trials: int | None = None,
    worker: Workers | None = None,
    references: RunReferences | None = None,
    begun: Begun | None = None,
    then: Callable[[], None] | None = None,
) -> MeasuredCase:
    """Run every trial of one case and measure it (a :class:`MeasuredCase`). Never raises
    for a broken impl: the result then carries ``error``. With a ``worker`` the callables run in it (the
    runner never imports the code under test); without, in this process. ``references``: the run's cache of
    inputs, baseline and oracle outputs (:mod:`acceptance.measure.references`). ``begun``: the case as
    :func:`begin` got it ready; ``then`` is called once every trial of the case is sent to the worker (the
    caller may then send the next case's, see :class:`acceptance.session.executors.OneWorker`)."""
    ready = (
        begun if begun is not None else begin(case, device, rules, trials=trials, worker=worker, references=references)
    )
    if not isinstance(ready, Begun):
        if then is not None:
            then()
        return ready
    identity, timing, started, executor = ready.identity, ready.timing, ready.started, ready.executor
    n_trials = ready.trials.trials
    if then is not None:
        ready.trials.after_sent(then)
    noted = len(executor.notes)  # the answers of a case are read after those of the case before it
    fold = _Fold(case, rules, ready.trials.more if ready.trials.extendable else None)
    memo = memo_for(case, rules, ready.trials.references, n_trials, device)
    try:
        for t in ready.trials:
            t = fold.extend(t)
            if memo is not None and memo.hold(t):
                continue  # measured as the memo recorded, unless a later trial differs
            for held in memo.release() if memo is not None else ():
                fold.add(held)
            fold.add(t)
        if memo is not None:
            timing.total = time.perf_counter() - started
            reused = memo.result({**identity, "timing": timing, "warnings": executor.notes[noted:]})
            if reused is not None:
                return reused
            for held in memo.release():  # an entry that does not read back: measured after all
                fold.add(held)
    except CaseError as exc:
        timing.total = time.perf_counter() - started
        return MeasuredCase(**identity, error=str(exc), timing=timing)
    except Exception as exc:  # input generation or metrics on a malformed output
        timing.total = time.perf_counter() - started
        return MeasuredCase(**identity, error=f"{type(exc).__name__}: {exc}", timing=timing)
    if fold.extras.error():
        timing.total = time.perf_counter() - started
        return MeasuredCase(**identity, error=fold.extras.error(), timing=timing, **fold.extras.fields())
    result = fold.measured(identity, n_trials, executor.notes[noted:], timing, started)
    if memo is not None:
        memo.record(result)
    return result


class _Fold:
    """What a case accumulates over its trials: one :class:`_Output` per output, the atomic spread, the run-to-run
    and oracle-range record (:class:`acceptance.measure.roles.Extras`) and the peers' gates."""

    def __init__(self, case: Case, rules: Rules, more: Callable[[engine.Trial, int], tuple] | None = None):
        self.case, self.rules = case, rules
        self.dd_metrics = rules.dual_delta.metrics if rules.dual_delta else ()
        self.atomic = case.spec.category == "atomic_add"
        self.outputs: list[_Output] = []
        self.peers = Peers(case.dtype)
        self.spread = 0.0  # atomic_add only
        self.extras = faithful.Extras(case)
        # where the impl may vary, the criteria see one run of each trial (measure/determinism.py)
        self.reruns = None if determinism.required(case.spec.category, case.spec.deterministic) else Reruns()
        self.more = more

    def extend(self, t: engine.Trial) -> engine.Trial:
        """The sequential reruns (:func:`acceptance.measure.determinism.straddles`): a trial whose runs lie on
        both sides of a dual-delta allowance gets runs from ``more`` until it has ``RERUN_CAP`` × as many."""
        runs = 1 + len(t.repeats)
        if self.reruns is None or self.more is None or not t.repeats or determinism.RERUN_CAP <= 1:
            return t
        errors, allowed = self._run_errors(t)
        if not any(determinism.straddles(errors[key], allowed[key]) for key in errors):
            return t
        self.reruns.extended += 1
        return dataclasses.replace(t, repeats=t.repeats + self.more(t, (determinism.RERUN_CAP - 1) * runs))

    def _run_errors(self, t: engine.Trial) -> tuple[dict[tuple[int, str], list[float]], dict[tuple[int, str], float]]:
        """Per (output, dual-delta metric): every run's error against the oracle, and the trial's allowance
        max(factor · the baseline's error, free)."""
        errors: dict[tuple[int, str], list[float]] = {}
        allowed: dict[tuple[int, str], float] = {}
        dd, names = self.rules.dual_delta, list(self.dd_metrics)
        if dd is None or not names or t.oracle is None:
            return errors, allowed
        for out, (b, o) in enumerate(zip(t.baseline, t.oracle, strict=False)):
            first, bo, free, _ = engine.against_oracle(t.impl[out], b, o, names, free=True)
            rest = [metrics.Batch().compute(r[out], o.to(r[out].device), dtype=b.dtype, names=names) for r in t.repeats]
            for name in names:
                errors[out, name] = [float(eo[name]) for eo in (first, *rest)]
                allowed[out, name] = max(dd.factors[name] * float(bo[name]), float(free[name]))
        return errors, allowed

    def add(self, t: engine.Trial) -> None:
        """Fold in one trial: every output, the spread of the impl's repeats (atomic_add), the extras; where the
        impl runs more than once, the dual-delta error of each output and metric is the median over the runs
        (:func:`acceptance.measure.determinism.typical`), or the chosen run's where that is gross."""
        if not self.outputs:
            self.peers.names = backward.output_names(self.case.spec.backward, len(t.impl))
            self.outputs = [_Output(self.case.dtype, forward=not name) for name in self.peers.names]
        self.extras.add(t)
        for again in t.repeats if self.atomic else ():
            for a, e in zip(again, t.impl, strict=False):
                self.spread = max(self.spread, float(abs_error(a, e).max()) if a.numel() else 0.0)
        errors: dict[tuple[int, str], list[float]] = {}
        if self.reruns is not None and t.repeats:
            errors = self._run_errors(t)[0]
            t = dataclasses.replace(t, impl=self.reruns.chosen(t.impl, t.repeats, t.oracle))
            if self.reruns.gross:
                errors = {}
        for out, acc in enumerate(self.outputs):
            acc.add(t, out, self.rules, self.dd_metrics, self.peers)
        for (out, name), runs in errors.items():
            self.outputs[out].delta_impl[name][-1] = determinism.typical(runs)

    def measured(
        self, identity: _Identity, n_trials: int, warnings: list[str], timing: Timing, started: float
    ) -> MeasuredCase:
        """The case's measurement from every trial folded (its timing closed now)."""
        outputs, dd = self.outputs, self.rules.dual_delta
        records = _dual_delta(outputs, self.rules, dd) if dd is not None and self.dd_metrics else []
        diagnoses = [acc.diagnosis for acc in outputs]
        worst = max((d for d in diagnoses if d.worst), key=lambda d: d.score, default=None)
        bad = max(diagnoses, key=lambda d: d.bad_fraction) if diagnoses else None
        buckets: dict[str, int] = {}
        for d in diagnoses:
            for k, v in d.buckets.items():
                buckets[k] = buckets.get(k, 0) + v
        timing.total = time.perf_counter() - started
        return MeasuredCase(
            **identity,
            outputs=[acc.record(self.rules) for acc in outputs],
            worst=worst.worst if worst else None,
            compared=_compared(outputs),
            vacuous=_vacuous(outputs),
            advisory=self.peers.advisories(n_trials),
            bad_fraction=bad.bad_fraction if bad else None,
            bad_location=bad.bad_where if bad else None,
            rel_error_buckets=buckets,
            atomic_spread=self.spread if self.atomic else None,
            dual_delta=records,
            timing=timing,
            output_names=backward.output_names(self.case.spec.backward, len(outputs))
            if self.case.spec.backward
            else [],
            **self._extras(),
            warnings=warnings,
        )

    def _extras(self) -> faithful.ExtraFields:
        """The extras' fields, the determinism record with the reruns' spread where the impl may vary."""
        fields = self.extras.fields()
        if self.reruns is not None:
            fields["determinism"] = self.reruns.annotate(fields["determinism"])
        return fields


def _dual_delta(outputs: list[_Output], rules: Rules, dd: DualDeltaSettings) -> list[DualDeltaRecord]:
    """The dual-delta analysis of each output and metric of ``dd`` (:func:`acceptance.numerics.stats.analyze`)."""
    from acceptance.numerics import stats  # scipy.stats: imported while the worker starts (see run)

    records = []
    for out, acc in enumerate(outputs):
        for name in dd.metrics:
            floor = _floor_of(name, rules)
            impl_ulp = acc.impl_ulp["max" if registry.get(name).worst_case else "mean"] if floor is not None else []
            records.append(
                stats.analyze(
                    np.asarray(acc.delta_impl[name]),
                    np.asarray(acc.delta_baseline[name]),
                    metric=name,
                    output=out,
                    factor=dd.factors[name],
                    alpha=dd.alpha,
                    free=np.asarray(acc.free[name]),
                    floor=floor,
                    impl_ulp=impl_ulp,
                    elements=acc.elements,
                )
            )
    return records


def worker_limit(case: Case) -> int:
    """Bytes the worker measuring ``case`` may map beyond its start (the spec's ``memory_limit_gib``)."""
    return int(case.spec.memory_limit_gib * 2**30)

"""A run's specs: discovered, validated and their callables' imports checked in a child process; the cases a run
selects from them, and the shard of each (balanced by estimated or measured cost). Light to import: ``acceptance
list`` and ``validate`` start without torch."""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from acceptance.errors import SpecError, UsageError
from acceptance.session import startup

if TYPE_CHECKING:
    from acceptance.session.options import RunOptions
    from acceptance.spec import Case, OperatorSpec

#: The specs a run reads when it names none.
DEFAULT_SPECS = Path("operator_specs")

#: The cost model of :func:`case_cost`, in element-runs (one input element through one role's call and the
#: metrics, about 10 ns on a CPU core): a case's fixed cost (a worker call, its setup, the verdict) ...
CASE_COST = 1e6
#: ... a trial's fixed cost (drawing inputs, three calls, the statistics) ...
TRIAL_COST = 1e4
#: ... the weight of an mpmath oracle (element by element in Python, about 300 times a vectorized role) ...
MPMATH_WEIGHT = 300.0
#: ... and of a ``backward`` section (each role's backward pass and the gradients' metrics besides the forward).
BACKWARD_WEIGHT = 3.0


def load(paths: Sequence[Path] = (), meanwhile: Sequence[Callable[[], object]] = ()) -> list[OperatorSpec]:
    """Discover and validate specs; a :class:`SpecError` with one line per problem. The code under test is
    imported for the check in a child process (:mod:`acceptance.isolation.importcheck`), never in this one.
    ``meanwhile``: work started in threads as the check begins, for the time this process waits on it."""
    startup.launch_workers()  # the check's child starts from the fork server: its preload overlaps with our imports
    from acceptance import spec
    from acceptance.isolation.importcheck import load_checked

    chosen = list(paths) or [DEFAULT_SPECS]
    missing = [p for p in chosen if not p.exists()]
    if missing:
        raise UsageError(*(f"{p}: no such file or directory" for p in missing))
    files = spec.discover(chosen)
    if not files:
        raise UsageError(f"{', '.join(map(str, chosen))}: no spec files (*.yaml) found")
    for work in meanwhile:
        startup.meanwhile(work)
    specs, problems = load_checked(files)
    if problems:
        raise SpecError(*(str(p) for p in problems), f"{len(problems)} problem(s) in the specs; nothing was run")
    return specs


def select_tiers(specs: Sequence[OperatorSpec], tiers: Sequence[str] = ()) -> list[OperatorSpec]:
    """The specs of the given tiers (``default`` when none is given): ``tier: large`` specs run only when asked."""
    wanted = set(tiers or ("default",))
    return [s for s in specs if s.tier in wanted]


class Planned(NamedTuple):
    """The cases a run selects: the whole run's (every shard), this shard's (in the whole run's order), and the
    shard (1..N) of each of the whole run's cases (``None`` without ``--shard``)."""

    everything: list[Case]
    cases: list[Case]
    shards: list[int] | None


def plan_cases(specs: Sequence[OperatorSpec], options: RunOptions) -> Planned:
    """The cases of the whole run (every shard) and those of this run's shard (the same list without
    ``--shard``): its seed, reruns, dtypes, ``--only`` glob, seeds and ``-k`` expression
    (:mod:`acceptance.session.keyword`) applied, then the shard: the cases :func:`assign_shards` gives it by cost
    (:func:`costs_of`; measured where ``--shard-costs`` gives an earlier run), so that every shard process,
    given the same specs and options, computes the same assignment."""
    from acceptance import spec

    if options.seed is not None:
        specs = [dataclasses.replace(s, seed=options.seed) for s in specs]
    if options.reruns is not None:
        specs = [dataclasses.replace(s, reruns=options.reruns) for s in specs]
    everything = spec.expand(list(specs), dtypes=list(options.dtypes) or None, only=options.only)
    if options.seeds > 1:
        from acceptance.spec.axes import with_seeds

        everything = with_seeds(everything, options.seeds)
    if options.keyword:
        everything = select_keyword(everything, options.keyword)
    cases, shards = everything, None
    if options.shard_costs is not None and options.shard is None:
        raise UsageError(f"--shard-costs {options.shard_costs}: only with --shard K/N")
    if options.shard is not None:
        k, n = options.shard
        measured = shard_costs_of(options.shard_costs) if options.shard_costs is not None else {}
        shards = assign_shards(costs_of(everything, options.trials, measured), n)
        cases = [c for c, s in zip(everything, shards, strict=True) if s == k]
    if not cases:
        o = options
        given = [f"--only {o.only!r}" if o.only else "", f"--dtype {', '.join(o.dtypes)}" if o.dtypes else ""]
        given += [f"-k {o.keyword!r}" if o.keyword else "", f"--shard {o.shard[0]}/{o.shard[1]}" if o.shard else ""]
        given = [g for g in given if g]
        raise UsageError(f"no case matches {', '.join(given)}; nothing run" if given else "the specs hold no case")
    return Planned(everything, cases, shards)


def select_keyword(cases: Sequence[Case], expression: str) -> list[Case]:
    """The cases whose id ``expression`` selects (:func:`acceptance.session.keyword.parse`); a usage error (exit
    2) naming the column where a malformed expression goes wrong."""
    from acceptance.session.keyword import KeywordError, parse

    try:
        keyword = parse(expression)
    except KeywordError as exc:
        raise UsageError(*exc.lines()) from None
    return [c for c in cases if keyword.matches(c.id)]


def case_cost(case: Case, trials: int | None = None) -> float:
    """The estimated cost of a case, in element-runs (see :data:`CASE_COST`)::

        cost = CASE_COST + T * (TRIAL_COST + E * (2 + R) / 3 * M * B)

    with T the trials (``trials`` given on the command line, else the spec's dual-delta trials, else its
    trials), E the elements of all inputs (at least 1), R the impl runs per trial (2 where the impl must be
    deterministic, else the reruns asked for or 5; the baseline and the oracle run once: (2 + R) / 3 roles'
    worth), M = :data:`MPMATH_WEIGHT` for an mpmath oracle (else 1) and B = :data:`BACKWARD_WEIGHT` with a
    ``backward`` section (else 1). An estimate to balance shards with, not a prediction of seconds."""
    spec = case.spec
    written = (spec.dual_delta or {}).get("trials")
    t = trials or (written if isinstance(written, int) and written > 0 else spec.trials)
    try:
        elements = sum(math.prod(shape) for shape in case.shapes)
    except (KeyError, TypeError, ValueError):  # a shape the symbols do not give: counted as one element
        elements = 1
    deterministic = spec.deterministic if spec.deterministic is not None else spec.category != "atomic_add"
    runs = 2 if deterministic else (spec.reruns if spec.reruns is not None else max(5, spec.atomic_runs))
    mpmath = MPMATH_WEIGHT if isinstance(spec.oracle, dict) and "mpmath" in spec.oracle else 1.0
    backward = BACKWARD_WEIGHT if spec.backward is not None else 1.0
    return CASE_COST + t * (TRIAL_COST + max(elements, 1) * (2 + runs) / 3 * mpmath * backward)


def costs_of(
    cases: Sequence[Case], trials: int | None = None, measured: Mapping[str, float] | None = None
) -> list[float]:
    """The cost of each case: the seconds ``measured`` gives (an earlier run's, :func:`shard_costs_of`), else its
    estimate (:func:`case_cost`) in seconds: scaled by s = (sum of the measured seconds) / (sum of the estimates)
    over the cases that have both (no case has both: the estimates as they are, the measured seconds unused)."""
    estimates = [case_cost(c, trials) for c in cases]
    measured = measured or {}
    both = [(measured[c.id], e) for c, e in zip(cases, estimates, strict=True) if c.id in measured]
    if not both or not sum(e for _, e in both) > 0:
        return estimates
    scale = sum(m for m, _ in both) / sum(e for _, e in both)
    return [measured.get(c.id, e * scale) for c, e in zip(cases, estimates, strict=True)]


def assign_shards(costs: Sequence[float], n: int) -> list[int]:
    """The shard (1..n) of each case: greedy longest first. The cases, costliest first (ties: in run order), go
    one by one to the shard with the least cost so far (ties: the lowest K). Deterministic, so every shard
    process computes the same assignment; the costliest shard exceeds the cheapest by at most the costliest
    case's cost, and is within 4/3 of the best assignment possible (Graham's bound for longest first)."""
    shards = [0] * len(costs)
    loads = [(0.0, k) for k in range(1, n + 1)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        load, k = heapq.heappop(loads)
        shards[i] = k
        heapq.heappush(loads, (load + costs[i], k))
    return shards


def shard_costs_of(path: Path) -> dict[str, float]:
    """Case id -> seconds (``timing.total``) of an earlier run's results (a results.json, or a folder of one or
    of shards, :func:`acceptance.session.results.load_run`); cases without a positive timing left out. A
    file that cannot be read is a usage error naming it (exit 2)."""
    from acceptance.errors import ResultsError
    from acceptance.session.results import load_run

    try:
        earlier = load_run(path, allow_partial=True, warn=lambda message: None)
    except ResultsError as exc:
        raise UsageError(*(f"--shard-costs: {line}" for line in exc.lines)) from None
    return {c.id: c.timing.total for c in earlier.cases if c.timing.total > 0 and math.isfinite(c.timing.total)}

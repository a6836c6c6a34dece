"""``acceptance.tune()``: run specs over several seeds (or read results.json files) and propose thresholds.

Example::

    import acceptance
    res = acceptance.tune(["operator_specs/sum.yaml"], seeds=5, dtypes=["float16"])
    print(res.table())                 # threshold, observed distributions, proposal, slack
    res.passed, res.problems           # the --check findings
    acceptance.tune(results=["reports/a/results.json", "reports/b/results.json"])   # from earlier runs

The proposal rule is :mod:`acceptance.decide.proposal`'s; writing the proposals into the
spec files is :mod:`acceptance.session.tunewrite`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from acceptance import spec
from acceptance.decide.limits import MAX_RATIO, MAX_SLOWDOWN
from acceptance.decide.proposal import LOOSE, MARGIN, TuneResult, observations, proposals
from acceptance.decide.regression import compare_results
from acceptance.device import resolve_device
from acceptance.errors import SpecError, UsageError
from acceptance.isolation import WORKER_THREADS
from acceptance.records import CaseResult, Comparison, Results
from acceptance.session import results as results_mod
from acceptance.session.run import run_cases


@contextlib.contextmanager
def worker_threads(isolate: bool) -> Iterator[None]:
    """In process (``isolate`` False): torch's intra-op threads set to :data:`WORKER_THREADS`, the count a worker
    process computes with, for the duration, then restored; so that a kernel whose result depends on how its work
    is split (a float16 sum) gives the same errors in and out of isolation. Isolated: nothing to do."""
    import torch

    if isolate:
        yield
        return
    own = torch.get_num_threads()
    torch.set_num_threads(WORKER_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(own)


def run_seeds(
    specs: Sequence[spec.OperatorSpec],
    seeds: Sequence[int],
    *,
    only: str | None = None,
    dtypes: list[str] | None = None,
    device: str = "cpu",
    trials: int | None = None,
    isolate: bool = True,
    on_seed: Callable[[int, int], None] | None = None,
) -> list[CaseResult]:
    """The decided cases of every spec run once per seed offset: seed ``spec.seed + k`` for ``k`` in ``seeds``.
    ``isolate``: the callables in a worker process (with :data:`WORKER_THREADS` torch threads); else in this
    process with the same thread count (:func:`worker_threads`). The one run behind ``acceptance tune`` and
    :func:`tune`."""
    dev = resolve_device(device)
    out: list[CaseResult] = []
    for k, offset in enumerate(seeds):
        seeded = [dataclasses.replace(s, seed=s.seed + offset) for s in specs]
        cases = spec.expand(seeded, dtypes=dtypes, only=only)
        if not cases:
            raise UsageError(f"no case matches (--only {only!r}, --dtype {', '.join(dtypes or []) or 'any'})")
        with worker_threads(isolate):
            out += run_cases(cases, dev, trials=trials, isolate=isolate, threads=WORKER_THREADS)
        if on_seed:
            on_seed(k + 1, len(seeds))
    return out


def load_specs(paths: Iterable[Path]) -> list[spec.OperatorSpec]:
    """Validated specs under ``paths``; :class:`SpecError` listing every problem."""
    specs, problems = spec.load_specs(spec.discover([Path(p) for p in paths]))
    if problems:
        raise SpecError(*(str(p) for p in problems))
    return specs


def tune(
    paths: Iterable[Path] | None = None,
    *,
    results: Iterable[Path] | None = None,
    seeds: int = 5,
    only: str | None = None,
    dtypes: list[str] | None = None,
    device: str = "cpu",
    trials: int | None = None,
    margin: float = MARGIN,
    loose: float = LOOSE,
    isolate: bool = True,
    on_seed: Callable[[int, int], None] | None = None,
) -> TuneResult:
    """Proposed thresholds per operator x dtype x criterion (see :mod:`acceptance.decide.proposal` for the rule).

    Either runs the specs under ``paths`` with ``seeds`` seeds (the spec's seed + 0, 1, ...; ``isolate``: in
    worker processes, as ``acceptance tune`` does; ``False``: in this process, as ``--no-isolation``, with the
    workers' torch thread count, so the proposals are the command's) or reads ``results`` (results.json files,
    e.g. one per seed). ``only``/``dtypes`` filter cases as ``acceptance run`` does.
    """
    if results:
        cases = [
            c
            for p in results
            for c in results_mod.load(Path(p)).cases
            if (dtypes is None or c.dtype in dtypes)
            and (only is None or spec.glob_match(c.operator, only) or spec.glob_match(c.id, only))
        ]
        if not cases:
            raise UsageError("no case in the results matches (--only, --dtype)")
    else:
        if seeds < 1:
            raise UsageError(f"--seeds: need at least 1, got {seeds}")
        cases = run_seeds(
            load_specs(paths or [Path("operator_specs")]),
            range(seeds),
            only=only,
            dtypes=dtypes,
            device=device,
            trials=trials,
            isolate=isolate,
            on_seed=on_seed,
        )
    found = proposals(observations(cases), margin=margin, loose=loose)
    return TuneResult(tuple(found), margin, loose, tuple(sorted({c.seed for c in cases})))


def compare(base, new, *, max_ratio: float = MAX_RATIO, max_slowdown: float = MAX_SLOWDOWN) -> Comparison:
    """NEW compared with BASE (:class:`~acceptance.records.Results`, or paths of results.json files or folders):
    verdict changes, error ratios NEW/BASE, timings NEW/BASE, waivers that can go (see
    :mod:`acceptance.decide.regression`). Example::

        cmp = acceptance.compare("reports/main/results.json", "reports/latest")
        cmp.passed, cmp.regressions, [c.worst_ratio for c in cmp.cases]
    """

    def loaded(x):
        return x if isinstance(x, Results) else results_mod.load_run(Path(x))

    label = base if not isinstance(base, Results) else "base"
    try:
        return compare_results(
            loaded(base), loaded(new), max_ratio=max_ratio, base_label=str(label), max_slowdown=max_slowdown
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None

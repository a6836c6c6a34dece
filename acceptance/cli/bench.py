"""``acceptance bench``: check each case, then time it (warm-up excluded) and gate the speed-up.

Registered on the command group of :mod:`acceptance.cli.run`; the timing itself is
:mod:`acceptance.session.bench` (statistics) over :mod:`acceptance.measure.timing` (the loop).
"""

from __future__ import annotations

from pathlib import Path

import click

from acceptance.cli.run import (
    DEFAULT_OUT,
    _compare_base,
    _console,
    _load,
    _with_comparison,
    device_option,
    main,
    resolved_device,
    select_tiers,
    tier_option,
    write_reports,
)
from acceptance.errors import OutputError, UsageError
from acceptance.report import REPORTERS as ALL_REPORTERS


@main.command("bench")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Folder for results.json (timings beside the accuracy fields), junit.xml and report.html.",
)
@device_option
@click.option("--only", metavar="GLOB", help="Time only operators or case ids matching this glob.")
@click.option("--dtype", "dtypes_", multiple=True, metavar="D", help="Time only this dtype (repeatable).")
@tier_option
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Accuracy trials per case before it is timed.",
)
@click.option(
    "--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="Warm-up calls at least (never timed)."
)
@click.option(
    "--warmup-time", type=click.FloatRange(min=0), default=0.1, show_default=True, help="Warm-up seconds at least."
)
@click.option(
    "--min-time", type=click.FloatRange(min=0), default=1.0, show_default=True, help="Timed seconds at least per case."
)
@click.option(
    "--min-runs", type=click.IntRange(min=1), default=5, show_default=True, help="Timed calls at least per case."
)
@click.option(
    "--max-runs", type=click.IntRange(min=1), default=100_000, show_default=True, help="Timed calls at most per case."
)
@click.option("--no-isolation", is_flag=True, help="Time in this process (debugging).")
@click.option(
    "--compare-to",
    type=click.Path(path_type=Path),
    metavar="BASE",
    help="Compare with a base run (results.json or folder): a slowdown or an accuracy regression fails.",
)
@click.option(
    "--max-slowdown",
    type=float,
    default=1.25,
    show_default=True,
    help="With --compare-to: fail a case whose median time grew by more than this factor (and whose p10 "
    "is above the base run's p90).",
)
def bench_cmd(
    paths,
    out_dir: Path,
    device: str,
    only: str | None,
    dtypes_: tuple[str, ...],
    tiers: tuple[str, ...],
    trials: int,
    warmup: int,
    warmup_time: float,
    min_time: float,
    min_runs: int,
    max_runs: int,
    no_isolation: bool,
    compare_to: Path | None = None,
    max_slowdown: float = 1.25,
) -> None:
    """Check and time operator specs (default: operator_specs/): median, p10/p90, GFLOP/s, GB/s, speed-up;
    with --compare-to, the slowdown against a base run."""
    from acceptance import spec
    from acceptance.decide import verdict
    from acceptance.decide.waivers import waiver_records
    from acceptance.measure.timing import TimerOptions
    from acceptance.records import Results
    from acceptance.session import bench, provenance
    from acceptance.session.results import OutputFolder

    if min_runs > max_runs:
        raise UsageError(f"--min-runs {min_runs} is above --max-runs {max_runs}")
    dev = resolved_device(device)
    base_run = _compare_base(compare_to, max_slowdown)
    specs = select_tiers(_load(paths), tiers)
    cases = spec.expand(specs, dtypes=list(dtypes_) or None, only=only)
    if not cases:
        raise UsageError(
            f"no case matches (--only {only!r}, --dtype {', '.join(dtypes_) or 'any'}, "
            f"--tier {', '.join(tiers) or 'default'})"
        )
    options = TimerOptions(
        warmup=warmup, warmup_time=warmup_time, min_time=min_time, min_runs=min_runs, max_runs=max_runs
    )
    folder = OutputFolder(out_dir, stale=tuple(r.filename for r in ALL_REPORTERS))
    start = provenance.now()
    click.echo(f"timing {len(cases)} cases on {dev}", err=True)

    def record(case, result) -> None:
        folder.append(result)
        p = result.perf
        took = f"median {p.median_s:.4g} s over {p.runs} runs" if p else f"ERROR {result.error}"
        click.echo(f"  {case.id}: {took}", err=True)

    try:
        results, _ = bench.bench(cases, dev, options, trials=trials, isolate=not no_isolation, on_case=record)
        env = provenance.environment(
            dev, command_line=provenance.command_line(click.get_current_context()), start=start, end=provenance.now()
        )
        res = Results(
            environment=env, summary=verdict.summarize(results), cases=results, waivers=waiver_records(specs, results)
        )
        if base_run is not None:
            res = _with_comparison(res, base_run, str(compare_to), max_slowdown=max_slowdown)
        try:
            written = write_reports(res, out_dir)
        except OSError as exc:
            raise OutputError(f"--out {out_dir}: cannot write the results: {exc.strerror or exc}") from None
    finally:
        folder.close()
    from acceptance.report import perf

    for line in perf.text_table(res):
        click.echo(line)
    for line, colour in _console(res):
        click.secho(line, fg=colour)
    click.echo("wrote " + ", ".join(str(p) for p in written))
    raise SystemExit(res.summary.exit_code)

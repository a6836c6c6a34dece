"""``acceptance bench``: check each case, then time it (warm-up excluded) and gate the speed-up.

Registered on the command group of :mod:`acceptance.cli.group`; the timing itself is
:mod:`acceptance.session.bench` (statistics) over :mod:`acceptance.measure.timing` (the loop).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from acceptance.cli.group import (
    DEFAULT_OUT,
    WorkflowCommands,
    command_line,
    device_option,
    device_source,
    main,
    max_slowdown_option,
    tier_option,
)
from acceptance.cli.run import report_run
from acceptance.decide.limits import MAX_SLOWDOWN
from acceptance.errors import UsageError

if TYPE_CHECKING:
    from acceptance.records import MeasuredCase
    from acceptance.spec import Case


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
@max_slowdown_option(
    "With --compare-to: fail a case whose median time grew by more than this factor (and whose p10 "
    "is above the base run's p90)."
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
    max_slowdown: float = MAX_SLOWDOWN,
) -> None:
    """Check and time operator specs (default: operator_specs/): median, p10/p90, GFLOP/s, GB/s, speed-up;
    with --compare-to, the slowdown against a base run."""
    click.get_current_context().with_resource(WorkflowCommands())  # on GitHub Actions: off while impls run
    from acceptance.measure.timing import TimerOptions
    from acceptance.report import perf
    from acceptance.session.bench import Bench
    from acceptance.session.run import RunOptions, Session

    if min_runs > max_runs:
        raise UsageError(f"--min-runs {min_runs} is above --max-runs {max_runs}")
    options = RunOptions(
        out=out_dir,
        device=device,
        device_option=device_source(),
        only=only,
        dtypes=dtypes_,
        tiers=tiers,
        trials=trials,
        isolate=not no_isolation,
        compare_to=compare_to,
        max_slowdown=max_slowdown,
        command_line=command_line(),
    )
    session = Session(options, [_Timings()])
    try:
        session.prepare(paths)
    except UsageError as exc:
        if not str(exc).startswith("no case matches"):
            raise
        raise UsageError(
            f"no case matches (--only {only!r}, --dtype {', '.join(dtypes_) or 'any'}, "
            f"--tier {', '.join(tiers) or 'default'})"
        ) from None
    timer = TimerOptions(
        warmup=warmup, warmup_time=warmup_time, min_time=min_time, min_runs=min_runs, max_runs=max_runs
    )
    click.echo(f"timing {len(session.cases)} cases on {session.device}", err=True)
    res = session.run(Bench(session.device, timer, trials=trials, isolate=not no_isolation))
    for line in perf.text_table(res):
        click.echo(line)
    report_run(session, res, note_underpowered=False)
    raise SystemExit(res.summary.exit_code)


class _Timings:
    """Each case's timing on standard error as it finishes."""

    def case_started(self, case: Case) -> None:
        pass

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        from acceptance.wording import safe

        p = result.perf
        took = f"median {p.median_s:.4g} s over {p.runs} runs" if p else f"ERROR {safe(result.error or '', 300)}"
        click.echo(f"  {safe(case.id)}: {took}", err=True)
        return result

"""``acceptance run``, ``validate`` and ``list``: parse the options and call the session
(:class:`acceptance.session.run.Session`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
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
    print_console,
    stop_on_sigterm,
    tier_option,
)
from acceptance.cli.progress import Progress
from acceptance.decide.limits import MAX_SLOWDOWN
from acceptance.errors import EXIT_FAIL, UsageError

if TYPE_CHECKING:  # the session's modules load once the command runs (startup overlaps them)
    from acceptance.session.run import Session


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """``--shard K/N`` as (K, N); a usage error naming the value otherwise."""
    if value is None:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not K/N, e.g. 2/4") from None
    if not 1 <= k <= n:
        raise click.BadParameter(f"{value!r}: K must be between 1 and N")
    return k, n


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Folder for results.json, junit.xml and report.html.",
)
@device_option
@click.option("--trials", type=click.IntRange(min=1), help="Trials per case (overrides the specs).")
@click.option("--seed", type=int, help="Seed (overrides the specs).")
@click.option(
    "--reruns",
    type=click.IntRange(min=1, max=1000),
    help="Impl runs per trial where run-to-run variation is allowed (atomic_add, `deterministic: false`); "
    "criteria see the median run of each trial, the worst where gross; a trial whose runs straddle a dual-delta "
    "allowance runs up to 4x as many (overrides the specs; default 5).",
)
@click.option("--only", metavar="GLOB", help="Run only operators or case ids matching this glob.")
@click.option(
    "-k",
    "keyword",
    metavar="EXPR",
    callback=lambda ctx, param, value: checked_keyword(value),
    help="Run only the cases whose id the expression selects, as pytest's -k: words (substrings of the id, "
    "any case; '=' optional) joined by and, or, not and parentheses, e.g. -k \"float16 and not N=1-\".",
)
@click.option(
    "-x",
    "--exitfirst",
    is_flag=True,
    help="Stop after the first case that fails or errors; the cases not run are listed, the run is not a pass "
    "(exit 1).",
)
@click.option("-v", "--verbose", is_flag=True, help="List the passing cases in the final summary too.")
@click.option("--dtype", "dtypes_", multiple=True, metavar="D", help="Run only this dtype (repeatable).")
@click.option(
    "--shard",
    metavar="K/N",
    callback=lambda ctx, param, value: parse_shard(value),
    help="Run only shard K of N (the cases balanced by estimated cost give shard K); merge with `acceptance report`.",
)
@click.option(
    "--shard-costs",
    type=click.Path(path_type=Path),
    metavar="PATH",
    help="Balance the shards by the case timings of an earlier run (a results.json or run folder); give every "
    "shard the same file.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Fail vacuous cases too: nothing compared, or a constant answer where the oracle varies.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Keep the cases already in DIR's journal whose content is unchanged, and run the rest.",
)
@click.option(
    "--no-isolation",
    is_flag=True,
    help="Call the code under test in this process (debugging): no separation at all (the impl shares the process "
    "and its global state with the baseline, the oracle and every other spec; the reference cache is only read), "
    "and a crash or exit ends the run.",
)
@click.option(
    "--compare-to",
    type=click.Path(path_type=Path),
    metavar="BASE",
    help="Compare with a base run (results.json or folder): a regression fails the gate.",
)
@max_slowdown_option(
    "With --compare-to: fail a case timed in both runs whose median time grew by more than this "
    "factor (and whose p10 is above the base run's p90)."
)
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run every case under N spec seeds (seed, seed+1, ...); each is a case, all must pass.",
)
@click.option(
    "--sanitize",
    is_flag=True,
    help="Run each impl once more under compute-sanitizer (memcheck, racecheck); needs CUDA and the tool.",
)
@tier_option
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    metavar="N",
    help="Cases measured at once, each in its own process and worker [default: the CPU cores; on CUDA "
    "one per GPU, and more jobs than GPUs share them].",
)
@click.option(
    "--no-cache",
    is_flag=True,
    help="Neither read nor write the reference cache (baseline and oracle outputs, and the measurements "
    "of impl outputs seen before).",
)
@click.option(
    "--cache-dir",
    metavar="DIR|URL",
    help="Where the reference cache lives: a folder, or a URL of shared storage (s3://bucket/prefix, gs://..., "
    "file:///nfs/cache; needs the fsspec extra) [default: $ACCEPTANCE_CACHE_DIR, else the user cache folder].",
)
@click.option(
    "--annotations",
    is_flag=True,
    help="Print at most 10 GitHub ::error annotations at the end (on GitHub Actions, the only workflow commands "
    "the run's log obeys).",
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="torch intra-op threads of each worker (a CPU baseline's last bits can depend on it; part of "
    "the reference cache key).",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where the cases are measured: this machine's job processes, or Ray tasks on a cluster (batches of one "
    "spec's cases, one GPU or CPU each; needs `pip install 'operator-acceptance[ray]'`).",
)
@click.option(
    "--ray-address",
    metavar="ADDR",
    help="With --executor ray: the Ray cluster to run on [default: $RAY_ADDRESS, else a local Ray instance of "
    "--jobs CPUs, shut down at the end].",
)
def run(
    paths: tuple[Path, ...],
    out_dir: Path,
    device: str,
    trials: int | None,
    seed: int | None,
    only: str | None,
    keyword: str | None,
    exitfirst: bool,
    verbose: bool,
    dtypes_: tuple[str, ...],
    shard: tuple[int, int] | None,
    strict: bool,
    resume: bool,
    no_isolation: bool,
    seeds: int = 1,
    sanitize: bool = False,
    compare_to: Path | None = None,
    tiers: tuple[str, ...] = (),
    jobs: int | None = None,
    no_cache: bool = False,
    cache_dir: str | None = None,
    max_slowdown: float = MAX_SLOWDOWN,
    threads: int = 1,
    annotations: bool = False,
    reruns: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    shard_costs: Path | None = None,
) -> None:
    """Run operator specs (default: operator_specs/) and gate on the verdicts."""
    # on GitHub Actions: workflow commands off while the code under test can write to the log, on at the end
    commands = click.get_current_context().with_resource(WorkflowCommands())
    from acceptance.session import startup

    # the fork server's torch import overlaps with this process's own imports; several jobs (the CPU's cores
    # unless told, or a CUDA device decides) also want the runner's modules there
    several = startup.several_jobs(not no_isolation, jobs, device)
    if executor == "local" and (not no_isolation or jobs != 1):  # Ray tasks start their own on their nodes
        startup.launch_workers(2 if several else 1)
    from acceptance.session.run import RunOptions, Session

    options = RunOptions(
        out=out_dir,
        device=device,
        device_option=device_source(),
        trials=trials,
        seed=seed,
        seeds=seeds,
        reruns=reruns,
        only=only,
        keyword=keyword,
        exitfirst=exitfirst,
        dtypes=dtypes_,
        shard=shard,
        shard_costs=shard_costs,
        tiers=tiers,
        strict=strict,
        resume=resume,
        isolate=not no_isolation,
        sanitize=sanitize,
        cache=not no_cache,
        cache_dir=cache_dir,
        jobs=jobs,
        threads=threads,
        compare_to=compare_to,
        max_slowdown=max_slowdown,
        command_line=command_line(),
        executor=executor,
        ray_address=ray_address,
    )
    session = Session(options)
    session.prepare(paths)
    progress = _progress(session, out_dir, strict)

    @contextlib.contextmanager
    def around() -> Iterator[None]:
        # around the handler's removal too: a signal there would otherwise leave as click's "Aborted!" (exit 1)
        with progress, stop_on_sigterm():
            yield

    res = session.run(around=around)
    report_run(session, res, verbose=verbose)
    if annotations:
        from acceptance.report import github

        commands.emit(github.annotations(res))
    sys.exit(res.summary.exit_code)


def _progress(session: Session, out_dir: Path, strict: bool) -> Progress:
    """The run's progress observer, added to ``session`` (prepared): what resuming keeps, and why the journal's
    other cases run again, said first on standard error."""
    from acceptance.session.results import JOURNAL

    cases, done = session.cases, len(session.measured)
    for note in session.notes:  # journaled cases measured from other content, journal lines skipped
        click.secho(note, fg="yellow", err=True)
    if done:
        click.echo(f"resuming: {done} of {len(cases)} cases already in {out_dir / JOURNAL}", err=True)
    progress = Progress(len(cases), f"{len(cases)} cases on {session.device}", done=done, strict=strict)
    session.observers.append(progress)
    return progress


def checked_keyword(value: str | None) -> str | None:
    """``-k EXPR`` parsed once here, so that a malformed expression is a usage error (exit 2, its column shown)
    before any spec loads; the run parses it again to select (:func:`acceptance.session.load.select_keyword`)."""
    if not value:
        return None
    from acceptance.session.keyword import KeywordError, parse

    try:
        parse(value)
    except KeywordError as exc:
        raise UsageError(*exc.lines()) from None
    return value


def report_run(session: object, res: object, *, note_underpowered: bool = True, verbose: bool = False) -> None:
    """What a finished run prints: regressions against the base run, reporters that broke, the console summary
    (passing cases too when ``verbose``), the note on underpowered cases, the files written, and whether it was
    interrupted or stopped at its first failure (``-x``)."""
    from acceptance.decide.run import underpowered
    from acceptance.records import Results
    from acceptance.session.run import Session
    from acceptance.wording import counted, safe

    assert isinstance(session, Session) and isinstance(res, Results)
    if res.comparison is not None:
        for line in res.comparison.regressions[:10]:
            click.secho(f"regression against {session.options.compare_to}: {safe(line)}", fg="red", err=True)
    for message in session.messages:
        click.secho(safe(message), fg="red", err=True)
    print_console(res, verbose=verbose)
    weak, m, needed = underpowered(res.cases) if note_underpowered else ([], 0, 0)
    if weak:
        click.secho(
            f"note: {len(weak)} case(s) have fewer than {needed} trials: their dual-delta sign test cannot "
            f"reach alpha after Holm over {m} records, only the worst-trial check can fail them "
            f"(raise trials or dual_delta.trials), e.g. {safe(weak[0], 200)}",
            fg="yellow",
            err=True,
        )
    click.echo("wrote " + ", ".join(str(p) for p in session.written))
    if session.stopped == EXIT_FAIL:
        click.secho(
            f"stopped at the first failure (-x) after {len(res.cases)} of {len(session.cases)} cases: "
            f"{counted(len(res.not_run), 'case')} not run; the run is not a pass",
            fg="red",
            err=True,
        )
    elif session.stopped:
        click.secho(
            f"interrupted after {len(res.cases)} of {len(session.cases)} cases: the results hold those, the run "
            f"is not a pass; finish it with --resume",
            fg="red",
            err=True,
        )


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option(
    "--gradcheck",
    is_flag=True,
    help="Also run torch.autograd.gradcheck in float64 on the oracle (and the baseline) of every backward spec.",
)
def validate(paths: tuple[Path, ...], gradcheck: bool) -> None:
    """Check specs without running them (default: operator_specs/)."""
    from acceptance import spec
    from acceptance.session.load import load

    specs = load(paths)
    n_cases = len(spec.expand(specs))
    click.echo(f"{len(specs)} specs valid, {n_cases} cases")
    if gradcheck:
        _gradcheck(specs)


def _gradcheck(specs: list) -> None:
    """gradcheck every backward spec's oracle; exit 2 naming each spec whose gradients are wrong."""
    from acceptance.errors import EXIT_USAGE
    from acceptance.session.gradcheck import check_spec

    checked = [s for s in specs if s.backward is not None]
    problems = [p for s in checked for p in check_spec(s)]
    for p in problems:
        click.secho(p, fg="red", err=True)
    if problems:
        sys.exit(EXIT_USAGE)
    click.echo(f"gradcheck: {len(checked)} backward specs, oracle gradients agree with finite differences")


@main.command("list")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
def list_(paths: tuple[Path, ...]) -> None:
    """Show operators, categories, dtypes and case counts."""
    from acceptance.session.load import load

    specs = load(paths)
    rows = [(s.name, s.category, ",".join(s.dtypes), str(len(s.cases) * len(s.dtypes)), str(s.path)) for s in specs]
    head = ("operator", "category", "dtypes", "cases", "spec")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())

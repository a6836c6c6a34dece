"""Command line: ``acceptance tune`` (proposed thresholds, ``--write``, ``--check``) and ``acceptance compare``.

Registered on the group of :mod:`acceptance.cli.group`; errors are
:class:`~acceptance.errors.AcceptanceError` s, turned into lines and exit codes there.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from acceptance.cli.group import WorkflowCommands, device_option, main, max_slowdown_option, resolved_device
from acceptance.decide.limits import MAX_RATIO, MAX_SLOWDOWN, check_max_slowdown
from acceptance.errors import EXIT_FAIL, OutputError, UsageError


@main.command("tune")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--only", metavar="GLOB", help="Tune only operators or case ids matching this glob.")
@click.option("--dtype", "dtypes_", multiple=True, metavar="D", help="Tune only this dtype (repeatable).")
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Runs per case: the spec's seed + 0, 1, ..., N-1.",
)
@click.option(
    "--from",
    "from_",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="RESULTS",
    help="Read results.json files (or folders) instead of running (repeatable).",
)
@click.option("--trials", type=click.IntRange(min=1), help="Trials per case (overrides the specs).")
@device_option
@click.option(
    "--margin",
    type=click.FloatRange(min=1),
    default=2.0,
    show_default=True,
    help="Safety margin over the largest observed error.",
)
@click.option(
    "--max-slack",
    type=click.FloatRange(min=1),
    default=100.0,
    show_default=True,
    help="--check: a threshold this many times the observed error is too loose.",
)
@click.option("--write", is_flag=True, help="Write the proposals into the spec files (prints the diff).")
@click.option("--check", is_flag=True, help="Exit 1 when a threshold is flaky or too loose (for CI).")
@click.option("--no-isolation", is_flag=True, help="Call the code under test in this process.")
def tune_cmd(paths, only, dtypes_, seeds, from_, trials, device, margin, max_slack, write, check, no_isolation) -> None:
    """Propose thresholds from the errors seen over many seeds (or earlier results)."""
    click.get_current_context().with_resource(WorkflowCommands())  # on GitHub Actions: off while impls run
    from acceptance.decide.proposal import TuneResult, observations, proposals
    from acceptance.session import results as results_mod
    from acceptance.session import tunewrite
    from acceptance.session.load import load
    from acceptance.session.tune import run_seeds

    if write and from_:
        files = {c.spec_file for p in from_ for c in results_mod.load_run(p).cases}
        digests = {Path(f): tunewrite.sha256_of(Path(f)) for f in files if Path(f).is_file()}
    if from_:
        cases = [c for p in from_ for c in results_mod.load_run(p).cases]
    else:
        resolved_device(device)  # a usage error before the specs load
        specs = load(paths)
        digests = {s.path: tunewrite.sha256_of(s.path) for s in specs}
        cases = run_seeds(
            specs,
            range(seeds),
            only=only,
            dtypes=list(dtypes_) or None,
            device=device,
            trials=trials,
            isolate=not no_isolation,
            on_seed=lambda k, n: click.echo(f"seed {k}/{n} done", err=True),
        )
    if from_ and (only or dtypes_):
        from acceptance.spec import glob_match

        cases = [
            c
            for c in cases
            if (not dtypes_ or c.dtype in dtypes_)
            and (not only or glob_match(c.operator, only) or glob_match(c.id, only))
        ]
    res = TuneResult(
        tuple(proposals(observations(cases), margin=margin, loose=max_slack)),
        margin,
        max_slack,
        tuple(sorted({c.seed for c in cases})),
    )
    if not res.proposals:
        raise UsageError("nothing to tune: no fixed threshold on a case that ran")
    click.echo(res.table())
    click.echo(
        f"proposal: max observed x {margin:g} (never below the dtype's rounding floor), rounded up to "
        f"1-2-5; seeds {', '.join(map(str, res.seeds))}"
    )
    if write:
        for path, edits in tunewrite.edits_for(res.proposals).items():
            if path not in digests:
                raise UsageError(f"{path}: the spec file of these results is not here; nothing written")
            text = tunewrite.write(path, edits, read_sha256=digests[path])
            click.echo(text or f"{path}: unchanged")
    if check:
        for line in res.problems:
            click.secho(line, fg="red", err=True)
        if not res.passed:
            sys.exit(EXIT_FAIL)


@main.command("compare")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option(
    "--max-ratio",
    type=float,
    default=MAX_RATIO,
    show_default=True,
    help="Flag a case whose error grew by more than this factor, even when it passes.",
)
@click.option(
    "--summary",
    "--markdown",
    "summary_path",
    type=click.Path(path_type=Path, allow_dash=True),
    help='Also write the comparison as Markdown here (a PR comment; "$GITHUB_STEP_SUMMARY" for the job '
    "summary); '-' prints the Markdown instead of the table.",
)
@max_slowdown_option(
    "Fail a timed case whose median time grew by more than this factor (and whose p10 is above the base run's p90)."
)
def compare_cmd(
    base: Path, new: Path, max_ratio: float, summary_path: Path | None, max_slowdown: float = MAX_SLOWDOWN
) -> None:
    """Compare two runs (results.json files or folders): what changed, worst first; exit 1 on a regression.

    Prints a table of the changed cases only (verdicts, error ratios NEW/BASE, slowdowns), the regressions in
    words and the waivers that can go; one line when nothing changed."""
    from acceptance.decide import regression as compare_mod
    from acceptance.report.comparison import markdown, terminal_table
    from acceptance.session import results as results_mod

    if not max_ratio > 1:
        raise UsageError(f"--max-ratio: must be > 1, got {max_ratio:g}")
    check_max_slowdown(max_slowdown)
    cmp = compare_mod.compare_results(
        results_mod.load_run(base),
        results_mod.load_run(new),
        max_ratio=max_ratio,
        base_label=str(base),
        max_slowdown=max_slowdown,
    )
    if summary_path is not None and str(summary_path) == "-":
        click.echo(markdown(cmp))
    else:
        for line in terminal_table(cmp):
            click.echo(line)
    if summary_path is not None and str(summary_path) != "-":
        try:
            summary_path.parent.mkdir(parents=True, exist_ok=True)
            summary_path.write_text(markdown(cmp), encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"--summary {summary_path}: cannot write: {exc.strerror or exc}") from None
        click.echo(f"wrote {summary_path}", err=True)
    if not cmp.passed:
        sys.exit(EXIT_FAIL)

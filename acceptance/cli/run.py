"""Command line: ``acceptance run | validate | list | report | metrics`` (and ``bench``, ``tune``, ``compare``,
``cache``: :mod:`acceptance.cli.bench`, :mod:`acceptance.cli.tune`, :mod:`acceptance.cli.cache`).

Exit codes (:mod:`acceptance.errors`): 0 every case passed; 1 a criterion
failed or an operator errored; 2 usage, spec, results or output error (the
message names the file and the field). Every :class:`~acceptance.errors.AcceptanceError`
is turned into its lines and exit code in one place, :class:`_Group`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import importlib
import json
import signal
import sys
import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import click

from acceptance.cli.progress import progress
from acceptance.errors import EXIT_INTERRUPTED, EXIT_TERMINATED, AcceptanceError, OutputError, SpecError, UsageError
from acceptance.report import BY_NAME as REPORTERS
from acceptance.report import REPORTERS as ALL_REPORTERS
from acceptance.report import Context
from acceptance.report import prepare as prepare_reports
from acceptance.version import __version__

if TYPE_CHECKING:
    import torch

    from acceptance.records import Results

DEFAULT_SPECS = Path("operator_specs")
DEFAULT_OUT = Path("reports/latest")


def _load(paths: tuple[Path, ...], meanwhile: tuple = ()):
    """Discover and validate specs; a :class:`SpecError` with one line per problem. The code under test is
    imported for the check in a child process (:mod:`acceptance.isolation.importcheck`), never in this one. ``meanwhile``:
    work started in threads (:func:`_meanwhile`) as the check begins, for the time this process waits on it."""
    from acceptance.isolation import forkserver

    forkserver.start()  # the check's child starts from it: its preload overlaps with this process's imports
    from acceptance import spec
    from acceptance.isolation.importcheck import load_checked

    paths = list(paths) or [DEFAULT_SPECS]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise UsageError(*(f"{p}: no such file or directory" for p in missing))
    files = spec.discover(paths)
    if not files:
        raise UsageError(f"{', '.join(map(str, paths))}: no spec files (*.yaml) found")
    for work in meanwhile:
        _meanwhile(work)
    specs, problems = load_checked(files)
    if problems:
        raise SpecError(*(str(p) for p in problems), f"{len(problems)} problem(s) in the specs; nothing was run")
    return specs


def resolved_device(device: str) -> torch.device:
    """``--device`` (or ``$ACCEPTANCE_DEVICE``) as a torch device (:func:`acceptance.device.resolve_device`); a
    usage error naming where the value came from otherwise."""
    from click.core import ParameterSource

    from acceptance.device import resolve_device

    ctx = click.get_current_context(silent=True)
    env = ctx is not None and ctx.get_parameter_source("device") is ParameterSource.ENVIRONMENT
    try:
        return resolve_device(device, option="$ACCEPTANCE_DEVICE" if env else "--device")
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def select_tiers(specs, tiers: tuple[str, ...] = ()):
    """The specs of the given tiers (``default`` when none is given): ``tier: large`` specs run only when asked."""
    wanted = set(tiers or ("default",))
    return [s for s in specs if s.tier in wanted]


#: ``--device``: the impl's device, an option of run, bench and tune; $ACCEPTANCE_DEVICE sets it for a whole shell
#: or CI job.
device_option = click.option(
    "--device",
    default="auto",
    show_default=True,
    envvar="ACCEPTANCE_DEVICE",
    show_envvar=True,
    help="auto | cpu | cuda | cuda:N (impl's device).",
)
#: ``--tier``: which spec tiers run (repeatable; default: the default tier only).
tier_option = click.option(
    "--tier",
    "tiers",
    multiple=True,
    type=click.Choice(["default", "large"]),
    help="Run specs of this tier (repeatable; default: 'default'; 'large' holds LLM-sized shapes).",
)


class _Group(click.Group):
    """The command group; an :class:`AcceptanceError` anywhere below becomes its lines on stderr and its exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AcceptanceError as exc:
            for line in exc.lines:
                click.echo(line, err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="acceptance")
def main() -> None:
    """Operator accuracy acceptance: run operator specs, measure the error, gate the merge."""


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
@click.option("--only", metavar="GLOB", help="Run only operators or case ids matching this glob.")
@click.option("--dtype", "dtypes_", multiple=True, metavar="D", help="Run only this dtype (repeatable).")
@click.option(
    "--shard",
    metavar="K/N",
    callback=lambda ctx, param, value: _parse_shard(value),
    help="Run only shard K of N (every N-th case, from the K-th); merge with `acceptance report`.",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Fail vacuous cases too: nothing compared, or a constant answer where the oracle varies.",
)
@click.option("--resume", is_flag=True, help="Keep the cases already in DIR's journal and run only the rest.")
@click.option(
    "--no-isolation",
    is_flag=True,
    help="Call the code under test in this process (debugging; a crash or exit then ends the run).",
)
@click.option(
    "--compare-to",
    type=click.Path(path_type=Path),
    metavar="BASE",
    help="Compare with a base run (results.json or folder): a regression fails the gate.",
)
@click.option(
    "--max-slowdown",
    type=float,
    default=1.25,
    show_default=True,
    help="With --compare-to: fail a case timed in both runs whose median time grew by more than this "
    "factor (and whose p10 is above the base run's p90).",
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
    "--threads",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    metavar="N",
    help="torch intra-op threads of each worker (a CPU baseline's last bits can depend on it; part of "
    "the reference cache key).",
)
def run(
    paths,
    out_dir: Path,
    device: str,
    trials: int | None,
    seed: int | None,
    only: str | None,
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
    max_slowdown: float = 1.25,
    threads: int = 1,
) -> None:
    """Run operator specs (default: operator_specs/) and gate on the verdicts."""
    from acceptance.isolation import forkserver

    # the fork server's torch import overlaps with this process's own imports; several jobs (the CPU's cores
    # unless told, or a CUDA device decides) also want the runner's modules there
    several = not no_isolation and (jobs or (forkserver.cores() if device in ("auto", "cpu") else 1)) > 1
    if not no_isolation or jobs != 1:
        forkserver.start(2 if several else 1)
    from acceptance import spec
    from acceptance.decide import verdict
    from acceptance.decide.waivers import waiver_records
    from acceptance.formats import dtypes
    from acceptance.measure import case as runner
    from acceptance.records import Results
    from acceptance.session import provenance
    from acceptance.session.results import JOURNAL, OutputFolder

    unknown = [d for d in dtypes_ if d not in dtypes.TEST_DTYPES]
    if unknown:
        raise UsageError(*(f"--dtype: unknown dtype {d!r} (known: {', '.join(dtypes.TEST_DTYPES)})" for d in unknown))
    dev = resolved_device(device)
    if sanitize:
        from acceptance.measure.sanitize import unavailable

        if unavailable(dev.type):
            raise UsageError(unavailable(dev.type))
    base_run = _compare_base(compare_to, max_slowdown)
    folder = OutputFolder(out_dir, resume=resume, stale=tuple(r.filename for r in ALL_REPORTERS))
    try:
        # with several jobs this process waits while the server preloads their modules: it loads what it needs
        # later (scipy.stats to decide, the reports) then, not while the jobs want every core
        later = (partial(importlib.import_module, "acceptance.numerics.stats"), prepare_reports) if several else ()
        specs = select_tiers(_load(paths, meanwhile=later), tiers)
    except AcceptanceError:
        folder.close()
        raise
    if seed is not None:
        specs = [dataclasses.replace(s, seed=seed) for s in specs]
    cases = spec.expand(specs, dtypes=list(dtypes_) or None, only=only)
    if seeds > 1:
        from acceptance.spec.axes import with_seeds

        cases = with_seeds(cases, seeds)
    if shard is not None:
        k, n = shard
        cases = cases[k - 1 :: n]
    if not cases:
        folder.close()
        raise UsageError(
            f"no case matches (--only {only!r}, --dtype {', '.join(dtypes_) or 'any'}"
            f"{f', --shard {shard[0]}/{shard[1]}' if shard else ''})"
        )

    start = provenance.now()
    order = {case.id: k for k, case in enumerate(cases)}
    journaled = {c.id: c for c in folder.journaled()} if resume else {}
    measured = [(journaled[case.id], spec.rules_for(case)) for case in cases if case.id in journaled]
    if journaled:
        click.echo(f"resuming: {len(measured)} of {len(cases)} cases already in {folder.path / JOURNAL}", err=True)
    stopped: int | None = None

    def record(case, result) -> None:
        folder.append(result)
        advance(case, result)

    decided = None  # every case decided by the run; when it is interrupted, the finished part is decided below
    if not several:
        _meanwhile(prepare_reports)  # the reports' modules and template, ready when the run ends
    gc.freeze()  # torch, the specs and the modules loaded so far live as long as the run: out of the cyclic
    # collector's full passes, which traversed them every time (0.3 s of this process's CPU on the library)
    try:  # around the handler's removal too: a signal there would otherwise leave as click's "Aborted!" (exit 1)
        with progress(len(cases), f"{len(cases)} cases on {dev}", done=len(measured)) as advance, _stop_on_sigterm():
            decided = runner.run(
                cases,
                dev,
                trials=trials,
                on_case=record,
                measured=measured,
                strict=strict,
                isolate=not no_isolation,
                guard=folder.path,
                sanitize=sanitize,
                cache=_reference_cache(not no_cache),
                jobs=_jobs(jobs, len(cases) - len(measured), isolate=not no_isolation, device=dev),
                threads=threads,
            )
    except KeyboardInterrupt as exc:
        stopped = EXIT_TERMINATED if isinstance(exc, _Terminated) else EXIT_INTERRUPTED
    if decided is None:
        decided = runner.decide_all(measured, strict=strict)  # Holm's adjusted p-values do not depend on the order
    case_results = sorted(decided, key=lambda c: order[c.id])
    env = provenance.environment(
        dev, command_line=provenance.command_line(click.get_current_context()), start=start, end=provenance.now()
    )
    res = Results(
        environment=env,
        summary=verdict.summarize(case_results, interrupted=stopped),
        cases=case_results,
        interrupted=stopped is not None,
        not_run=[c.id for c in cases if c.id not in {m.id for m in case_results}] if stopped else [],
        waivers=waiver_records(specs, case_results),
    )
    if base_run is not None:
        res = _with_comparison(res, base_run, str(compare_to), max_slowdown=max_slowdown)
    try:
        written = write_reports(res, out_dir)
    except OSError as exc:
        raise OutputError(f"--out {out_dir}: cannot write the results: {exc.strerror or exc}") from None
    finally:
        folder.close()
    for line, colour in _console(res):
        click.secho(line, fg=colour)
    weak, m, needed = runner.underpowered(case_results)
    if weak:
        click.secho(
            f"note: {len(weak)} case(s) have fewer than {needed} trials: their dual-delta sign test cannot "
            f"reach alpha after Holm over {m} records, only the worst-trial check can fail them "
            f"(raise trials or dual_delta.trials), e.g. {weak[0]}",
            fg="yellow",
            err=True,
        )
    click.echo("wrote " + ", ".join(str(p) for p in written))
    if stopped:
        click.secho(
            f"interrupted after {len(case_results)} of {len(cases)} cases: the results hold those, the run "
            f"is not a pass; finish it with --resume",
            fg="red",
            err=True,
        )
    sys.exit(res.summary.exit_code)


def _jobs(jobs: int | None, cases: int, *, isolate: bool, device: torch.device) -> int:
    """``--jobs``, by default the CPU cores on CPU and one per GPU on CUDA (:func:`acceptance.device.default_jobs`);
    one job for a single case or without isolation (the code under test then runs in this process)."""
    import torch

    from acceptance.device import default_jobs
    from acceptance.isolation.forkserver import cores

    if jobs is None:
        jobs = default_jobs(device, cores(), torch.cuda.device_count() if device.type == "cuda" else 0)
    return 1 if not isolate or cases < 2 else min(jobs, cases)


def _reference_cache(enabled: bool):
    from acceptance.cache import ReferenceCache

    try:
        return ReferenceCache(enabled=enabled)
    except ValueError as exc:
        raise UsageError(f"reference cache: {exc}") from None


class _Terminated(KeyboardInterrupt):
    """SIGTERM (what CI sends on cancel), raised like Ctrl-C so the run stops the same way."""


@contextlib.contextmanager
def _stop_on_sigterm():
    def handler(signum, frame):
        raise _Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _parse_shard(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        k, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not K/N, e.g. 2/4") from None
    if not 1 <= k <= n:
        raise click.BadParameter(f"{value!r}: K must be between 1 and N")
    return k, n


def _meanwhile(work) -> None:
    """Run ``work()`` in a daemon thread, its errors ignored: work done ahead that the caller would otherwise do
    later itself (an error then surfaces there)."""

    def run() -> None:
        try:
            work()
        except Exception:
            pass

    threading.Thread(target=run, name=getattr(work, "__name__", "meanwhile"), daemon=True).start()


def _console(res):
    from acceptance.report import console

    return console.render(res)


def write_reports(res: Results, out_dir: Path) -> list[Path]:
    """results.json first (atomically), then every default reporter rendered from it."""
    from acceptance.session import results as results_mod

    results_path = results_mod.write(res, out_dir / "results.json")
    context = Context(results_sha256=hashlib.sha256(results_path.read_bytes()).hexdigest())
    written = [results_path]
    for reporter in ALL_REPORTERS:
        if not reporter.default:
            continue
        path = out_dir / reporter.filename
        try:
            path.write_text(reporter.render(res, context), encoding="utf-8")
        except Exception as exc:  # a reporter bug must not lose the results
            click.secho(
                f"{path}: could not render ({type(exc).__name__}: {exc}); results.json is intact", fg="red", err=True
            )
            continue
        written.append(path)
    return written


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
def validate(paths) -> None:
    """Check specs without running them (default: operator_specs/)."""
    from acceptance import spec

    specs = _load(paths)
    n_cases = len(spec.expand(specs))
    click.echo(f"{len(specs)} specs valid, {n_cases} cases")


@main.command("list")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
def list_(paths) -> None:
    """Show operators, categories, dtypes and case counts."""
    specs = _load(paths)
    rows = [(s.name, s.category, ",".join(s.dtypes), str(len(s.cases) * len(s.dtypes)), str(s.path)) for s in specs]
    head = ("operator", "category", "dtypes", "cases", "spec")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    for row in [head, *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)).rstrip())


def _reporter_options(command):
    """One ``--<name> PATH`` option per reporter of the registry."""
    for reporter in reversed(ALL_REPORTERS):
        command = click.option(
            f"--{reporter.name}", f"{reporter.name}_path", type=click.Path(path_type=Path), help=reporter.help
        )(command)
    return command


@main.command()
@click.argument("results_files", nargs=-1, required=True, type=click.Path(path_type=Path))
@_reporter_options
@click.option("--merged", "merged_path", type=click.Path(path_type=Path), help="Write the merged results.json here.")
@click.option("--annotations", is_flag=True, help="Print at most 10 GitHub ::error annotations.")
@click.option("--artifact-url", help="Link to the uploaded reports, for the job summary.")
def report(results_files, merged_path, annotations, artifact_url, **paths) -> None:
    """Re-render reports from results.json files or run folders (several = shards, merged)."""
    from acceptance.session import results as results_mod

    files = [f for p in results_files for f in results_mod.files_of(p)]
    parts = [results_mod.load(f) for f in files]
    res = parts[0] if len(parts) == 1 else results_mod.merge(parts)
    if len(parts) == 1:
        digest = hashlib.sha256(files[0].read_bytes()).hexdigest()
    else:
        digest = hashlib.sha256(results_mod.dumps(res).encode()).hexdigest()
    context = Context(results_sha256=digest, artifact_url=artifact_url)
    outputs = [(merged_path, lambda: results_mod.dumps(res))]
    outputs += [
        (paths[f"{name}_path"], lambda r=reporter: r.render(res, context)) for name, reporter in REPORTERS.items()
    ]
    for path, render in outputs:
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(), encoding="utf-8")
        except OSError as exc:
            raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        click.echo(f"wrote {path}", err=True)
    if annotations:
        from acceptance.report import github

        for line in github.annotations(res):
            click.echo(line)
    if not any(path for path, _ in outputs) and not annotations:
        for line, colour in _console(res):
            click.secho(line, fg=colour)


@main.command("metrics")
@click.argument("evaluated", type=click.Path(path_type=Path))
@click.argument("baseline", type=click.Path(path_type=Path))
@click.option("--dtype", help="Output dtype for ULP and the diff3 threshold (default: EVALUATED's dtype).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def metrics_cmd(evaluated: Path, baseline: Path, dtype: str | None, as_json: bool) -> None:
    """Print every metric for two saved arrays (.npy or .pt)."""
    from acceptance.numerics import metrics
    from acceptance.wording import fmt_value as fmt

    try:
        e = metrics.load_array(evaluated)
        b = metrics.load_array(baseline)
        values = metrics.compute(e, b, dtype=dtype)
    except ValueError as exc:
        raise UsageError(f"error: {exc}") from None
    if as_json:
        click.echo(json.dumps({k: _jsonable(v) for k, v in values.items()}, indent=1, allow_nan=False))
        return
    width = max(len(k) for k in values)
    for name, value in values.items():
        click.echo(f"{name:<{width}}  {fmt(value)}")


def _jsonable(value):
    from acceptance.records import json_float

    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    return json_float(value)


def _compare_base(path: Path | None, max_slowdown: float = 1.25):
    """The base run of ``--compare-to``, loaded before anything runs (a bad path or ``--max-slowdown`` is a usage
    error at once)."""
    if path is None:
        return None
    from acceptance.cli.tune import check_max_slowdown
    from acceptance.session import results as results_mod

    check_max_slowdown(max_slowdown)
    return results_mod.load_run(path)


def _with_comparison(res: Results, base: Results, label: str, *, max_slowdown: float = 1.25) -> Results:
    """The run with its comparison to ``base`` recorded and put into the gate."""
    from acceptance.decide import regression, verdict
    from acceptance.wording import safe

    cmp = regression.compare_results(base, res, base_label=label, max_slowdown=max_slowdown)
    for line in cmp.regressions[:10]:
        click.secho(f"regression against {label}: {safe(line)}", fg="red", err=True)
    return res.model_copy(update={"comparison": cmp, "summary": verdict.gate_comparison(res.summary, cmp)})


from acceptance.cli import bench as cli_bench  # noqa: E402,F401  (registers `acceptance bench` on the group)
from acceptance.cli import cache as cli_cache  # noqa: E402,F401  (registers `acceptance cache info|clear` on the group)
from acceptance.cli import tune as cli_tune  # noqa: E402,F401  (registers `acceptance tune` and `compare` on the group)

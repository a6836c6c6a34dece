"""``acceptance report`` (re-render reports from results.json files, merging shards) and ``acceptance metrics``
(every metric of two saved arrays)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import click

from acceptance.cli.group import main, print_console
from acceptance.errors import UsageError
from acceptance.report import BY_NAME, REPORTERS, Context


def _reporter_options(command):
    """One ``--<name> PATH`` option per reporter of the registry."""
    for reporter in reversed(REPORTERS):
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
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Merge shards even when some are missing or interrupted; the merged run is then interrupted, never a pass.",
)
def report(results_files, merged_path, annotations, artifact_url, allow_partial, **paths) -> None:
    """Re-render reports from results.json files or run folders (several = shards, merged; every shard of the
    run must be there once, finished)."""
    from acceptance.session import results as results_mod

    files = [f for p in results_files for f in results_mod.files_of(p)]
    parts = [results_mod.load(f) for f in files]
    if len(parts) == 1:
        res = parts[0]
        sha = hashlib.sha256()
        with open(files[0], "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                sha.update(block)
    else:
        res = results_mod.merge(parts, names=[str(f) for f in files], allow_partial=allow_partial)
        del parts  # the merge holds the cases; the shards' records go
        sha = hashlib.sha256()
        for piece in results_mod.chunks(res):
            sha.update(piece)
    digest = sha.hexdigest()
    context = Context(results_sha256=digest, artifact_url=artifact_url)
    if merged_path is not None:
        try:
            results_mod.write_chunks(merged_path, results_mod.chunks(res), prefix=".results-")
        except OSError as exc:
            raise results_mod.cannot_write(merged_path, exc) from None
        click.echo(f"wrote {merged_path}", err=True)
    outputs: list[tuple[Path | None, Callable[[], str]]] = [
        (paths[f"{name}_path"], partial(reporter.render, res, context)) for name, reporter in BY_NAME.items()
    ]
    for path, render in outputs:
        if path is None:
            continue
        try:
            results_mod.write_text(path, render())
        except OSError as exc:
            raise results_mod.cannot_write(path, exc) from None
        click.echo(f"wrote {path}", err=True)
    if annotations:
        from acceptance.report import github

        for line in github.annotations(res):
            click.echo(line)
    if merged_path is None and not any(path for path, _ in outputs) and not annotations:
        print_console(res)


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

"""The ``acceptance`` command group, its options shared by several commands, and the one place every
:class:`~acceptance.errors.AcceptanceError` becomes its lines and exit code (:class:`_Group`).

Exit codes (:mod:`acceptance.errors`): 0 every case passed; 1 a criterion failed or an operator errored; 2 usage,
spec, results or output error (the message names the file and the field).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import click
from click.decorators import FC

from acceptance.decide.limits import MAX_SLOWDOWN
from acceptance.errors import AcceptanceError, Terminated
from acceptance.version import __version__

DEFAULT_OUT = Path("reports/latest")


class _Group(click.Group):
    """The command group; an :class:`AcceptanceError` anywhere below becomes its lines on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> object:
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


def max_slowdown_option(help: str) -> Callable[[FC], FC]:
    """``--max-slowdown`` of run, bench and compare, with its default
    (:data:`acceptance.decide.limits.MAX_SLOWDOWN`)."""
    return click.option("--max-slowdown", type=float, default=MAX_SLOWDOWN, show_default=True, help=help)


def device_source() -> str:
    """How a message names where ``--device`` came from: the option, or ``$ACCEPTANCE_DEVICE``."""
    from click.core import ParameterSource

    ctx = click.get_current_context(silent=True)
    env = ctx is not None and ctx.get_parameter_source("device") is ParameterSource.ENVIRONMENT
    return "$ACCEPTANCE_DEVICE" if env else "--device"


def resolved_device(device: str):  # noqa: ANN201 - a torch.device; torch loads only here
    """``--device`` (or ``$ACCEPTANCE_DEVICE``) as a torch device; a usage error naming where it came from."""
    from acceptance.session.run import resolved_device as resolve

    return resolve(device, option=device_source())


def command_line() -> str:
    """The command as typed, rebuilt from its parsed options (for results.json's provenance)."""
    from acceptance.session import provenance

    return provenance.command_line(click.get_current_context())


@contextlib.contextmanager
def stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (what CI sends on cancel) raised as :class:`acceptance.errors.Terminated`, like Ctrl-C, while the
    block runs."""

    def handler(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def print_console(res: object, *, verbose: bool = False) -> None:
    """The console summary of a run (:mod:`acceptance.report.console`); ``verbose`` (``-v``) lists the passing
    cases too."""
    from acceptance.report import console

    for line, colour in console.render(res, verbose=verbose):  # type: ignore[arg-type]
        click.secho(line, fg=colour)

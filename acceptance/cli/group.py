"""The ``acceptance`` command group, its options shared by several commands, and the one place every
:class:`~acceptance.errors.AcceptanceError` becomes its lines and exit code (:class:`_Group`).

Exit codes (:mod:`acceptance.errors`): 0 every case passed; 1 a criterion failed or an operator errored; 2 usage,
spec, results or output error (the message names the file and the field).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import TextIO

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
            from acceptance.wording import visible_controls  # a message can quote a spec's or a result's strings

            for line in exc.lines:  # each one line: a quoted newline cannot start a forged one
                click.echo(visible_controls(line).replace("\r", "\\r").replace("\n", "\\n"), err=True)
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


class WorkflowCommands:
    """GitHub Actions' workflow commands switched off while the code under test can write to the run's log.

    On GitHub Actions (``GITHUB_ACTIONS=true``), entering prints ``::stop-commands::T`` with a fresh random token
    T (128 bits from :mod:`secrets`, never printed before): until ``::T::`` the log treats every line as text,
    whatever the code under test writes to the runner's standard output or error (through
    ``/proc/<pid>/fd/1`` too). :meth:`emit` prints the runner's own commands with commands switched on around
    them (``::T::``, the lines, then ``::stop-commands::T2`` with a new token, in one write); leaving switches
    them on again (``::T::``). Elsewhere it prints the lines as they are and nothing else. Defined here, not
    with the GitHub reporter, because it is entered before the run's first import of the code under test.
    """

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None):
        self.stream = stream if stream is not None else sys.stdout
        self.enabled = os.environ.get("GITHUB_ACTIONS") == "true" if enabled is None else enabled
        self.token: str | None = None

    def _write(self, text: str) -> None:
        self.stream.flush()  # what was printed before goes first
        self.stream.write(text)
        self.stream.flush()

    def __enter__(self) -> WorkflowCommands:
        if self.enabled:
            self.token = secrets.token_hex(16)
            self._write(f"::stop-commands::{self.token}\n")
        return self

    def emit(self, lines: list[str]) -> None:
        """Print the runner's own workflow commands (``lines``), switched on just for them."""
        if not lines:
            return
        text = "".join(f"{line}\n" for line in lines)
        if self.token is None:
            self._write(text)
            return
        new = secrets.token_hex(16)
        self._write(f"::{self.token}::\n{text}::stop-commands::{new}\n")
        self.token = new

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.token is not None:
            self._write(f"::{self.token}::\n")
            self.token = None

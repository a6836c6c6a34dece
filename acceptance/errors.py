"""The exception family and the exit codes, in one place.

Every problem a user must fix is an :class:`AcceptanceError` carrying the
lines to print and the exit code; the command line maps them once
(:func:`acceptance.cli.main`). A case that breaks while running is not one of
them: it is a :class:`CaseError`, recorded as verdict ``error``, and the run
goes on.

Exit codes (as shells report signals, 128 + the signal number):

====  ==========================================================
0     every case passed
1     a criterion failed or a case errored
2     usage, spec, results or output-folder problem; nothing was run
130   the run was interrupted (SIGINT, Ctrl-C); the finished cases are on disk
143   the run was terminated (SIGTERM, as CI sends on cancel)
====  ==========================================================
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAIL = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class AcceptanceError(Exception):
    """A problem the user must fix. ``lines`` are printed to stderr; the process exits with ``exit_code``."""

    exit_code = EXIT_USAGE

    def __init__(self, *lines: str):
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class UsageError(AcceptanceError):
    """A command-line option or argument that cannot be used."""


class SpecError(AcceptanceError, ValueError):
    """A spec, callable reference or filter that cannot be used; the message says why."""


class ResultsError(AcceptanceError, ValueError):
    """A results.json that cannot be read; the message names the file."""


class OutputError(AcceptanceError):
    """An output folder or report path that cannot be written."""


class CaseError(Exception):
    """The run of one case broke (a callable raised, returned something unusable, or timed out): verdict ``error``."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (what CI sends on cancel), raised like Ctrl-C so that a run stops the same way: its finished cases
    are kept and written, and the run is ``interrupted`` (exit code :data:`EXIT_TERMINATED`)."""

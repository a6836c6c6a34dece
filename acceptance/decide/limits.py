"""The comparison gate's default limits, light enough for the command line's option defaults."""

from acceptance.errors import UsageError

#: Default factor an error may grow by before a case is flagged.
MAX_RATIO = 2.0
#: Default factor a timed case's median may grow by before it is a performance regression.
MAX_SLOWDOWN = 1.25


def check_max_slowdown(value: float) -> None:
    """``--max-slowdown`` must be a finite factor >= 1 (a usage error naming the option otherwise)."""
    if not 1 <= value < float("inf"):
        raise UsageError(f"--max-slowdown: must be a finite factor >= 1, got {value:g}")

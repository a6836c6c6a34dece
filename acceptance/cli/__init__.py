"""The ``acceptance`` command line: click commands that parse options and call the session."""

from acceptance.cli.run import main

__all__ = ["main"]

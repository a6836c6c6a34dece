"""The ``acceptance`` command line: click commands that parse options and call the session.

:data:`main` is the command group (:mod:`acceptance.cli.group`); each module below registers its commands on it.
"""

from acceptance.cli import bench, cache, report, run, tune
from acceptance.cli.group import main

__all__ = ["main", "bench", "cache", "report", "run", "tune"]

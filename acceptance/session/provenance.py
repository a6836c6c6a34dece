"""A run's provenance: the versions, device, git commit, host, times and command line that results.json
records."""

from __future__ import annotations

import platform
import shlex
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import click
import numpy as np
import torch
from click.core import ParameterSource

from acceptance.device import device_name
from acceptance.records import Environment
from acceptance.version import __version__


def now() -> datetime:
    """The time now, in UTC."""
    return datetime.now(timezone.utc)


def _git_commit(cwd: Path) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def command_line(ctx: click.Context) -> str:
    """The command as typed, rebuilt from the parameters given on the command line or by the environment
    (works under any launcher): a flag by its name alone (``--no-cache``), never ``--no-cache True``, and
    nothing left at its default."""
    words = ["acceptance", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        given = ctx.get_parameter_source(param.name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
        if value is None or value == () or not given:
            continue
        if isinstance(param, click.Option) and param.is_flag and isinstance(value, bool):
            words += (param.opts if value else param.secondary_opts)[:1]
            continue
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            words += [str(v)] if isinstance(param, click.Argument) else [param.opts[0], str(v)]
    return shlex.join(words)


def environment(
    device: torch.device, *, command_line: str, start: datetime, end: datetime, cwd: Path | None = None
) -> Environment:
    """Provenance of a run: versions, device, the git commit of ``cwd`` (default: the current folder, when
    called), host, times (UTC, ISO 8601)."""
    return Environment(
        acceptance=__version__,
        python=platform.python_version(),
        torch=torch.__version__,
        numpy=np.__version__,
        platform=platform.platform(),
        host=socket.gethostname(),
        device=str(device),
        device_name=device_name(device),
        cuda_version=torch.version.cuda if device.type == "cuda" else None,
        git_commit=_git_commit(Path.cwd() if cwd is None else cwd),
        command_line=command_line,
        start_time=start.isoformat(timespec="seconds"),
        end_time=end.isoformat(timespec="seconds"),
    )

"""Callables of the integrity tests: an impl that passes, one that is 1.5x too large, one that forges workflow
commands on the runner's output."""

import os

import torch


def plain(a, b, **params):
    return torch.add(a, b)


def scaled(a, b, **params):
    return torch.add(a, b) * 1.5


def _marked_ancestors():
    """The processes above this one that carry FORGE_TARGET=1 (the runner, the fork server), nearest first."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as fh:
            pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                if b"FORGE_TARGET=1" not in fh.read().split(b"\0"):
                    return
        except OSError:
            return
        yield pid


def forger(a, b, **params):
    forged = "::error file=x::forged\n::stop-commands::x\n::error file=y::forged after its own stop\n"
    for pid in _marked_ancestors():
        try:
            with open(f"/proc/{pid}/fd/1", "w") as out:
                out.write(forged)
        except OSError:
            pass
    os.write(1, forged.encode())
    return torch.add(a, b) * 1.5

"""Impls whose outputs carry code that would run where they are unpickled: it creates the file named by the
environment variable ACCEPTANCE_TEST_MARKER."""

import dataclasses
import os

import torch

MARKER = os.environ.get("ACCEPTANCE_TEST_MARKER", "/nonexistent/marker")


class Evil(torch.Tensor):
    """A tensor subclass whose reducer opens (creates) the marker file."""

    def __reduce_ex__(self, protocol):
        return (open, (MARKER, "w"))


class Payload:
    def __reduce__(self):
        return (open, (MARKER, "w"))


def returns_subclass(x: torch.Tensor) -> torch.Tensor:
    return (x * 1.0).as_subclass(Evil)


def _install() -> None:
    """Make this worker's answers carry :class:`Payload` in place of the outputs (past the worker's own checks)."""
    from acceptance.isolation import serve
    from acceptance.isolation.protocol import Answered

    real = serve.dumps

    def dumps(obj):
        if isinstance(obj, Answered):
            obj = dataclasses.replace(obj, outputs=(Payload(),))
        return real(obj)

    serve.dumps = dumps


def sends_a_reducer(x: torch.Tensor) -> torch.Tensor:
    _install()
    return x * 1.0

"""The test device: choosing it, naming it, waiting for it."""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path

import torch


def resolve_device(name: str = "auto", *, option: str = "--device") -> torch.device:
    """``auto`` = the first CUDA device when present, else CPU; ``cuda[:i]`` must exist.

    Raises ``ValueError`` (naming ``option``, where the value came from) for anything else.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"{option}: '{name}' is not a device (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{option}: '{name}' asked for, but torch sees no CUDA device")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{option}: '{name}': only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ValueError(f"{option}: '{name}' is not supported (auto, cpu, cuda, cuda:N)")
    return device


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on CPU), so that a timer around a call measures the call."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """A person's name for the device: the GPU's model, or the CPU's."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()

"""The options of a run (those of ``acceptance run``), light to import."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from acceptance.decide.limits import MAX_SLOWDOWN
from acceptance.isolation import WORKER_THREADS

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How a run selects, measures and records its cases (the options of ``acceptance run``)."""

    out: Path | None = None
    device: str | torch.device = "auto"
    device_option: str = "--device"  # where ``device`` came from, for messages
    trials: int | None = None
    seed: int | None = None
    seeds: int = 1
    reruns: int | None = None  # impl runs per trial where run-to-run variation is allowed (overrides the specs)
    only: str | None = None
    keyword: str | None = None  # ``-k EXPR`` (:mod:`acceptance.session.keyword`)
    dtypes: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None
    shard_costs: Path | None = None  # ``--shard-costs``: an earlier run whose timings balance the shards
    tiers: tuple[str, ...] = ()
    strict: bool = False
    resume: bool = False
    isolate: bool = True
    sanitize: bool = False
    cache: bool = True
    cache_dir: str | None = None  # the reference cache's folder or URL (None: $ACCEPTANCE_CACHE_DIR, else the default)
    jobs: int | None = None
    threads: int = WORKER_THREADS
    compare_to: Path | None = None
    max_slowdown: float = MAX_SLOWDOWN
    command_line: str = ""
    exitfirst: bool = False  # ``-x``: stop after the first case that fails or errors (decided alone)
    executor: str = "local"  # where the cases are measured: ``local`` or ``ray`` (:mod:`acceptance.session.cluster`)
    ray_address: str | None = None  # ``--executor ray``: the cluster (else ``$RAY_ADDRESS``, else a local one)

"""What ``--executor ray`` costs next to a local run, on one machine.

    python benchmarks/ray_overhead.py [--specs operator_specs/gelu.yaml operator_specs/mul.yaml] [--dtype float32]
                                      [--trials 8] [--cpus 1]

In one process: a local Ray instance of ``--cpus`` CPUs is started (its start timed), then the same slice is
measured with ``acceptance.run(..., cache=False)``: locally (``--jobs`` = ``--cpus``), as Ray tasks of the
default batch size (the first Ray run, which also waits for Ray's worker processes and their fork servers:
torch imported once per worker), as the fewest tasks (one per slot and spec), and as one case per task. The
last two find the workers warm, so ``(one-case run - fewest-task run) x CPUs / (tasks added)`` is the cost of a
task beyond the cases it measures (with one CPU, the default, the tasks run one after another, so neither run's
wall time depends on how evenly its batches split the work). Printed:
the seconds of each, the ratios to the local run, and the per-task cost. The machine's load moves wall times;
compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(work) -> tuple[float, object]:
    start = time.monotonic()
    out = work()
    return time.monotonic() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--specs", nargs="+", default=["operator_specs/gelu.yaml", "operator_specs/mul.yaml"])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--cpus", type=int, default=1)
    args = parser.parse_args()

    import ray

    import acceptance
    from acceptance.session import cluster
    from acceptance.session.load import load
    from acceptance.spec import expand

    specs = [ROOT / s for s in args.specs]
    cases = [c for c in expand(load(specs)) if c.dtype == args.dtype]
    common = {"dtypes": (args.dtype,), "trials": args.trials, "cache": False}
    started, _ = timed(lambda: ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False))
    local, _ = timed(lambda: acceptance.run(specs, jobs=args.cpus, **common))
    cold, _ = timed(lambda: acceptance.run(specs, executor="ray", **common))
    cluster.TASKS_PER_SLOT = 1  # the largest batches the run allows: one task per slot and spec
    big = len(cluster.batches(cases, args.cpus))
    batched, _ = timed(lambda: acceptance.run(specs, executor="ray", **common))
    cluster.MAX_BATCH = 1
    single, _ = timed(lambda: acceptance.run(specs, executor="ray", **common))
    ray.shutdown()

    print(f"{len(cases)} cases, {args.trials} trials, {args.cpus} CPUs; Ray start {started:.1f} s")
    print(f"local (--jobs {args.cpus})           {local:7.1f} s")
    print(f"ray, first run (cold workers)  {cold:7.1f} s  {cold / local:5.2f}x local")
    print(f"ray, {big} tasks                 {batched:7.1f} s  {batched / local:5.2f}x local")
    print(f"ray, {len(cases)} tasks (one case each) {single:7.1f} s  {single / local:5.2f}x local")
    if len(cases) > big:
        print(f"per task beyond its cases: {(single - batched) * args.cpus / (len(cases) - big):.2f} s of a slot")


if __name__ == "__main__":
    main()

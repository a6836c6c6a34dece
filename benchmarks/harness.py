"""What the harness costs around the code it tests, on the built-in library, measured in one run.

    python benchmarks/harness.py [--specs operator_specs] [--only GLOB] [--jobs N] [--no-memory]

Prints the machine (CPU, cores, load average before and after: the figures
are wall-clock times, so a loaded machine inflates them), then:

- startup: ``acceptance --help`` and ``acceptance report results.json``
  (best of 5, a fresh interpreter each time);
- four runs of ``acceptance run``: ``--jobs 1`` with an empty cache (cold),
  ``--jobs 1`` again (warm), ``--jobs 1 --no-cache`` and ``--jobs N --no-cache``;
  for each, wall time, time inside the callables (the sum of the impl,
  baseline and oracle seconds of every case in results.json), and
  outside/inside = (wall - inside) / inside;
- the ratios: cold/warm, jobs 1/jobs N, and whether the four results.json are
  identical once the run's timestamps, command line and per-case seconds are
  removed;
- memory: peak RSS of ``acceptance run`` (the runner process; the worker
  holds the callables' own tensors) on one trial of a 5e7-element float32 add,
  against the bytes of the case's own tensors (two inputs, impl and baseline
  outputs in float32, the oracle output in float64).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOLATILE_ENV = ("start_time", "end_time", "command_line")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numpy
    import torch

    return (f"{cpu}, {len(os.sched_getaffinity(0))} cores, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, torch {torch.__version__}, numpy {numpy.__version__}")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def acceptance(*args: str, env: dict | None = None) -> float:
    """Wall seconds of ``python -m acceptance ARGS`` (output discarded; a failure to run raises)."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "acceptance", *args], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    seconds = time.perf_counter() - started
    if out.returncode not in (0, 1):
        raise SystemExit(f"acceptance {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return seconds


def inside(results: Path) -> float:
    data = json.loads(results.read_text())
    return sum(c["timing"][role] for c in data["cases"] for role in ("impl", "baseline", "oracle"))


def stripped(results: Path) -> dict:
    data = json.loads(results.read_text())
    for k in VOLATILE_ENV:
        data["environment"].pop(k, None)
    for c in data["cases"]:
        c.pop("timing", None)
    return data


def memory(tmp: Path) -> tuple[float, float]:
    """(peak RSS of the runner in bytes, bytes of the case's own tensors) for one trial of a 5e7-element add."""
    n = 50_000_000
    spec = tmp / "big_add.yaml"
    spec.write_text(f"""name: big_add
category: arithmetic
impl: torch:add
dtypes: [float32]
inputs:
  - {{name: a, shape: [N], dist: {{uniform: [-1, 1]}}}}
  - {{name: b, shape: [N], dist: {{uniform: [-1, 1]}}}}
cases:
  - {{N: {n}}}
trials: 1
memory_limit_gib: 16
""")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    acceptance("run", str(spec), "--out", str(tmp / "big"), "--no-cache", "--jobs", "1")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if peak <= before * 1024:
        peak = float("nan")  # an earlier child was larger; not measurable this way
    own = n * 4 * 4 + n * 8  # a, b, impl, baseline in float32; oracle in float64
    return peak, own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default="operator_specs")
    ap.add_argument("--only", help="restrict the runs to operators/case ids matching this glob")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--no-memory", action="store_true")
    args = ap.parse_args()

    print(f"machine: {machine()}")
    print(f"load average at start: {load()}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        cache = {"ACCEPTANCE_CACHE_DIR": str(tmp / "cache")}
        select = [args.specs] + (["--only", args.only] if args.only else [])
        runs = [("jobs 1, cold cache", ["--jobs", "1"]), ("jobs 1, warm cache", ["--jobs", "1"]),
                ("jobs 1, no cache", ["--jobs", "1", "--no-cache"]),
                (f"jobs {args.jobs}, no cache", ["--jobs", str(args.jobs), "--no-cache"])]
        walls, ins, files = [], [], []
        for k, (label, flags) in enumerate(runs):
            out = tmp / f"run{k}"
            wall = acceptance("run", *select, "--out", str(out), *flags, env=cache)
            files.append(out / "results.json")
            walls.append(wall)
            ins.append(inside(files[-1]))
            print(f"{label:<22} wall {wall:7.1f} s   inside callables {ins[-1]:6.1f} s   "
                  f"outside/inside {(wall - ins[-1]) / ins[-1]:5.2f}")
        same = all(stripped(f) == stripped(files[0]) for f in files[1:])
        for label_f, f in zip(runs[1:], files[1:]):
            a, b = stripped(files[0]), stripped(f)
            diff = sorted({(ca["id"], k) for ca, cb in zip(a["cases"], b["cases"]) for k in ca if ca[k] != cb.get(k)})
            if a["summary"] != b["summary"] or diff:
                print(f"  differs from the cold run in {label_f[0]}: summary {a['summary'] != b['summary']}, "
                      f"{len(diff)} case fields, e.g. {diff[:3]}")
        help_s = min(acceptance("--help") for _ in range(5))
        report_s = min(acceptance("report", str(files[0])) for _ in range(5))
        cases = len(json.loads(files[0].read_text())["cases"])
        print(f"cases: {cases}")
        print(f"cold / warm cache:       {walls[0] / walls[1]:.2f}x")
        print(f"jobs 1 / jobs {args.jobs} (no cache): {walls[2] / walls[3]:.2f}x")
        print(f"results.json identical across the four runs (timestamps, command line, seconds removed): {same}")
        print(f"startup: acceptance --help {help_s:.2f} s, acceptance report {report_s:.2f} s (best of 5)")
        if not args.no_memory:
            peak, own = memory(tmp)
            print(f"memory, 5e7-element float32 add: runner peak RSS {peak / 2**20:.0f} MiB, the case's own tensors "
                  f"{own / 2**20:.0f} MiB, ratio {peak / own:.2f}")
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()

"""What the harness costs around the code it tests, on the built-in library, measured in one run.

    python benchmarks/harness.py [--specs operator_specs] [--only GLOB] [--jobs N] [--rounds R] [--no-memory]
                                 [--warm-up GLOB]

Prints the machine (CPU, cores, load average before and after: the figures
are wall-clock times, so a loaded machine inflates them), then:

- a warm-up run, not timed (every case, one trial): it writes the bytecode and compiles the numba
  kernels once, as an installed package has them after its first run; every timed command then runs
  with that bytecode (``PYTHONPYCACHEPREFIX``), whatever ``PYTHONDONTWRITEBYTECODE`` says;
- startup: ``acceptance --help``,
  ``acceptance report results.json``, ``list`` and
  ``validate`` of the specs, ``compare`` of two of the runs' results.json
  (best of 5, a fresh interpreter each time);
- ``--rounds R`` rounds (default 3) of four runs of ``acceptance run``: ``--jobs 1``
  with an empty cache (cold), ``--jobs 1`` again (warm), ``--jobs 1 --no-cache``
  and ``--jobs N --no-cache``; for each, wall time, time inside the callables
  (the sum of the impl, baseline and oracle seconds of every case in
  results.json), and outside/inside = (wall - inside) / inside. A round's four
  runs follow each other within a minute or two, so its ratios compare like
  with like; on a shared machine whose speed moves from minute to minute, one
  round can land on either side of a target, so every round is printed and
  the summary gives each figure's median over the rounds (and its range);
- the ratios: cold/warm, jobs 1/jobs N (per round, then their median), and
  whether every results.json of every round is identical once the run's
  timestamps, command line and per-case seconds are removed;
- memory: peak RSS of the runner process and of the worker (sampled from
  /proc every 20 ms) on one trial of a 5e7-element float32 add, against the
  bytes of the case's own tensors (two inputs, impl and baseline outputs in
  float32, the oracle output in float64).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
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

    return (
        f"{cpu}, {len(os.sched_getaffinity(0))} cores, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, torch {torch.__version__}, numpy {numpy.__version__}"
    )


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def speed() -> float:
    """Seconds of a fixed pure-Python loop (3e7 additions), one core: how fast this machine runs right now. On a
    shared or throttled machine it moves, and every wall time moves with it; compare figures taken at like
    speeds."""
    started = time.perf_counter()
    total = 0
    for i in range(30_000_000):
        total += i
    return time.perf_counter() - started


def acceptance(*args: str, env: dict | None = None) -> float:
    """Wall seconds of ``python -m acceptance ARGS`` (output discarded; a failure to run raises)."""
    started = time.perf_counter()
    merged = {**os.environ, **(env or {})}
    out = subprocess.run(
        [sys.executable, "-m", "acceptance", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={k: v for k, v in merged.items() if v is not None},
    )
    seconds = time.perf_counter() - started
    if out.returncode not in (0, 1):
        raise SystemExit(f"acceptance {' '.join(args)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    return seconds


def summary(values: list[float], unit: str = "") -> str:
    """``median [lowest, highest]`` of ``values``, two decimals, each followed by ``unit``."""
    ordered = sorted(values)
    return (
        f"{statistics.median(ordered):.2f}{unit} [{ordered[0]:.2f}{unit}, {ordered[-1]:.2f}{unit}]"
        if len(ordered) > 1
        else f"{ordered[0]:.2f}{unit}"
    )


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


def _rss(pid: int) -> int:
    """Resident bytes of process ``pid`` now (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (``/proc/<pid>/task/*/children``, recursively)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except OSError:
                kids = []
            found += kids
            todo += kids
    return found


def memory(tmp: Path, n: int = 50_000_000) -> tuple[int, int, int]:
    """(peak RSS of the runner, peak RSS of the largest process below it (the worker), bytes of the case's own
    tensors) for one trial of an ``n``-element float32 add, sampled every 20 ms from /proc."""
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
    proc = subprocess.Popen(
        [sys.executable, "-m", "acceptance", "run", str(spec), "--out", str(tmp / "big"), "--no-cache", "--jobs", "1"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    runner_peak, child_peak = 0, 0
    while proc.poll() is None:
        runner_peak = max(runner_peak, _rss(proc.pid))
        child_peak = max([child_peak] + [_rss(k) for k in _descendants(proc.pid)])
        time.sleep(0.02)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"the memory run failed ({proc.returncode}):\n{proc.stderr.read()[-2000:]}")
    own = n * 4 * 4 + n * 8  # a, b, impl, baseline in float32; oracle in float64
    return runner_peak, child_peak, own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default="operator_specs")
    ap.add_argument("--only", help="restrict the runs to operators/case ids matching this glob")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the four timed runs (default 3)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument(
        "--warm-up",
        metavar="GLOB",
        help="cases of the untimed warm-up run, one trial each (default: every case, so that every kernel is compiled)",
    )
    args = ap.parse_args()

    print(f"machine: {machine()}")
    print(f"load average at start: {load()}; a 3e7-addition Python loop: {speed():.2f} s")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # every run as an installed package runs after its first: bytecode written once (an environment that
        # sets PYTHONDONTWRITEBYTECODE would otherwise compile every module on every start), and the numba
        # kernels compiled and cached on disk by a warm-up run that is not timed (else the first timed run,
        # the cold one, would pay for compiling them in a fresh checkout)
        compiled = {"PYTHONDONTWRITEBYTECODE": None, "PYTHONPYCACHEPREFIX": str(tmp / "pyc")}
        select = [args.specs] + (["--only", args.only] if args.only else [])
        warm_up = acceptance(
            "run",
            args.specs,
            *(["--only", args.warm_up] if args.warm_up else []),
            "--out",
            str(tmp / "warm-up"),
            "--no-cache",
            "--jobs",
            "1",
            "--trials",
            "1",
            env=compiled,
        )
        print(f"warm-up (bytecode and JIT kernels compiled, not counted): {warm_up:.1f} s")
        runs = [
            ("jobs 1, cold cache", ["--jobs", "1"]),
            ("jobs 1, warm cache", ["--jobs", "1"]),
            ("jobs 1, no cache", ["--jobs", "1", "--no-cache"]),
            (f"jobs {args.jobs}, no cache", ["--jobs", str(args.jobs), "--no-cache"]),
        ]
        walls: list[list[float]] = []  # per round, the four runs' wall seconds
        ins: list[list[float]] = []  # per round, the four runs' seconds inside the callables
        files: list[Path] = []
        for r in range(args.rounds):
            cache = {"ACCEPTANCE_CACHE_DIR": str(tmp / f"cache{r}"), **compiled}  # empty: the round's cold run
            walls.append([])
            ins.append([])
            print(f"round {r + 1} of {args.rounds} (load average {load()})")
            for k, (label, flags) in enumerate(runs):
                out = tmp / f"round{r}-run{k}"
                wall = acceptance("run", *select, "--out", str(out), *flags, env=cache)
                files.append(out / "results.json")
                walls[r].append(wall)
                ins[r].append(inside(files[-1]))
                print(
                    f"  {label:<22} wall {wall:7.1f} s   inside callables {ins[r][-1]:6.1f} s   "
                    f"outside/inside {(wall - ins[r][-1]) / ins[r][-1]:5.2f}"
                )
            shutil.rmtree(tmp / f"cache{r}", ignore_errors=True)  # ~0.9 GB for the built-in library
        first = stripped(files[0])  # each results.json read once (4 MB for the built-in library)
        others = [(f, stripped(f)) for f in files[1:]]
        same = all(b == first for _, b in others)
        for f, b in others:
            a = first
            diff = sorted(
                {
                    (ca["id"], k)
                    for ca, cb in zip(a["cases"], b["cases"], strict=False)
                    for k in ca
                    if ca[k] != cb.get(k)
                }
            )
            if a["summary"] != b["summary"] or diff:
                print(
                    f"  {f.parent.name} differs from the first cold run: summary {a['summary'] != b['summary']}, "
                    f"{len(diff)} case fields, e.g. {diff[:3]}"
                )

        def started(*cmd: str) -> float:
            acceptance(*cmd, env=compiled)
            return min(acceptance(*cmd, env=compiled) for _ in range(5))

        help_s = started("--help")
        report_s = started("report", str(files[0]))
        list_s = started("list", *select[:1])
        validate_s = started("validate", *select[:1])
        compare_s = started("compare", str(files[0]), str(files[2]))
        cases = len(json.loads(files[0].read_text())["cases"])
        print(f"cases: {cases}; median over {args.rounds} round(s) [lowest, highest]:")
        for k, (label, _) in enumerate(runs):
            print(
                f"  {label:<22} wall {summary([w[k] for w in walls], ' s')}   outside/inside "
                f"{summary([(w[k] - i[k]) / i[k] for w, i in zip(walls, ins, strict=False)])}"
            )
        print(f"cold / warm cache:       {summary([w[0] / w[1] for w in walls], 'x')}")
        print(f"jobs 1 / jobs {args.jobs} (no cache): {summary([w[2] / w[3] for w in walls], 'x')}")
        print(
            f"results.json identical across the {len(files)} runs (timestamps, command line, seconds removed): {same}"
        )
        print(
            f"startup: acceptance --help {help_s:.2f} s, acceptance report {report_s:.2f} s (best of 5, "
            f"bytecode compiled)"
        )
        print(
            f"startup: acceptance list {list_s:.2f} s, validate {validate_s:.2f} s (both import the specs' "
            f"callables), compare {compare_s:.2f} s (best of 5)"
        )
        if not args.no_memory:
            runner_peak, worker_peak, own = memory(tmp)
            print(
                f"memory, 5e7-element float32 add: the case's own tensors {own / 2**20:.0f} MiB; peak RSS of the "
                f"runner {runner_peak / 2**20:.0f} MiB ({runner_peak / own:.2f}x), of the worker "
                f"{worker_peak / 2**20:.0f} MiB ({worker_peak / own:.2f}x)"
            )
    print(f"load average at end: {load()}; a 3e7-addition Python loop: {speed():.2f} s")


if __name__ == "__main__":
    main()

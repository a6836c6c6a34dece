"""What separating the roles costs on the built-in library: wall time of ``acceptance run operator_specs --no-cache``
with this checkout (the impl in a fresh worker per spec, baseline and oracle in a checked reference worker,
inputs made in the runner) and with the package as it was before (commit 7cb7770: every role in one worker),
both with this interpreter and its torch (wall time, and the CPU time of every process of the run, which a
loaded machine turns into wall time); then what one more worker costs: started from the fork server and
answering its first call.

Run: ``python benchmarks/roles.py [--repeat 2] [--before COMMIT] [SPECS]``. Prints each wall time, the ratio
after / before, and the cost of one impl worker. The two versions run alternately, so that a machine busy
with other work slows both alike; the fastest of each is compared.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout(commit: str, into: Path) -> Path:
    """The package at ``commit`` (its ``acceptance`` folder) extracted under ``into``."""
    archive = into / "before.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit, "acceptance"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "before", filter="data")
    return into / "before"


def _subreaper() -> None:
    """Make this process the subreaper of its descendants (Linux): the workers and the fork server, orphaned when
    the runner exits, are reaped here, so that their CPU time counts in this process's ``RUSAGE_CHILDREN``."""
    import ctypes

    ctypes.CDLL(None).prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def _reap_all() -> None:
    """Wait for every descendant handed to this subreaper."""
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def run(specs: Path, package: Path | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of every process of the run) of one run of ``specs`` with the package under
    ``package`` (``None``: this checkout's). CPU seconds are user + system time of the runner, the fork server,
    the jobs and every worker: what a loaded machine turns into wall time."""
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = str(package)
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "acceptance", "run", str(specs.resolve()), "--out", out, "--no-cache"],
            capture_output=True,
            text=True,
            env=env,
            cwd=package or ROOT,
        )
        seconds = time.perf_counter() - started
        _reap_all()
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr[-2000:])
    return seconds, (now.ru_utime - used.ru_utime) + (now.ru_stime - used.ru_stime)


def worker_start(count: int = 10) -> float:
    """Mean seconds from starting a worker from the (running) fork server to its first answer (a trivial call)."""
    import torch

    from acceptance.isolation.forkserver import start
    from acceptance.isolation.protocol import ObjectRef
    from acceptance.isolation.worker import Worker

    start()
    spent = 0.0
    for _ in range(count + 1):
        begun = time.perf_counter()
        with Worker(threads=1) as worker:
            worker.call("impl", ObjectRef(torch.neg), 0, (torch.ones(4),), {}, device=torch.device("cpu"))
        if _:  # the first one waits for the fork server's own start
            spent += time.perf_counter() - begun
    return spent / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="?", default=str(ROOT / "operator_specs"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", default="7cb7770")
    args = parser.parse_args()
    _subreaper()
    with tempfile.TemporaryDirectory() as tmp:
        before_pkg = checkout(args.before, Path(tmp))
        before, after = [], []
        for _ in range(args.repeat):
            before.append(run(Path(args.specs), before_pkg))
            after.append(run(Path(args.specs), None))
    specs = len(list(Path(args.specs).glob("*.yaml")))
    for name, runs in ((f"before ({args.before})", before), ("after", after)):
        walls, cpus = ", ".join(f"{w:.1f}" for w, _ in runs), ", ".join(f"{c:.1f}" for _, c in runs)
        print(f"{name}: wall {walls} s; CPU {cpus} s")
    print(f"ratio after / before: wall {min(after)[0] / min(before)[0]:.2f}, ", end="")
    print(f"CPU {min(c for _, c in after) / min(c for _, c in before):.2f}")
    one = worker_start()
    print(f"one impl worker (fork server to first answer): {one * 1e3:.1f} ms; {specs} specs: {specs * one:.1f} s")


if __name__ == "__main__":
    main()

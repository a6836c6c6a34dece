"""What separating the roles costs on the built-in library: wall time of ``acceptance run operator_specs --no-cache``
with this checkout (the impl in a fresh worker per spec, baseline and oracle in a checked reference worker,
inputs made in the runner) and with the package as it was before (commit 7cb7770: every role in one worker),
both with this interpreter and its torch; then what one more worker costs: started from the fork server and
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


def run(specs: Path, package: Path | None) -> float:
    """Seconds of one run of ``specs`` with the package under ``package`` (``None``: this checkout's)."""
    env = dict(os.environ)
    if package is not None:
        env["PYTHONPATH"] = str(package)
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
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr[-2000:])
    return seconds


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
    with tempfile.TemporaryDirectory() as tmp:
        before_pkg = checkout(args.before, Path(tmp))
        before, after = [], []
        for _ in range(args.repeat):
            before.append(run(Path(args.specs), before_pkg))
            after.append(run(Path(args.specs), None))
    specs = len(list(Path(args.specs).glob("*.yaml")))
    print(f"before ({args.before}): {', '.join(f'{s:.1f}' for s in before)} s")
    print(f"after: {', '.join(f'{s:.1f}' for s in after)} s")
    print(f"ratio after / before: {min(after) / min(before):.2f}")
    one = worker_start()
    print(f"one impl worker (fork server to first answer): {one * 1e3:.1f} ms; {specs} specs: {specs * one:.1f} s")


if __name__ == "__main__":
    main()

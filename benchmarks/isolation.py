"""What process isolation costs on the built-in library: wall time of `acceptance run operator_specs` with the
code under test in a worker process (the default) and in the runner's own process (--no-isolation).

Run: ``python benchmarks/isolation.py [--repeat 2] [SPECS]``. Prints each wall time and the ratio.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(specs: Path, *extra: str) -> float:
    with tempfile.TemporaryDirectory() as out:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "acceptance", "run", str(specs), "--out", out, *extra],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        raise SystemExit(proc.stderr[-2000:])
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="?", default=str(ROOT / "operator_specs"))
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    isolated = min(run(Path(args.specs)) for _ in range(args.repeat))
    in_process = min(run(Path(args.specs), "--no-isolation") for _ in range(args.repeat))
    print(
        f"{args.specs}: isolated {isolated:.1f} s, in-process {in_process:.1f} s, "
        f"ratio {isolated / in_process:.2f} (best of {args.repeat})"
    )


if __name__ == "__main__":
    main()

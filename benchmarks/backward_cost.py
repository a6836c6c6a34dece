"""What checking gradients costs: each built-in ``*_backward`` spec against the same spec without ``backward``.

    python benchmarks/backward_cost.py [--specs operator_specs] [--only GLOB] [--device cpu] [--rounds 1]

For every ``<op>_backward.yaml`` it writes a forward-only copy (the same cases, dtypes and trials, the
``backward`` section removed) next to it in a temporary folder, then runs ``acceptance run --no-cache`` on
each, in turn, in a fresh process. Printed per operator: wall seconds of the forward and backward run, their
ratio, and the seconds inside the callables (impl + baseline + oracle of every case, from results.json) of
each with their ratio. The last line sums the library: the whole backward library next to its forward copy.
Wall times include the process start (the same for both), so the "inside" ratio is the cost of the gradients
themselves. The machine's load moves wall times; compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def forward_copy(spec: Path, folder: Path) -> Path:
    """``spec`` without its ``backward`` section (the YAML keys ``backward:`` and ``impl_backward:``)."""
    lines = spec.read_text().splitlines()
    kept, skipping = [], False
    for line in lines:
        if line.startswith(("backward:", "impl_backward:")):
            skipping = line.rstrip().endswith(":")  # a block mapping continues on indented lines
            continue
        if skipping and line.startswith((" ", "-")):
            continue
        skipping = False
        kept.append(line.replace("_backward", "_forward", 1) if line.startswith("name:") else line)
    out = folder / spec.name.replace("_backward", "_forward")
    out.write_text("\n".join(kept) + "\n")
    return out


def run(spec: Path, device: str, out: Path) -> tuple[float, float]:
    """(wall seconds, seconds inside the callables) of ``acceptance run`` on one spec."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "acceptance", "run", str(spec), "--no-cache", "--device", device, "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{spec.name}: acceptance run exited {done.returncode}\n{done.stderr[-2000:]}")
    cases = json.loads((out / "results.json").read_text())["cases"]
    inside = sum(c["timing"]["impl"] + c["timing"]["baseline"] + c["timing"]["oracle"] for c in cases)
    return wall, inside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--specs", type=Path, default=ROOT / "operator_specs")
    parser.add_argument("--only", default="*")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    specs = sorted(p for p in args.specs.glob("*_backward.yaml") if fnmatch.fnmatch(p.stem, args.only))
    print(f"load average {os.getloadavg()[0]:.2f}, device {args.device}, {len(specs)} backward specs")
    print(f"{'operator':24} {'fwd wall':>9} {'bwd wall':>9} {'ratio':>6} {'fwd in':>8} {'bwd in':>8} {'ratio':>6}")
    totals = [0.0, 0.0, 0.0, 0.0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for spec in specs:
            copied = folder / "specs"
            shutil.copytree(spec.parent, copied, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.yaml"))
            fwd = run(forward_copy(spec, copied), args.device, folder / "f")
            bwd = run(spec, args.device, folder / "b")
            totals = [t + v for t, v in zip(totals, (*fwd, *bwd), strict=True)]
            name = spec.stem.removesuffix("_backward")
            print(
                f"{name:24} {fwd[0]:9.1f} {bwd[0]:9.1f} {bwd[0] / fwd[0]:6.2f} "
                f"{fwd[1]:8.2f} {bwd[1]:8.2f} {bwd[1] / max(fwd[1], 1e-9):6.2f}"
            )
    fw, fi, bw, bi = totals
    print(f"{'all':24} {fw:9.1f} {bw:9.1f} {bw / fw:6.2f} {fi:8.2f} {bi:8.2f} {bi / max(fi, 1e-9):6.2f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

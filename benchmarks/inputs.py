"""What input generation and the per-trial extras cost per trial on the built-in library, before and after.

    python benchmarks/inputs.py [--before REV] [--only GLOB] [--repeat 3] [--specs operator_specs]

For every (case, trial) of the default tier (the trials a run makes: the
spec's, or its dual-delta trials) it times, in a fresh process with one torch
thread (as the runner's main process computes with ``--jobs 1``), best of
``--repeat`` passes, in CPU seconds of the process:

- ``generate``: :func:`acceptance.spec.inputs.generate` of every trial;
- ``extras``: per trial, on the first float input of the case's trial 0 taken
  as a float64 oracle of its size, :func:`acceptance.formats.presets.range_counts` and
  :func:`acceptance.formats.dtypes.rounded` (what :class:`acceptance.measure.roles.Extras`
  and the oracle comparison add per output).

"after" is the working tree. "before" is ``--before REV`` (a git revision,
extracted to a temporary folder), or without it the working tree with its
fast paths turned off (``inputs._GENERATOR_EXACT = False``,
``dtypes._TENSOR_FAST = {}``, the torch passes of ``range_counts``). Each side
also prints a SHA-256 of every generated tensor (dtype, shape and bytes):
equal digests mean bit-identical inputs. Ratios are before / after (> 1: faster
now). The machine's load average is printed: on a loaded machine run it twice.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, sys, time
from pathlib import Path
tree, specs_dir = sys.argv[1], sys.argv[2]
only, repeat, slow = sys.argv[3] or None, int(sys.argv[4]), sys.argv[5] == "1"
sys.path.insert(0, tree)
import numpy as np
import torch
torch.set_num_threads(1)
from acceptance import spec
from acceptance.formats import dtypes, presets
from acceptance.spec import inputs
from acceptance.measure.case import rules_for, trials_of
if slow:
    inputs._GENERATOR_EXACT = False
    dtypes._TENSOR_FAST = {}
    presets._counts_numpy = lambda x, dt, name: presets._counts_torch(torch.from_numpy(x), dt, name)
specs, problems = spec.load_specs(spec.discover([Path(specs_dir)]))
cases = spec.expand([s for s in specs if s.tier == "default"], only=only)
pairs = [(c, k) for c in cases for k in range(trials_of(c, rules_for(c)))]
digest = hashlib.sha256()
oracles = []
for c, k in pairs:
    made = inputs.generate(c, k)
    tensors = list(made.impl) + list(made.reference) if isinstance(made, inputs.RoleInputs) else made
    for t in tensors:
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        digest.update(f"{t.dtype}{tuple(t.shape)}".encode() + raw)
    floats = [t for t in tensors if t.is_floating_point()]
    if k == 0 and floats and c.dtype != "float64":  # one stand-in per case, timed once per trial
        oracles.append((floats[0].to(torch.float64), getattr(torch, c.dtype), trials_of(c, rules_for(c))))
def timed(fn):
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best
def gen():
    for c, k in pairs:
        inputs.generate(c, k)
def extras():
    for o, dt, trials in oracles:
        for _ in range(trials):
            presets.range_counts(o, dt)
            dtypes.rounded(o, dt)
print(json.dumps({"trials": len(pairs), "oracles": sum(t for _, _, t in oracles), "digest": digest.hexdigest(),
                  "generate": timed(gen), "extras": timed(extras)}))
"""


def measure(tree: Path, specs: Path, only: str, repeat: int, slow: bool) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(specs), only or "", str(repeat), "1" if slow else "0"],
        capture_output=True,
        text=True,
        cwd=tree,
    )
    if out.returncode != 0:
        raise SystemExit(f"timing {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def extract(rev: str, into: Path) -> Path:
    """The ``acceptance`` package of git revision ``rev`` under ``into``."""
    archive = subprocess.run(["git", "archive", rev, "acceptance"], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"--before {rev}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="git revision to compare with (default: fast paths off)")
    parser.add_argument("--only", default="", metavar="GLOB", help="only operators or case ids matching GLOB")
    parser.add_argument("--repeat", type=int, default=3, help="passes per side; the best is kept")
    parser.add_argument("--specs", type=Path, default=ROOT / "operator_specs")
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        before_tree = extract(args.before, Path(tmp)) if args.before else ROOT
        before = measure(before_tree, args.specs.resolve(), args.only, args.repeat, slow=not args.before)
        after = measure(ROOT, args.specs.resolve(), args.only, args.repeat, slow=False)
    label = args.before or "fast paths off"
    n = after["trials"]
    print(f"{n} trials, {after['oracles']} float oracles (stand-ins); before = {label}, after = working tree")
    print(f"{'':10} {'before ms/trial':>16} {'after ms/trial':>15} {'before/after':>13}")
    for what in ("generate", "extras"):
        b, a = 1e3 * before[what] / n, 1e3 * after[what] / n
        print(f"{what:10} {b:16.3f} {a:15.3f} {b / a:13.2f}")
    same = before["digest"] == after["digest"]
    print(f"inputs bit-identical: {'yes' if same else 'NO'} ({after['digest'][:16]})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

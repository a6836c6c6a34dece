"""What the runner's per-trial measurement costs: ``_Output.add`` replayed on recorded trials, two code trees compared.

    python benchmarks/runner_measure.py [--specs operator_specs] [--only GLOB] [--against DIR] [--repeat N]
                                        [--trials-file FILE]

Runs the selected cases of the built-in library once in this process (the
code of this tree), keeping every trial's tensors; then, in a fresh
interpreter per code tree (this one, and ``--against``'s, e.g. a checkout of
``main``), replays every trial through ``runner._Output.add`` and ``Peers``
exactly as :func:`acceptance.measure.case.measure` does, ``--repeat`` times (the
trees taking turns), and prints per tree:

- the seconds per (trial, output), per operator (its best repetition) and
  overall (those bests weighted by each operator's count);
- a digest of everything the replay accumulated (worst metrics, metrics
  against the oracle, ULP, diff4 counts, bias, bit mismatches, dual-delta
  series, diagnostics, peer advisories), so two trees that measure alike
  print the same digest;

then the ratio of the two trees' costs (against / this). Wall-clock figures:
a loaded machine inflates both; the ratio is what to read.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def record(specs: str, only: str | None, path: Path) -> None:
    """Run the cases in this process and save (case id, operator, dtype, rules, trials) to ``path``."""
    sys.path.insert(0, str(ROOT))
    import torch

    from acceptance import spec
    from acceptance.measure import case as runner
    from acceptance.session.load import load as _load

    loaded = _load([Path(specs)])
    cases = [c for glob in (only.split(",") if only else [None]) for c in spec.expand(loaded, only=glob)]
    captured: list = []
    original = runner._Output.add

    def spy(self, t, out, rules, dd_metrics, peers):
        if out == 0:
            captured[-1]["trials"].append(t)
        captured[-1]["rules"], captured[-1]["dd"] = rules, dd_metrics
        return original(self, t, out, rules, dd_metrics, peers)

    runner._Output.add = spy
    torch.set_num_threads(1)
    try:
        for case in cases:
            captured.append({"id": case.id, "operator": case.spec.name, "dtype": case.dtype, "trials": []})
            runner.measure(case, torch.device("cpu"), spec.rules_for(case))
    finally:
        runner._Output.add = original
    kept = [c for c in captured if c["trials"]]
    torch.save(kept, path)
    print(f"recorded {len(kept)} cases, {sum(len(c['trials']) for c in kept)} trials")


def replay(root: str, path: Path, repeat: int) -> dict:
    """Replay the recorded trials through ``root``'s runner; best seconds per (trial, output) and a digest."""
    sys.path.insert(0, root)
    import torch

    from acceptance.measure import case as runner
    from acceptance.measure.peers import Peers

    torch.set_num_threads(1)
    cases = torch.load(path, weights_only=False)
    per_op: dict[str, float] = {}
    calls: dict[str, int] = {}
    best = float("inf")
    digest = ""
    for _ in range(repeat):
        state, total = [], 0.0
        times: dict[str, float] = {}
        for c in cases:
            outputs = [runner._Output(c["dtype"]) for _ in c["trials"][0].impl]
            peers = Peers(c["dtype"])
            started = time.perf_counter()
            for t in c["trials"]:
                for out, acc in enumerate(outputs):
                    acc.add(t, out, c["rules"], c["dd"], peers)
            seconds = time.perf_counter() - started
            total += seconds
            times[c["operator"]] = times.get(c["operator"], 0.0) + seconds
            calls[c["operator"]] = len(c["trials"]) * len(outputs)
            state.append(
                [
                    c["id"],
                    [
                        [
                            acc.metrics_record(),
                            acc.impl_oracle,
                            acc.baseline_oracle,
                            repr(acc.ulp),
                            acc.impl_ulp,
                            repr(acc.diff4),
                            repr(acc.bias.record()),
                            acc.bits,
                            acc.delta_impl,
                            acc.delta_baseline,
                            acc.free,
                            acc.constant,
                            acc.oracle_constant,
                            repr(acc.diagnosis),
                        ]
                        for acc in outputs
                    ],
                    [repr(a) for a in peers.advisories(len(c["trials"]))],
                ]
            )
        digest = hashlib.sha256(json.dumps(state, default=repr).encode()).hexdigest()[:16]
        if total < best:
            best, per_op = total, times
    n = sum(len(c["trials"]) * len(c["trials"][0].impl) for c in cases)
    counts = {}
    for c in cases:
        counts[c["operator"]] = counts.get(c["operator"], 0) + len(c["trials"]) * len(c["trials"][0].impl)
    return {
        "seconds": best,
        "per_add": best / n,
        "adds": n,
        "digest": digest,
        "counts": counts,
        "per_op": {op: per_op[op] / counts[op] for op in per_op},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", default=str(ROOT / "operator_specs"))
    ap.add_argument("--only", help="restrict to operators/case ids matching this glob (several: comma-separated)")
    ap.add_argument("--against", help="another checkout of the package to compare with (e.g. main)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trials-file", help="where the recorded trials are kept: read when it exists, else written")
    ap.add_argument("--replay", nargs=2, metavar=("ROOT", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.replay:
        print(json.dumps(replay(args.replay[0], Path(args.replay[1]), args.repeat)))
        return
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.trials_file) if args.trials_file else Path(tmp) / "trials.pt"
        if not path.exists():
            record(args.specs, args.only, path)
        roots = [str(ROOT)] + ([str(Path(args.against).resolve())] if args.against else [])
        found: dict[str, dict] = {}
        for _ in range(args.repeat):  # the trees take turns, so a change in the machine's load hits both alike
            for root in roots:
                out = subprocess.run(
                    [sys.executable, __file__, "--replay", root, str(path), "--repeat", "1"],
                    cwd=tmp,
                    capture_output=True,
                    text=True,
                )
                if out.returncode:
                    raise SystemExit(f"replay under {root} failed:\n{out.stderr[-3000:]}")
                r = json.loads(out.stdout.strip().splitlines()[-1])
                if root in found:  # each operator's best over the turns: a burst of load elsewhere hits one turn
                    r["per_op"] = {op: min(t, found[root]["per_op"][op]) for op, t in r["per_op"].items()}
                    r["seconds"] = min(r["seconds"], found[root]["seconds"])
                found[root] = r
                r["per_add"] = sum(r["per_op"][op] * r["counts"][op] for op in r["per_op"]) / r["adds"]
        for root in roots:
            r = found[root]
            print(
                f"{root}: {r['adds']} (trial, output) pairs, {r['per_add'] * 1e3:.3f} ms each "
                f"(each operator's best of {args.repeat}; best whole replay {r['seconds']:.2f} s), "
                f"digest {r['digest']}"
            )
        if args.against:
            mine, other = found[roots[0]], found[roots[1]]
            print(
                f"per-trial cost, {roots[1]} / this tree: {other['per_add'] / mine['per_add']:.2f}x; "
                f"digests {'identical' if mine['digest'] == other['digest'] else 'DIFFER'}"
            )
            print("per operator (ms per trial-output, this tree vs the other, ratio):")
            for op in sorted(mine["per_op"]):
                a, b = mine["per_op"][op], other["per_op"][op]
                print(f"  {op:<20} {a * 1e3:8.3f} {b * 1e3:8.3f}  {b / a:5.2f}x")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

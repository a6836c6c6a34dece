"""How often the verdict of a nondeterministic kernel changes between whole reruns of the same cases.

    python benchmarks/atomic_reruns.py [--runs 20] [--device cpu|cuda] [--chunk C ...] [--dtype D ...] [-k WORD]

Every run measures the cases afresh (same seed, same inputs; only the kernel's run-to-run order differs) and
decides them as one run (Holm over its dual-delta records). Without ``--chunk`` the built-in ``scatter_add``
and ``index_add`` specs run as they are: on ``--device cuda`` that is torch's own GPU atomics, the check to
repeat on a GPU. With ``--chunk C`` the impl is ``tests/atomic_emulation.py``'s: updates in a fresh random
order per call, in a float32 accumulator rounded to the output dtype after every C updates (C = 1: float16
atomics), against the library's CPU op; one run per C value and case.

Prints, per case: the verdicts counted over the runs, the trials over the max_hyb allowance (sign-test count
k of n, min–max over the runs), the median over runs of the max_hyb median ratio, and the trials that took
more runs (sequential reruns; '-' where the version measured has none). A case "flips" when it got both
verdicts. Runs on either version of the package (the one first on ``sys.path``), to compare a rule before and
after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _specs(folder: Path, chunk: int | None) -> list[Path]:
    """The atomics specs, with the emulated impl where ``chunk`` is set."""
    out = []
    for name in ("scatter_add", "index_add"):
        text = (ROOT / "operator_specs" / f"{name}.yaml").read_text(encoding="utf-8")
        text = text.replace("impl: _ops.py:", f"impl: {ROOT / 'operator_specs' / '_ops.py'}:")
        if chunk is not None:
            roles = (
                f"impl: {ROOT / 'tests' / 'atomic_emulation.py'}:{name}_atomic\n"
                f"impl_params: {{chunk: {chunk}}}\n"
                f"baseline: {ROOT / 'operator_specs' / '_ops.py'}:{name}\n"
            )
            text = text.replace(f"impl: {ROOT / 'operator_specs' / '_ops.py'}:{name}\n", roles)
        path = folder / f"{name}.yaml"
        path.write_text(text, encoding="utf-8")
        out.append(path)
    return out


def _one_run(cases: list, device: torch.device) -> list:
    from acceptance.decide.run import decide_all
    from acceptance.measure.case import measure
    from acceptance.spec.defaults import rules_for

    measured = [(measure(c, device, rules_for(c)), rules_for(c)) for c in cases]
    return decide_all(measured)


def _row(results: list) -> tuple[str, str, str, str]:
    """(verdicts, k of n range, median ratio, extended trials) of one case's results over the runs."""
    verdicts = Counter(r.verdict for r in results)
    recs = [next((d for d in r.dual_delta if d.metric == "max_hyb"), None) for r in results]
    ks = [
        sum(a > max(r.factor * b, r.free) for a, b in zip(r.delta_impl, r.delta_baseline, strict=True))
        for r in recs
        if r
    ]
    ratios = [r.ratio.median for r in recs if r is not None and r.ratio is not None]
    n = len(recs[0].delta_impl) if recs and recs[0] else 0
    found = [getattr(r.determinism, "extended_trials", None) for r in results if r.determinism is not None]
    ext = [int(e) for e in found if e is not None]  # None: a version without sequential reruns
    extended = f"{min(ext)}-{max(ext)}" if ext else "-"
    k = f"{min(ks)}-{max(ks)} of {n}" if ks else "-"
    ratio = f"{statistics.median(ratios):.3g}" if ratios else "-"
    return " ".join(f"{v} {c}" for v, c in sorted(verdicts.items())), k, ratio, extended


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--chunk", type=int, action="append", help="emulated impl, rounded every C updates")
    ap.add_argument("--dtype", action="append", help="test dtypes (default: float16)")
    ap.add_argument("-k", dest="word", default="", help="only case ids containing this text")
    args = ap.parse_args()
    from acceptance.spec import expand, load_specs

    torch.set_num_threads(1)
    device = torch.device(args.device)
    flips = 0
    for chunk in args.chunk or [None]:
        with tempfile.TemporaryDirectory() as tmp:
            specs, problems = load_specs(_specs(Path(tmp), chunk))
            assert not problems, problems
            cases = [c for c in expand(specs, dtypes=args.dtype or ["float16"]) if args.word in c.id]
            runs = [_one_run(cases, device) for _ in range(args.runs)]
        label = "torch's own" if chunk is None else f"chunk {chunk}"
        for i, case in enumerate(cases):
            verdicts, k, ratio, extended = _row([run[i] for run in runs])
            flips += len(set(run[i].verdict for run in runs)) > 1
            print(f"{label:12} {case.id:48} {verdicts:16} k {k:12} max_hyb ratio {ratio:6} extended {extended}")
    print(f"cases that flipped over {args.runs} runs: {flips}")
    sys.exit(0)


if __name__ == "__main__":
    main()

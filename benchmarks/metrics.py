"""Speed and memory of ``acceptance.numerics.metrics.compute`` against two yardsticks.

For float32 inputs of 1e6, 1e7 and 5e7 elements it times

- ``compute``: every metric, one fused pass (the numba kernel);
- ``numpy``: the same formulas written the plain way (float64 copies, one
  numpy expression per metric), as a user would;
- ``floor``: a streaming floor, one float64 sum over each array,
  ``e.sum(dtype=np.float64) + b.sum(dtype=np.float64)``;

and prints the times (best of several runs), the ratios numpy/compute and
compute/floor, and the peak extra memory of each. Each measurement runs in its
own subprocess: after the inputs exist the process resets its resident-set
high-water mark (``echo 5 > /proc/self/clear_refs``), runs the method, and
reports VmHWM − VmRSS-before from ``/proc/self/status``. That sees every
allocation (numpy, numba, torch, the interpreter), unlike tracemalloc.

It also reports the kernel's first-call compile time with an empty numba
cache and with the cache filled (``cache=True``), and compute's time for other
inputs of 1e7 elements. Targets: compute ≥ 4× faster than numpy and within 5×
of the floor.

Run: ``python benchmarks/metrics.py [--sizes 1e6,1e7,5e7] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np


def inputs(n: int, kind: str = "float32"):
    """Deterministic pairs: b ~ N(0, 1), e = b + N(0, 1e-3), rounded to float32 (other kinds from that)."""
    rng = np.random.default_rng(0)
    m = 2 * n if kind == "float32-strided" else n
    b = rng.standard_normal(m, dtype=np.float32)
    e = b + rng.standard_normal(m, dtype=np.float32) * np.float32(1e-3)
    if kind == "float16":
        return e.astype(np.float16), b.astype(np.float16)
    if kind == "bfloat16":
        import torch

        return torch.from_numpy(e).bfloat16(), torch.from_numpy(b).bfloat16()
    if kind == "float32-vs-float64":
        return e, b.astype(np.float64)
    if kind == "float32-strided":
        return e[::2], b[::2]
    return e, b


def numpy_metrics(e: np.ndarray, b: np.ndarray, th: float = 1e-6, p: int = 24, emin: int = -126) -> dict:
    """Every metric of acceptance.numerics.metrics for float32 data, one numpy expression each (float64 temporaries)."""
    e, b = e.astype(np.float64), b.astype(np.float64)
    out = {
        "nan_mismatch": int(np.sum(np.isnan(e) != np.isnan(b))),
        "inf_mismatch": int(np.sum(~np.isnan(e) & ~np.isnan(b) & ~(np.isfinite(e) & np.isfinite(b)) & (e != b))),
        "special_matched": int(np.sum((np.isnan(e) & np.isnan(b)) | (np.isinf(e) & (e == b)))),
    }
    keep = np.isfinite(e) & np.isfinite(b)
    e, b = e[keep], b[keep]
    n = e.size
    with np.errstate(divide="ignore", invalid="ignore"):
        out["diff1"] = np.sum(np.abs(e - b)) / np.sum(np.abs(b))
        out["diff2"] = np.sqrt(np.sum((e - b) ** 2) / np.sum(b**2))
        out["diff3_1"] = np.max(np.where(e == b, 0.0, np.abs(e - b) / np.abs(b)))
        out["diff3_2"] = np.max(np.abs(e - b))
        out["diff3"] = (
            np.max(np.where(np.abs(b) > th, np.abs(e - b) / np.abs(b), 0.0)),
            np.max(np.where(np.abs(b) <= th, np.abs(e - b), 0.0)),
        )
        out["diff4"] = (np.sum(e > b) / np.sum(e != b), np.sum(e < b) / np.sum(e != b), int(np.sum(e != b)))
        out["mse"] = np.mean((e - b) ** 2)
        out["nmse"] = np.sum((e - b) ** 2) / np.sum(b**2)
        out["rms"] = np.sqrt(np.sum((e - b) ** 2)) / (np.sqrt(n) * max(np.max(np.abs(e)), np.max(np.abs(b))))
        out["max_abs"] = np.max(np.abs(e - b))
        out["mean_abs"] = np.mean(np.abs(e - b))
        out["max_rel"] = np.max(np.where(e == b, 0.0, np.abs(e - b) / np.abs(b)))
        out["max_rel_floor"] = np.max(np.where(np.abs(b) > 1e-3, np.abs(e - b) / np.abs(b), 0.0))
        m = np.minimum(np.abs(e), np.abs(b))  # spacing(m) = 2^(max(floor(log2 m), emin) - (p-1)), m = 0 -> emin
        out["max_ulp"] = np.max(
            np.abs(e - b) / np.ldexp(1.0, np.maximum(np.where(m > 0, np.frexp(m)[1] - 1, emin), emin) - (p - 1))
        )
        out["mean_ulp"] = np.mean(
            np.abs(e - b) / np.ldexp(1.0, np.maximum(np.where(m > 0, np.frexp(m)[1] - 1, emin), emin) - (p - 1))
        )
        out["max_hyb"] = np.max(np.abs(e - b) / (1 + np.abs(b)))
        out["mean_hyb"] = np.mean(np.abs(e - b) / (1 + np.abs(b)))
        out["normwise_rel"] = np.linalg.norm(e - b) / np.linalg.norm(b)
    out["n"] = n
    return out


def _status() -> dict[str, int]:
    """VmHWM and VmRSS of this process, in bytes."""
    values = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) * 1024
    return values


def measure(method: str, n: int, kind: str, repeat: int) -> dict:
    """Best time of ``repeat`` runs and peak extra resident memory of one method (in this process)."""
    e, b = inputs(n, kind)
    if method == "compute":
        from acceptance.numerics.metrics import compute

        compute(e[:10], b[:10])  # compile, or load the compiled kernel from the cache

        def run():
            return compute(e, b)
    elif method == "numpy":

        def run():
            return numpy_metrics(e, b)
    else:

        def run():
            return e.sum(dtype=np.float64) + b.sum(dtype=np.float64)

    before = _status()["VmRSS"]
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # reset VmHWM to the current RSS
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - t0)
    peak = _status()["VmHWM"] - before
    summary = {k: result[k] for k in ("max_abs", "max_ulp", "mean_hyb", "diff2")} if method != "floor" else {}
    return {"seconds": best, "peak_extra": peak, "check": {k: float(v) for k, v in summary.items()}}


def first_call(cache_dir: str) -> float:
    """Seconds of the first compute() call in a fresh process using numba cache folder ``cache_dir``."""
    code = (
        "import time, numpy as np; from acceptance.numerics.metrics import compute; e = np.ones(4, np.float32);"
        "t = time.perf_counter(); compute(e, e); print(time.perf_counter() - t)"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True)
    return float(out.stdout)


def _child(method: str, n: int, kind: str, repeat: int) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", method, str(n), kind, str(repeat)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e6,1e7,5e7", help="comma-separated element counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, n, kind, repeat = args.child
        print(json.dumps(measure(method, int(n), kind, int(repeat))))
        return

    import numba

    print(
        f"worker threads (NUMBA_NUM_THREADS): {numba.config.NUMBA_NUM_THREADS}, cpus {os.cpu_count()}; "
        f"times are the best of {args.repeat}"
    )
    with tempfile.TemporaryDirectory() as cache:
        cold, warm = first_call(cache), first_call(cache)
    print(f"first call, float32 kernel: {cold:.2f} s with an empty numba cache, {warm:.2f} s with it filled\n")

    mib = 1 << 20
    print(
        f"{'elements':>9} {'compute':>9} {'numpy':>9} {'floor':>9} {'numpy/compute':>14} {'compute/floor':>14}"
        f"   peak extra MiB: compute / numpy / floor (inputs {'':>1}MiB)"
    )
    for n in (int(float(s)) for s in args.sizes.split(",")):
        r = {m: _child(m, n, "float32", args.repeat) for m in ("compute", "numpy", "floor")}
        for key, value in r["compute"]["check"].items():
            want = r["numpy"]["check"][key]
            assert abs(value - want) <= 1e-9 * abs(want), (key, value, want)
        t = {m: r[m]["seconds"] for m in r}
        print(
            f"{n:>9.0e} {t['compute']:>8.4f}s {t['numpy']:>8.3f}s {t['floor']:>8.4f}s "
            f"{t['numpy'] / t['compute']:>13.1f}x {t['compute'] / t['floor']:>13.2f}x   "
            f"{r['compute']['peak_extra'] / mib:8.1f} / {r['numpy']['peak_extra'] / mib:7.1f} / "
            f"{r['floor']['peak_extra'] / mib:5.1f}   ({2 * 4 * n / mib:.0f})"
        )

    n = 10**7
    floor = _child("floor", n, "float32", args.repeat)["seconds"]
    print(f"\nother inputs, {n:.0e} elements (compute / float32 floor):")
    for kind in ("float16", "bfloat16", "float32-vs-float64", "float32-strided"):
        r = _child("compute", n, kind, args.repeat)
        print(
            f"  {kind:<20} {r['seconds']:.4f}s  {r['seconds'] / floor:5.2f}x   "
            f"peak extra {r['peak_extra'] / mib:.1f} MiB"
        )


if __name__ == "__main__":
    main()

"""Nanoseconds per element of the host metrics kernel, by element format, against another checkout's kernel.

    python benchmarks/host_kernel.py [--against DIR] [--n 65537] [--repeat 200]

For each format the kernel reads (float32, float64, float16 and bfloat16 bit
patterns), one pair of 65,537-element arrays (an output of the built-in
library's size) is reduced ``--repeat`` times by this tree's
``acceptance.numerics.metrics.host._kernel`` and, with ``--against``, by the one in
``DIR/acceptance/numerics/metrics/host.py``, in alternating rounds (best of three).
Prints ns per element and the ratio, and whether the two kernels give the same
sums, maxima and counts bit for bit on those arrays and on random bit
patterns of float32 and float64 (NaN payloads, subnormals, both zeros,
infinities).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acceptance.formats import dtypes  # noqa: E402
from acceptance.numerics.metrics import host  # noqa: E402


def _other(folder: Path):
    spec = importlib.util.spec_from_file_location("other_host", folder / "acceptance" / "metrics" / "host.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._kernel


def _reduce(kernel, e, b, codes, fmt):
    sums, maxs, counts = np.zeros(6), np.zeros(9), np.zeros(6, dtype=np.int64)
    kernel(e, b, codes[0], codes[1], fmt.precision, fmt.emin, not fmt.is_float, fmt.diff3_threshold, sums, maxs, counts)
    return np.concatenate([sums.view(np.int64), maxs.view(np.int64), counts])


def _inputs(name: str, n: int, rng) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    import torch

    y = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)
    x = y * (1 + rng.standard_normal(n) * 1e-3)
    tx, ty = (torch.from_numpy(v).to(dtypes.torch_dtype(name)) for v in (x, y))
    if name in ("float16", "bfloat16"):
        code = {"float16": 1, "bfloat16": 2}[name]
        return tx.view(torch.int16).numpy().view(np.uint16), ty.view(torch.int16).numpy().view(np.uint16), (code, code)
    return tx.numpy(), ty.numpy(), (0, 0)


def _ns(kernel, args, repeat: int, n: int) -> float:
    started = time.perf_counter()
    for _ in range(repeat):
        _reduce(kernel, *args)
    return (time.perf_counter() - started) / repeat / n * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path)
    parser.add_argument("--n", type=int, default=65537)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    kernels = [("this tree", host._kernel)] + ([(str(args.against), _other(args.against))] if args.against else [])
    rng = np.random.default_rng(0)
    same = True
    for name in ("float32", "float64", "float16", "bfloat16"):
        fmt = dtypes.lookup(name)
        e, b, codes = _inputs(name, args.n, rng)
        call = (e, b, codes, fmt)
        results = [_reduce(k, *call) for _, k in kernels]  # compiles each
        same &= all(np.array_equal(results[0], r) for r in results[1:])
        best = [min(_ns(k, call, args.repeat, args.n) for _ in range(3)) for _, k in kernels]
        line = f"{name:9} " + "  ".join(
            f"{label}: {ns:6.2f} ns/element" for (label, _), ns in zip(kernels, best, strict=False)
        )
        print(line + (f"  ratio {best[1] / best[0]:.2f}x" if len(best) > 1 else ""))
    for dt, it in ((np.float32, np.uint32), (np.float64, np.uint64)):
        fmt = dtypes.lookup(np.dtype(dt).name)
        for _ in range(10):
            n = int(rng.integers(1, 5000))
            e = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dt)
            b = rng.integers(0, np.iinfo(it).max, n, dtype=it, endpoint=True).view(dt)
            results = [_reduce(k, e, b, (0, 0), fmt) for _, k in kernels]
            same &= all(np.array_equal(results[0], r) for r in results[1:])
    if len(kernels) > 1:
        print(f"results bit for bit the same: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()

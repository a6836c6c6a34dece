"""Quantize / dequantize throughput of acceptance.formats.quant against gguf-py's reference codec.

    python benchmarks/quant_throughput.py [--rows 1024] [--k 4096] [--repeat 3]

For each format, the best of ``--repeat`` wall-clock times of one call on a
(rows, k) float32 N(0, 1) array, as millions of elements per second, for
``acceptance.formats.quant`` and for ``gguf.quants`` (0.19; it has no q8_1), and the speed
ratio ours / gguf (> 1: ours is faster). Single process, whatever BLAS/numpy threads
are configured; on a shared machine, compare ratios rather than absolute rates.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from acceptance.formats import quant


def best_time(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    try:
        import gguf
        from gguf import GGMLQuantizationType as GT
    except ImportError:  # the dev extra brings it
        gguf = None
    x = np.random.default_rng(0).standard_normal((args.rows, args.k)).astype(np.float32)
    n = x.size / 1e6
    print(f"({args.rows}, {args.k}) float32, best of {args.repeat}; rates in Melem/s")
    print(
        f"{'format':7s} {'quantize ours':>14s} {'gguf':>8s} {'ratio':>7s}   "
        f"{'dequantize ours':>16s} {'gguf':>8s} {'ratio':>7s}"
    )
    for fmt in quant.FORMATS:
        packed = quant.quantize(x, fmt)
        q_ours = n / best_time(lambda fmt=fmt: quant.quantize(x, fmt), args.repeat)
        d_ours = n / best_time(lambda packed=packed, fmt=fmt: quant.dequantize(packed, fmt), args.repeat)
        gt = getattr(GT, fmt.upper()) if gguf is not None else None
        if gt is not None and fmt != "q8_1":
            q_g = n / best_time(lambda gt=gt: gguf.quants.quantize(x, gt), args.repeat)
            d_g = n / best_time(lambda packed=packed, gt=gt: gguf.quants.dequantize(packed, gt), args.repeat)
            print(
                f"{fmt:7s} {q_ours:14.1f} {q_g:8.1f} {q_ours / q_g:6.2f}x   "
                f"{d_ours:16.1f} {d_g:8.1f} {d_ours / d_g:6.2f}x"
            )
        else:
            print(f"{fmt:7s} {q_ours:14.1f} {'-':>8s} {'-':>7s}   {d_ours:16.1f} {'-':>8s} {'-':>7s}")


if __name__ == "__main__":
    main()

"""NMSE of each GGML block format's own quantization round trip.

    python benchmarks/quant_nmse.py [--n 1000000] [--seed 0]

NMSE = sum((dequantize(quantize(x)) - x)^2) / sum(x^2), computed in float64, for x
drawn from N(0, 1) and from U[-1, 1] (float32, fixed seed, blocks of 32 along rows of
4000, 125 blocks). Printed in percent next to the quantized category's NMSE gates
(``acceptance.spec.defaults.QUANT_NMSE``: q8_x 0.5%, q5_x 1%, q4_x 1.5%), with their ratio (gate / measured).
"""

from __future__ import annotations

import argparse

import numpy as np

from acceptance.formats import quant
from acceptance.spec.defaults import QUANT_NMSE

THRESHOLD_PCT = {fmt: 100 * gate for fmt, gate in QUANT_NMSE.items()}


def nmse(x: np.ndarray, fmt: str) -> float:
    """sum((deq - x)^2) / sum(x^2) in float64."""
    y = quant.dequantize(quant.quantize(x, fmt), fmt).astype(np.float64)
    x64 = x.astype(np.float64)
    return float(np.sum((y - x64) ** 2) / np.sum(x64**2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="values per distribution (rounded up to rows of 4000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = -(-args.n // 4000)
    rng = np.random.default_rng(args.seed)
    data = {
        "N(0,1)": rng.standard_normal((rows, 4000)).astype(np.float32),
        "U[-1,1]": rng.uniform(-1.0, 1.0, (rows, 4000)).astype(np.float32),
    }
    print(f"{rows * 4000} values per distribution, seed {args.seed}")
    print(
        f"{'format':7s} {'bpw':>5s} {'NMSE N(0,1) %':>14s} {'NMSE U[-1,1] %':>15s} "
        f"{'threshold %':>12s} {'margin N':>9s} {'margin U':>9s}"
    )
    for fmt, f in quant.FORMATS.items():
        g, u = nmse(data["N(0,1)"], fmt), nmse(data["U[-1,1]"], fmt)
        t = THRESHOLD_PCT[fmt]
        print(
            f"{fmt:7s} {f.bits_per_weight:5.2f} {100 * g:14.4f} {100 * u:15.4f} {t:12.2f} "
            f"{t / (100 * g):8.1f}x {t / (100 * u):8.1f}x"
        )


if __name__ == "__main__":
    main()

"""Dual-delta overhead per trial beyond the calls to impl, baseline and oracle.

    python benchmarks/dual_delta.py [--trials 50]

For each case, ``dual_delta`` reports seconds per role; the overhead is
total - impl - baseline - oracle - input generation (the three metric passes
per trial, moving data between roles, the statistics at the end). Printed per
case: the callables' time per trial, the overhead per trial, and their ratio.
All on the CPU (impl_device="cpu"), so the numbers do not depend on a GPU.
"""

from __future__ import annotations

import argparse
import time

import torch

from acceptance import dual_delta
from acceptance.spec import defaults


def _timed(generate):
    """generate_input wrapped to sum its own time, which is user code, not overhead."""
    spent = [0.0]

    def wrapper(g):
        t0 = time.perf_counter()
        out = generate(g)
        spent[0] += time.perf_counter() - t0
        return out

    return wrapper, spent


CASES = [
    ("exp float16, 1e3 elements", torch.exp, lambda g: torch.randn(1_000, generator=g), torch.float16),
    ("exp float16, 1e5 elements", torch.exp, lambda g: torch.randn(100_000, generator=g), torch.float16),
    ("exp float32, 1e6 elements", torch.exp, lambda g: torch.randn(1_000_000, generator=g), torch.float32),
    (
        "matmul float16, 64^3",
        torch.matmul,
        lambda g: (torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)),
        torch.float16,
    ),
    (
        "matmul float16, 256^3",
        torch.matmul,
        lambda g: (torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)),
        torch.float16,
    ),
    (
        "matmul float32, 512^3",
        torch.matmul,
        lambda g: (torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)),
        torch.float32,
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    args = parser.parse_args()
    metrics = list(defaults.DEFAULT_METRICS)
    dual_delta(torch.exp, torch.exp, None, lambda g: torch.randn(8, generator=g), metrics, 2)  # compile metrics kernels
    print(f"{args.trials} trials, metrics {metrics}, free='auto' (3 metric passes per trial)")
    print(f"{'case':28s} {'callables ms/trial':>19s} {'overhead ms/trial':>18s} {'overhead/callables':>19s}")
    for name, fn, generate, dtype in CASES:
        gen, spent = _timed(generate)
        res = dual_delta(fn, fn, None, gen, metrics, args.trials, dtype=dtype, impl_device="cpu")
        t = res.timing
        calls = t.impl + t.baseline + t.oracle
        overhead = t.total - calls - spent[0]
        print(
            f"{name:28s} {1e3 * calls / args.trials:19.3f} {1e3 * overhead / args.trials:18.3f} "
            f"{overhead / calls:19.2f}"
        )


if __name__ == "__main__":
    main()

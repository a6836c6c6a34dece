"""Speed and memory of ``acceptance.numerics.emulate.matmul`` on one CPU thread.

For each configuration it times the emulated GEMM (best of ``--repeat`` runs,
after one warm-up) and prints it with two yardsticks on the same inputs:
``torch.matmul`` in float32 (what a same-dtype CPU baseline costs) and in
float64. Ratios are emulate / yardstick. Each configuration runs in its own
subprocess with ``torch.set_num_threads(1)``, which also reports the peak
resident memory it added while running emulate (``VmHWM`` after resetting it
through ``/proc/self/clear_refs``, minus ``VmRSS`` before; Linux only).

Configurations: float16 inputs in [-1, 1] (products exact in float32; float16
sums exact in float64 almost always) and float32 inputs spread over 2**±20
(group sums usually need the extraction path), square GEMMs of size 256 and
512, float32 accumulation with the schemes of interest.

Run: ``python benchmarks/emulate.py [--sizes 256,512] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

SCHEMES = {
    "fp32 RN, chunk 1": dict(acc_dtype="float32"),
    "fp32 RN, chunk 1, FMA": dict(acc_dtype="float32", fused=True),
    "fp32 RZ, chunk 1": dict(acc_dtype="float32", rounding="truncate"),
    "fp32 RZ, chunk 4 (DOT4)": dict(acc_dtype="float32", chunk=4, rounding="truncate"),
    "fp32 RZ, chunk 4, fused": dict(acc_dtype="float32", chunk=4, rounding="truncate", fused=True),
    "fp32 RN, chunk 32, split 4": dict(acc_dtype="float32", chunk=32, split_k=4),
    "fp16 acc RN, chunk 1": dict(acc_dtype="float16"),
    "one rounding (chunk K)": dict(acc_dtype="float32", chunk=-1),
}


def child(kind: str, size: int, scheme: str, repeat: int) -> dict:
    import torch

    from acceptance.numerics import emulate

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    if kind == "float16":
        a = (torch.rand(size, size, generator=g) * 2 - 1).half()
        b = (torch.rand(size, size, generator=g) * 2 - 1).half()
    else:
        spread = lambda: torch.exp2(torch.randint(-20, 21, (size, size), generator=g).float())  # noqa: E731
        a = torch.randn(size, size, generator=g) * spread()
        b = torch.randn(size, size, generator=g) * spread()
    kw = dict(SCHEMES[scheme])
    if kw.get("chunk") == -1:
        kw["chunk"] = size

    def best(fn) -> float:
        fn()
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    a32, b32, a64, b64 = a.float(), b.float(), a.double(), b.double()
    t32 = best(lambda: a32 @ b32)
    t64 = best(lambda: a64 @ b64)
    rss_before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    t_em = best(lambda: emulate.matmul(a, b, **kw))
    peak = _status("VmHWM") - rss_before
    return {"emulate": t_em, "fp32": t32, "fp64": t64, "peak_mib": peak / 1024}


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])  # kB
    raise RuntimeError(f"no {field} in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,512")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "SIZE", "SCHEME"))
    args = parser.parse_args()
    if args.child:
        kind, size, scheme = args.child
        print(json.dumps(child(kind, int(size), scheme, args.repeat)))
        return
    print(
        f"{'inputs':<8} {'size':>5}  {'scheme':<28} {'emulate s':>10} {'/ fp32 mm':>10} {'/ fp64 mm':>10}"
        f" {'peak MiB':>9}"
    )
    for size in map(int, args.sizes.split(",")):
        for kind in ("float16", "float32"):
            for scheme in SCHEMES:
                out = subprocess.run(
                    [sys.executable, __file__, "--repeat", str(args.repeat), "--child", kind, str(size), scheme],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(out.stdout)
                print(
                    f"{kind:<8} {size:>5}  {scheme:<28} {r['emulate']:>10.3f} {r['emulate'] / r['fp32']:>10.0f}"
                    f" {r['emulate'] / r['fp64']:>10.0f} {r['peak_mib']:>9.0f}"
                )


if __name__ == "__main__":
    main()

"""Reference cache: cost of a put and a get against recomputing what the entry holds.

    python benchmarks/cache.py [--sizes 1e3,1e6,1e7] [--repeat 3] [--dtypes float32,float64] [--threads N]

For entries of n elements (one tensor of the dtype: float32 like a baseline
output, float64 like an oracle output) it times, best of ``--repeat`` calls
after a warm-up (more calls for fast ones, up to 0.2 s):

- ``put``: ``ReferenceCache.put`` of a new key each call (header, XXH3-128, temp file, rename);
- ``get``: ``ReferenceCache.get`` with the file in the page cache (the usual
  case on a rerun), and ``get cold`` after evicting the file's pages
  (``fsync`` + ``posix_fadvise(DONTNEED)``, Linux only): a read from the disk;
- ``sha``: SHA-256 of the entry's bytes alone, the integrity check's share;
- the recomputation it replaces: a float64 matmul with n outputs
  (M = N = round(sqrt(n))) from float32 inputs, converted to float64 as the
  oracle does, for K = 128 and K = M (square); and the inputs' generation,
  ``acceptance.spec.inputs.unit_uniform`` + ``acceptance.formats.dtypes.to_tensor`` of n values.

Then the same put and get on each kind of storage (``--storage``): a folder (the
local code path), the same disk through a ``file://`` URL (fsspec: the entry built
in memory, a temporary file renamed over it, one whole-file read) and ``memory://``
(fsspec's in-process store: the cost of the URL layer alone), with the ratio of
each to the folder's time. Needs fsspec (``pip install 'operator-acceptance[fsspec]'``).

Ratios printed: matmul / get (how many times faster a hit is than the work it
saves; > 1 means the cache pays) and put / matmul (the first run's extra cost).
The numbers depend on the disk and on ``torch.get_num_threads()`` (printed
first; on a loaded machine ``--threads 1`` gives steadier matmul times).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from acceptance.cache import ReferenceCache, key
from acceptance.formats.dtypes import to_tensor
from acceptance.spec.inputs import unit_uniform


def best(fn, repeat: int, budget: float = 0.2) -> float:
    """Least wall time of one call of ``fn()`` (seconds), after a warm-up call: at least
    ``repeat`` calls, more for fast ones until ``budget`` seconds are spent (at most 1000)."""
    fn()
    times: list[float] = []
    while len(times) < repeat or (sum(times) < budget and len(times) < 1000):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def drop_page_cache(path: str) -> bool:
    """Write the file back and drop its pages from the page cache; False where unsupported."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    return True


def matmul_time(n: int, k: int, repeat: int) -> float:
    """Float64 matmul with round(sqrt(n))**2 outputs and inner size k, inputs float32 -> float64."""
    m = round(math.sqrt(n))
    a, b = torch.randn(m, k), torch.randn(k, m)
    return best(lambda: torch.matmul(a.to(torch.float64), b.to(torch.float64)), repeat)


def generate_time(n: int, repeat: int) -> float:
    """Drawing n uniform values as acceptance.spec.inputs does and rounding them to float32."""

    def run():
        bits = np.random.PCG64(np.random.SeedSequence(1234, spawn_key=(0,)))
        to_tensor(-1.0 + 2.0 * unit_uniform(bits, n), "float32")

    return best(run, repeat)


def storage_table(sizes: list[int], repeat: int) -> None:
    """put/get of one float32 entry of n elements on a folder, a file:// URL and memory://, and ratios to the
    folder's times. The puts cycle over 4 keys (each replaces an entry, as concurrent writers of a key do), so
    that the stores stay small (memory:// holds its entries in this process)."""
    import uuid

    print(f"\n{'storage':10s} {'n':>6s} {'put':>10s} {'get':>10s} {'put/folder':>11s} {'get/folder':>11s}")
    with tempfile.TemporaryDirectory(prefix="acceptance-cache-bench-") as root:
        stores = {
            "folder": ReferenceCache(os.path.join(root, "folder")),
            "file://": ReferenceCache(Path(root, "url").as_uri()),
            "memory://": ReferenceCache(f"memory://acceptance-bench/{uuid.uuid4().hex}"),
        }
        for n in sizes:
            t = torch.randn(n)
            base: tuple[float, float] | None = None
            for name, cache in stores.items():
                counter = iter(range(10**9))
                put = best(
                    lambda c=cache, i=counter, n=n, t=t: c.put(key(bench="put", n=n, i=next(i) % 4), (t,)), repeat
                )
                k = key(bench="get", n=n)
                cache.put(k, (t,))
                get = best(lambda c=cache, k=k: c.get(k), repeat)
                base = base or (put, get)
                print(f"{name:10s} {n:6.0e} {ms(put)} {ms(get)} {put / base[0]:11.2f} {get / base[1]:11.2f}")
                cache.clear()
        for cache in stores.values():
            info = cache.info()
            assert info.corrupt == 0 and info.write_errors == 0, info


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:10.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1e3,1e6,1e7")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--storage", action="store_true", help="only the folder / file:// / memory:// table")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, best of {args.repeat}; times in ms")
    if args.storage:
        storage_table(sizes, args.repeat)
        return
    recompute = {}
    for n in sizes:
        m = round(math.sqrt(n))
        recompute[n] = (matmul_time(n, 128, args.repeat), matmul_time(n, m, args.repeat), generate_time(n, args.repeat))
        print(
            f"n={n:.0e}: matmul fp64 {m}x128x{m} {ms(recompute[n][0]).strip()}, "
            f"{m}x{m}x{m} {ms(recompute[n][1]).strip()}; input generation {ms(recompute[n][2]).strip()}"
        )
    print()
    header = (
        f"{'dtype':8s} {'n':>6s} {'MB':>7s} {'put':>10s} {'get':>10s} {'get cold':>10s} {'sha':>10s} "
        f"{'mm128/get':>10s} {'mmKxK/get':>10s} {'gen/get':>8s} {'put/mm128':>10s}"
    )
    print(header)
    with tempfile.TemporaryDirectory(prefix="acceptance-cache-bench-") as root:
        cache = ReferenceCache(root)
        for dtype in dtypes:
            for n in sizes:
                t = torch.randn(n).to(dtype)
                data = t.view(torch.uint8).numpy()
                counter = iter(range(10**9))
                put = best(
                    lambda n=n, counter=counter, dtype=dtype, t=t: cache.put(
                        key(bench="put", n=n, i=next(counter), dtype=dtype), (t,)
                    ),
                    args.repeat,
                )
                k = key(bench="get", n=n, dtype=dtype)
                cache.put(k, (t,))
                cache.get(k)
                get = best(lambda k=k: cache.get(k), args.repeat)
                cold_times = []
                for _ in range(args.repeat):
                    if not drop_page_cache(str(cache.path(k))):
                        break
                    t0 = time.perf_counter()
                    cache.get(k)
                    cold_times.append(time.perf_counter() - t0)
                cold = min(cold_times) if cold_times else float("nan")
                sha = best(lambda data=data: hashlib.sha256(data).digest(), args.repeat)
                mm128, mm_square, gen = recompute[n]
                print(
                    f"{str(dtype).removeprefix('torch.'):8s} {n:6.0e} {t.nbytes / 1e6:7.3f} {ms(put)} {ms(get)} "
                    f"{ms(cold)} {ms(sha)} {mm128 / get:10.2f} {mm_square / get:10.1f} {gen / get:8.2f} "
                    f"{put / mm128:10.2f}"
                )
                cache.clear()
    info = cache.info()
    assert info.corrupt == 0 and info.write_errors == 0, info
    storage_table(sizes, args.repeat)


if __name__ == "__main__":
    main()

"""Accuracy of production activation kernels, ulp at the oracle: the measurements behind the default floors.

For each function (exp, log, tanh, sigmoid, erf, GELU erf and tanh forms, softplus, SiLU) and each library
that runs on this machine -- torch CPU (SLEEF / vectorized ATen), numpy float32 ufuncs and scipy.special,
onnxruntime CPU (MLAS), jax CPU (XLA, whose float32 tanh/logistic are Eigen's rational approximations) --
the error of every element is

    ulp_i = |e_i - o_i| / spacing(round_dtype(o_i)),   spacing(r) = 2^(max(floor(log2 |r|), emin) - (p - 1))

(the smallest subnormal spacing 2^(emin - p + 1) where the rounded oracle is zero or subnormal; 0 where
impl and oracle are both below the smallest normal -- a flush to zero, forgiven as the gate forgives it;
inputs whose true result overflows the dtype left out), with the
oracle ``o`` the function in float64 (numpy/scipy float64; the tanh-form GELU as x / (1 + exp(-2z)), the same
function without the cancellation of 1 + tanh(z)). Float64 is ~2^29 times finer than float32, so the oracle's
own error is < 1e-8 float32 ulp. Reported: max and mean ulp, the input of the max, and range violations
(tanh outside [-1, 1], sigmoid outside [0, 1] or 0 where the oracle is >= the smallest normal).

Sweeps: float16, every finite value in the function's domain within [-LIM, LIM]; float32, every 256th bit
pattern with |x| <= LIM (8.6 million values for LIM = 20 -- dense in every binade: 2^15 values per binade);
with ``--uniform``, 10^6 uniform draws on [-LIM, LIM] instead (seed 0). bfloat16: every finite value (torch
and jax only). Run: ``python benchmarks/floors_measure.py [--lib torch,numpy,ort,jax]`` (a library that is
not installed is left out; jax and onnxruntime install with pip).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable

import numpy as np

FMT = {"float32": (24, -126), "float16": (11, -14), "bfloat16": (8, -126)}
LIM = {
    "exp": 88.0,
    "log": 1e4,
    "tanh": 20.0,
    "sigmoid": 40.0,
    "erf": 6.0,
    "gelu": 10.0,
    "gelu_tanh": 10.0,
    "softplus": 30.0,
    "silu": 40.0,
}
SQ2PI = math.sqrt(2.0 / math.pi)


def _oracle(name: str, x: np.ndarray) -> np.ndarray:
    """The function in float64 (cancellation-free forms)."""
    import scipy.special as sp

    with np.errstate(all="ignore"):
        if name == "exp":
            return np.exp(x)
        if name == "log":
            return np.log(x)
        if name == "tanh":
            return np.tanh(x)
        if name == "sigmoid":
            return sp.expit(x)
        if name == "erf":
            return sp.erf(x)
        if name == "gelu":
            return 0.5 * x * sp.erfc(-x / math.sqrt(2.0))
        if name == "gelu_tanh":
            return x * sp.expit(2.0 * SQ2PI * (x + 0.044715 * x**3))
        if name == "softplus":
            return np.logaddexp(0.0, x)
        if name == "silu":
            return x * sp.expit(x)
    raise KeyError(name)


def _round(o: np.ndarray, dtype: str) -> np.ndarray:
    """The oracle rounded once to ``dtype`` (ties to even), as float64."""
    if dtype == "bfloat16":
        import torch

        return torch.from_numpy(o).to(torch.bfloat16).double().numpy()
    return o.astype(dtype).astype(np.float64)


def ulp_at_oracle(e: np.ndarray, o: np.ndarray, dtype: str) -> np.ndarray:
    """|e - o| / spacing(round_dtype(o)); inf where e is NaN/inf and o is finite."""
    p, emin = FMT[dtype]
    r = np.abs(_round(o, dtype))
    r = np.where(np.isfinite(r), r, np.finfo(np.float64).max)
    _, ex = np.frexp(r)
    spacing = np.ldexp(1.0, np.maximum(ex - 1, emin) - (p - 1))
    err = np.abs(e - o) / spacing
    err = np.where(np.isnan(err), np.inf, err)
    tiny = 2.0**emin  # flush to zero forgiven: impl and oracle both below the smallest normal
    return np.where((np.abs(e) < tiny) & (np.abs(o) < tiny), 0.0, err)


def sweep(name: str, dtype: str, uniform: bool = False) -> np.ndarray:
    """The inputs: every float16 / bfloat16 value, every 256th float32 bit pattern, within the domain."""
    lim = LIM[name]
    if dtype == "float16":
        x = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
    elif dtype == "bfloat16":
        x = (np.arange(0, 1 << 16, dtype=np.uint32) << 16).astype(np.uint32).view(np.float32).astype(np.float64)
    else:
        x = (np.arange(0, 1 << 32, 256, dtype=np.uint64).astype(np.uint32)).view(np.float32).astype(np.float64)
    x = x[np.isfinite(x) & (np.abs(x) <= lim)]
    if uniform:
        x = np.random.default_rng(0).uniform(-lim, lim, 1_000_000).astype(dtype).astype(np.float64)
    return x[x > 0] if name == "log" else x


def _torch(name: str, dtype: str) -> Callable[[np.ndarray], np.ndarray] | None:
    import torch
    import torch.nn.functional as F

    fns = {
        "exp": torch.exp,
        "log": torch.log,
        "tanh": torch.tanh,
        "sigmoid": torch.sigmoid,
        "erf": torch.erf,
        "gelu": F.gelu,
        "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
        "softplus": F.softplus,
        "silu": F.silu,
    }
    td = getattr(torch, dtype)
    return lambda x: fns[name](torch.from_numpy(x).to(td)).double().numpy()


def _numpy(name: str, dtype: str) -> Callable[[np.ndarray], np.ndarray] | None:
    import scipy.special as sp

    if dtype == "bfloat16":
        return None
    fns: dict[str, Callable] = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sigmoid": sp.expit, "erf": sp.erf}
    if name not in fns:
        return None
    f = fns[name]
    # scipy has no float16 loop: float16 goes through float32 (its float32 kernel, rounded once)
    cast = np.float32 if (dtype == "float16" and name in ("sigmoid", "erf")) else np.dtype(dtype).type
    return lambda x: np.asarray(f(x.astype(cast)), dtype=np.dtype(dtype)).astype(np.float64)


def _ort(name: str, dtype: str) -> Callable[[np.ndarray], np.ndarray] | None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if dtype == "bfloat16":
        return None
    et = TensorProto.FLOAT if dtype == "float32" else TensorProto.FLOAT16
    nodes = {
        "exp": [helper.make_node("Exp", ["x"], ["y"])],
        "log": [helper.make_node("Log", ["x"], ["y"])],
        "tanh": [helper.make_node("Tanh", ["x"], ["y"])],
        "sigmoid": [helper.make_node("Sigmoid", ["x"], ["y"])],
        "erf": [helper.make_node("Erf", ["x"], ["y"])],
        "gelu": [helper.make_node("Gelu", ["x"], ["y"], approximate="none")],
        "gelu_tanh": [helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")],
        "softplus": [helper.make_node("Softplus", ["x"], ["y"])],
        "silu": [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])],
    }[name]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", et, [None])], [helper.make_tensor_value_info("y", et, [None])]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as exc:  # an op without a kernel for the dtype
        print(f"  ort {name} {dtype}: {str(exc).splitlines()[0][:100]}", file=sys.stderr)
        return None
    return lambda x: sess.run(None, {"x": x.astype(dtype)})[0].astype(np.float64)


def _jax(name: str, dtype: str) -> Callable[[np.ndarray], np.ndarray] | None:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")
    fns = {
        "exp": jnp.exp,
        "log": jnp.log,
        "tanh": jnp.tanh,
        "sigmoid": jax.nn.sigmoid,
        "erf": jax.scipy.special.erf,
        "gelu": lambda t: jax.nn.gelu(t, approximate=False),
        "gelu_tanh": lambda t: jax.nn.gelu(t, approximate=True),
        "softplus": jax.nn.softplus,
        "silu": jax.nn.silu,
    }
    f = jax.jit(fns[name])
    jd = getattr(jnp, dtype)
    return lambda x: np.asarray(f(jnp.asarray(x.astype(np.float32)).astype(jd)).astype(jnp.float32), np.float64)


LIBS = {"torch": _torch, "numpy": _numpy, "ort": _ort, "jax": _jax}


def violations(name: str, x: np.ndarray, e: np.ndarray, o: np.ndarray, dtype: str) -> str:
    """Range invariant violations: tanh outside [-1, 1]; sigmoid outside [0, 1] or flushed to 0 where the
    oracle is a normal number of the dtype."""
    p, emin = FMT[dtype]
    bad = np.zeros(e.shape, bool)
    if name == "tanh":
        bad = np.abs(e) > 1
    elif name == "sigmoid":
        bad = (e < 0) | (e > 1) | ((e == 0) & (o >= 2.0**emin))
    if not bad.any():
        return ""
    i = int(np.flatnonzero(bad)[0])
    return f"{int(bad.sum())} out of range, first x={x[i]:.9g} -> {e[i]:.9g}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="torch,numpy,ort,jax")
    ap.add_argument("--fn", default=",".join(LIM))
    ap.add_argument("--dtype", default="float32,float16,bfloat16")
    ap.add_argument("--uniform", action="store_true", help="float32: 10^6 uniform inputs (seed 0) instead")
    args = ap.parse_args()
    print("| function | dtype | library | max ulp | mean ulp | worst x | range invariant |")
    print("|---|---|---|---|---|---|---|")
    for name in args.fn.split(","):
        for dtype in args.dtype.split(","):
            x = sweep(name, dtype, args.uniform and dtype == "float32")
            o = _oracle(name, x)
            for lib in args.lib.split(","):
                try:
                    fn = LIBS[lib](name, dtype)
                except ImportError:
                    fn = None
                if fn is None:
                    continue
                t0 = time.perf_counter()
                e = fn(x)
                u = ulp_at_oracle(e, o, dtype)
                ok = np.isfinite(o) & np.isfinite(_round(o, dtype))  # the dtype holds the true result
                u = u[ok]
                i = int(np.argmax(u))
                inv = violations(name, x[ok], e[ok], o[ok], dtype)
                print(
                    f"| {name} | {dtype} | {lib} | {u.max():.3g} | {u.mean():.3g} | {x[ok][i]:.7g} | {inv} |"
                    f"  <!-- n={u.size} {time.perf_counter() - t0:.1f}s -->",
                    flush=True,
                )


if __name__ == "__main__":
    main()

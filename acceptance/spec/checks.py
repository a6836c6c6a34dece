"""Checks a schema cannot make: case symbols against shapes and bounds, per-case values, dtypes, waivers.

Each check returns ``(field path, message)`` pairs; :mod:`acceptance.spec.load`
turns them into :class:`~acceptance.spec.model.SpecProblem` lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from acceptance.formats.dtypes import lookup, torch_dtype
from acceptance.spec.cases import expand, glob_match
from acceptance.spec.expr import Bound, Expr, value_of
from acceptance.spec.model import (
    CaseSpec,
    Choice,
    Dist,
    InputSpec,
    Normal,
    OperatorSpec,
    Preset,
    RandInt,
    Sparse,
    Specials,
    Uniform,
    dist_bounds,
)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _symbols_text(symbols: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in symbols.items())


def _dist_problems(dist: Dist, path: str, symbols: Mapping[str, int], dtype: str | None) -> list[tuple[str, str]]:
    """Problems of one distribution for one case's symbol values (``dtype``: the input's fixed dtype)."""
    out: list[tuple[str, str]] = []
    integer = dtype is not None
    if isinstance(dist, (Uniform, Normal)) and integer:
        kind = "uniform" if isinstance(dist, Uniform) else "normal"
        out.append((path, f"{kind} draws real numbers; {dtype} input needs randint or choice"))
    elif isinstance(dist, Uniform):
        lo, hi = value_of(dist.lo, symbols), value_of(dist.hi, symbols)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            out.append((f"{path}.uniform", f"needs finite lo < hi, got [{lo}, {hi}]"))
    elif isinstance(dist, Normal):
        mean, std = value_of(dist.mean, symbols), value_of(dist.std, symbols)
        if not (math.isfinite(mean) and math.isfinite(std) and std >= 0):
            out.append((f"{path}.normal", f"needs a finite mean and std >= 0, got [{mean}, {std}]"))
    elif isinstance(dist, RandInt):
        lo, hi = value_of(dist.lo, symbols), value_of(dist.hi, symbols)
        low, high = _int_range(dtype)
        if not lo < hi:
            out.append((f"{path}.randint", f"needs lo < hi (hi is exclusive), got [{lo}, {hi}]"))
        elif lo < low or hi - 1 > high:
            out.append((f"{path}.randint", f"[{lo}, {hi}) does not fit {dtype or 'int64'} ({low} .. {high})"))
    elif isinstance(dist, (Choice, Specials)):
        key = "choice" if isinstance(dist, Choice) else "specials.values"
        if integer:
            low, high = _int_range(dtype)
            bad = [v for v in dist.values if not isinstance(v, int) or not low <= v <= high]
            if bad:
                out.append((f"{path}.{key}", f"{bad[0]!r} is not an integer in {dtype} range ({low} .. {high})"))
        if isinstance(dist, Specials):
            out += _dist_problems(dist.of, f"{path}.specials.of", symbols, dtype)
    elif isinstance(dist, Sparse):
        out += _dist_problems(dist.of, f"{path}.sparse.of", symbols, dtype)
    elif isinstance(dist, Preset) and integer:
        out.append((f"{path}.preset", f"a preset draws real numbers; {dtype} input needs randint or choice"))
    return out


def _int_range(dtype: str | None) -> tuple[int, int]:
    if dtype is None or dtype == "int64":
        return _INT64_MIN, _INT64_MAX
    if dtype == "bool":
        return 0, 1
    import torch  # here, so that loading specs starts without torch

    info = torch.iinfo(torch_dtype(dtype))
    return info.min, info.max


def input_case_problems(inputs: list[InputSpec], cases: list[CaseSpec]) -> list[tuple[str, str]]:
    """What the schema cannot check about inputs and cases: names, symbols, per-case values."""
    out: list[tuple[str, str]] = []
    seen_names: dict[str, int] = {}
    for i, inp in enumerate(inputs):
        if inp.name in seen_names:
            first = seen_names[inp.name]
            out.append((f"inputs[{i}].name", f"duplicate input name {inp.name!r} (also inputs[{first}])"))
        seen_names.setdefault(inp.name, i)

    bounds: list[tuple[str, Bound]] = []
    for i, inp in enumerate(inputs):
        bounds += [(f"inputs[{i}].shape[{j}]", d) for j, d in enumerate(inp.shape)]
        bounds += dist_bounds(inp.dist, f"inputs[{i}].dist")
    exprs = [(p, e) for p, e in bounds if isinstance(e, Expr)]
    used = {n: p for p, e in reversed(exprs) for n in e.names}
    defined = list(dict.fromkeys(k for c in cases for k in c.symbols))
    known = ", ".join(sorted(defined)) or "none"
    for p, e in exprs:
        for n in e.names:
            if n not in defined:
                out.append((p, f"unknown symbol {n!r} (case symbols: {known})"))

    for c in cases:
        for n in c.symbols:
            if n not in used:
                uses = ", ".join(sorted(used)) or "none"
                out.append(
                    (
                        f"cases[{c.index}].{n}",
                        f"symbol {n!r} is used by no input shape or bound (used: {uses}); "
                        "put keyword arguments under params",
                    )
                )
        missing = [n for n in used if n in defined and n not in c.symbols]
        for n in missing:
            out.append((f"cases[{c.index}]", f"missing symbol {n!r} (used by {used[n]})"))
        where = f" for cases[{c.index}] ({_symbols_text(c.symbols)})"
        known_here = c.symbols.keys()
        for p, e in exprs:
            if not set(e.names) <= known_here:
                continue
            try:
                value = e.evaluate(c.symbols)
            except ZeroDivisionError:
                out.append((p, f"{e} divides by zero{where}"))
                continue
            if ".shape[" in p and value < 0:
                out.append((p, f"{e} = {value}{where}; a dimension must be >= 0"))
        for i, inp in enumerate(inputs):
            dist_exprs = [e for p, e in exprs if p.startswith(f"inputs[{i}].dist")]
            if not all(set(e.names) <= known_here for e in dist_exprs):
                continue
            try:
                problems = _dist_problems(inp.dist, f"inputs[{i}].dist", c.symbols, inp.dtype)
            except ZeroDivisionError:
                continue
            out += [(p, m + (where if dist_exprs else "")) for p, m in problems]

    if not any(isinstance(inp.dist, Preset) for inp in inputs):
        out += [
            (f"cases[{c.index}].preset", "no input has `dist: {preset: ...}` for the case's preset to apply to")
            for c in cases
            if c.preset
        ]
    return list(dict.fromkeys(out))


def dtype_problems(dtypes: list[str], per_dtype: Mapping[str, Mapping[str, object]]) -> list[tuple[str, str]]:
    """Duplicate test dtypes, and per-dtype sections (``thresholds``, ``floors``) for a dtype that is not tested."""
    out = [(f"dtypes[{k}]", f"duplicate dtype {dt!r}") for k, dt in enumerate(dtypes) if dt in dtypes[:k]]
    out += [
        (f"{section}.{dt}", f"dtype {dt!r} is not tested (dtypes: {', '.join(dtypes)})")
        for section, entries in per_dtype.items()
        for dt in entries
        if dt not in dtypes
    ]
    return out


def waiver_problems(spec: OperatorSpec) -> list[tuple[str, str]]:
    ids = [c.id for c in expand([spec])]
    return [
        (f"waivers[{k}].match", f"{w.match!r} matches no case id of this operator (e.g. {ids[0]})")
        for k, w in enumerate(spec.waivers)
        if not any(glob_match(i, w.match) for i in ids)
    ]


def memory_problems(spec: OperatorSpec) -> list[tuple[str, str]]:
    """Cases whose inputs alone would need more than the spec's memory limit (each role gets its own copy,
    and the oracle a float64 one): a spec error naming the case and the size, found before anything runs."""
    out = []
    limit = spec.memory_limit_gib * 2**30
    for case in expand([spec]):
        width = lookup(case.dtype).itemsize
        elements = [math.prod(shape) for shape in case.shapes]
        need = (
            sum(
                n * (lookup(inp.dtype).itemsize if inp.dtype else width)
                for n, inp in zip(elements, spec.inputs, strict=False)
            )
            * 3
            + sum(elements) * 8
        )
        if need > limit:
            out.append(
                (
                    f"cases[{case.index}]",
                    f"{case.id} needs {need / 2**30:.3g} GiB for its inputs (three "
                    f"copies and a float64 one), over the memory limit of {spec.memory_limit_gib:.3g} GiB "
                    "(memory_limit_gib)",
                )
            )
    return out


def _special_values(dist: Dist) -> list[float]:
    """The fixed values a distribution can produce (``choice`` and ``specials`` values, nested ones too)."""
    if isinstance(dist, Choice):
        return list(dist.values)
    if isinstance(dist, Specials):
        return list(dist.values) + _special_values(dist.of)
    if isinstance(dist, Sparse):
        return _special_values(dist.of)
    return []


def quant_problems(inputs: list[InputSpec], cases: list[CaseSpec]) -> list[tuple[str, str]]:
    """Quantized inputs: the last dimension a multiple of the block size in every case, and no inf/NaN among
    the values the distribution can produce (GGML's quantizers have no encoding for them)."""
    from acceptance.formats.dtypes import lookup

    out: list[tuple[str, str]] = []
    for i, inp in enumerate(inputs):
        if inp.quant is None:
            continue
        block = lookup(inp.quant).block
        bad = [v for v in _special_values(inp.dist) if isinstance(v, float) and not math.isfinite(v)]
        if bad:
            out.append(
                (
                    f"inputs[{i}].dist",
                    f"{bad[0]!r}: input {inp.name!r} is quantized to {inp.quant}, which cannot encode inf or NaN",
                )
            )
        last = len(inp.shape) - 1
        for c in cases:
            k = value_of(inp.shape[last], c.symbols)
            if k % block:
                out.append(
                    (
                        f"inputs[{i}].shape[{last}]",
                        f"input {inp.name!r}: {inp.shape[last]} = {k} for "
                        f"cases[{c.index}] ({_symbols_text(c.symbols)}) is not a multiple of {block}, the "
                        f"{inp.quant} block size",
                    )
                )
    return out


def perf_problems(spec: OperatorSpec) -> list[tuple[str, str]]:
    """``perf.flops`` and ``perf.bytes``: only case symbols, a value >= 0 in every case."""
    out: list[tuple[str, str]] = []
    for key in ("flops", "bytes"):
        e = (spec.perf or {}).get(key)
        if not isinstance(e, Expr):
            continue
        for c in spec.cases:
            missing = [n for n in e.names if n not in c.symbols]
            if missing:
                out.append(
                    (
                        f"perf.{key}",
                        f"unknown symbol {missing[0]!r} in cases[{c.index}] "
                        f"(case symbols: {', '.join(c.symbols) or 'none'})",
                    )
                )
                break
            try:
                value = e.evaluate(c.symbols)
            except ZeroDivisionError:
                out.append((f"perf.{key}", f"{e} divides by zero for cases[{c.index}]"))
                break
            if value < 0:
                out.append((f"perf.{key}", f"{e} = {value} < 0 for cases[{c.index}] ({_symbols_text(c.symbols)})"))
                break
    return out

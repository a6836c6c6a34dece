"""Per-case thresholds: expressions of case symbols, and overrides scoped to case ids by a glob.

A threshold in ``thresholds.<dtype>`` or in an ``overrides`` entry is a number
or an expression of the case's symbols (``"3e-3 * sqrt(K / 128)"``, parsed by
:func:`acceptance.spec.expr.parse_real`, never ``eval``). An ``overrides``
entry applies to the case ids its ``match`` glob matches (the globs of waivers
and ``--only``), over the per-dtype thresholds and the spec's ``dual_delta``;
when several match, later entries win. Each resolved value keeps the words of
where it came from, which the verdict records as the criterion's ``source``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from acceptance.spec.cases import expand, glob_match
from acceptance.spec.expr import RealExpr, parse_real
from acceptance.spec.model import Case, OperatorSpec

if TYPE_CHECKING:
    from acceptance.spec.kinds import JSONValue
    from acceptance.spec.model import ThresholdSpec

#: The source of a per-dtype threshold written as a number.
PLAIN_SOURCE = "spec override"


#: A threshold for one case: a number, a pair (diff3), or a flag (diff4).
ThresholdOverride = float | list[float] | bool


@dataclass(frozen=True)
class CaseOverrides:
    """What a case's spec says beyond the category defaults, resolved for that case.

    ``thresholds``: metric -> value (expressions evaluated); ``sources``: metric -> where it came from, in
    words; ``dual_delta``: the spec's ``dual_delta`` keys with matching overrides applied (``factor`` merged per
    metric, ``"*"`` for every metric not named); ``dual_delta_sources``: metric (or ``"*"``) -> the override that set
    its factor.
    """

    thresholds: dict[str, ThresholdOverride]
    sources: dict[str, str]
    dual_delta: dict[str, JSONValue]
    dual_delta_sources: dict[str, str]


def threshold_value(value: ThresholdSpec, symbols: dict[str, int]) -> ThresholdOverride:
    """A threshold as written (a number, a pair, a flag, or an expression's text) for a case's symbols.

    Raises ``ValueError`` (naming the expression) when the expression uses a symbol the case does not have or
    does not give a finite number >= 0.
    """
    if not isinstance(value, str):
        return value
    expr = parse_real(value)
    if not isinstance(expr, RealExpr):
        return expr
    missing = [n for n in expr.names if n not in symbols]
    if missing:
        raise ValueError(
            f"{value!r} uses {', '.join(missing)}, not a symbol of this case (symbols: {', '.join(symbols) or 'none'})"
        )
    try:
        out = expr.evaluate(symbols)
    except (ValueError, ZeroDivisionError, OverflowError) as exc:
        raise ValueError(f"{value!r} cannot be evaluated with {_symbols_text(expr, symbols)}: {exc}") from None
    if not (math.isfinite(out) and out >= 0):
        raise ValueError(
            f"{value!r} gives {out!r} with {_symbols_text(expr, symbols)}; a threshold must be a finite number >= 0"
        )
    return out


def _symbols_text(expr: RealExpr, symbols: dict[str, int]) -> str:
    return ", ".join(f"{n}={symbols[n]}" for n in expr.names) or "no symbols"


def _source(base: str, value: ThresholdSpec, symbols: dict[str, int]) -> str:
    if isinstance(value, str):
        expr = parse_real(value)
        if isinstance(expr, RealExpr):
            return f"{base}: {expr.text} at {_symbols_text(expr, symbols)}"
    return base


def case_overrides(case: Case) -> CaseOverrides:
    """The spec's thresholds and dual-delta settings for one case: per dtype, then every matching override."""
    spec = case.spec
    thresholds: dict[str, ThresholdOverride] = {}
    sources: dict[str, str] = {}
    for metric, value in spec.thresholds.get(case.dtype, {}).items():
        thresholds[metric] = threshold_value(value, case.symbols)
        sources[metric] = _source(PLAIN_SOURCE, value, case.symbols)
    section = dict(spec.dual_delta or {})
    dd_sources: dict[str, str] = {}
    for o in spec.overrides:
        if not glob_match(case.id, o.match):
            continue
        where = f"spec override overrides[{o.index}] (match {o.match!r})"
        for metric, value in o.thresholds.items():
            thresholds[metric] = threshold_value(value, case.symbols)
            sources[metric] = _source(where, value, case.symbols)
        dd = dict(o.dual_delta)
        if "factor" in dd:
            old, new = section.get("factor"), dd.pop("factor")
            if isinstance(new, dict):  # per metric, over what was there ("*": the factor of every other metric)
                merged = dict(old) if isinstance(old, dict) else ({"*": old} if old is not None else {})
                section["factor"] = {**merged, **new}
                dd_sources.update({m: where for m in new})
            else:
                section["factor"] = new
                dd_sources = {"*": where}
        section.update(dd)
    return CaseOverrides(thresholds, sources, section, dd_sources)


def override_problems(spec: OperatorSpec) -> list[tuple[str, str]]:
    """Overrides that match no case id, and threshold expressions that do not evaluate for a case they apply
    to (a symbol the case lacks, a value that is not a finite number >= 0): (field path, sentence)."""
    out: list[tuple[str, str]] = []
    cases = expand([spec])
    ids = [c.id for c in cases]
    for o in spec.overrides:
        if not any(glob_match(i, o.match) for i in ids):
            out.append(
                (f"overrides[{o.index}].match", f"{o.match!r} matches no case id of this operator (e.g. {ids[0]})")
            )
    for case in cases:
        scoped = [(f"thresholds.{case.dtype}", spec.thresholds.get(case.dtype, {}))]
        scoped += [
            (f"overrides[{o.index}].thresholds", o.thresholds) for o in spec.overrides if glob_match(case.id, o.match)
        ]
        for where, values in scoped:
            for metric, value in values.items():
                try:
                    threshold_value(value, case.symbols)
                except ValueError as exc:
                    out.append((f"{where}.{metric}", f"{exc} (case {case.id})"))
    return list(dict.fromkeys(out))

"""Case expansion and ids: one :class:`~acceptance.spec.model.Case` per (operator, dtype, case).

A case id reads ``matmul[float16-M=128-N=128-K=128]``: the operator, the test
dtype, the case symbols in case order, then the case's own params. It does
not depend on filters, shards or other specs, so a case's seed (derived from
its id) does not either.
"""

from __future__ import annotations

import fnmatch
import json
from datetime import date, datetime, timezone

from acceptance.errors import SpecError
from acceptance.formats.dtypes import TEST_DTYPES
from acceptance.spec.messages import one_of
from acceptance.spec.model import Case, OperatorSpec


def glob_match(text: str, pattern: str) -> bool:
    """Glob match where ``*`` and ``?`` are wildcards and ``[`` ``]`` match themselves,
    so a case id such as ``matmul[float16-M=1-N=1-K=32]`` is its own pattern."""
    return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]"))


def _compact(value: object) -> str:
    """A param value in a case id: strings bare, floats by ``repr`` (``inf``), the rest as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"))


def case_labels(spec: OperatorSpec) -> list[str]:
    """Per case: ``M=128-N=128-K=128`` (symbols in case order, then the case's own params);
    a label equal to an earlier one gets ``#<index>``."""
    labels: list[str] = []
    for c in spec.cases:
        parts = [f"{k}={v}" for k, v in c.symbols.items()] + [f"{k}={_compact(v)}" for k, v in c.params.items()]
        parts += [f"preset={c.preset}"] if c.preset else []
        parts += [f"{role}.{k}={_compact(v)}" for role, given in c.role_params.items() for k, v in given.items()]
        label = "-".join(parts)
        labels.append(f"{label}#{c.index}" if label in labels else label)
    return labels


def role_params(spec: OperatorSpec, case_roles: dict[str, dict]) -> dict[str, dict]:
    """Per role, the spec's ``<role>_params`` with the case's merged over them; an oracle that defaults to the
    baseline (no ``oracle:``) takes the baseline's params under its own."""
    roles = {r: {**spec.role_params.get(r, {}), **case_roles.get(r, {})} for r in ("impl", "baseline", "oracle")}
    if spec.oracle is None:
        roles["oracle"] = {**roles["baseline"], **roles["oracle"]}
    return {r: given for r, given in roles.items() if given}


def expand(
    specs: list[OperatorSpec], *, dtypes: list[str] | None = None, only: str | None = None, today: date | None = None
) -> list[Case]:
    """All cases to run, operator by operator, then dtype (spec order), then case.

    ``dtypes`` keeps only those test dtypes (unknown names raise :class:`SpecError`).
    ``only`` keeps the cases whose operator name or case id matches the glob
    (see :func:`glob_match`). A case's id, and so its seed, does not depend on the filters.
    ``today`` (default: the UTC date) decides which waivers have expired.
    """
    today = today or datetime.now(timezone.utc).date()
    if dtypes is not None:
        unknown = [d for d in dtypes if d not in TEST_DTYPES]
        if unknown:
            raise SpecError(f"unknown dtype {one_of(unknown[0], TEST_DTYPES)}")
    out: list[Case] = []
    for spec in specs:
        labels = case_labels(spec)
        for dtype in spec.dtypes:
            if dtypes is not None and dtype not in dtypes:
                continue
            for c, label in zip(spec.cases, labels, strict=False):
                case_id = f"{spec.name}[{dtype}{'-' if label and not label.startswith('#') else ''}{label}]"
                if only is not None and not (glob_match(spec.name, only) or glob_match(case_id, only)):
                    continue
                matching = [w for w in spec.waivers if glob_match(case_id, w.match)]
                active = next((w for w in matching if not w.expired(today)), None)
                expired = next((w for w in matching if w.expired(today)), None)
                roles = role_params(spec, c.role_params)
                out.append(
                    Case(
                        spec,
                        dtype,
                        dict(c.symbols),
                        {**spec.params, **c.params},
                        c.index,
                        case_id,
                        active.reason if active else None,
                        preset=c.preset,
                        role_params=roles,
                        waiver_covers=active.covers if active else ("fail",),
                        expired_waiver=f"waiver expired on {expired.expires}: {expired.reason}" if expired else None,
                    )
                )
    return out

"""Case expansion and ids: one :class:`~acceptance.spec.model.Case` per (operator, dtype, case).

A case id reads ``matmul[float16-M=128-N=128-K=128]``: the operator, the test
dtype, the case symbols in case order, then the case's own params. It does
not depend on filters, shards or other specs, so a case's seed (derived from
its id) does not either.
"""

from __future__ import annotations

import fnmatch
import json
from typing import Any, Optional

from acceptance.dtypes import TEST_DTYPES
from acceptance.errors import SpecError
from acceptance.spec.messages import one_of
from acceptance.spec.model import Case, OperatorSpec


def glob_match(text: str, pattern: str) -> bool:
    """Glob match where ``*`` and ``?`` are wildcards and ``[`` ``]`` match themselves,
    so a case id such as ``matmul[float16-M=1-N=1-K=32]`` is its own pattern."""
    return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]"))


def _compact(value: Any) -> str:
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
        label = "-".join(parts)
        labels.append(f"{label}#{c.index}" if label in labels else label)
    return labels


def expand(specs: list[OperatorSpec], *, dtypes: Optional[list[str]] = None, only: Optional[str] = None) -> list[Case]:
    """All cases to run, operator by operator, then dtype (spec order), then case.

    ``dtypes`` keeps only those test dtypes (unknown names raise :class:`SpecError`).
    ``only`` keeps the cases whose operator name or case id matches the glob
    (see :func:`glob_match`). A case's id, and so its seed, does not depend on the filters.
    """
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
            for c, label in zip(spec.cases, labels):
                case_id = f"{spec.name}[{dtype}{'-' if label and not label.startswith('#') else ''}{label}]"
                if only is not None and not (glob_match(spec.name, only) or glob_match(case_id, only)):
                    continue
                waiver = next((w.reason for w in spec.waivers if glob_match(case_id, w.match)), None)
                out.append(Case(spec, dtype, dict(c.symbols), {**spec.params, **c.params}, c.index, case_id, waiver,
                                c.preset))
    return out

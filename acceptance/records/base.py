"""Shared pieces of the records: the schema version, verdict names, JSON-safe floats, the base model."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Literal, TypeAlias, Union

from pydantic import BaseModel, ConfigDict, PlainSerializer
from typing_extensions import TypeAliasType

SCHEMA_VERSION = 3

Verdict = Literal["pass", "fail", "error", "skip"]
VERDICT_ORDER: dict[str, int] = {"fail": 0, "error": 1, "skip": 2, "pass": 3}


def json_float(x: float) -> float | str:
    """``inf``, ``-inf`` and ``nan`` as the strings strict JSON can hold; other values unchanged."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


#: A float that survives JSON even when it is ``inf`` or ``nan``: written as the strings of
#: :func:`json_float`, which pydantic's float validation reads back as those values itself (no Python call
#: per float on reading: ~15 ms of every ``report`` of the built-in library's results.json).
JFloat = Annotated[float, PlainSerializer(json_float)]

#: One metric value: a float, or a tuple of floats for ``diff3`` (m1, m2) and
#: ``diff4`` (p1, p2, n).
MetricValue = JFloat | list[JFloat] | None

#: Plain data as JSON holds it: null, booleans, numbers, strings, lists and string-keyed mappings (a case's
#: symbols and params).
if TYPE_CHECKING:
    JSON: TypeAlias = "None | bool | int | float | str | list[JSON] | dict[str, JSON]"
else:  # the same alias as pydantic validates it (recursive)
    JSON = TypeAliasType("JSON", Union[None, bool, int, float, str, list["JSON"], dict[str, "JSON"]])  # noqa: UP007


class Model(BaseModel):
    """Base of every record: unknown fields are an error; attribute docstrings document the schema (read by
    :mod:`acceptance.docgen` from the source, not at import: pydantic's extraction costs ~0.1 s per start)."""

    # a non-finite float outside JFloat is written as the string "NaN", "Infinity" or "-Infinity", which strict
    # JSON can hold and pydantic reads back as the float
    model_config = ConfigDict(extra="forbid", defer_build=True, ser_json_inf_nan="strings")

"""The cases of a large HTML report as data: compact JSON the page's script turns into table rows and, when a
row is opened, into its detail section.

Past :data:`acceptance.report.html.INLINE_MAX` cases the report does not lay out every row and detail section
(at 15,000 cases that was 1.4 million elements and a 50 s load); it embeds each case once, in two
``<script type="application/json">`` blocks: the table rows (:func:`row`), and the detail sections
(:func:`detail`) gzip-compressed in chunks of :data:`CHUNK` cases (:func:`packed`); ``cases.js`` shows one page
of rows at a time and decodes a chunk when one of its cases is opened. The values are
the strings the small report prints (the same case views, numbers formatted in Python by
:mod:`acceptance.wording`), so both layouts show the same numbers; the script inserts text with
``textContent`` only, except the charts, which are the SVG markup the small report inlines (escaped there).

The JSON is safe inside ``<script>``: ``<``, ``>`` and ``&`` are written ``\\u003c``, ``\\u003e``, ``\\u0026``,
and U+2028/U+2029 as escapes, so no string can close the element or start a comment.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
from collections.abc import Mapping

from markupsafe import Markup

from acceptance.records import CaseResult
from acceptance.wording import counted, fmt, visible_controls

#: Row fields, in order: what the table shows and sorts by (see ``cases.js``).
ROW_FIELDS = (
    "verdict",
    "id",
    "operator",
    "category",
    "dtype",
    "params",
    "deciding",
    "margin",
    "margin_sort",
    "time",
    "time_sort",
    "verdict_sort",
    "anchor",
)


def _visible(text: str) -> str:
    return text if text.isprintable() else visible_controls(text)


def shown(value: object) -> object:
    """``value`` as the page prints it: strings with control characters made visible (as the templates'
    ``finalize`` does), tuples as lists, :class:`Markup` (charts) as its HTML text, recursively."""
    if isinstance(value, Markup):
        return str(value)
    if isinstance(value, str):
        return _visible(value)
    if isinstance(value, dict):
        return {k: shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return fmt(value)  # JSON has no nan or inf; the views hold formatted text, this is a guard
    return value


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def item_json(value: object) -> str:
    """``value`` as compact JSON, its strings as :func:`shown` prints them. Fast path: JSON text that holds no
    character outside :meth:`str.isprintable` and no escape of a C0 control (``\\u00..``, ``\\b``,
    ``\\f``; tab, newline and carriage return are kept as they are) has no string that
    :func:`acceptance.wording.visible_controls` would change, so it is used as it is; otherwise (text from
    the code under test with control or bidi characters) every string is made visible first."""
    try:
        text = _json(value)
    except ValueError:  # a non-finite number
        return _json(shown(value))
    if text.isprintable() and "\\u00" not in text and "\\b" not in text and "\\f" not in text:
        return text
    return _json(shown(value))


def script_json(items: list[str]) -> Markup:
    """A JSON array of ``items`` (JSON texts, :func:`item_json`) that can stand between
    ``<script type="application/json">`` and ``</script>`` (see the module docstring)."""
    text = "[" + ",".join(items) + "]"
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escaped)
    return Markup(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


#: Detail sections per compressed chunk: opening a case decodes its chunk only (~0.1-1 MB of JSON).
CHUNK = 200


def packed(items: list[str], chunk: int = CHUNK) -> Markup:
    """The detail sections as a JSON array of strings, each the base64 of the gzip of one JSON array of
    ``chunk`` items (:func:`script_json`; gzip with mtime 0, so the page is the same for the same run).
    Compressed, the 80 MB of detail text of 20,000 cases takes a few MB of the page; base64 needs no escape
    inside ``<script>``."""
    parts = []
    for start in range(0, len(items), chunk):
        text = str(script_json(items[start : start + chunk])).encode("utf-8")
        parts.append(base64.b64encode(gzip.compress(text, compresslevel=6, mtime=0)).decode("ascii"))
    return Markup(json.dumps(parts))


def row(case: CaseResult, view: Mapping[str, object]) -> str:
    """One table row: the fields of :data:`ROW_FIELDS`, from ``case`` and its view (``html._case_view``)."""
    flat: dict[str, object] = {"verdict": case.verdict, "id": case.id, "operator": case.operator}
    flat |= {"category": case.category, "dtype": case.dtype, **view}
    return item_json([flat[name] for name in ROW_FIELDS])


#: View entries the detail leaves out: the record itself, the table's sort keys, the small layout's open flag.
_NOT_IN_DETAIL = frozenset({"case", "open", "margin_sort", "time_sort", "verdict_sort"})


def detail(case: CaseResult, view: Mapping[str, object]) -> str:
    """What the detail section of one case shows (the small report's ``<details>``), as JSON text."""
    rows = view["criteria"]
    return item_json(
        {
            "description": case.description,
            "spec": case.spec_file,
            "trials": counted(case.trials, "trial"),
            "seed": str(case.seed),  # as text: a JavaScript number keeps 53 bits
            "waiver": case.waiver,
            "error": case.error,
            "warnings": case.warnings,
            "reasons": case.reasons,
            **{k: v for k, v in view.items() if k not in _NOT_IN_DETAIL},
            "criteria": [_criterion(r, full=bool(view["full"])) for r in rows],  # type: ignore[attr-defined]
        }
    )


_CRITERION_COLUMNS = ("metric", "value", "comparison", "threshold", "margin", "result", "source", "note")


def _criterion(r: Mapping[str, object], *, full: bool) -> list[object]:
    """A criterion as the detail shows it: the table's columns and note, or (one-line criteria) text and margin."""
    return [r[k] for k in _CRITERION_COLUMNS] if full else [r["text"], r["margin"]]

"""The tables of ``docs/`` that restate code, generated from the code.

A Markdown file marks each generated block::

    <!-- generated: metrics -->
    ...the table...
    <!-- end generated -->

``python -m acceptance.docgen`` rewrites every block under ``docs/`` (and the
README); ``python -m acceptance.docgen --check`` lists the stale ones and
exits 1, which is what the test suite does, so docs and code cannot disagree.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union, get_args, get_origin

import click

from acceptance import errors
from acceptance.formats import dtypes
from acceptance.numerics import factors
from acceptance.numerics.metrics import registry
from acceptance.records import CaseResult, Criterion, DualDeltaRecord, MeasuredCase, OutputMeasurement, Results
from acceptance.spec import defaults
from acceptance.spec.model import CATEGORIES
from acceptance.wording import fmt, fmt_value

if TYPE_CHECKING:
    from pydantic import BaseModel

BLOCK = re.compile(r"(<!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- end generated -->)", re.S)


def _table(head: list[str], rows: list[list[str]]) -> str:
    cell = lambda text: " ".join(str(text).split()).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def metrics_table() -> str:
    """Every metric of the registry: name, kind, formula, units, source."""
    return _table(
        ["metric", "kind", "formula (e = evaluated, b = baseline)", "units", "source"],
        [[f"`{m.name}`", m.kind, m.formula, m.units, m.source] for m in registry.REGISTRY],
    )


def categories_table() -> str:
    """The default criteria per category and test dtype (MLU-OPS's table, scaled where it names no dtype)."""
    rows = []
    for category in CATEGORIES:
        row = [f"`{category}`"]
        for dtype in dtypes.TEST_DTYPES:
            ths = defaults.thresholds_for(category, dtype)
            row.append(
                ", ".join(f"{t.metric} {t.comparison} {fmt_value(t.value)}" for t in ths)
                or "bits of the baseline or of the rounded oracle"
            )
        row.append("yes" if category in defaults.DEFAULT_CATEGORIES else "no")
        rows.append(row)
    return _table(["category", *dtypes.TEST_DTYPES, "dual-delta by default"], rows)


def floors_table() -> str:
    """The accuracy floors per category and test dtype (max / mean ulp against the oracle)."""
    rows = []
    for category in CATEGORIES:
        cells = []
        for dtype in dtypes.TEST_DTYPES:
            floor_max, floor_mean = defaults.floors_for(category, dtype)
            cells.append("—" if floor_max is None and floor_mean is None else f"{fmt(floor_max)} / {fmt(floor_mean)}")
        rows.append([f"`{category}`", *cells])
    return _table(["category", *dtypes.TEST_DTYPES], rows)


def dtypes_table() -> str:
    """The float rows of the dtype table."""
    rows = [
        [
            f"`{d.name}`",
            str(d.bits),
            str(d.precision),
            str(d.emin),
            fmt(d.unit_roundoff),
            fmt(d.smallest_normal),
            fmt(d.max),
            "inf" if d.has_inf else ("NaN" if d.name.endswith("fnuz") else "saturates"),
            fmt(d.diff3_threshold),
            d.mlu_scale_from or "—",
            "yes" if d.test else "no",
        ]
        for d in dtypes.TABLE.values()
        if d.is_float
    ]
    return _table(
        [
            "dtype",
            "bits",
            "p",
            "emin",
            "u = 2^-p",
            "smallest normal",
            "largest",
            "overflow",
            "diff3 th",
            "MLU-OPS scaled from",
            "test dtype",
        ],
        rows,
    )


def factors_table() -> str:
    """The default non-inferiority factor per dual-delta metric."""
    rows = [
        [f"`{m}`", fmt(f), "yes" if m in defaults.DEFAULT_METRICS else ""] for m, f in factors.DEFAULT_FACTORS.items()
    ]
    rows.append(["any other scalar error", fmt(factors.DEFAULT_FACTOR), ""])
    return _table(["metric", "factor", "collected by default"], rows)


def exit_codes_table() -> str:
    """The exit codes of :mod:`acceptance.errors`."""
    codes = [
        (errors.EXIT_OK, "every case passed (skipped and waived cases included)"),
        (errors.EXIT_FAIL, "a criterion failed or a case errored"),
        (errors.EXIT_USAGE, "usage, spec, results or output-folder problem; one line per problem, nothing run"),
        (errors.EXIT_INTERRUPTED, "interrupted (SIGINT, Ctrl-C); the finished cases are on disk"),
        (errors.EXIT_TERMINATED, "terminated (SIGTERM, as CI sends on cancel); the finished cases are on disk"),
    ]
    return _table(["code", "meaning"], [[str(c), m] for c, m in codes])


def type_name(annotation: object) -> str:
    """A field's type as the JSON reader sees it: ``float``, ``list[float]``, ``str or null``, ``'a' | 'b'``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin is Literal:
        return " | ".join(repr(a) for a in args)
    if origin in (Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin in (list, tuple):
        return f"list[{type_name(args[0])}]" if args else "list"
    if origin is dict:
        return f"dict[{type_name(args[0])}, {type_name(args[1])}]" if args else "dict"
    return "any" if annotation is Any else getattr(annotation, "__name__", str(annotation))  # a field typed Any


def attribute_docs(model: type) -> dict[str, str]:
    """The docstring under each annotated attribute of ``model`` and its bases (the nearest class wins),
    cleaned with :func:`inspect.cleandoc`, from the classes' source."""
    import ast
    import inspect
    import textwrap

    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for stmt, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = inspect.cleandoc(nxt.value.value)
    return docs


def _fields_table(model: type[BaseModel]) -> str:
    docs = attribute_docs(model)
    rows = [
        [f"`{name}`", type_name(info.annotation), info.description or docs.get(name, "")]
        for name, info in model.model_fields.items()
    ]
    return _table(["field", "type", "meaning"], rows)


def cli_reference() -> str:
    """Every command with its usage line and options, from the click definitions."""
    from acceptance.cli import main

    out = []
    ctx = click.Context(main, info_name="acceptance")
    for name, command in main.commands.items():
        sub = click.Context(command, info_name=name, parent=ctx)
        usage = " ".join(command.collect_usage_pieces(sub))
        out += [
            f"### `acceptance {name}`",
            "",
            (command.help or "").strip().splitlines()[0],
            "",
            f"```\nacceptance {name} {usage}\n```",
            "",
        ]
        rows = []
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                record = param.get_help_record(sub)
                if record:
                    rows.append([f"`{record[0]}`", record[1]])
        if rows:
            out.append(_table(["option", "meaning"], rows))
    return "\n".join(out).rstrip() + "\n"


GENERATORS: dict[str, Callable[[], str]] = {
    "metrics": metrics_table,
    "categories": categories_table,
    "dtypes": dtypes_table,
    "floors": floors_table,
    "factors": factors_table,
    "exit-codes": exit_codes_table,
    "case-fields": lambda: _fields_table(CaseResult),
    "criterion-fields": lambda: _fields_table(Criterion),
    "measured-case-fields": lambda: _fields_table(MeasuredCase),
    "output-fields": lambda: _fields_table(OutputMeasurement),
    "dual-delta-fields": lambda: _fields_table(DualDeltaRecord),
    "results-fields": lambda: _fields_table(Results),
    "cli": cli_reference,
}


def render(text: str, source: str = "") -> tuple[str, list[str]]:
    """``text`` with every generated block refreshed, and the names of the blocks that changed.

    Raises ``ValueError`` naming ``source`` for an unknown block name.
    """
    stale: list[str] = []

    def refresh(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise ValueError(f"{source}: unknown generated block {name!r} (known: {', '.join(GENERATORS)})")
        body = GENERATORS[name]()
        if body != m.group("body"):
            stale.append(name)
        return m.group(1) + body + m.group(4)

    return BLOCK.sub(refresh, text), stale


def doc_files(root: Path) -> list[Path]:
    """The Markdown files that may hold generated blocks: ``docs/*.md`` and the README."""
    return sorted((root / "docs").glob("*.md")) + [root / "README.md"]


def main(argv: list[str]) -> int:
    root = Path(__file__).resolve().parents[1]
    check = "--check" in argv
    stale_files = []
    for path in doc_files(root):
        text = path.read_text(encoding="utf-8")
        new, stale = render(text, str(path))
        if stale:
            stale_files.append(f"{path.relative_to(root)}: {', '.join(stale)}")
            if not check:
                path.write_text(new, encoding="utf-8")
    for line in stale_files:
        print(("stale: " if check else "updated: ") + line)
    return 1 if check and stale_files else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

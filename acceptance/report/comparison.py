"""The comparison of two runs as terminal lines: the outcome, the regressions in words, then one table of the
cases that changed verdict or whose error grew the most. From :class:`acceptance.records.Comparison` alone.

Every cell is made safe for a terminal or a CI log (:func:`acceptance.wording.safe`); counts agree with their
nouns (:func:`acceptance.wording.counted`).
"""

from __future__ import annotations

from acceptance.records import CaseComparison, Comparison
from acceptance.wording import counted, fmt, safe

#: Rows of the table at most; the rest are counted.
LIMIT = 20

_HEAD = ("case", "base", "new", "change", "worst NEW/BASE", "metric", "flagged")


def _row(c: CaseComparison) -> tuple[str, ...]:
    worst = max(c.ratios, key=lambda r: r.ratio) if c.ratios else None
    return (
        safe(c.id, 120),
        c.base_verdict or "-",
        c.new_verdict or "-",
        c.change,
        f"{fmt(worst.ratio)}x" if worst is not None else "-",
        safe(worst.metric, 40) if worst is not None else "-",
        "grew" if c.grew else ("slower" if c.slower else ""),
    )


def _rank(c: CaseComparison) -> tuple[bool, bool, float]:
    """Changed verdicts first, then flagged cases, then the largest worst ratio NEW/BASE."""
    return (c.change == "same", not (c.grew or c.slower), -(c.worst_ratio or 0.0))


def terminal_table(cmp: Comparison, *, limit: int = LIMIT) -> list[str]:
    """Lines for a terminal: ``compared with BASE: no regression|REGRESSION``, the counts, each regression, and a
    table (columns aligned with spaces) of at most ``limit`` cases: the verdict changes, then the largest worst
    error ratios NEW/BASE (impl against the rounded oracle), with ``grew`` where a ratio is above
    ``cmp.max_ratio`` and ``slower`` where the median time grew too much."""
    moved = sum(c.change != "same" for c in cmp.cases)
    lines = [
        f"compared with {safe(cmp.base)}: {'no regression' if cmp.passed else 'REGRESSION'}",
        f"{counted(len(cmp.cases), 'case')}, {counted(moved, 'verdict change')}, "
        f"{counted(len(cmp.regressions), 'regression')}; an error may grow {fmt(cmp.max_ratio)}x "
        f"({safe(', '.join(cmp.metrics))})",
    ]
    lines += [f"  {safe(r)}" for r in cmp.regressions[:limit]]
    if len(cmp.regressions) > limit:
        lines.append(f"  ... and {counted(len(cmp.regressions) - limit, 'more regression')}")
    shown = sorted((c for c in cmp.cases if c.change != "same" or c.ratios), key=_rank)
    if shown:
        rows = [_HEAD, *(_row(c) for c in shown[:limit])]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
        lines.append("")
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        if len(shown) > limit:
            lines.append(f"... and {counted(len(shown) - limit, 'more case')} (--markdown, results.json)")
    if cmp.waivers_passing:
        lines += ["", f"{counted(len(cmp.waivers_passing), 'waiver')} that can go (the waived case passes):"]
        lines += [f"  {safe(w)}" for w in cmp.waivers_passing[:limit]]
    return lines

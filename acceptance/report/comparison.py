"""The comparison of two runs rendered from :class:`acceptance.records.Comparison` alone: as terminal lines (the
outcome with the changed cases counted, one table of the cases that changed, the regressions in words),
as GitHub Markdown (:func:`markdown`: a PR comment or job summary), and its cases worst first (:func:`worse_first`).

Every cell is made safe for a terminal or a CI log (:func:`acceptance.wording.safe`); counts agree with their
nouns (:func:`acceptance.wording.counted`).
"""

from __future__ import annotations

from acceptance.decide.limits import MAX_SLOWDOWN
from acceptance.decide.regression import regressions_by_case
from acceptance.records import VERDICT_ORDER, CaseComparison, Comparison
from acceptance.wording import counted, fmt, safe, seconds

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


def changed(cmp: Comparison) -> list[CaseComparison]:
    """The cases that changed, worst first (:func:`worse_first`): a verdict that moved (regressed, fixed, changed,
    new, removed), an error grown past ``cmp.max_ratio``, or a slowdown."""
    return [c for c in worse_first(cmp) if c.change != "same" or c.grew or c.slower]


def tally(cmp: Comparison) -> list[str]:
    """What changed, counted by case, each case once: ``2 regressed cases`` (a worse verdict, a new failing case,
    an error grown past the allowed factor or a slowdown: every case with a sentence in ``cmp.regressions``),
    then fixed, changed (another verdict move), new and removed cases."""
    bad = {c.id for c, _ in regressions_by_case(cmp)}
    parts = [counted(len(bad), "regressed case")] if bad else []
    for change in ("fixed", "changed", "new", "removed"):
        n = sum(c.change == change and c.id not in bad for c in cmp.cases)
        parts += [counted(n, f"{change} case")] if n else []
    return parts


def terminal_table(cmp: Comparison, *, limit: int = LIMIT) -> list[str]:
    """Lines for a terminal, what changed only: ``compared with BASE: REGRESSION|no regression — <tally> (of N
    cases)``, a table (columns aligned with spaces) of at most ``limit`` changed cases (:func:`changed`) with
    their worst error ratio NEW/BASE (impl against the rounded oracle), each regression in words, and the waivers
    that can go; one line ``compared with BASE: no change (N cases ...)`` when nothing changed."""
    shown = changed(cmp)
    allowed = f"errors within {fmt(cmp.max_ratio)}x on {safe(', '.join(cmp.metrics))}"
    if not shown and not cmp.waivers_passing:
        return [f"compared with {safe(cmp.base)}: no change ({counted(len(cmp.cases), 'case')}; {allowed})"]
    outcome = "no regression" if cmp.passed else "REGRESSION"
    what = ", ".join(tally(cmp)) or "no verdict change"
    lines = [f"compared with {safe(cmp.base)}: {outcome} — {what} (of {counted(len(cmp.cases), 'case')})"]
    if shown:
        rows = [_HEAD, *(_row(c) for c in shown[:limit])]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
        lines.append("")
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
        if len(shown) > limit:
            lines.append(f"... and {counted(len(shown) - limit, 'more changed case')} (--summary, results.json)")
    if cmp.regressions:
        lines += ["", "regressions:"] + [f"  {safe(r)}" for r in cmp.regressions[:limit]]
        if len(cmp.regressions) > limit:
            lines.append(f"  ... and {counted(len(cmp.regressions) - limit, 'more sentence')}")
    if cmp.waivers_passing:
        lines += ["", f"{counted(len(cmp.waivers_passing), 'waiver')} that can go (the waived case passes):"]
        lines += [f"  {safe(w)}" for w in cmp.waivers_passing[:limit]]
    return lines


# ----------------------------------------------------------------------------- Markdown


def _md(text: str) -> str:
    """Text safe in a Markdown table cell: pipes, backticks, angle brackets and newlines escaped."""
    return (
        str(text)
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("`", "\\`")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", " ")
    )


def markdown(cmp: Comparison, *, limit: int = 50) -> str:
    """The comparison as GitHub Markdown (a PR comment or job summary): outcome, regressions, verdict changes,
    the largest error ratios, waivers that can go; at most ``limit`` rows per table."""
    moved = [c for c in cmp.cases if c.change != "same"]
    lines = [
        f"### Accuracy compared with {_md(cmp.base)}: {'no regression' if cmp.passed else 'REGRESSION'}",
        "",
        f"{counted(len(cmp.cases), 'case')}; {counted(len(moved), 'verdict change')}; "
        f"an error may grow {fmt(cmp.max_ratio)}x "
        f"({', '.join(cmp.metrics)}; impl against the rounded oracle, also relative to the baseline).",
        "",
    ]
    if cmp.regressions:
        lines += ["**Regressions**", ""] + [f"- {_md(r)}" for r in cmp.regressions[:limit]] + [""]
    if moved:
        lines += ["| case | base | new | change |", "|---|---|---|---|"]
        lines += [
            f"| {_md(c.id)} | {c.base_verdict or '-'} | {c.new_verdict or '-'} | {c.change} |" for c in moved[:limit]
        ] + [""]
    ranked = sorted((c for c in cmp.cases if c.worst_ratio is not None), key=lambda c: -(c.worst_ratio or 0.0))
    if ranked:
        lines += ["| case | worst NEW/BASE | metric | base | new | flagged |", "|---|---|---|---|---|---|"]
        for c in ranked[: min(limit, 10)]:
            r = max(c.ratios, key=lambda r: r.ratio)
            lines.append(
                f"| {_md(c.id)} | {fmt(r.ratio)}x | {r.metric} | {fmt(r.base)} | {fmt(r.new)} | "
                f"{'yes' if c.grew else ''} |"
            )
        lines.append("")
    timed = [(c, c.perf) for c in cmp.cases if c.perf is not None]
    if timed:
        allowed = fmt(cmp.max_slowdown or MAX_SLOWDOWN)
        lines += [
            f"| case | median NEW/BASE | base | new | new p10 > base p90 | slower (> {allowed}x) |",
            "|---|---|---|---|---|---|",
        ]
        for c, p in sorted(timed, key=lambda cp: (not cp[0].slower, -cp[1].ratio))[:limit]:
            lines.append(
                f"| {_md(c.id)} | {fmt(p.ratio)}x | {seconds(p.base_median_s)} | {seconds(p.new_median_s)} "
                f"| {'yes' if p.separated else 'no'} | {'yes' if c.slower else _md(p.note or '')} |"
            )
        lines.append("")
    if cmp.waivers_passing:
        lines += ["**Waivers that can go** (the waived case passes)", ""]
        lines += [f"- {_md(i)}" for i in cmp.waivers_passing[:limit]] + [""]
    return "\n".join(lines)


def worse_first(cmp: Comparison) -> list[CaseComparison]:
    """Cases with a regression first, then by largest ratio."""
    order = {"regressed": 0, "new": 1, "removed": 2, "changed": 3, "fixed": 4, "same": 5}
    return sorted(
        cmp.cases,
        key=lambda c: (
            not c.grew and not c.slower and c.change != "regressed",
            order[c.change],
            -(c.worst_ratio or 0.0),
            VERDICT_ORDER.get(c.new_verdict or "pass", 3),
        ),
    )

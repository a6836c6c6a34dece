"""Console reporter: one line per case that did not pass, then counts per operator and overall."""

from __future__ import annotations

from collections import defaultdict

from acceptance.records import Results, Verdict, sorted_failures_first
from acceptance.report.text import is_note
from acceptance.wording import counted, safe

#: Reasons shown per case; the rest are counted, and are in the HTML report and results.json.
MAX_REASONS = 8

_COLOURS = {"pass": "green", "fail": "red", "error": "magenta", "skip": "yellow"}


def render(results: Results, *, width: int = 100, verbose: bool = False) -> list[tuple[str, str | None]]:
    """Lines of the console summary, each with the colour click should give it (or None); ``verbose``: a line for
    every passing case too (after the others)."""
    lines: list[tuple[str, str | None]] = []
    shown = [c for c in sorted_failures_first(results.cases) if verbose or c.verdict != "pass"]
    for case in shown:
        assert case.verdict is not None  # results hold decided cases
        head = f"{case.verdict.upper():5} {safe(case.id)}"
        lines.append((head, _COLOURS[case.verdict]))
        reasons = [r for r in case.reasons if not is_note(r)] + [r for r in case.reasons if is_note(r)]
        for reason in reasons[:MAX_REASONS]:  # notes after the failures, in results of every version
            lines.append((f"      {safe(reason, width * 4)}", None))
        if len(case.reasons) > MAX_REASONS:
            lines.append(
                (
                    f"      ... and {counted(len(case.reasons) - MAX_REASONS, 'more reason')} "
                    "(report.html, results.json)",
                    None,
                )
            )
    vacuous = [c for c in results.cases if c.verdict == "pass" and c.vacuous]
    for case in vacuous[:MAX_REASONS]:
        lines.append((f"NOTE  {safe(case.id)} passed vacuously: {safe(case.vacuous or '')}", "yellow"))
    if len(vacuous) > MAX_REASONS:
        lines.append(
            (
                f"NOTE  ... and {counted(len(vacuous) - MAX_REASONS, 'more vacuous pass', 'more vacuous passes')} "
                "(--strict fails them)",
                "yellow",
            )
        )
    per_op: dict[str, dict[Verdict | None, int]] = defaultdict(lambda: defaultdict(int))
    categories: dict[str, str] = {}
    for case in results.cases:
        per_op[case.operator][case.verdict or ""] += 1
        categories[case.operator] = case.category
    if per_op:
        name_w = max(len("operator"), *(len(op) for op in per_op))
        lines.append(("", None))
        lines.append(
            (f"{'operator':<{name_w}}  {'category':<12} {'pass':>5} {'fail':>5} {'error':>5} {'skip':>5}", None)
        )
        for op in sorted(per_op):
            counts = per_op[op]
            colour = "red" if counts["fail"] or counts["error"] else None
            lines.append(
                (
                    f"{op:<{name_w}}  {categories[op]:<12} {counts['pass']:>5} {counts['fail']:>5} "
                    f"{counts['error']:>5} {counts['skip']:>5}",
                    colour,
                )
            )
    cmp = results.comparison
    if cmp is not None:
        lines.append(("", None))
        lines.append(
            (
                f"compared with {safe(cmp.base)}: {counted(len(cmp.regressions), 'regression')}, "
                f"{counted(len(cmp.waivers_passing), 'waiver')} that can go",
                "red" if cmp.regressions else None,
            )
        )
        lines += [(f"      {safe(r)}", None) for r in cmp.regressions[:MAX_REASONS]]
    emulated = {(c.operator, c.dtype): c.emulation for c in results.cases if c.emulation}
    for (op, dtype), text in sorted(emulated.items()):
        lines.append((f"baseline of {safe(op)} [{dtype}] emulates: {safe(text)}", None))
    s = results.summary
    lines.append(("", None))
    lines.append(
        (
            f"{s.verdict.upper()}: {counted(s.total, 'case')}, {s.passed} passed, {s.failed} failed, "
            f"{counted(s.errors, 'error')}, "
            f"{s.skipped} skipped",
            "green" if s.verdict == "pass" else "red",
        )
    )
    return lines

"""Timing tables of ``acceptance bench``: console, Markdown (job summary) and HTML (table and SVG chart).

One row per timed case, as llama.cpp's ``test-backend-ops perf`` prints them:
the case, timed calls, median time (p10-p90), GFLOP/s, GB/s, the fraction of
the measured copy bandwidth and the speed-up over the perf baseline, with its
gate. Every figure comes from :class:`acceptance.records.PerfRecord`.
"""

from __future__ import annotations

from typing import NamedTuple

from markupsafe import Markup, escape

from acceptance.records import CaseResult, PerfRecord, Results
from acceptance.report.svg import _esc, _n
from acceptance.wording import safe

#: Rows shown in the job summary (the HTML report and results.json hold all).
SUMMARY_ROWS = 50


class PerfRow(NamedTuple):
    """One timed case, as the tables show it (numbers as text; em dash where unknown)."""

    case: str
    runs: str
    median: str
    spread: str
    gflops: str
    gbps: str
    fraction: str
    speedup: str
    gate: str


def _seconds(s: float | None) -> str:
    if s is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _num(x: float | None, digits: str = ".4g") -> str:
    return "—" if x is None else format(x, digits)


def _rate(x: float | None) -> str:
    """A rate with three significant digits (a decode-size GEMM on a CPU runs at 0.0372 GFLOP/s, not 0.0)."""
    return "—" if x is None else (f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}")


def _perf(case: CaseResult) -> PerfRecord:
    """The timing of a timed case (one :func:`timed` returns)."""
    assert case.perf is not None  # only timed cases reach the tables
    return case.perf


def row(case: CaseResult) -> PerfRow:
    """The table row of a timed case."""
    p = _perf(case)
    gate = (
        "—"
        if p.min_speedup is None
        else ("pass" if p.speedup is not None and p.speedup >= p.min_speedup else "FAIL") + f" (>= {p.min_speedup:g}x)"
    )
    return PerfRow(
        case.id,
        str(p.runs),
        _seconds(p.median_s),
        f"{_seconds(p.p10_s)} .. {_seconds(p.p90_s)}",
        _rate(p.gflops),
        _rate(p.gbps),
        "—" if p.bandwidth_fraction is None else f"{_rate(100 * p.bandwidth_fraction)} %",
        "—" if p.speedup is None else f"{p.speedup:.2f}x",
        gate,
    )


def timed(results: Results) -> list[CaseResult]:
    """The cases that carry a timing, in run order."""
    return [c for c in results.cases if c.perf is not None]


HEAD = PerfRow("case", "runs", "median", "p10 .. p90", "GFLOP/s", "GB/s", "of copy BW", "speed-up", "gate")


def copy_line(results: Results) -> str:
    """The measured copy bandwidth of the run, in words (empty when no case was timed)."""
    records = [_perf(c) for c in timed(results)]
    gbps = next((p.copy_gbps for p in records if p.copy_gbps), None)
    if not records:
        return ""
    timer = records[0].timer
    bw = f"{gbps:.1f} GB/s" if gbps else "not measured"
    return f"timer {timer}, device copy bandwidth {bw}"


def text_table(results: Results) -> list[str]:
    """The console table (left-aligned case, right-aligned numbers), control characters made visible."""
    rows = [HEAD] + [row(c) for c in timed(results)]
    if len(rows) == 1:
        return []
    rows = [PerfRow(safe(r.case, 90), *r[1:]) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
    lines = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=False))
        )
        for r in rows
    ]
    return lines + [copy_line(results)]


def _md(text: str) -> str:
    return safe(text, 200).replace("|", "\\|").replace("`", "'")


def markdown(results: Results, limit: int = SUMMARY_ROWS) -> str:
    """The job summary section: a Markdown table of at most ``limit`` timed cases."""
    cases = timed(results)
    if not cases:
        return ""
    lines = [
        "### Performance",
        "",
        _md(copy_line(results)),
        "",
        "| " + " | ".join(HEAD) + " |",
        "|---|" + "---:|" * (len(HEAD) - 1),
    ]
    lines += ["| " + " | ".join(_md(cell) for cell in row(c)) + " |" for c in cases[:limit]]
    if len(cases) > limit:
        lines += ["", f"… {len(cases) - limit} more timed cases in results.json and the HTML report"]
    return "\n".join(lines) + "\n"


def gflops_chart(cases: list[CaseResult], width: int = 720) -> str:
    """Horizontal bars of GFLOP/s per case (GB/s where a spec gives bytes only), as inline SVG."""
    rates = [(c.id, _perf(c).gflops if _perf(c).gflops is not None else _perf(c).gbps) for c in cases]
    shown = [(label, v) for label, v in rates if v is not None]
    unit = "GFLOP/s" if any(_perf(c).gflops is not None for c in cases) else "GB/s"
    if not shown:
        return ""
    bar_h, left, top = 18, 330, 24
    height = top + bar_h * len(shown) + 10
    peak = max(v for _, v in shown) or 1.0
    body = [f'<text class="title" x="{left}" y="14">{_esc(unit)} per case (median time)</text>']
    for i, (label, v) in enumerate(shown):
        y = top + i * bar_h
        w = (width - left - 80) * v / peak
        body.append(
            f'<text class="tick" x="{left - 6}" y="{_n(y + 12)}" text-anchor="end">{_esc(safe(label, 48))}</text>'
        )
        body.append(f'<rect class="bar" x="{left}" y="{_n(y + 2)}" width="{_n(max(w, 1))}" height="{bar_h - 5}"/>')
        body.append(f'<text class="count" x="{_n(left + w + 4)}" y="{_n(y + 12)}">{v:.4g}</text>')
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(unit)} per case">' + "".join(body) + "</svg>"
    )


def html_section(results: Results) -> Markup:
    """The report's performance section: the copy bandwidth, the chart and the table (empty when untimed)."""
    cases = timed(results)
    if not cases:
        return Markup("")
    head = "".join(f"<th>{escape(h)}</th>" for h in HEAD)
    body = "".join("<tr>" + "".join(f"<td>{escape(safe(cell, 200))}</td>" for cell in row(c)) + "</tr>" for c in cases)
    return Markup(
        f"<h2>Performance</h2><p>{escape(copy_line(results))}</p>{gflops_chart(cases)}"
        f'<table class="perf"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )

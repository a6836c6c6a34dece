"""The HTML report: one self-contained page for reviewers and release managers.

Inline CSS, inline SVG charts and a little inline JavaScript (filter, sort);
nothing is fetched: a Content-Security-Policy meta tag allows only the page's
own style and script (by sha256), so the page opens from ``file://`` offline.
Light and dark colour schemes follow ``prefers-color-scheme``. Every string
from the results goes through Jinja2 autoescaping; control characters are shown
as ``\\xNN``.

Layout: verdict and counts, provenance, a table of every case (failures
first) with the deciding criterion, then one collapsible section per case
with all criteria, the reasons, the worst element, the relative-error
buckets and, for dual-delta cases, histograms, box plots, a Q-Q plot and the
delta_1-vs-delta_2 scatter. To stay usable at thousands of cases, charts are
drawn for the first :data:`MAX_PLOTTED_CASES` cases that have dual-delta
records or relative-error buckets (failures first); passing cases without
charts show their criteria in one line and dual-delta means and maxima
instead of the full tables; only the first :data:`OPEN_FAILURES` failing
sections start open; and the page's script lists 500 table rows at a time
("show all" lists the rest). Past :data:`INLINE_MAX` cases nothing is laid out
per case: the cases are embedded once as JSON (:mod:`acceptance.report.casedata`)
and ``cases.js`` shows :data:`PAGE_ROWS` rows a page and draws a case's
detail section when it is opened, so the page's size in elements does not
grow with the run.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from functools import lru_cache

import jinja2
from markupsafe import Markup, escape

from acceptance.records import VERDICT_ORDER, CaseResult, Criterion, DualDeltaRecord, Results, sorted_failures_first
from acceptance.report import casedata, perf, svg
from acceptance.report.buckets import bucket_table
from acceptance.report.text import deciding_criterion, headline, margin, overall_line
from acceptance.wording import (
    counted,
    criterion_text,
    fmt,
    fmt_value,
    metric_name,
    output_label,
    params_text,
    visible_controls,
)
from acceptance.wording import full as full_precision

#: What a template renders from: names to values (records, strings, markup, lists of rows).
TemplateContext = dict[str, object]

MAX_PLOTTED_CASES = 40
OPEN_FAILURES = 20

#: Most cases laid out in full (every row and detail section in the page); a larger run gets the large layout:
#: cases as embedded JSON, :data:`PAGE_ROWS` rows at a time, a detail section drawn when its row is opened.
INLINE_MAX = 1000
PAGE_ROWS = 100

#: Where a case id may wrap: after ``[ ] , / _ :`` and before a ``-`` that starts a new ``key=value`` (a letter
#: follows); never inside a number such as ``N=1000`` or ``eps=1e-05``.
_BREAK = re.compile(r"(?<=[\[\],/_:])|(?=-[A-Za-z])")

#: Fewest trials, and fewest distinct values on each side, for which the dual-delta charts show a distribution;
#: below that they are a table of the values.
MIN_PLOTTED_TRIALS = 3


def visible(text: str) -> str:
    """:func:`acceptance.wording.visible_controls`, called only for text that holds a character it may
    replace: every one of them is outside :meth:`str.isprintable` (controls, bidi marks, separators), so
    printable text, nearly all of a report, is returned as it is without the two regex passes."""
    return text if text.isprintable() else visible_controls(text)


def breakable(text: str) -> Markup:
    """``text`` escaped, with ``<wbr>`` at the separators of :data:`_BREAK`, so a narrow column wraps a case id
    between its parameters only."""
    return Markup("<wbr>").join(escape(visible(part)) for part in _BREAK.split(text))


def _finalize(value: object) -> object:
    """Applied to every ``{{ }}`` before escaping: control characters become visible, ``None`` an em dash."""
    if value is None:
        return "—"
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible(value)
    return value


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja2 environment of the report templates (autoescape always on)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("acceptance.report", "templates"),
        autoescape=True,
        finalize=_finalize,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["counted"] = counted
    env.filters["breakable"] = breakable
    return env


def prepare() -> None:
    """Compile every template now (Jinja2 keeps them in :func:`environment`): the pages then render without
    compiling them (~0.25 s)."""
    env = environment()
    for name in env.list_templates(filter_func=lambda name: name.endswith(".j2")):
        env.get_template(name)


def asset(name: str) -> str:
    """The text of a file in ``templates/`` (the page's CSS and script)."""
    loader = environment().loader
    assert loader is not None  # environment() always sets its package loader
    return loader.get_source(environment(), name)[0]


def _sha256_source(text: str) -> str:
    """A CSP hash source: ``'sha256-<base64 of sha256(utf-8 text)>'``."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def content_security_policy(css: str, js: str | None) -> str:
    """Nothing may load; only the page's own ``<style>`` (and ``<script>``, when given) run, matched by hash."""
    script = _sha256_source(js) if js is not None else "'none'"
    return (
        f"default-src 'none'; style-src {_sha256_source(css)}; script-src {script}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )


def provenance(results: Results, results_sha256: str | None) -> list[tuple[str, str | None]]:
    """(label, value) rows: commit, device, software versions, times, command line, results.json digest."""
    env = results.environment
    device = f"{env.device} — {env.device_name}" + (f" (CUDA {env.cuda_version})" if env.cuda_version else "")
    return [
        ("Commit", env.git_commit),
        ("Device", device),
        ("torch", env.torch),
        ("Python", env.python),
        ("numpy", env.numpy),
        ("acceptance", env.acceptance),
        ("Platform", env.platform),
        ("Host", env.host),
        ("Started (UTC)", env.start_time),
        ("Finished (UTC)", env.end_time),
        ("Command line", env.command_line or None),
        ("results.json sha256", results_sha256),
        ("Schema version", str(results.schema_version)),
    ]


def page_context(results: Results, results_sha256: str | None, css: str, js: str | None) -> TemplateContext:
    """What every page (report, sign-off) shows at the top."""
    s = results.summary
    return {
        "css": Markup(css),
        "js": Markup(js) if js is not None else None,
        "csp": content_security_policy(css, js),
        "verdict": s.verdict,
        "overall": overall_line(results),
        "counts": [("pass", s.passed), ("fail", s.failed), ("error", s.errors), ("skip", s.skipped)],
        "dtypes": sorted({c.dtype for c in results.cases}),
        "provenance": provenance(results, results_sha256),
        "commit": (results.environment.git_commit or "")[:12],
    }


def _sort_number(x: float | None) -> str:
    """A ``data-sort`` value for numeric columns: missing sorts last, nan first (as the worst)."""
    if x is None:
        return "Infinity"
    if math.isnan(x):
        return "-Infinity"
    return repr(x) if math.isfinite(x) else ("Infinity" if x > 0 else "-Infinity")


def _margin_text(m: float | None) -> str:
    if m is None:
        return "—"
    return "∞" if m == math.inf else f"×{fmt(m)}"


def _deciding(case: CaseResult) -> tuple[str, float | None]:
    """The table's deciding column: the deciding criterion (fail/pass) or the headline (error/skip), and its margin."""
    c = deciding_criterion(case)
    if case.verdict in ("error", "skip") or c is None:
        return headline(case), None
    return criterion_text(c), margin(c)


def _criterion_row(c: Criterion) -> TemplateContext:
    m = margin(c)
    return {
        "metric": metric_name(c),
        "value": fmt_value(c.value),
        "comparison": c.comparison,
        "threshold": fmt_value(c.threshold),
        "margin": _margin_text(m),
        "result": {True: "pass", False: "fail", None: "not evaluated"}[c.passed],
        "source": c.source + (" — measured against the oracle" if c.against == "oracle" else ""),
        "note": c.note,
        "text": criterion_text(c),
    }


def _criterion_line(c: Criterion) -> TemplateContext:
    """What a one-line criterion shows (passing cases without charts): its sentence and margin."""
    return {"text": criterion_text(c), "margin": _margin_text(margin(c))}


def _values_table(d: DualDeltaRecord) -> Markup:
    """The δ1 and δ2 values per trial when there are too few, or too few distinct ones, to draw (one trial, or
    every trial the same): equal runs of trials are one row."""
    rows: list[tuple[str, float, float]] = []
    for i, pair in enumerate(zip(d.delta_impl, d.delta_baseline, strict=True)):
        if rows and (rows[-1][1], rows[-1][2]) == pair:
            rows[-1] = (f"{rows[-1][0].split('–')[0]}–{i + 1}", *pair)
        else:
            rows.append((str(i + 1), *pair))
    body = "".join(
        f"<tr><td>{escape(t)}</td><td>{escape(full_precision(a))}</td><td>{escape(full_precision(b))}</td></tr>"
        for t, a, b in rows
    )
    return Markup(
        f'<table class="describe values"><caption>{escape(d.metric)}: too few distinct values to draw a '
        f"distribution</caption><thead><tr><th>trial</th><th>δ1 impl</th><th>δ2 baseline</th></tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def _dual_plots(d: DualDeltaRecord) -> list[Markup]:
    distinct = min(len(set(d.delta_impl)), len(set(d.delta_baseline)))
    if len(d.delta_impl) < MIN_PLOTTED_TRIALS or distinct < 2:
        return [_values_table(d)]
    series = [("δ1 impl", d.delta_impl, "s-impl"), ("δ2 baseline", d.delta_baseline, "s-base")]
    return [
        Markup(svg.histogram_overlay(series, title=f"{d.metric}: δ1 and δ2 per trial", xlabel=d.metric)),
        Markup(svg.box_plot(series, title=f"{d.metric}: distribution", ylabel=d.metric)),
        Markup(svg.qq_plot(d.delta_impl, d.delta_baseline, title=f"{d.metric}: Q-Q δ1 vs δ2", metric=d.metric)),
        Markup(
            svg.scatter_plot(
                d.delta_impl, d.delta_baseline, factor=d.factor, title=f"{d.metric}: δ1 vs δ2 by trial", metric=d.metric
            )
        ),
    ]


def _dual_view(d: DualDeltaRecord, *, plotted: bool, full: bool) -> TemplateContext:
    """One dual-delta record; ``full`` adds the descriptive-statistics and test tables (else means and maxima only)."""
    stats = ["n", "mean", "median", "std", "p50", "p90", "p99", "max", "min"]
    describe = [("δ1 impl", d.impl), ("δ2 baseline", d.baseline)] + ([("δ1/δ2", d.ratio)] if d.ratio else [])
    compact = (
        []
        if full
        else [
            ("δ1 mean / max", f"{fmt(d.impl.mean)} / {fmt(d.impl.max)}"),
            ("δ2 mean / max", f"{fmt(d.baseline.mean)} / {fmt(d.baseline.max)}"),
        ]
    )
    return {
        "title": f"{d.metric} ({output_label(d.output, d.output_name)}, {counted(d.trials, 'trial')})",
        "passed": d.passed,
        "conclusion": d.conclusion,
        "full": full,
        "facts": compact
        + [
            ("non-inferiority factor", fmt(d.factor)),
            ("alpha", fmt(d.alpha)),
            ("free error (output rounding)", fmt(d.free)),
            ("p-value", fmt(d.p_value)),
            ("Holm-adjusted p", fmt(d.p_adjusted)),
            ("worst-trial p (Holm)", fmt(d.p_worst_adjusted if d.p_worst_adjusted is not None else d.p_worst)),
            ("accuracy floor (ulp)", fmt(d.floor)),
        ],
        "stats": stats,
        "describe": [(name, [fmt(getattr(x, s)) for s in stats]) for name, x in describe] if full else [],
        "tests": [(t.name, fmt(t.statistic), fmt(t.p_value), t.alternative, t.note) for t in d.tests] if full else [],
        "reasons": d.reasons,
        "plots": _dual_plots(d) if plotted else [],
    }


def _buckets_chart(case: CaseResult) -> Markup:
    labels, counts = list(case.rel_error_buckets), list(case.rel_error_buckets.values())
    return Markup(
        svg.bar_chart(
            labels,
            counts,
            title="relative error |e−b|/|b|, all elements",
            xlabel="bucket of |e−b|/|b|",
            ylabel="elements",
        )
    )


def _case_view(index: int, case: CaseResult, *, plotted: bool, open_: bool) -> TemplateContext:
    """Everything the template shows for one case; passing cases without charts get one-line criteria."""
    deciding, m = _deciding(case)
    full = plotted or case.verdict != "pass"
    w = case.worst
    t = case.timing
    return {
        "anchor": f"c{index}",
        "case": case,
        "params": params_text(case.params),
        "headline": headline(case),
        "deciding": deciding,
        "margin": _margin_text(m),
        "margin_sort": _sort_number(m),
        "verdict_sort": VERDICT_ORDER[str(case.verdict)],
        "time": fmt(t.total),
        "time_sort": _sort_number(t.total),
        "open": open_,
        "full": full,
        "criteria": [_criterion_row(c) if full else _criterion_line(c) for c in case.criteria],
        "worst": None
        if w is None
        else [
            ("output", w.output_name or str(w.output)),
            ("trial", str(w.trial)),
            ("index", str(w.index)),
            ("impl", full_precision(w.evaluated)),
            ("baseline", full_precision(w.baseline)),
            ("oracle", full_precision(w.oracle)),
            ("|e-o|", fmt(w.oracle_error)),
            ("ulp", fmt(w.ulp)),
            ("|e-b|", fmt(w.abs_error)),
        ],
        "facts": [
            (label, value)
            for label, value in [
                ("vacuous", case.vacuous),
                (
                    "peers (advisory, never deciding)",
                    " · ".join(f"{a.name}: {'pass' if a.passed else 'fail'} ({a.detail})" for a in case.advisory)
                    or None,
                ),
                (
                    "fraction of elements over tolerance (worst trial)",
                    fmt(case.bad_fraction) if case.bad_fraction is not None else None,
                ),
                ("where they sit", case.bad_location),
                ("impl run-to-run spread", fmt(case.atomic_spread) if case.atomic_spread is not None else None),
                ("baseline emulation", case.emulation),
                ("oracle range", case.oracle_range),
                (
                    "run to run (impl / baseline)",
                    f"{case.determinism.impl} / {case.determinism.baseline}" if case.determinism else None,
                ),
                ("input layouts (impl)", ", ".join(f"{k}: {v}" for k, v in case.layouts.items()) or None),
                (
                    "smallest thresholds that would pass",
                    ", ".join(f"{k} ≤ {fmt(v)}" for k, v in case.tolerance_to_pass.items()) or None,
                ),
                ("time (s): impl / baseline / oracle", f"{fmt(t.impl)} / {fmt(t.baseline)} / {fmt(t.oracle)}"),
            ]
            if value is not None
        ],
        "buckets": [(k, v) for k, v in case.rel_error_buckets.items()],
        "buckets_chart": _buckets_chart(case) if plotted and case.rel_error_buckets else None,
        "dual": [_dual_view(d, plotted=plotted, full=full) for d in case.dual_delta],
        "metrics": [(i, [(k, fmt_value(v)) for k, v in out.items()]) for i, out in enumerate(case.metrics)],
    }


def _comparison_view(results: Results) -> TemplateContext | None:
    """The comparison with the base run, for its section: regressions, then every case that moved or grew."""
    cmp = results.comparison
    if cmp is None:
        return None
    from acceptance.report.comparison import worse_first

    rows = []
    for c in worse_first(cmp):
        if c.change == "same" and not c.grew and not c.slower and (c.worst_ratio or 0) <= 1 and c.perf is None:
            continue
        worst = max(c.ratios, key=lambda r: r.ratio) if c.ratios else None
        rows.append(
            {
                "id": c.id,
                "base": c.base_verdict,
                "new": c.new_verdict,
                "change": c.change,
                "grew": c.grew,
                "metric": worst.metric if worst else None,
                "ratio": f"{fmt(worst.ratio)}x" if worst else None,
                "normalized": f"{fmt(worst.normalized)}x" if worst and worst.normalized is not None else None,
                "values": f"{fmt(worst.base)} → {fmt(worst.new)}" if worst else None,
                "slower": c.slower,
                "time": (
                    f"{fmt(c.perf.ratio)}x ({fmt(c.perf.base_median_s)} → {fmt(c.perf.new_median_s)} s)"
                    + (f"; {c.perf.note}" if c.perf.note else "")
                )
                if c.perf
                else None,
            }
        )
    return {
        "base": cmp.base,
        "passed": cmp.passed,
        "max_ratio": fmt(cmp.max_ratio),
        "regressions": cmp.regressions,
        "waivers": cmp.waivers_passing,
        "rows": rows[:500],
        "more": max(0, len(rows) - 500),
        "metrics": ", ".join(cmp.metrics),
        "timed": any(c.perf for c in cmp.cases),
        "max_slowdown": fmt(cmp.max_slowdown) if cmp.max_slowdown is not None else None,
    }


def _case_views(cases: list[CaseResult], *, large: bool) -> tuple[list[TemplateContext], int]:
    """The view of every case (failures first): charts for the first :data:`MAX_PLOTTED_CASES` cases with
    error distributions, the first :data:`OPEN_FAILURES` failing sections open (none in the large layout, whose
    sections open on demand); and how many cases have charts."""
    views, plotted, opened = [], 0, 0
    for i, case in enumerate(cases):
        plot = plotted < MAX_PLOTTED_CASES and bool(case.dual_delta or case.rel_error_buckets)
        open_ = not large and case.verdict in ("fail", "error") and opened < OPEN_FAILURES
        plotted += plot
        opened += open_
        views.append(_case_view(i, case, plotted=plot, open_=open_))
    return views, plotted


def _large_context(cases: list[CaseResult], views: list[TemplateContext]) -> TemplateContext:
    """The two JSON blocks of the large layout (:mod:`acceptance.report.casedata`): the table rows, read when the
    page loads, and the detail sections, compressed in chunks, each decoded when a case in it is opened."""
    return {
        "rows_json": casedata.script_json([casedata.row(c, v) for c, v in zip(cases, views, strict=True)]),
        "details_json": casedata.packed([casedata.detail(c, v) for c, v in zip(cases, views, strict=True)]),
        "chunk": casedata.CHUNK,
    }


def render_html(results: Results, *, results_sha256: str | None = None, inline_max: int = INLINE_MAX) -> str:
    """The self-contained HTML report of a run; past ``inline_max`` cases in the large layout (the table and
    the detail sections drawn by the page's script from embedded JSON, one page of rows at a time)."""
    cases = sorted_failures_first(results.cases)
    large = len(cases) > inline_max
    css, js = asset("report.css"), asset("cases.js" if large else "report.js")
    views, plotted = _case_views(cases, large=large)
    return (
        environment()
        .get_template("report.html.j2")
        .render(
            **page_context(results, results_sha256, css, js),
            cases=[] if large else views,
            large=_large_context(cases, views) if large else None,
            total=len(cases),
            page_rows=PAGE_ROWS,
            perf=perf.html_section(results),
            max_plotted=MAX_PLOTTED_CASES,
            unplotted=sum(bool(c.dual_delta or c.rel_error_buckets) for c in cases) - plotted,
            comparison=_comparison_view(results),
            bucket_table=bucket_table(results.cases),
            waiver_records=results.waivers,
        )
    )

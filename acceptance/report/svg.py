"""Small SVG charts for the HTML report, drawn from the data (no plotting library).

Each chart function returns one ``<svg>`` element as a string. Colours come
from CSS classes (``s-impl``, ``s-base``, ``ref``, ``factor``, ``bar``, ...)
styled by the page, so charts follow the light/dark colour scheme. Every text
is XML-escaped here.

Axes switch to log10 when the positive values span two decades or more
(:func:`choose_log`). Values a chart cannot place (``nan``, ``±inf``, and zero
or negative values on a log axis) are left out and counted in a note under
the chart, never silently dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

import numpy as np
import numpy.typing as npt

from acceptance.wording import fmt, visible_controls

WIDTH, HEIGHT = 290, 262
LEFT, RIGHT, TOP, BOTTOM = 62, 12, 40, 58
#: Values to plot: a list of floats or a float64 array.
Floats = Sequence[float] | npt.NDArray[np.float64]

MAX_POINTS = 1000


def _esc(text: object) -> str:
    """XML-escaped text with control characters made visible (:func:`text.visible_controls`)."""
    return escape(visible_controls(str(text)), quote=True)


def _n(x: float) -> str:
    """A pixel coordinate with one decimal."""
    return f"{x:.1f}"


@dataclass(frozen=True)
class Scale:
    """Maps data ``[lo, hi]`` to pixels ``[px_lo, px_hi]``, linearly or in log10.

    Linear: ``px = px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo)``;
    log: the same with ``log10`` of ``v``, ``lo`` and ``hi``.
    """

    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool = False

    def _t(self, v: float) -> float:
        return math.log10(v) if self.log else v

    def __call__(self, v: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        return self.px_lo + (self._t(v) - a) / (b - a) * (self.px_hi - self.px_lo)

    def ticks(self) -> list[float]:
        """Log axis: decades (every k-th when more than 7), plus 2·10^k and 5·10^k when fewer than 3 decades show.
        Linear axis: 1-2-5 steps, about 5 ticks."""
        if self.log:
            first, last = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            inside = [
                10.0**k for k in range(first, last + 1) if self.lo * (1 - 1e-9) <= 10.0**k <= self.hi * (1 + 1e-9)
            ]
            if len(inside) >= 3:
                step = math.ceil(len(inside) / 7)
                return inside[::step]
            candidates = [m * 10.0**k for k in range(first, last + 1) for m in (1, 2, 5)]
            return [t for t in candidates if self.lo * (1 - 1e-9) <= t <= self.hi * (1 + 1e-9)]
        raw = (self.hi - self.lo) / 5
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
        start = math.ceil(self.lo / step - 1e-9) * step
        count = int(math.floor((self.hi - start) / step + 1e-9)) + 1
        return [0.0 if abs(start + i * step) < step * 1e-9 else start + i * step for i in range(count)]


def tick_label(v: float, log: bool) -> str:
    """Short tick labels: log ticks ``m·10^k`` as ``me<k>`` (``1e-3``, ``5e-4``; plain from 1 to 500); linear
    ticks with 3 significant digits, in ``7.46e-6`` form below 1e-3 and from 1e4 up."""
    if log and v > 0:
        k = math.floor(math.log10(v) + 1e-9)
        m = round(v / 10.0**k)
        return fmt(float(m * 10**k)) if 0 <= k <= 2 else f"{m}e{k}"
    if v != 0 and (abs(v) < 1e-3 or abs(v) >= 1e4):
        mantissa, exponent = f"{v:.2e}".split("e")
        return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"
    return fmt(v)


def choose_log(*series: Floats) -> bool:
    """True when the finite positive values span at least two decades (max/min >= 100)."""
    values = np.concatenate([np.asarray(s, dtype=np.float64) for s in series]) if series else np.empty(0)
    positive = values[np.isfinite(values) & (values > 0)]
    return positive.size >= 2 and positive.max() / positive.min() >= 100


def plottable(values: Floats, log: bool) -> tuple[np.ndarray, dict[str, int]]:
    """The values a chart can place, and the counts of those it cannot (``nan``, ``inf``, ``zero``, ``negative``)."""
    v = np.asarray(values, dtype=np.float64)
    dropped = {"nan": int(np.isnan(v).sum()), "inf": int(np.isinf(v).sum())}
    keep = np.isfinite(v)
    if log:
        dropped["zero"] = int((v == 0).sum())
        dropped["negative"] = int((keep & (v < 0)).sum())
        keep &= v > 0
    return v[keep], {k: n for k, n in dropped.items() if n}


def data_range(values: np.ndarray, log: bool) -> tuple[float, float]:
    """[lo, hi] covering the values, widened when they are all equal (by a decade on log axes, ±0.5 or ±10 % on
    linear)."""
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        if log:
            return lo / math.sqrt(10), hi * math.sqrt(10)
        pad = abs(lo) * 0.1 or 0.5
        return lo - pad, hi + pad
    return lo, hi


def _dropped_note(dropped: dict[str, int]) -> str:
    return "not shown: " + ", ".join(f"{n} {k}" for k, n in dropped.items()) if dropped else ""


def _merge(*parts: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        for k, n in part.items():
            out[k] = out.get(k, 0) + n
    return out


def _empty(title: str, message: str, width: int = WIDTH) -> str:
    return (
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        f'viewBox="0 0 {width} {HEIGHT}" role="img" aria-label="{_esc(title)}"><title>{_esc(title)}</title>'
        f'<text class="title" x="{width / 2}" y="16" text-anchor="middle">{_esc(title)}</text>'
        f'<text class="note" x="{width / 2}" y="{HEIGHT / 2}" text-anchor="middle">{_esc(message)}</text></svg>'
    )


def _frame(
    title: str,
    xs: Scale | None,
    ys: Scale,
    xlabel: str,
    ylabel: str,
    body: list[str],
    *,
    note: str = "",
    legend: Sequence[tuple[str, str]] = (),
    width: int = WIDTH,
) -> str:
    """Axes, grid, ticks, labels, title, legend and note around ``body``."""
    x0, x1, y0, y1 = LEFT, width - RIGHT, HEIGHT - BOTTOM, TOP
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        f'viewBox="0 0 {width} {HEIGHT}" role="img" aria-label="{_esc(title)}"><title>{_esc(title)}</title>',
        f'<text class="title" x="{width / 2}" y="16" text-anchor="middle">{_esc(title)}</text>',
    ]
    for t in ys.ticks():
        y = ys(t)
        out.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{_n(y)}" y2="{_n(y)}"/>')
        out.append(
            f'<text class="tick" x="{x0 - 4}" y="{_n(y + 3)}" text-anchor="end">{_esc(tick_label(t, ys.log))}</text>'
        )
    if xs is not None:
        for t in xs.ticks():
            x = xs(t)
            out.append(f'<line class="grid" x1="{_n(x)}" x2="{_n(x)}" y1="{y0}" y2="{y1}"/>')
            out.append(
                f'<text class="tick" x="{_n(x)}" y="{y0 + 13}" text-anchor="middle">'
                f"{_esc(tick_label(t, xs.log))}</text>"
            )
    out += body
    out.append(f'<path class="axis" d="M{x0} {y1}V{y0}H{x1}"/>')
    out.append(f'<text class="label" x="{(x0 + x1) / 2}" y="{y0 + 30}" text-anchor="middle">{_esc(xlabel)}</text>')
    out.append(
        f'<text class="label" transform="rotate(-90)" x="{-(y0 + y1) / 2}" y="13" text-anchor="middle">'
        f"{_esc(ylabel)}</text>"
    )
    x = x0
    for label, cls in legend:  # one row between the title and the plot
        out.append(f'<rect class="{cls}" x="{x}" y="22" width="9" height="9"/>')
        out.append(f'<text class="legend" x="{x + 13}" y="30">{_esc(label)}</text>')
        x += 22 + 6 * len(label)
    if note:
        out.append(f'<text class="note" x="{x0}" y="{HEIGHT - 6}">{_esc(note)}</text>')
    out.append("</svg>")
    return "".join(out)


def histogram_counts(series: Sequence[np.ndarray], bins: int, log: bool) -> tuple[np.ndarray, list[np.ndarray]]:
    """Shared bin edges over all series (log-spaced when ``log``) and each series' counts.

    Edges span [min, max] of all values (:func:`data_range`); counts follow
    ``numpy.histogram`` (last bin closed).
    """
    lo, hi = data_range(np.concatenate(series), log)
    edges = np.logspace(math.log10(lo), math.log10(hi), bins + 1) if log else np.linspace(lo, hi, bins + 1)
    return edges, [np.histogram(s, bins=edges)[0] for s in series]


def histogram_overlay(series: Sequence[tuple[str, Floats, str]], *, title: str, xlabel: str, bins: int = 20) -> str:
    """Overlaid histograms of several series ``(label, values, css_class)`` on shared bins."""
    log = choose_log(*(v for _, v, _ in series))
    kept = [plottable(v, log) for _, v, _ in series]
    note = _dropped_note(_merge(*(d for _, d in kept)))
    if not any(k.size for k, _ in kept):
        return _empty(title, note or "no values")
    edges, counts = histogram_counts([k for k, _ in kept], bins, log)
    xs = Scale(edges[0], edges[-1], LEFT, WIDTH - RIGHT, log)
    ys = Scale(0, max(1, max(int(c.max()) for c in counts)) * 1.1, HEIGHT - BOTTOM, TOP)
    body = []
    for (_, _, cls), c in zip(series, counts, strict=False):
        for left, right, n in zip(edges[:-1], edges[1:], c, strict=False):
            if n:
                body.append(
                    f'<rect class="{cls} hist" x="{_n(xs(left))}" y="{_n(ys(n))}" '
                    f'width="{_n(max(xs(right) - xs(left), 0.5))}" height="{_n(ys(0) - ys(n))}"/>'
                )
    return _frame(title, xs, ys, xlabel, "trials", body, note=note, legend=[(lbl, cls) for lbl, _, cls in series])


@dataclass(frozen=True)
class BoxStats:
    """Tukey box: quartiles (numpy linear interpolation), whiskers at the most extreme values within 1.5·IQR of the
    box."""

    q1: float
    median: float
    q3: float
    whisker_lo: float
    whisker_hi: float
    outliers: np.ndarray


def box_stats(values: np.ndarray) -> BoxStats:
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    iqr = q3 - q1
    inside = values[(values >= q1 - 1.5 * iqr) & (values <= q3 + 1.5 * iqr)]
    outliers = values[(values < q1 - 1.5 * iqr) | (values > q3 + 1.5 * iqr)]
    return BoxStats(float(q1), float(median), float(q3), float(inside.min()), float(inside.max()), outliers)


def box_plot(series: Sequence[tuple[str, Floats, str]], *, title: str, ylabel: str) -> str:
    """Side-by-side Tukey box plots of several series ``(label, values, css_class)``; log y when they span decades."""
    log = choose_log(*(v for _, v, _ in series))
    kept = [plottable(v, log) for _, v, _ in series]
    note = _dropped_note(_merge(*(d for _, d in kept)))
    nonempty = [k for k, _ in kept if k.size]
    if not nonempty:
        return _empty(title, note or "no values")
    lo, hi = data_range(np.concatenate(nonempty), log)
    ys = Scale(lo, hi, HEIGHT - BOTTOM, TOP, log)
    slot = (WIDTH - RIGHT - LEFT) / len(series)
    body = []
    for i, ((label, _, cls), (values, _)) in enumerate(zip(series, kept, strict=False)):
        cx = LEFT + slot * (i + 0.5)
        body.append(
            f'<text class="tick" x="{_n(cx)}" y="{HEIGHT - BOTTOM + 13}" text-anchor="middle">{_esc(label)}</text>'
        )
        if not values.size:
            continue
        b, half = box_stats(values), min(slot * 0.25, 30)
        body.append(
            f'<line class="whisker" x1="{_n(cx)}" x2="{_n(cx)}" y1="{_n(ys(b.whisker_lo))}" y2="{_n(ys(b.q1))}"/>'
        )
        body.append(
            f'<line class="whisker" x1="{_n(cx)}" x2="{_n(cx)}" y1="{_n(ys(b.q3))}" y2="{_n(ys(b.whisker_hi))}"/>'
        )
        for w in (b.whisker_lo, b.whisker_hi):
            body.append(
                f'<line class="whisker" x1="{_n(cx - half / 2)}" x2="{_n(cx + half / 2)}"'
                f' y1="{_n(ys(w))}" y2="{_n(ys(w))}"/>'
            )
        body.append(
            f'<rect class="{cls} box" x="{_n(cx - half)}" y="{_n(ys(b.q3))}" width="{_n(2 * half)}" '
            f'height="{_n(max(ys(b.q1) - ys(b.q3), 0.5))}"/>'
        )
        body.append(
            f'<line class="median" x1="{_n(cx - half)}" x2="{_n(cx + half)}"'
            f' y1="{_n(ys(b.median))}" y2="{_n(ys(b.median))}"/>'
        )
        for o in _thin(b.outliers, 200):
            body.append(f'<circle class="{cls} dot" cx="{_n(cx)}" cy="{_n(ys(o))}" r="2"/>')
    return _frame(title, None, ys, "", ylabel, body, note=note)


def _thin(values: np.ndarray, limit: int) -> np.ndarray:
    """At most ``limit`` values, evenly spaced by position (deterministic)."""
    if values.size <= limit:
        return values
    return values[np.linspace(0, values.size - 1, limit).round().astype(int)]


def qq_points(x: np.ndarray, y: np.ndarray, n_max: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Two-sample Q-Q: the quantiles of ``x`` and ``y`` at ``p_i = (i + 0.5) / m``, ``m = min(len(x), len(y), n_max)``.

    Quantiles use numpy's default linear interpolation.
    """
    m = min(x.size, y.size, n_max)
    p = (np.arange(m) + 0.5) / m
    return np.quantile(x, p), np.quantile(y, p)


def _line(xs: Scale, ys: Scale, k: float, cls: str) -> str:
    """The line y = k·x clipped to the square data window [lo, hi]² (k > 0; straight on log-log axes too)."""
    lo, hi = xs.lo, xs.hi
    a, b = max(lo, lo / k), min(hi, hi / k)
    if a >= b:
        return ""
    return f'<line class="{cls}" x1="{_n(xs(a))}" y1="{_n(ys(k * a))}" x2="{_n(xs(b))}" y2="{_n(ys(k * b))}"/>'


def _square_scales(x: np.ndarray, y: np.ndarray, log: bool) -> tuple[Scale, Scale]:
    """The same data range on both axes (so y = x is the diagonal).

    A linear range starts at 0 when the data reach down to a quarter of their
    maximum, so that y = factor·x is seen against the origin; narrower ranges
    (all trials alike) keep their own span so the points do not collapse.
    """
    lo, hi = data_range(np.concatenate([x, y]), log)
    if not log and 0 < lo <= 0.25 * hi:
        lo = 0.0
    return Scale(lo, hi, LEFT, WIDTH - RIGHT, log), Scale(lo, hi, HEIGHT - BOTTOM, TOP, log)


def _pairs(x: Floats, y: Floats, log: bool) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Paired values both of which can be placed, and the dropped pairs counted by the first reason that applies
    to either member: ``nan``, ``inf``, then (log axes) ``zero``, ``negative``."""
    xa, ya = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    left = np.ones(xa.shape, dtype=bool)
    dropped: dict[str, int] = {}
    tests: list[tuple[str, Callable[[np.ndarray], np.ndarray]]] = [("nan", np.isnan), ("inf", np.isinf)]
    if log:
        tests += [("zero", lambda v: v == 0), ("negative", lambda v: v < 0)]
    for reason, test in tests:
        hit = left & (test(xa) | test(ya))
        if hit.any():
            dropped[reason] = int(hit.sum())
        left &= ~hit
    return xa[left], ya[left], dropped


def qq_plot(impl: Floats, baseline: Floats, *, title: str, metric: str) -> str:
    """Q-Q plot of delta_1 (impl, y) against delta_2 (baseline, x) with the line y = x."""
    log = choose_log(impl, baseline)
    yi, di = plottable(impl, log)
    xb, db = plottable(baseline, log)
    note = _dropped_note(_merge(di, db))
    if not (yi.size and xb.size):
        return _empty(title, note or "no values")
    qx, qy = qq_points(xb, yi)
    xs, ys = _square_scales(qx, qy, log)
    body = [_line(xs, ys, 1.0, "ref")]
    body += [
        f'<circle class="s-impl dot" cx="{_n(xs(a))}" cy="{_n(ys(b))}" r="2.2"/>' for a, b in zip(qx, qy, strict=False)
    ]
    return _frame(
        title,
        xs,
        ys,
        f"δ2 baseline quantile ({metric})",
        f"δ1 impl quantile ({metric})",
        body,
        note=note,
        legend=[("y = x", "ref-key")],
    )


def scatter_plot(impl: Floats, baseline: Floats, *, factor: float, title: str, metric: str) -> str:
    """delta_1 (impl, y) against delta_2 (baseline, x), paired by trial, with the lines y = x and y = factor·x."""
    log = choose_log(impl, baseline)
    xb, yi, dropped = _pairs(baseline, impl, log)
    note = _dropped_note(dropped)
    if not xb.size:
        return _empty(title, note or "no values")
    xs, ys = _square_scales(xb, yi, log)
    body, legend = [_line(xs, ys, 1.0, "ref")], [("y = x", "ref-key")]
    if math.isfinite(factor) and factor > 0 and factor != 1:
        factor_line = _line(xs, ys, factor, "factor")
        if factor_line:
            body.append(factor_line)
            legend.append((f"y = {fmt(factor)}·x", "factor-key"))
        else:
            note = (note + "; " if note else "") + f"y = {fmt(factor)}·x lies outside the window"
    shown = _thin(np.arange(xb.size), MAX_POINTS)
    if shown.size < xb.size:
        note = (note + "; " if note else "") + f"{shown.size} of {xb.size} trials drawn"
    body += [f'<circle class="s-impl dot" cx="{_n(xs(xb[i]))}" cy="{_n(ys(yi[i]))}" r="2.2"/>' for i in shown]
    return _frame(
        title,
        xs,
        ys,
        f"δ2 = err(baseline, oracle) ({metric})",
        "δ1 = err(impl, oracle)",
        body,
        note=note,
        legend=legend,
    )


def bar_chart(labels: Sequence[str], counts: Sequence[int], *, title: str, xlabel: str, ylabel: str) -> str:
    """Counts per category (e.g. relative-error buckets), each bar labelled with its count; log y when counts span
    decades."""
    width = max(WIDTH, LEFT + RIGHT + 34 * len(labels))
    c = np.asarray(counts, dtype=np.float64)
    if not c.size or c.max() <= 0:
        return _empty(title, "no elements", width)
    log = choose_log(c)
    ys = Scale(0.5, c.max() * 2, HEIGHT - BOTTOM, TOP, True) if log else Scale(0, c.max() * 1.15, HEIGHT - BOTTOM, TOP)
    slot = (width - RIGHT - LEFT) / len(labels)
    body = []
    for i, (label, n) in enumerate(zip(labels, counts, strict=False)):
        x = LEFT + slot * i
        cx = x + slot / 2
        if n > 0:
            top = ys(n)
            body.append(
                f'<rect class="bar" x="{_n(x + slot * 0.15)}" y="{_n(top)}" width="{_n(slot * 0.7)}"'
                f' height="{_n(ys.px_lo - top)}"/>'
            )
        body.append(
            f'<text class="count" x="{_n(cx)}" y="{_n((ys(n) if n > 0 else ys.px_lo) - 3)}" text-anchor="middle">'
            f"{int(n)}</text>"
        )
        body.append(
            f'<text class="tick" transform="translate({_n(cx + 3)} {HEIGHT - BOTTOM + 8}) rotate(-35)"'
            f' text-anchor="end">{_esc(label)}</text>'
        )
    return _frame(title, None, ys, "", ylabel, body, note=xlabel, width=width)

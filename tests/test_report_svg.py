"""SVG charts: scales, ticks, bins, box statistics, Q-Q quantiles, reference lines, unplottable values."""

import math
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from acceptance.report import svg


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_linear_and_log_scale_mapping():
    lin = svg.Scale(0.0, 10.0, 100.0, 300.0)
    assert lin(0.0) == 100.0 and lin(10.0) == 300.0 and lin(2.5) == pytest.approx(150.0)
    log = svg.Scale(1e-6, 1e-2, 200.0, 0.0, log=True)  # y axis: pixels grow downwards
    assert log(1e-6) == pytest.approx(200.0)
    assert log(1e-4) == pytest.approx(100.0)  # half-way in decades
    assert log(1e-2) == pytest.approx(0.0)


def test_ticks():
    assert svg.Scale(0, 1, 0, 1).ticks() == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert svg.Scale(-3, 47, 0, 1).ticks() == pytest.approx([0, 10, 20, 30, 40])
    assert svg.Scale(1e-6, 1e-2, 0, 1, log=True).ticks() == pytest.approx([1e-6, 1e-5, 1e-4, 1e-3, 1e-2])
    # more than 7 decades: every second one
    assert svg.Scale(1e-12, 1.0, 0, 1, log=True).ticks() == pytest.approx([10.0**k for k in range(-12, 1, 2)])
    # under 3 decades: 1-2-5 ticks
    assert svg.Scale(1.5e-4, 3e-3, 0, 1, log=True).ticks() == pytest.approx([2e-4, 5e-4, 1e-3, 2e-3])


@pytest.mark.parametrize(
    "v, text", [(1e-5, "1e-5"), (0.01, "1e-2"), (5e-4, "5e-4"), (1.0, "1"), (200.0, "200"), (1e4, "1e4")]
)
def test_log_tick_labels(v, text):
    assert svg.tick_label(v, True) == text


@pytest.mark.parametrize(
    "v, text",
    [
        (7.46e-6, "7.46e-6"),
        (5e5, "5e5"),
        (12345.0, "1.23e4"),
        (2e-4, "2e-4"),
        (0.002, "2e-3"),
        (250.0, "250"),
        (0.0, "0"),
    ],
)
def test_linear_tick_labels(v, text):
    assert svg.tick_label(v, False) == text


def test_choose_log():
    assert svg.choose_log([1e-5, 1e-3])  # exactly two decades
    assert not svg.choose_log([1e-5, 9e-4])
    assert not svg.choose_log([0.0, 0.0, 1e-3])  # one positive value
    assert svg.choose_log([0.0, 1e-7], [math.nan, 1e-3])


def test_plottable_counts_what_it_drops():
    values = [0.0, 0.0, -1.0, math.nan, math.inf, 1e-3, 2e-3]
    kept, dropped = svg.plottable(values, log=True)
    assert kept.tolist() == [1e-3, 2e-3]
    assert dropped == {"nan": 1, "inf": 1, "zero": 2, "negative": 1}
    kept, dropped = svg.plottable(values, log=False)
    assert kept.tolist() == [0.0, 0.0, -1.0, 1e-3, 2e-3]
    assert dropped == {"nan": 1, "inf": 1}


def test_histogram_counts_match_numpy_on_log_bins():
    rng = np.random.default_rng(0)
    a, b = rng.lognormal(-7, 1.5, 300), rng.lognormal(-6, 1.0, 200)
    edges, (ca, cb) = svg.histogram_counts([a, b], 12, log=True)
    lo, hi = min(a.min(), b.min()), max(a.max(), b.max())
    expected_edges = 10 ** np.linspace(np.log10(lo), np.log10(hi), 13)
    np.testing.assert_allclose(edges, expected_edges, rtol=1e-12)
    assert ca.sum() == 300 and cb.sum() == 200
    np.testing.assert_array_equal(ca, np.histogram(a, bins=expected_edges)[0])


def test_box_stats_tukey():
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 100.0])
    b = svg.box_stats(values)
    # numpy linear percentiles of 9 points: q1 at position 2, median 4, q3 6 (0-based)
    assert (b.q1, b.median, b.q3) == (3.0, 5.0, 7.0)
    # fences 3 - 6 = -3 and 7 + 6 = 13: 100 is an outlier, whiskers at 1 and 8
    assert (b.whisker_lo, b.whisker_hi) == (1.0, 8.0)
    assert b.outliers.tolist() == [100.0]


def test_qq_points_linear_interpolation():
    x = np.arange(10.0)
    qx, qy = svg.qq_points(x, 2 * x)
    # p_i = (i + 0.5) / 10; position p·(n-1) = 0.9·(i + 0.5) and x_k = k
    np.testing.assert_allclose(qx, 0.9 * (np.arange(10) + 0.5))
    np.testing.assert_allclose(qy, 2 * qx)
    assert svg.qq_points(np.arange(1000.0), np.arange(50.0))[0].size == 50


def _lines(root, cls):
    return [e for e in root.iter("{http://www.w3.org/2000/svg}line") if e.get("class") == cls]


def test_scatter_reference_lines_and_points_on_log_axes():
    rng = np.random.default_rng(1)
    base = rng.lognormal(-8, 1.2, 40)
    impl = base * 1.4
    base[:3] = 0.0  # bit-exact trials cannot sit on a log axis
    root = parse(svg.scatter_plot(impl.tolist(), base.tolist(), factor=2.0, title="t", metric="max_abs"))
    circles = list(root.iter("{http://www.w3.org/2000/svg}circle"))
    assert len(circles) == 37
    assert "not shown: 3 zero" in ET.tostring(root, encoding="unicode")
    (ref,), (factor,) = _lines(root, "ref"), _lines(root, "factor")
    x0, x1 = svg.LEFT, svg.WIDTH - svg.RIGHT
    y0, y1 = svg.HEIGHT - svg.BOTTOM, svg.TOP
    # y = x on equal log ranges: from the bottom-left to the top-right corner
    assert [float(ref.get(k)) for k in ("x1", "y1", "x2", "y2")] == pytest.approx([x0, y0, x1, y1], abs=0.06)
    # y = 2x is the same slope shifted up by log10(2) / (decades shown) of the plot height
    both = np.concatenate([base[3:], impl[3:]])
    decades = math.log10(both.max()) - math.log10(both.min())
    shift = math.log10(2.0) / decades * (y0 - y1)
    fx1, fy1 = float(factor.get("x1")), float(factor.get("y1"))
    assert fx1 == pytest.approx(x0, abs=0.06)
    assert fy1 == pytest.approx(y0 - shift, abs=0.06)
    fx2, fy2 = float(factor.get("x2")), float(factor.get("y2"))
    assert (fy1 - fy2) / (fx2 - fx1) == pytest.approx((y0 - y1) / (x1 - x0), rel=2e-3)


def test_scatter_linear_axes_start_at_zero():
    root = parse(svg.scatter_plot([0.5, 2.0, 3.0], [0.6, 2.0, 2.5], factor=2.0, title="t", metric="m"))
    (ref,) = _lines(root, "ref")
    # data reach below a quarter of the maximum: linear range [0, 3]; y = x runs corner to corner
    assert float(ref.get("x1")) == pytest.approx(svg.LEFT) and float(ref.get("y1")) == pytest.approx(
        svg.HEIGHT - svg.BOTTOM
    )
    (factor,) = _lines(root, "factor")
    # y = 2x leaves the window at x = 1.5, the middle of the x axis, at the top
    assert float(factor.get("x2")) == pytest.approx((svg.LEFT + svg.WIDTH - svg.RIGHT) / 2, abs=0.06)
    assert float(factor.get("y2")) == pytest.approx(svg.TOP, abs=0.06)


def test_narrow_linear_range_keeps_its_span():
    base = np.linspace(7.44e-6, 7.51e-6, 20)  # identical trials: impl == baseline
    root = parse(svg.scatter_plot(base.tolist(), base.tolist(), factor=2.0, title="t", metric="m"))
    xs = [float(c.get("cx")) for c in root.iter("{http://www.w3.org/2000/svg}circle")]
    # the points spread over the whole axis instead of collapsing into the corner next to 0
    assert min(xs) == pytest.approx(svg.LEFT, abs=0.06) and max(xs) == pytest.approx(svg.WIDTH - svg.RIGHT, abs=0.06)
    assert _lines(root, "factor") == []  # y = 2x lies entirely above this window
    assert "y = 2·x lies outside the window" in ET.tostring(root, encoding="unicode")


def test_degenerate_inputs_do_not_crash():
    zeros = [0.0] * 20
    for chart in (
        svg.histogram_overlay([("a", zeros, "s-impl"), ("b", [math.nan] * 3, "s-base")], title="t", xlabel="x"),
        svg.box_plot([("a", [5e-4] * 10, "s-impl")], title="t", ylabel="y"),
        svg.qq_plot(zeros, zeros, title="t", metric="m"),
        svg.scatter_plot([math.inf], [math.nan], factor=2.0, title="t", metric="m"),
        svg.bar_chart(["=0", ">1"], [0, 0], title="t", xlabel="x", ylabel="y"),
        svg.histogram_overlay([("a", [], "s-impl")], title="t", xlabel="x"),
    ):
        root = parse(chart)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    text = svg.histogram_overlay([("a", [0.0, 0.0, 1e-9, 1e-3], "s-impl")], title="t", xlabel="x")
    assert "not shown: 2 zero" in text


def test_bar_chart_heights_proportional_on_linear_axis():
    root = parse(svg.bar_chart(["a", "b", "c"], [10, 20, 0], title="t", xlabel="x", ylabel="y"))
    bars = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "bar"]
    assert len(bars) == 2
    assert float(bars[1].get("height")) / float(bars[0].get("height")) == pytest.approx(2.0, rel=1e-2)
    counts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.get("class") == "count"]
    assert counts == ["10", "20", "0"]


def test_text_is_escaped():
    text = svg.histogram_overlay([("<b>&", [1.0, 2.0], "s-impl")], title="</svg><script>", xlabel='"x"')
    assert "<script>" not in text and "&lt;/svg&gt;&lt;script&gt;" in text
    parse(text)
    assert re.search(r"&lt;b&gt;&amp;", text)
    text = svg.box_plot([("a\x1b\ud800", [1.0, 2.0], "s-impl")], title="t\x00", ylabel="y")
    assert "\\x1b\\ud800" in text and "\\x00" in text
    text.encode("utf-8")


def test_scatter_thins_many_trials_and_says_so():
    rng = np.random.default_rng(2)
    base = rng.lognormal(-8, 1.0, 5000)
    root = parse(svg.scatter_plot((base * 1.1).tolist(), base.tolist(), factor=1.0, title="t", metric="m"))
    assert len(list(root.iter("{http://www.w3.org/2000/svg}circle"))) == svg.MAX_POINTS
    assert f"{svg.MAX_POINTS} of 5000 trials drawn" in ET.tostring(root, encoding="unicode")
    assert _lines(root, "factor") == []  # factor 1 coincides with y = x

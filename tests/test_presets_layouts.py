"""acceptance.formats.presets (through the real spec loader and input generator) and acceptance.formats.layouts."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from acceptance.formats import presets
from acceptance.formats.layouts import LAYOUTS, apply_layout, describe_layout, edge_values
from acceptance.spec import expand, inputs, load_spec

N = 20000


def draw(tmp_path, dist: dict, dtype: str) -> torch.Tensor:
    """N values of ``dist`` drawn the way the runner does: a spec file, the loader, the generator."""
    spec = {
        "name": "preset_probe",
        "category": "arithmetic",
        "impl": "torch:neg",
        "dtypes": [dtype],
        "inputs": [{"name": "x", "shape": ["N"], "dist": dist}],
        "cases": [{"N": N}],
    }
    path = tmp_path / "probe.yaml"
    path.write_text(yaml.safe_dump(spec))
    loaded, problems = load_spec(path)
    assert problems == [], problems
    (case,) = expand([loaded])
    (x,) = inputs.generate(case, 0)
    return x


@pytest.mark.parametrize("name", list(presets.RANGES))
def test_range_presets_load_and_draw_within_their_bounds(tmp_path, name):
    lo, hi = presets.RANGES[name]
    assert presets.preset(name, "float16") == {"uniform": [lo, hi]}
    x = draw(tmp_path, presets.preset(name, "float16"), "float16").double()
    # rounding is monotone: the float16 draws lie within the bounds rounded to float16
    lo16, hi16 = torch.tensor([lo, hi], dtype=torch.float64).half().double().tolist()
    assert x.min() >= lo16 and x.max() <= hi16
    assert x.min() < lo + (hi - lo) * 0.01 and x.max() > hi - (hi - lo) * 0.01  # the whole range is covered


def test_sparse_preset_is_ninety_percent_zeros(tmp_path):
    assert presets.preset("sparse", "bfloat16") == {"sparse": {"density": 0.1, "of": {"uniform": [-1.0, 1.0]}}}
    x = draw(tmp_path, presets.preset("sparse", "bfloat16"), "bfloat16").double()
    zeros = int((x == 0).sum())
    # binomial(N, 0.9): mean 18000, sd 42.4; 6 sd either side
    assert abs(zeros - 0.9 * N) < 6 * math.sqrt(N * 0.9 * 0.1)
    assert x.abs().max() <= 1


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_specials_preset_mixes_every_special_value_into_normal_data(tmp_path, dtype):
    spec_form = presets.preset("specials", dtype)
    assert spec_form["specials"]["fraction"] == 0.01 and spec_form["specials"]["of"] == {"uniform": [-1.0, 1.0]}
    json.dumps(spec_form, allow_nan=False)  # plain data: no float inf/nan
    x = draw(tmp_path, spec_form, dtype).double()
    info = torch.finfo(getattr(torch, dtype))
    tiny, top = info.smallest_normal, info.max
    sub_min = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149}[dtype]  # by hand
    wanted = [
        0.0,
        -0.0,
        sub_min,
        -sub_min,
        tiny - sub_min,
        -(tiny - sub_min),
        tiny,
        -tiny,
        top,
        -top,
        math.inf,
        -math.inf,
    ]
    bits = x.view(torch.int64)
    wanted_bits = torch.tensor(wanted, dtype=torch.float64).view(torch.int64)
    for v, b in zip(wanted, wanted_bits, strict=False):
        assert bool((bits == b).any()), v
    assert bool(torch.isnan(x).any())
    special = torch.isnan(x) | torch.isin(bits, wanted_bits)
    # 13 values, each element replaced with probability 1 %: binomial(N, 0.01) specials, 6 sd either side
    # (a uniform draw on [-1, 1] equals one of them with odds below 1e-7)
    assert abs(int(special.sum()) - 0.01 * N) < 6 * math.sqrt(N * 0.01 * 0.99)


def test_specials_of_a_format_without_infinity():
    values = presets.special_values("float8_e4m3fn")
    assert "inf" not in values and "-inf" not in values and values[-1] == "nan"
    assert values[:10] == [
        0.0,
        -0.0,
        2.0**-9,
        -(2.0**-9),
        2.0**-6 - 2.0**-9,
        -(2.0**-6 - 2.0**-9),
        2.0**-6,
        -(2.0**-6),
        448.0,
        -448.0,
    ]


def test_preset_errors():
    with pytest.raises(
        ValueError, match="unknown preset 'r9'; presets: r0, r1, r4, r5, large, small, sparse, specials"
    ):
        presets.preset("r9", "float16")
    with pytest.raises(ValueError, match="dtype must be a floating-point test dtype"):
        presets.preset("r0", "int32")
    a, b = presets.preset("sparse", "float16"), presets.preset("sparse", "float16")
    a["sparse"]["of"]["uniform"][0] = 5.0
    assert b["sparse"]["of"]["uniform"][0] == -1.0  # each call returns a fresh mapping


def test_overflow_report_counts_each_kind_by_hand():
    oracle = torch.tensor(
        [
            70000.0,
            -65520.0,
            65519.9,
            65504.0,  # 2 overflow: 65520 ties to 65536, i.e. inf
            1e-8,
            2.0**-25,
            -(2.0**-25),  # 3 underflow: at most half the smallest subnormal 2**-24
            3e-8,
            1e-5,
            -(2.0**-14) * 0.999,  # 3 subnormal
            1e-4,
            0.0,
            -0.0,
            1.0,  # fine
            math.nan,
            math.inf,
        ],  # 2 non-finite
        dtype=torch.float64,
    )
    counts = presets.range_counts(oracle, "float16")
    assert counts == presets.RangeCounts("float16", 16, 2, 3, 3, 2)
    # the overflow count agrees with torch's own float16 cast of the finite values
    finite = oracle[torch.isfinite(oracle)]
    assert int(torch.isinf(finite.to(torch.float16)).sum()) == 2
    assert presets.overflow_report(oracle, torch.float16) == (
        "oracle exceeds float16 max (65504) at 2 of 16 elements (|x| >= 65520 rounds to inf); "
        "oracle underflows float16 (nonzero, |x| <= 2**-25: rounds to 0) at 3 of 16 elements; "
        "oracle is subnormal in float16 (|x| < 2**-14, reduced precision) at 3 of 16 elements; "
        "oracle is inf or NaN at 2 of 16 elements"
    )


def test_overflow_report_other_dtypes_and_silence():
    assert presets.overflow_report(torch.linspace(-3, 3, 50, dtype=torch.float64), "bfloat16") is None
    # bfloat16: max (2 - 2**-7) * 2**127, overflow from max + 2**119
    top = (2 - 2.0**-7) * 2.0**127
    c = presets.range_counts(torch.tensor([top, top + 2.0**119, top + 2.0**118], dtype=torch.float64), "bfloat16")
    assert (c.overflow, c.underflow, c.subnormal) == (1, 0, 0)
    assert (
        torch.isinf(torch.tensor([top + 2.0**119]).bfloat16()).all()
        and not torch.isinf(torch.tensor([top + 2.0**118]).bfloat16()).any()
    )
    msg = presets.overflow_report(torch.tensor([1e-46, 1e-40, 1e39], dtype=torch.float64), "float32")
    assert msg.startswith("oracle exceeds float32 max (3.40282e+38) at 1 of 3 elements")
    assert "underflows float32 (nonzero, |x| <= 2**-150: rounds to 0) at 1 of 3" in msg
    assert presets.range_counts(torch.tensor([1e300, 1e-320], dtype=torch.float64), "float64") == presets.RangeCounts(
        "float64", 2, 0, 0, 0, 0
    )
    with pytest.raises(ValueError, match="oracle must be a floating-point tensor"):
        presets.range_counts(torch.ones(3, dtype=torch.int64), "float16")


# --------------------------------------------------------------------------- layouts


def fresh(shape, dtype=torch.float32):
    return torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape).to(dtype) * 0.5 - 3


@pytest.mark.parametrize(
    "layout, shape, strides, offset",
    [
        ("contiguous", (3, 4, 5), (20, 5, 1), 0),
        ("transposed", (3, 4, 5), (20, 1, 4), 0),
        ("transposed", (4, 5), (1, 4), 0),
        ("strided", (3, 4, 5), (40, 10, 2), 0),
        ("strided", (7,), (2,), 0),
        ("channels_last", (2, 3, 4, 5), (60, 1, 15, 3), 0),
        ("offset", (3, 4), (4, 1), 1),
    ],
)
def test_layouts_keep_values_and_have_the_promised_strides(layout, shape, strides, offset):
    t = fresh(shape, torch.float16)
    u = apply_layout(t, layout)
    assert u.shape == t.shape and u.dtype == t.dtype and torch.equal(u, t)
    assert u.stride() == strides and u.storage_offset() == offset
    assert u.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert u.is_contiguous() == (layout in ("contiguous", "offset"))


def test_broadcast_layout_gives_zero_strides_to_constant_dims():
    t = torch.tensor([[1.0, 2.0, 3.0]] * 4)  # constant along dim 0
    u = apply_layout(t, "broadcast")
    assert torch.equal(u, t) and u.stride() == (0, 1)
    cube = torch.full((2, 3, 4), 7.0)
    assert apply_layout(cube, "broadcast").stride() == (0, 0, 0)
    nan_rows = torch.tensor([[math.nan, 1.0]] * 3)
    v = apply_layout(nan_rows, "broadcast")
    assert v.stride() == (0, 1) and torch.isnan(v[:, 0]).all()
    # -0.0 and +0.0 differ in bits, so the dim does not qualify
    with pytest.raises(
        ValueError,
        match=r"layout 'broadcast' needs a dim of size > 1 along which all values are equal.*got shape \(2, 1\)",
    ):
        apply_layout(torch.tensor([[0.0], [-0.0]]), "broadcast")


@pytest.mark.parametrize(
    "layout, t, needs",
    [
        ("transposed", torch.ones(5), r"layout 'transposed' needs at least 2 dims .*got shape \(5,\)"),
        ("strided", torch.tensor(1.0), r"layout 'strided' needs at least 1 dim .*got shape \(\)"),
        (
            "channels_last",
            torch.ones(2, 3, 4),
            r"layout 'channels_last' needs exactly 4 dims \(N, C, H, W\); got shape \(2, 3, 4\)",
        ),
        ("broadcast", torch.arange(6.0).reshape(2, 3), r"layout 'broadcast' needs .*got shape \(2, 3\)"),
        (
            "diagonal",
            torch.ones(2, 2),
            r"unknown layout 'diagonal'; layouts: contiguous, transposed, strided, channels_last, broadcast, offset",
        ),
    ],
)
def test_impossible_layouts_name_the_layout_and_the_shape(layout, t, needs):
    with pytest.raises(ValueError, match=needs):
        apply_layout(t, layout)


def test_layouts_work_for_every_dtype_and_keep_nan_and_signed_zero():
    t = torch.tensor([[math.nan, -0.0, math.inf], [1.5, 0.0, -2.0]], dtype=torch.bfloat16)
    for layout in ("contiguous", "transposed", "strided", "offset"):
        u = apply_layout(t, layout)
        assert torch.equal(u.contiguous().view(torch.int16), t.view(torch.int16)), layout
    ints = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    assert torch.equal(apply_layout(ints, "transposed"), ints)
    assert LAYOUTS == ("contiguous", "transposed", "strided", "channels_last", "broadcast", "offset")


def test_describe_layout_in_words():
    t = fresh((3, 4, 5))
    assert describe_layout(t) == "shape (3, 4, 5), strides (20, 5, 1), offset 0: contiguous"
    assert describe_layout(apply_layout(t, "transposed")) == (
        "shape (3, 4, 5), strides (20, 1, 4), offset 0: transposed (last two dims column-major), not contiguous"
    )
    assert describe_layout(apply_layout(t, "strided")) == (
        "shape (3, 4, 5), strides (40, 10, 2), offset 0: step 2 in the last dim, not contiguous"
    )
    assert describe_layout(apply_layout(t, "offset")) == (
        "shape (3, 4, 5), strides (20, 5, 1), offset 1: contiguous, storage offset 1 element (4 bytes)"
    )
    assert describe_layout(apply_layout(fresh((2, 3, 4, 5)), "channels_last")) == (
        "shape (2, 3, 4, 5), strides (60, 1, 15, 3), offset 0: channels_last (NHWC memory)"
    )
    assert (
        describe_layout(torch.ones(3).expand(2, 3))
        == "shape (2, 3), strides (0, 1), offset 0: broadcast (stride 0 in dim 0), not contiguous"
    )


# --------------------------------------------------------------------------- edge sizes


def test_edge_values_by_hand():
    # median 200: prime 199; 8*25+1 = 201, 16*12-1 = 191, 32*6+3 = 195; budget 4096
    assert edge_values([100, 200, 300], max_value=4096) == [1, 191, 195, 199, 201, 4096]
    # median of [64, 128] is 64: prime 61 (|61-64| = 3 < |67-64|), 65, 63, 67 (also prime)
    assert edge_values([128, 64], max_value=1000) == [1, 61, 63, 65, 67, 1000]
    # small values: v = 3 -> prime 3, 9, 15, 35 (each multiple at least 1), within the budget
    assert edge_values([3], max_value=20) == [1, 3, 9, 15, 20]
    assert edge_values([128], max_value=100) == [1, 100]


def test_edge_values_avoid_tile_multiples_and_include_a_prime():
    for v in (17, 96, 250, 1000, 4096):
        sizes = edge_values([v], max_value=10**6)
        inner = sizes[1:-1]
        assert all(s % 8 for s in inner), (v, sizes)
        assert any(all(s % d for d in range(2, int(s**0.5) + 1)) and s > 1 for s in inner)
        assert sizes[0] == 1 and sizes[-1] == 10**6


@pytest.mark.parametrize(
    "values, max_value, match",
    [
        ([], 10, "symbol_values must be a non-empty list of integers >= 1"),
        ([0, 4], 10, "symbol_values must be a non-empty list"),
        ([4.0], 10, "symbol_values must be a non-empty list"),
        ([4], 0, "max_value must be an integer >= 1"),
    ],
)
def test_edge_values_errors(values, max_value, match):
    with pytest.raises(ValueError, match=match):
        edge_values(values, max_value=max_value)

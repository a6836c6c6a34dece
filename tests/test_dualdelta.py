"""The dual_delta library call and the oracles, against errors computed independently in float64."""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import special

from acceptance import DualDeltaResult, dual_delta
from acceptance.numerics.oracle import float64_oracle, mpmath_oracle, oracle_from_spec, to_float64
from acceptance.session.dualdelta import DualDeltaError, trial_seed

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def matmul_inputs(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(24, 40, generator=g), torch.randn(40, 16, generator=g)


def biased_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.float() @ b.float() * 1.001).to(a.dtype)


def hybrid(e: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
    """|e - o| / (1 + |o|) in float64."""
    return (e.double() - o).abs() / (1 + o.abs())


# ----------------------------------------------------------------------------- deltas


def test_deltas_and_free_equal_float64_errors_computed_here():
    res = dual_delta(
        biased_matmul,
        torch.matmul,
        None,
        matmul_inputs,
        ["max_hyb", "mean_hyb"],
        6,
        dtype=torch.float16,
        seed=3,
        impl_device="cpu",
    )
    free_max = free_mean = 0.0
    for t in range(6):
        a, b = (x.half() for x in matmul_inputs(torch.Generator().manual_seed(trial_seed(3, t))))
        o = a.double() @ b.double()  # the oracle: exact products of the float16 inputs (K=40 sums)
        e, base = biased_matmul(a, b), torch.matmul(a, b)
        assert res.delta_impl["max_hyb"][t] == pytest.approx(float(hybrid(e, o).max()), rel=1e-12)
        assert res.delta_impl["mean_hyb"][t] == pytest.approx(float(hybrid(e, o).mean()), rel=1e-12)
        assert res.delta_baseline["max_hyb"][t] == pytest.approx(float(hybrid(base, o).max()), rel=1e-12)
        free_max = max(free_max, float(hybrid(o.half(), o).max()))
        free_mean = max(free_mean, float(hybrid(o.half(), o).mean()))
    assert res.free["max_hyb"] == pytest.approx(free_max, rel=1e-12)
    assert res.free["mean_hyb"] == pytest.approx(free_mean, rel=1e-12)
    # correct rounding to float16 costs at most half an ulp: |o|/(1+|o|) * 2^-11 < 2^-11
    assert 0 < res.free["max_hyb"] < 2.0**-11
    assert res.analysis["max_hyb"].free == res.free["max_hyb"]


def test_same_inputs_same_result_and_seeds_differ():
    def run(seed):
        return dual_delta(
            torch.matmul,
            torch.matmul,
            None,
            matmul_inputs,
            "max_abs",
            3,
            dtype=torch.float16,
            seed=seed,
            impl_device="cpu",
        )

    np.testing.assert_array_equal(run(0).delta_impl["max_abs"], run(0).delta_impl["max_abs"])
    assert not np.array_equal(run(0).delta_impl["max_abs"], run(1).delta_impl["max_abs"])
    assert trial_seed(0, 1) != trial_seed(1, 0)


def test_bit_identical_impl_is_identical_and_passes():
    res = dual_delta(
        torch.matmul, torch.matmul, None, matmul_inputs, num_tests=20, dtype=torch.float16, impl_device="cpu"
    )
    assert res.passed and res.labels == ("max_hyb",)
    assert res.analysis["max_hyb"].conclusion == "identical"
    assert "PASS" in res.summary() and "identical" in repr(res)


def test_biased_impl_fails_with_reasons_in_the_summary():
    res = dual_delta(
        biased_matmul,
        torch.matmul,
        None,
        matmul_inputs,
        ["max_hyb", "mean_hyb"],
        30,
        dtype=torch.float16,
        impl_device="cpu",
    )
    assert not res.passed
    rec = res.analysis["mean_hyb"]
    # Holm over the 2 metrics' sign tests and worst-trial tests: both sign-test p's are the smallest of the
    # 4 and equal (2^-30, impl over in all 30 trials), so each is adjusted by 4
    family = [r.p_value for r in res.records] + [r.p_worst for r in res.records]
    assert rec.p_value == 2.0**-30 and sorted(family)[:2] == [rec.p_value, rec.p_value]
    assert not rec.passed and rec.p_adjusted == pytest.approx(min(1.0, 4 * rec.p_value))
    assert rec.conclusion.startswith("impl less accurate by")
    summary = res.summary()
    assert "FAIL" in summary and "mean_hyb: impl error exceeds" in summary


def test_callable_error_and_several_outputs():
    def two_outputs(x):
        return x.sum(dim=-1), x.amax(dim=-1)

    def rel_l2(e, o):
        return float(torch.linalg.vector_norm(e.double() - o) / torch.linalg.vector_norm(o))

    res = dual_delta(
        two_outputs,
        two_outputs,
        None,
        lambda g: torch.randn(8, 300, generator=g),
        ["max_abs", rel_l2],
        4,
        dtype=torch.float32,
        impl_device="cpu",
    )
    assert res.labels == ("max_abs[0]", "rel_l2[0]", "max_abs[1]", "rel_l2[1]")
    assert [r.output for r in res.records] == [0, 0, 1, 1]
    x = torch.randn(8, 300, generator=torch.Generator().manual_seed(trial_seed(0, 2)))
    o = x.double().sum(dim=-1)
    assert res.delta_impl["rel_l2[0]"][2] == pytest.approx(rel_l2(x.sum(dim=-1), o), rel=1e-12)
    # the max is exact in any precision: no error, nothing free
    assert np.all(res.delta_impl["max_abs[1]"] == 0) and res.free["max_abs[1]"] == 0.0


def test_params_reach_every_role_and_integers_stay_integers():
    seen = []

    def oracle(index, src, *, bins):
        seen.append((index.dtype, src.dtype, bins))
        return torch.zeros(bins, dtype=src.dtype).index_add_(0, index, src)

    def index_add(index, src, *, bins):
        return torch.zeros(bins, dtype=src.dtype).index_add_(0, index, src)

    gen = lambda g: (torch.randint(0, 5, (50,), generator=g), torch.randn(50, generator=g))  # noqa: E731
    res = dual_delta(
        index_add, index_add, oracle, gen, "max_abs", 2, dtype=torch.bfloat16, params={"bins": 5}, impl_device="cpu"
    )
    assert seen == [(torch.int64, torch.float64, 5)] * 2
    assert res.passed


def test_float64_output_has_nothing_free():
    res = dual_delta(
        torch.exp,
        torch.exp,
        None,
        lambda g: torch.randn(10, generator=g),
        "max_hyb",
        3,
        dtype=torch.float64,
        impl_device="cpu",
    )
    assert res.free["max_hyb"] == 0.0


def test_timing_covers_the_roles():
    res = dual_delta(torch.matmul, torch.matmul, None, matmul_inputs, "max_hyb", 3, impl_device="cpu")
    t = res.timing
    assert min(t.impl, t.baseline, t.oracle) > 0
    assert t.impl + t.baseline + t.oracle < t.total


def test_mpmath_oracle_in_a_dual_delta_run():
    res = dual_delta(
        torch.exp,
        torch.exp,
        mpmath_oracle("exp", 30),
        lambda g: 4 * torch.rand(64, generator=g) - 2,
        ["max_ulp", "max_hyb"],
        5,
        dtype=torch.float32,
        impl_device="cpu",
    )
    assert res.passed
    # torch's float32 exp is within a few ulps of the correctly rounded value
    assert res.delta_impl["max_ulp"].max() <= 2.0


@cuda
def test_impl_on_cuda_matches_the_cpu_baseline():
    res = dual_delta(
        torch.matmul,
        torch.matmul,
        None,
        matmul_inputs,
        ["max_hyb", "mean_hyb"],
        20,
        dtype=torch.float16,
        impl_device="cuda",
    )
    assert res.impl_device.startswith("cuda") and res.passed


# ----------------------------------------------------------------------------- bad input


def _gen(g):
    return (torch.randn(4, generator=g),)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(get_error="nope"), "get_error: 'nope' is not a scalar metric"),
        (dict(get_error="diff4"), "'diff4' is not a scalar metric"),
        (dict(get_error=[]), "no metric given"),
        (dict(get_error=["max_hyb", "max_hyb"]), "given twice"),
        (dict(get_error=[3]), "expected a metric name or a callable"),
        (dict(num_tests=0), "num_tests: expected an integer >= 1"),
        (dict(alpha=1.5), "alpha: expected a number in"),
        (dict(free=-1.0), "free: expected 'auto'"),
        (dict(factor=-2.0), "factor for 'max_hyb'"),
        (dict(factor={"rms": 2.0}), "factor: rms not among the metrics"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    args = dict(impl=torch.exp, baseline=torch.exp, oracle=None, generate_input=_gen, impl_device="cpu") | kwargs
    with pytest.raises(DualDeltaError, match=message.replace("(", r"\(")):
        dual_delta(**args)


def test_failing_callables_are_named_with_the_trial():
    def broken(x):
        raise RuntimeError("kernel launch failed")

    with pytest.raises(
        DualDeltaError,
        match=r"impl raised RuntimeError: kernel launch failed \(test_dualdelta.py:\d+\) "
        "in trial 0",
    ):
        dual_delta(broken, torch.exp, None, _gen, impl_device="cpu")
    with pytest.raises(DualDeltaError, match="generate_input must return a tensor or a tuple of tensors"):
        dual_delta(torch.exp, torch.exp, None, lambda g: [1, 2], impl_device="cpu")
    with pytest.raises(DualDeltaError, match="oracle returned NoneType at output 0 in trial 0, expected a Tensor"):
        dual_delta(torch.exp, torch.exp, lambda x: None, _gen, impl_device="cpu")
    shapes = r"oracle output 0 has shape \(1,\), the baseline \(4,\) \(trial 0\)"
    with pytest.raises(DualDeltaError, match=shapes):
        dual_delta(torch.exp, torch.exp, lambda x: x[:1], _gen, impl_device="cpu")
    with pytest.raises(DualDeltaError, match=r"impl returned 2 outputs, the baseline 1 \(trial 0\)"):
        dual_delta(lambda x: (x, x), torch.exp, None, _gen, impl_device="cpu")
    with pytest.raises(DualDeltaError, match="get_error 'bad' returned 'x', not a number"):

        def bad(e, o):
            return "x"

        dual_delta(torch.exp, torch.exp, None, _gen, bad, impl_device="cpu")


def test_result_type_is_exported():
    res = dual_delta(torch.exp, torch.exp, None, _gen, num_tests=2, impl_device="cpu")
    assert isinstance(res, DualDeltaResult) and res.num_tests == 2


# ----------------------------------------------------------------------------- oracles


def _is_nearest(y: float, exact: Fraction) -> bool:
    """y is a float64 nearest to ``exact`` (neither neighbour is strictly closer)."""
    here = abs(Fraction(y) - exact)
    return all(abs(Fraction(math.nextafter(y, d)) - exact) >= here for d in (-math.inf, math.inf))


def test_to_float64_rounds_once_even_among_subnormals():
    # 2^-1075 (1 + 2^-59) lies just above half the smallest subnormal: nearest is 2^-1074.
    # Rounding to 53 bits first gives 2^-1075 exactly, which then ties to even: 0.
    ctx = mpmath.MPContext()
    ctx.prec = 200
    x = ctx.ldexp(1 + ctx.ldexp(1, -59), -1075)
    assert to_float64(x) == 5e-324
    assert to_float64(-x) == -5e-324
    assert to_float64(ctx.ldexp(1, 1024)) == math.inf
    assert to_float64(ctx.ldexp(1, -1100)) == 0.0
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = ctx.mpf(rng.standard_normal()) * ctx.exp(ctx.mpf(rng.uniform(-700, 700))) / 3
        sign, man, exp, _bc = v._mpf_
        exact = Fraction((-1) ** sign * man) * Fraction(2) ** exp
        assert _is_nearest(to_float64(v), exact)


def test_mpmath_exp_is_correctly_rounded():
    assert float(mpmath_oracle("exp")(torch.tensor([1.0]))) == math.e
    x = torch.linspace(-20, 20, 101, dtype=torch.float64)
    y = mpmath_oracle("exp", 40)(x)
    ctx = mpmath.MPContext()
    ctx.prec = 300
    for xi, yi in zip(x.tolist(), y.tolist(), strict=False):
        v = ctx.exp(ctx.mpf(xi))
        sign, man, exp, _bc = v._mpf_
        assert _is_nearest(yi, Fraction(man) * Fraction(2) ** exp)


def test_mpmath_gelu_matches_x_times_normal_cdf_where_float64_torch_cancels():
    x = torch.linspace(-12, 6, 181, dtype=torch.float64)
    y = mpmath_oracle("gelu")(x)
    ref = x.numpy() * special.ndtr(x.numpy())  # ndtr is accurate in the lower tail
    np.testing.assert_allclose(y.numpy(), ref, rtol=1e-13, atol=0)  # ndtr: ~1e-14 relative in the tail
    # torch's float64 gelu computes 1 + erf(x/sqrt 2), which cancels for x << 0
    naive = F.gelu(x).numpy()
    assert np.max(np.abs(naive[:20] - ref[:20]) / np.abs(ref[:20])) > 1e-6
    # tanh form x/2 (1 + tanh z) = x * expit(2z): no cancellation (error ~|2z| u, 1.6e-14 at x = -12)
    tanh = mpmath_oracle("gelu")(x, approximate="tanh")
    xn = x.numpy()
    z = math.sqrt(2 / math.pi) * (xn + 0.044715 * xn**3)
    np.testing.assert_allclose(tanh.numpy(), xn * special.expit(2 * z), rtol=1e-12, atol=0)


def test_mpmath_oracle_special_points_follow_ieee():
    z = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -1.0], dtype=torch.float64)
    assert mpmath_oracle("exp")(z)[:4].tolist() == [1.0, 1.0, math.inf, 0.0]
    r = mpmath_oracle("rsqrt")(z)
    assert r[0] == math.inf and r[1] == -math.inf and math.isnan(r[5])
    assert mpmath_oracle("log")(z)[0] == -math.inf and math.isnan(mpmath_oracle("log")(z)[5])
    assert torch.isnan(mpmath_oracle("sqrt")(z)[4:]).all()
    # two inputs broadcast; a name mpmath knows without a formula here
    assert mpmath_oracle("atan2")(torch.tensor([1.0]), torch.tensor([[1.0], [-1.0]])).shape == (2, 1)
    assert float(mpmath_oracle("gamma")(torch.tensor([5.0]))) == 24.0


def test_mpmath_oracle_rejects_bad_requests():
    with pytest.raises(ValueError, match="unknown function 'nope'"):
        mpmath_oracle("nope")
    with pytest.raises(ValueError, match="dps must be an integer >= 20"):
        mpmath_oracle("exp", 10)
    with pytest.raises(ValueError, match="'exp': unknown parameter 'approximate'"):
        mpmath_oracle("exp")(torch.ones(1), approximate="tanh")
    with pytest.raises(ValueError, match="approximate must be one of"):
        mpmath_oracle("gelu")(torch.ones(1), approximate="fast")


def test_oracle_from_spec():
    assert float(oracle_from_spec({"mpmath": "exp", "dps": 30})(torch.tensor([0.0]))) == 1.0
    with pytest.raises(ValueError, match="oracle: unknown field"):
        oracle_from_spec({"mpmath": "exp", "digits": 30})
    with pytest.raises(ValueError, match="oracle.dps: expected an integer"):
        oracle_from_spec({"mpmath": "exp", "dps": "50"})
    with pytest.raises(ValueError, match="oracle.mpmath: expected a function name"):
        oracle_from_spec({"dps": 50})


def test_float64_oracle_casts_floats_only():
    seen = []

    def fn(x, idx):
        seen.append((x.dtype, idx.dtype))
        return x.float()[idx]  # returns float32 on purpose

    out = float64_oracle(fn)(torch.tensor([1.5, 2.5], dtype=torch.float16), torch.tensor([1, 0]))
    assert seen == [(torch.float64, torch.int64)]
    assert out.dtype == torch.float64 and out.tolist() == [2.5, 1.5]

"""Gradients as outputs (``backward:`` in a spec): values, naming, hand-written backwards, modules, compile,
spec errors and the float64 gradcheck of the oracle."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.isolation.grad import BackwardRef, with_backward
from acceptance.session import results as results_mod
from acceptance.spec import load_spec
from acceptance.spec.model import Normal

SPECS = Path(__file__).parent / "backward_specs"

pytest_plugins = ["pytester"]


def _run(tmp_path: Path, *specs: Path) -> tuple[int, results_mod.Results]:
    result = CliRunner().invoke(
        main, ["run", *map(str, specs), "--out", str(tmp_path), "--no-isolation"], catch_exceptions=False
    )
    return result.exit_code, results_mod.load(tmp_path / "results.json")


def test_vjp_of_a_product_is_dy_times_the_other_factor():
    """grad[a] = dy * b and grad[b] = dy * a, with dy drawn from the seed's stream 0 (normal(0, 1))."""
    ref = BackwardRef(object(), ("a", "b"), ("a", "b"), Normal(0.0, 1.0), (), "float64")  # type: ignore[arg-type]
    fn = with_backward(lambda a, b: a * b, ref)
    a, b = torch.rand(5, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    out, ga, gb = fn(a, b, torch.tensor([12345]))
    # the cotangent, drawn independently: Marsaglia's polar method on PCG64 stream (seed, spawn_key=(0,)); for
    # 5 values a batch of 3 + 3 // 3 + 8 = 12 pairs, its 12 x words then its 12 y words
    bits = np.random.PCG64(np.random.SeedSequence(12345, spawn_key=(0,)))
    u = (bits.random_raw(24) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    x, y = 2 * u[: len(u) // 2] - 1, 2 * u[len(u) // 2 :] - 1
    z = []
    for xi, yi in zip(x, y, strict=True):
        s = xi * xi + yi * yi
        if 0 < s < 1:
            f = math.sqrt(-2 * math.log(s) / s)
            z += [xi * f, yi * f]
    dy = torch.tensor(z[:5], dtype=torch.float64)
    torch.testing.assert_close(out, a * b, rtol=0, atol=0)
    torch.testing.assert_close(ga, dy * b, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(gb, dy * a, rtol=1e-15, atol=1e-15)


def test_hand_written_backward_checks_a_non_differentiable_impl(tmp_path):
    code, res = _run(tmp_path, SPECS / "hand.yaml")
    (case,) = res.cases
    assert code == 0 and case.verdict == "pass", case.reasons
    assert case.output_names == ["", "grad[a]", "grad[b]"]
    assert len(case.metrics) == 3
    assert {c.output_name for c in case.criteria if c.output} == {"grad[a]", "grad[b]"}


def test_without_impl_backward_a_detached_impl_is_an_error(tmp_path):
    text = (SPECS / "hand.yaml").read_text().replace("impl_backward: kernels.py:mul_backward\n", "")
    spec = tmp_path / "spec" / "nohand.yaml"
    spec.parent.mkdir()
    spec.write_text(text)
    (spec.parent / "kernels.py").write_text((SPECS / "kernels.py").read_text())
    code, res = _run(tmp_path / "out", spec)
    (case,) = res.cases
    assert code == 1 and case.verdict == "error"
    assert "requires grad" in (case.error or "")


def test_a_wrong_gradient_fails_and_is_named(tmp_path):
    kernels = tmp_path / "k.py"
    kernels.write_text(
        (SPECS / "kernels.py").read_text() + "\n\ndef mul_bwd_wrong(dy, a, b):\n    return dy * b, dy * b\n"
    )
    spec = tmp_path / "wrong.yaml"
    spec.write_text(
        (SPECS / "hand.yaml")
        .read_text()
        .replace("kernels.py", "k.py")
        .replace("k.py:mul_backward", "k.py:mul_bwd_wrong")
    )
    code, res = _run(tmp_path / "out", spec)
    (case,) = res.cases
    assert code == 1 and case.verdict == "fail"
    assert any("[grad[b]]" in r for r in case.reasons)
    assert not any("[grad[a]]" in r for r in case.reasons)
    assert "grad[b]" in (tmp_path / "out" / "junit.xml").read_text()


def test_module_parameters_and_torch_compile(tmp_path):
    code, res = _run(tmp_path, SPECS / "module.yaml")
    (case,) = res.cases
    assert code == 0 and case.verdict == "pass", case.reasons + [case.error or ""]
    assert case.output_names == ["", "grad[x]", "grad[proj.weight]", "grad[proj.bias]"]
    assert case.warnings == []  # compiled once, with the parameters requiring grad: no recompilation


def _write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(body))
    (tmp_path / "kernels.py").write_text((SPECS / "kernels.py").read_text())
    return path


@pytest.mark.parametrize(
    ("extra", "field", "words"),
    [
        ("backward: {wrt: [c]}", "backward.wrt[0]", "'c' is not an input"),
        ("backward: {wrt: [i]}", "backward.wrt[0]", "not differentiable"),
        ("backward: {wrt: [a, a]}", "backward.wrt[1]", "listed twice"),
        ("impl_backward: kernels.py:mul_backward", "impl_backward", "needs a `backward:` section"),
    ],
)
def test_spec_errors_name_the_field(tmp_path, extra, field, words):
    path = _write(
        tmp_path,
        f"""\
        name: s
        category: arithmetic
        impl: kernels.py:mul
        dtypes: [float32]
        inputs:
          - {{name: a, shape: [4], dist: {{uniform: [-1, 1]}}}}
          - {{name: i, shape: [4], dtype: int64, dist: {{randint: [0, 3]}}}}
        {extra}
        """,
    )
    spec, problems = load_spec(path)
    assert spec is None
    assert any(p.field == field and words in p.message and p.file == str(path) for p in problems), problems


def test_gradcheck_catches_a_wrong_oracle(tmp_path):
    path = _write(
        tmp_path,
        """\
        name: exp_backward
        category: activation
        impl: torch:exp
        oracle: kernels.py:wrong_exp
        dtypes: [float32]
        inputs:
          - {name: x, shape: [6], dist: {uniform: [-1, 1]}}
        backward: {wrt: [x]}
        """,
    )
    result = CliRunner().invoke(main, ["validate", "--gradcheck", str(path)])
    assert result.exit_code == 2
    assert str(path) in result.output and "oracle" in result.output
    good = path.read_text().replace("oracle: kernels.py:wrong_exp\n", "")
    path.write_text(good)
    assert CliRunner().invoke(main, ["validate", "--gradcheck", str(path)]).exit_code == 0


def test_tune_proposes_per_gradient_and_writes_the_largest(tmp_path):
    """A deliberately off-by-rounding hand-written backward: grad[a] = dy * b computed in float16 and widened
    back, so grad[a] errs by about 2**-11 relative and grad[b] (exact) not at all."""
    (tmp_path / "kernels.py").write_text(
        (SPECS / "kernels.py").read_text()
        + "\n\ndef mul_bwd_half(dy, a, b):\n    return (dy.half() * b.half()).float(), dy * a\n"
    )
    spec = tmp_path / "hand.yaml"
    text = (SPECS / "hand.yaml").read_text().replace("kernels.py:mul_backward", "kernels.py:mul_bwd_half")
    spec.write_text(text.replace("category: arithmetic", "category: composite"))
    result = CliRunner().invoke(
        main, ["tune", str(spec), "--seeds", "2", "--no-isolation", "--write"], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    rows = {line.split()[2]: line.split() for line in result.output.splitlines() if line.startswith("hand_mul ")}
    assert {"diff1[grad[a]]", "diff1[grad[b]]", "diff1"} <= set(rows)
    a, b = float(rows["diff1[grad[a]]"][-3]), float(rows["diff1[grad[b]]"][-3])
    # rounding dy, b and their product to float16: |error| <= 3 * 2**-11 relative, mean about a third of it;
    # x margin 2, stepped up to 1-2-5: between 2e-4 and 5e-3
    assert 2e-4 <= a <= 5e-3 and b < a
    written = spec.read_text()
    assert f"diff1: {rows['diff1[grad[a]]'][-3]}" in written  # the largest over the outputs


def _installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == "acceptance.pytest_plugin" for ep in entry_points(group="pytest11"))


def test_pytest_plugin_runs_backward_cases(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[1]))
    specs = pytester.mkdir("specs")
    (specs / "kernels.py").write_text(
        (SPECS / "kernels.py").read_text() + "\n\ndef mul_bwd_wrong(dy, a, b):\n    return dy * b, dy * b\n"
    )
    (specs / "hand.yaml").write_text((SPECS / "hand.yaml").read_text())
    (specs / "wrong.yaml").write_text(
        (SPECS / "hand.yaml").read_text().replace("hand_mul", "wrong_mul").replace("mul_backward", "mul_bwd_wrong")
    )
    plugin = () if _installed() else ("-p", "acceptance.pytest_plugin")
    result = pytester.runpytest(*plugin, "-p", "no:cacheprovider", "--acceptance-no-isolation", "specs")
    result.assert_outcomes(passed=1, failed=1)
    assert f"bit_mismatch[grad[b]] {3 * 257} != 0" in result.stdout.str()  # every element, in 3 trials


def test_every_role_gets_the_same_cotangent_values():
    """The gradient of the identity is dy itself: the float16 role's, the float32 role's and the float64
    (oracle) role's are the same float16-rounded numbers, and a new seed draws new ones."""
    ref = BackwardRef(object(), ("x",), ("x",), Normal(0.0, 1.0), (), "float16")  # type: ignore[arg-type]
    fn = with_backward(lambda x: x.clone(), ref)
    seed = torch.tensor([7])
    grads = [fn(torch.zeros(33, dtype=dt), seed)[1] for dt in (torch.float16, torch.float32, torch.float64)]
    assert [g.dtype for g in grads] == [torch.float16, torch.float32, torch.float64]
    assert torch.equal(grads[0].double(), grads[2]) and torch.equal(grads[1].double(), grads[2])
    assert torch.equal(grads[2].half().double(), grads[2])  # float16 values: rounded once to the test dtype
    assert 0.5 < float(grads[2].std()) < 1.6  # a normal(0, 1) draw of 33 values
    assert not torch.equal(fn(torch.zeros(33, dtype=torch.float64), torch.tensor([8]))[1], grads[2])


def test_bench_times_the_forward_and_the_gradients(tmp_path):
    result = CliRunner().invoke(main, ["bench", str(SPECS / "hand.yaml"), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (case,) = results_mod.load(tmp_path / "results.json").cases
    assert case.perf is not None and case.perf.median_s > 0 and case.perf.runs >= 1

"""Callable kinds declared in specs: nn.Module, torch.compile (eager fallback reported), ONNX Runtime; setup,
warm-up and per-role params."""

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.isolation.adapters import Adapter
from acceptance.session.run import run_cases
from acceptance.spec import expand, load_spec

HERE = Path(__file__).parent / "ecosystem_specs"
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "ecosystem"


def spec_file(
    tmp_path: Path,
    body: str,
    inputs: str = "  - {name: x, shape: [N], dist: {uniform: [-2, 2]}}\n",
    cases: str = "[{N: 16}]",
    extra: str = "",
) -> Path:
    shutil.copy(HERE / "kernels.py", tmp_path / "kernels.py")
    path = tmp_path / "op.yaml"
    path.write_text(
        f"name: op\ncategory: composite\n{body}\ndtypes: [float32]\ninputs:\n{inputs}"
        f"cases: {cases}\ntrials: 3\nseed: 0\n{extra}"
    )
    return path


def run_spec(path: Path, *, isolate: bool = False):
    spec, problems = load_spec(path)
    assert problems == [], problems
    cases = expand([spec])
    return run_cases(cases, torch.device("cpu"), isolate=isolate)


def test_module_weights_are_the_same_for_every_role_and_cast_per_role(tmp_path):
    decl = {"module": "kernels.py:Affine", "args": [5], "weights_seed": 3}
    shutil.copy(HERE / "kernels.py", tmp_path / "kernels.py")
    x32 = torch.linspace(-1, 1, 10).reshape(2, 5)
    impl, oracle = Adapter(decl, tmp_path / "op.yaml", "impl"), Adapter(decl, tmp_path / "op.yaml", "oracle")
    impl.setup(x32)
    oracle.setup(x32.double())
    torch.manual_seed(3)  # the module as the user would build it, independently
    mine = torch.nn.Linear(5, 5)
    w32, w64 = impl._fn.lin.weight, oracle._fn.lin.weight
    assert w32.dtype == torch.float32 and w64.dtype == torch.float64
    assert torch.equal(w32, mine.weight.detach()) and torch.equal(w64, mine.weight.detach().double())
    expected = x32.double() @ mine.weight.detach().double().T + mine.bias.detach().double()
    assert torch.allclose(oracle(x32.double()), expected, rtol=0, atol=1e-15)


def test_module_weights_from_a_state_dict_file(tmp_path):
    shutil.copy(HERE / "kernels.py", tmp_path / "kernels.py")
    state = {"lin.weight": torch.eye(3) * 2.0, "lin.bias": torch.tensor([1.0, 0.0, -1.0])}
    torch.save(state, tmp_path / "w.pt")
    adapter = Adapter({"module": "kernels.py:Affine", "args": [3], "weights": "w.pt"}, tmp_path / "op.yaml", "impl")
    out = adapter(torch.tensor([[1.0, 2.0, 3.0]]))
    assert out.tolist() == [[3.0, 4.0, 5.0]]  # 2x + b by hand


@pytest.mark.parametrize("isolate", [False, True])
def test_a_module_spec_passes_in_process_and_in_a_worker(tmp_path, isolate):
    path = spec_file(
        tmp_path,
        "impl: {module: kernels.py:Affine, args: [4]}",
        inputs="  - {name: x, shape: [N, 4], dist: {uniform: [-1, 1]}}\n",
        cases="[{N: 3}]",
    )
    (case,) = run_spec(path, isolate=isolate)
    assert case.verdict == "pass", case.reasons
    assert case.timing.setup > 0


def test_compile_hitting_the_recompile_limit_is_an_error_naming_it(tmp_path):
    torch._dynamo.reset()
    path = spec_file(
        tmp_path,
        "impl: {fn: kernels.py:square, compile: {backend: eager, recompile_limit: 2, dynamic: false}}",
        cases="[{N: 3}, {N: 4}, {N: 5}, {N: 6}]",
    )
    results = run_spec(path)
    verdicts = [c.verdict for c in results]
    # shapes 3 and 4 fill the two cache entries; shape 5 hits the limit and Dynamo runs it eagerly, as 6 after it
    assert verdicts == ["pass", "pass", "error", "error"], [c.reasons for c in results]
    assert "hit config.recompile_limit (2)" in results[2].error and "eagerly" in results[2].error
    assert "ran call 1 eagerly" in results[3].error  # the limit was hit earlier: still said


def test_an_allowed_eager_fallback_is_a_warning(tmp_path):
    torch._dynamo.reset()
    path = spec_file(
        tmp_path,
        "impl: {fn: kernels.py:square, allow_eager: true, compile: {backend: eager, "
        "recompile_limit: 1, dynamic: false}}",
        cases="[{N: 3}, {N: 5}]",
    )
    first, second = run_spec(path)
    assert first.verdict == second.verdict == "pass"
    assert first.warnings == []
    assert any("recompile_limit (1)" in w and "eagerly" in w for w in second.warnings), second.warnings


def test_graph_breaks_are_warnings(tmp_path):
    torch._dynamo.reset()
    path = spec_file(tmp_path, "impl: {fn: kernels.py:chatty_square, compile: {backend: eager}}")
    (case,) = run_spec(path, isolate=True)
    assert case.verdict == "pass", case.reasons
    assert any("graph break" in w and "print" in w for w in case.warnings), case.warnings


def test_setup_runs_once_outside_the_impl_time(tmp_path):
    path = spec_file(
        tmp_path, "impl: {fn: kernels.py:square, setup: kernels.py:slow_setup}\nbaseline: kernels.py:square"
    )
    (case,) = run_spec(path, isolate=True)
    assert case.verdict == "pass"
    assert 0.4 <= case.timing.setup < 1.0  # one setup (impl's only: the baseline is a plain function)
    assert case.timing.impl < 0.4


def test_setup_has_its_own_timeout(tmp_path):
    path = spec_file(tmp_path, "impl: {fn: kernels.py:square, setup: kernels.py:hanging_setup, setup_timeout: 0.5}")
    (case,) = run_spec(path, isolate=True)
    assert case.verdict == "error"
    assert case.error.startswith("impl setup exceeded the 0.5 s timeout")


def test_per_role_params_reach_only_their_role(tmp_path):
    path = spec_file(
        tmp_path,
        "impl: kernels.py:impl_only\nbaseline: kernels.py:scaled\nparams: {}\n"
        "impl_params: {block: 8}\nbaseline_params: {scale: 1.0}",
    )
    (case,) = run_spec(path)
    assert case.verdict == "pass", case.reasons


def test_per_case_role_params_override_and_enter_the_case_id(tmp_path):
    path = spec_file(
        tmp_path,
        "impl: kernels.py:scaled\nbaseline: kernels.py:scaled\nbaseline_params: {scale: 2.0}"
        "\nimpl_params: {scale: 2.0}",
        cases="[{N: 4}, {N: 4, impl_params: {scale: 3.0}}]",
    )
    spec, _ = load_spec(path)
    ids = [c.id for c in expand([spec])]
    assert ids == ["op[float32-N=4]", "op[float32-N=4-impl.scale=3.0]"]
    same, scaled = run_spec(path)
    assert same.verdict == "pass" and scaled.verdict == "fail"
    assert scaled.metrics[0]["max_rel"] == pytest.approx(0.5)  # |3x - 2x| / |2x|


@pytest.mark.parametrize(
    "body, message",
    [
        ("impl: {fn: kernels.py:square, module: kernels.py:Affine}", "impl: give exactly one of fn, module, onnx"),
        ("impl: {fn: kernels.py:square, providers: [CPUExecutionProvider]}", "impl: providers applies to a"),
        ("impl: {fn: kernels.py:square, allow_eager: true}", "impl: allow_eager applies only with compile"),
        ("impl: {onnx: missing.onnx}", "impl: onnx: no such file 'missing.onnx'"),
        ("impl: {fn: kernels.py:nope}", "impl: fn: 'kernels.py:nope': "),
        (
            "impl: {fn: kernels.py:square, compile: {mode: max-autotune, options: {}}}",
            "impl: compile: give mode or options",
        ),
        ("impl: {fn: kernels.py:square, warm: true}", "impl: unknown field 'warm'"),
    ],
)
def test_declaration_problems_name_the_field(tmp_path, body, message):
    _, problems = load_spec(spec_file(tmp_path, body))
    assert any(str(p).split(": ", 1)[1].startswith(message) for p in problems), problems


def test_onnx_model_runs_in_onnx_runtime(tmp_path):
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"])
    graph = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["y"])], "square", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "square.onnx")
    adapter = Adapter({"onnx": "square.onnx"}, tmp_path / "op.yaml", "impl")
    values = np.array([0.5, -3.0, 1e-3], dtype=np.float32)
    assert adapter(torch.from_numpy(values)).numpy().tolist() == (values * values).tolist()
    path = spec_file(
        tmp_path, "impl: {onnx: square.onnx, providers: [CPUExecutionProvider]}\nbaseline: kernels.py:square"
    )
    (case,) = run_spec(path, isolate=True)
    assert case.verdict == "pass", case.reasons


def test_the_example_repository_passes_through_the_command_line(tmp_path):
    pytest.importorskip("onnxruntime")
    from click.testing import CliRunner

    from acceptance.cli import main
    from acceptance.session import results

    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", str(EXAMPLE / "specs"), "--out", str(out)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    res = results.load(out / "results.json")
    assert {c.operator for c in res.cases} == {"tiny_mlp", "gelu_compiled", "softmax_onnx", "softmax_blocked"}
    assert all(c.description for c in res.cases)

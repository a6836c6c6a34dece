"""The code under test cannot change its own verdict: the impl never shares a process with the baseline, the
oracle or another spec's impl; what a worker sends back is decoded with an allow-list; the reference cache holds
only what a pristine reference worker computed.

Every expected verdict follows from how the kernels of ``isolation_specs/`` are built: a kernel 1% wrong has
diff1 0.01 against the true function (so fails the activation category's 3e-3), a kernel that is ``x * 1`` in
a pristine process is exact (passes), one that doubles subnormal inputs is wrong wherever its inputs are
subnormal (fails the bit-exact arithmetic category)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "isolation_specs"


def spec(name: str, impl: str, baseline: str | None = None, *, category: str = "activation", dist: str = "") -> str:
    dist = dist or "[-3, 3]"
    return textwrap.dedent(f"""\
        name: {name}
        category: {category}
        impl: {impl}
        {f"baseline: {baseline}" if baseline else ""}
        dtypes: [float32]
        inputs:
          - {{name: x, shape: [N], dist: {{uniform: {dist}}}}}
        cases:
          - {{N: 257}}
        trials: 2
        seed: 3
        """)


def write(folder: Path, specs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for f in KERNELS.glob("*.py"):
        shutil.copy(f, folder / f.name)
    for name, text in specs.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


def run(specs: Path, out: Path, *args: object, env: dict[str, str] | None = None, cwd: Path | None = None):
    """``acceptance run`` in a child process: (exit code, the cases of results.json by operator, the process)."""
    proc = subprocess.run(
        [sys.executable, "-m", "acceptance", "run", str(specs), "--out", str(out), "--no-cache", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=300,
    )
    results = json.loads((out / "results.json").read_text())
    return proc.returncode, {c["operator"]: c for c in results["cases"]}, proc


def diff1(case: dict) -> float:
    return case["metrics"][0]["diff1"]


# ----------------------------------------------------------------------------- an impl that patches torch/numpy


def test_an_impl_that_patches_what_the_baseline_calls_is_compared_with_the_real_baseline(tmp_path):
    specs = write(
        tmp_path / "specs",
        {
            "silu": spec("silu", "patch_silu.py:fast_silu", "torch.nn.functional:silu"),
            "sigmoid": spec("sigmoid", "patch_tensor.py:fast_sigmoid", "torch:Tensor.sigmoid"),
            "exp": spec("exp", "patch_numpy.py:fast_exp", "kernels.py:np_exp"),
        },
    )
    code, cases, proc = run(specs, tmp_path / "out", "--jobs", "1")
    assert code == 1, proc.stderr[-2000:]
    for name in ("silu", "sigmoid", "exp"):
        assert cases[name]["verdict"] == "fail", (name, cases[name]["reasons"], cases[name]["error"])
        # e = 1.01 b everywhere: sum|e - b| / sum|b| = 0.01 (to float32 rounding of the products)
        assert diff1(cases[name]) == pytest.approx(0.01, rel=1e-4), name


# ----------------------------------------------------------------------------- state leaking between specs

#: impl -> the state it changes in its own process
CHANGERS = [
    "sets_flush_denormal",
    "sets_default_dtype",
    "sets_num_threads",
    "changes_cwd",
    "sets_env_var",
    "extends_sys_path",
    "patches_gelu",
    "disables_mkldnn",
    "numpy_raises",
]

#: float32 subnormals (below 1.18e-38)
SUBNORMAL = "[1e-39, 1e-38]"

#: victim -> (spec text, its verdict in a process nobody changed)
VICTIMS = {
    "sensitive": (spec("{}", "kernels.py:sensitive", "kernels.py:times_one", category="arithmetic"), "pass"),
    "gelu_1pct": (spec("{}", "kernels.py:wrong_gelu", "torch.nn.functional:gelu"), "fail"),
    "subnormal": (
        spec("{}", "kernels.py:doubles_subnormals", "kernels.py:times_one", category="arithmetic", dist=SUBNORMAL),
        "fail",
    ),
}


def _state_specs(changers_first: bool) -> dict[str, str]:
    first, last = ("a", "z") if changers_first else ("z", "a")
    found = {f"{first}_{c}": spec(f"{first}_{c}", f"kernels.py:{c}", "kernels.py:times_one") for c in CHANGERS}
    for name, (text, _) in VICTIMS.items():
        found[f"{last}_{name}"] = text.replace("name: {}", f"name: {last}_{name}")
    return found


@pytest.mark.parametrize(("changers_first", "jobs"), [(True, 1), (False, 1), (True, 2)])
def test_state_a_spec_changes_does_not_change_another_specs_verdict(tmp_path, changers_first, jobs):
    specs = write(tmp_path / "specs", _state_specs(changers_first))
    # a relative spec folder: a spec that changes the working directory would break the resolving of the next
    code, cases, proc = run(Path("specs"), tmp_path / "out", "--jobs", jobs, cwd=tmp_path)
    assert code == 1, proc.stderr[-2000:]
    prefix = "z" if changers_first else "a"
    for name, (_, verdict) in VICTIMS.items():
        case = cases[f"{prefix}_{name}"]
        assert case["verdict"] == verdict, (name, case["reasons"], case["error"])
    if changers_first:
        assert diff1(cases["z_gelu_1pct"]) == pytest.approx(0.01, rel=1e-4)
    other = "a" if changers_first else "z"
    for c in CHANGERS:  # each changer is right in its own process: x * 1
        assert cases[f"{other}_{c}"]["verdict"] == "pass", (c, cases[f"{other}_{c}"]["error"])
    assert specs.is_dir()


def test_a_baseline_that_changes_global_state_is_an_error_and_the_next_spec_is_unaffected(tmp_path):
    specs = write(
        tmp_path / "specs",
        {
            "a_baseline_patches": spec("a_baseline_patches", "kernels.py:times_one", "kernels.py:patches_gelu"),
            "b_true_gelu": spec("b_true_gelu", "torch.nn.functional:gelu"),
            "c_gelu_1pct": spec("c_gelu_1pct", "kernels.py:wrong_gelu", "torch.nn.functional:gelu"),
        },
    )
    code, cases, proc = run(specs, tmp_path / "out", "--jobs", "1")
    assert code == 1
    error = cases["a_baseline_patches"]["error"] or ""
    assert cases["a_baseline_patches"]["verdict"] == "error"
    assert "global state" in error and "torch.nn.functional.gelu replaced" in error, error
    assert cases["b_true_gelu"]["verdict"] == "pass" and diff1(cases["b_true_gelu"]) == 0.0
    assert cases["c_gelu_1pct"]["verdict"] == "fail"
    assert diff1(cases["c_gelu_1pct"]) == pytest.approx(0.01, rel=1e-4)


# ----------------------------------------------------------------------------- hostile reducers


@pytest.mark.parametrize("impl", ["returns_subclass", "sends_a_reducer"])
def test_an_output_that_is_not_plain_tensors_is_an_error_and_its_reducer_never_runs(tmp_path, impl):
    marker = tmp_path / "marker"
    specs = write(
        tmp_path / "specs",
        {
            "hostile": spec("hostile", f"hostile.py:{impl}", "kernels.py:times_one"),
            "good": spec("good", "kernels.py:times_one"),
        },
    )
    code, cases, proc = run(specs, tmp_path / "out", "--jobs", "1", env={"ACCEPTANCE_TEST_MARKER": str(marker)})
    assert code == 1
    case = cases["hostile"]
    assert case["verdict"] == "error", case["reasons"]
    expected = "returned a tensor subclass" if impl == "returns_subclass" else "sent back something that is not plain"
    assert expected in case["error"], case["error"]
    assert cases["good"]["verdict"] == "pass"
    assert not marker.exists()


def test_the_restricted_decoder_refuses_a_global_outside_its_allow_list(tmp_path):
    import multiprocessing

    import torch

    from acceptance.isolation import protocol, transport

    marker = tmp_path / "marker"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    a, b = multiprocessing.Pipe()
    transport.send(a, transport.dumps(protocol.Answered((torch.ones(2),), (), 0.0, ())))
    received = transport.recv(b)
    assert torch.equal(received.outputs[0], torch.ones(2)) and type(received.outputs[0]) is torch.Tensor
    transport.send(a, transport.dumps(protocol.Answered((Payload(),), (), 0.0, ())))  # type: ignore[arg-type]
    with pytest.raises(transport.Refused, match="builtins.open|io.open"):
        transport.recv(b)
    assert not marker.exists()
    transport.send(a, transport.dumps(protocol.Broke("x")))
    assert transport.recv(b) == protocol.Broke("x")


# ----------------------------------------------------------------------------- the reference cache


def test_references_computed_while_an_impl_patched_the_baseline_are_not_reused(tmp_path):
    cache = tmp_path / "cache"
    env = {"ACCEPTANCE_CACHE_DIR": str(cache)}
    patched = write(tmp_path / "a", {"gelu": spec("gelu", "patch_gelu.py:fast_gelu", "torch.nn.functional:gelu")})
    clean = write(tmp_path / "b", {"gelu": spec("gelu", "kernels.py:wrong_gelu", "torch.nn.functional:gelu")})

    def cached_run(folder: Path, out: str):
        proc = subprocess.run(
            [sys.executable, "-m", "acceptance", "run", str(folder), "--out", str(tmp_path / out), "--jobs", "1"],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=300,
        )
        return json.loads((tmp_path / out / "results.json").read_text())["cases"][0], proc

    first, proc = cached_run(patched, "o1")
    assert first["verdict"] == "fail", (first["error"], proc.stderr[-2000:])
    assert any(cache.rglob("*.ref")), "the run wrote no cache entry"
    second, _ = cached_run(clean, "o2")  # the same case, its references read from the cache
    assert second["verdict"] == "fail"
    assert diff1(second) == pytest.approx(0.01, rel=1e-4)


# ----------------------------------------------------------------------------- what a reference worker compares


def _changes():
    """(what is changed, a phrase :func:`changes` must report, how to change it, how to undo it)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    silu, exp, cwd, err = F.silu, np.exp, os.getcwd(), np.geterr()
    threads, path = torch.get_num_threads(), list(sys.path)
    return [
        (
            "F.silu",
            "torch.nn.functional.silu replaced",
            lambda: setattr(F, "silu", abs),
            lambda: setattr(F, "silu", silu),
        ),
        (
            "Tensor.sigmoid",
            "torch.Tensor.sigmoid replaced",
            lambda: setattr(torch.Tensor, "sigmoid", abs),
            lambda: delattr(torch.Tensor, "sigmoid"),  # inherited from the C base class: not in Tensor's namespace
        ),
        (
            "Tensor.new",
            "torch.Tensor.my_method replaced",
            lambda: setattr(torch.Tensor, "my_method", abs),
            lambda: delattr(torch.Tensor, "my_method"),
        ),
        ("np.exp", "numpy.exp replaced", lambda: setattr(np, "exp", abs), lambda: setattr(np, "exp", exp)),
        (
            "flush",
            "torch flush-denormal False -> True",
            lambda: torch.set_flush_denormal(True),
            lambda: torch.set_flush_denormal(False),
        ),
        (
            "dtype",
            "torch default dtype torch.float32 -> torch.float64",
            lambda: torch.set_default_dtype(torch.float64),
            lambda: torch.set_default_dtype(torch.float32),
        ),
        (
            "threads",
            f"torch intra-op threads {threads} -> {threads + 1}",
            lambda: torch.set_num_threads(threads + 1),
            lambda: torch.set_num_threads(threads),
        ),
        ("cwd", "working directory", lambda: os.chdir("/"), lambda: os.chdir(cwd)),
        (
            "env",
            "environment variable(s) ACCEPTANCE_PROBE",
            lambda: os.environ.__setitem__("ACCEPTANCE_PROBE", "1"),
            lambda: os.environ.pop("ACCEPTANCE_PROBE"),
        ),
        ("path", "sys.path", lambda: sys.path.insert(0, "/x"), lambda: sys.path.__setitem__(slice(None), path)),
        (
            "mkldnn",
            "torch.backends.mkldnn.enabled True -> False",
            lambda: setattr(torch.backends.mkldnn, "enabled", False),
            lambda: setattr(torch.backends.mkldnn, "enabled", True),
        ),
        ("seterr", "numpy error handling", lambda: np.seterr(all="raise"), lambda: np.seterr(**err)),
    ]


def test_the_reference_workers_state_check_sees_each_change_and_nothing_else():
    import torch
    import torch.nn.functional as F

    from acceptance.isolation import pristine

    before = pristine.capture()
    F.gelu(torch.randn(8))  # ordinary work changes nothing it compares
    import torch.utils.data  # noqa: F401  # nor does a submodule imported late

    assert pristine.changes(before) == []
    for what, phrase, change, undo in _changes():
        change()
        try:
            found = pristine.changes(before)
        finally:
            undo()
        assert any(phrase in line for line in found), (what, found)
        assert pristine.changes(before) == [], what

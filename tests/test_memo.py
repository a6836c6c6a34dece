"""The measurement memo: a re-run whose impl answers the same bytes reuses the recorded measurement, and any
impl that answers differently (in any trial), varies, or runs under other measuring code is measured again;
the results are those of a run without a cache, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.measure import case as runner
from acceptance.measure import memo

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
name: memo_add
category: arithmetic
impl: kern.py:add
baseline: torch:add
dtypes: [float32]
inputs:
  - {name: a, shape: [N], dist: {uniform: [-1, 1]}}
  - {name: b, shape: [N], dist: {uniform: [-1, 1]}}
cases: [{N: 257}, {N: 31}]
trials: 8
seed: SEED
"""

EXACT = "import torch\n\ndef add(a, b):\n    return torch.add(a, b)\n"

#: Adds 2^-10 to element 5 in the one trial of the N=257 case whose first element of ``a`` is TARGET (a
#: deterministic function of the inputs, so the impl's repeats agree and only that trial differs).
SOMETIMES = textwrap.dedent("""\
    import torch

    def add(a, b):
        out = torch.add(a, b)
        if a.numel() == 257 and float(a.reshape(-1)[0]) == TARGET:
            out = out.clone()
            out.view(-1)[5] += 2.0 ** -10
        return out
    """)

#: Noise from the operating system's entropy: other bits in every call of every run.
NOISY = textwrap.dedent("""\
    import os
    import torch

    def add(a, b):
        out = torch.add(a, b)
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
        return out + torch.randn(out.shape, generator=g) * 1e-7
    """)


def _folder(tmp_path: Path, seed: int, kern: str) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    (folder / "memo_add.yaml").write_text(SPEC.replace("SEED", str(seed)))
    (folder / "kern.py").write_text(kern)
    return folder


@pytest.fixture
def measured(monkeypatch):
    """Counts the runner's per-trial measuring calls (``_Output.add``) in this process."""
    calls = []
    original = runner._Output.add

    def add(self, *args, **kwargs):
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(runner._Output, "add", add)
    return calls


def _run(specs: Path, out: Path, *flags: str) -> dict:
    r = CliRunner().invoke(main, ["run", str(specs), "--out", str(out), "--jobs", "1", *flags], catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    return json.loads((out / "results.json").read_text())


def _stripped(results: dict) -> list[dict]:
    return [{k: v for k, v in case.items() if k != "timing"} for case in results["cases"]]


def _first_elements(seed: int) -> list[float]:
    """a[0] of each trial of the N=257 case, drawn by the generator the runs use."""
    from acceptance import spec
    from acceptance.spec.inputs import generate

    folder = Path(os.environ["MEMO_SPECS"])
    specs, problems = spec.load_specs([folder / "memo_add.yaml"])
    assert not problems
    case = next(c for c in spec.expand(specs) if "N=257" in c.id)
    return [float(generate(case, t)[0].reshape(-1)[0]) for t in range(8)]


def test_a_rerun_with_the_same_impl_outputs_reuses_the_measurement(tmp_path, monkeypatch, measured):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _folder(tmp_path, 5, EXACT)
    cold = _run(specs, tmp_path / "cold")
    assert len(measured) == 2 * 8  # two cases of one output, eight trials each
    warm = _run(specs, tmp_path / "warm")
    assert len(measured) == 2 * 8  # nothing measured again
    assert all(c["timing"]["impl"] > 0 for c in warm["cases"])  # yet the impl ran every trial
    assert [c["verdict"] for c in warm["cases"]] == ["pass", "pass"]
    assert _stripped(warm) == _stripped(cold)
    fresh = _run(specs, tmp_path / "fresh", "--no-cache")
    assert _stripped(fresh) == _stripped(cold)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_an_impl_that_changes_in_a_later_trial_is_measured_again(tmp_path, monkeypatch, measured, seed):
    """The changed trial is not the first: the trials held while they matched are measured, in order."""
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _folder(tmp_path, seed, EXACT)
    monkeypatch.setenv("MEMO_SPECS", str(specs))
    firsts = _first_elements(seed)
    changed_trial = 3 + seed % 4  # trial 0 keeps its outputs, and the trials but this one too
    assert firsts.count(firsts[changed_trial]) == 1
    cold = _run(specs, tmp_path / "cold")
    assert [c["verdict"] for c in cold["cases"]] == ["pass", "pass"]
    (specs / "kern.py").write_text(SOMETIMES.replace("TARGET", repr(firsts[changed_trial])))
    before = len(measured)
    warm = _run(specs, tmp_path / "warm")
    changed = next(c for c in warm["cases"] if "N=257" in c["id"])
    assert changed["verdict"] == "fail"  # bit exact against the baseline no more
    assert len(measured) - before == 8  # the changed case measured all its trials; the other case reused
    fresh = _run(specs, tmp_path / "fresh", "--no-cache")
    assert _stripped(warm) == _stripped(fresh)
    before = len(measured)
    again = _run(specs, tmp_path / "again")  # the changed impl's own measurement is now the one recorded
    assert len(measured) == before
    assert _stripped(again) == _stripped(fresh)


def test_an_impl_whose_outputs_vary_is_measured_every_run(tmp_path, monkeypatch, measured):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _folder(tmp_path, 7, NOISY)
    _run(specs, tmp_path / "one")
    first = len(measured)
    _run(specs, tmp_path / "two")
    assert first == 16 and len(measured) == 32


def test_other_measuring_code_or_an_unreadable_record_measures_again(tmp_path, monkeypatch, measured):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _folder(tmp_path, 9, EXACT)
    cold = _run(specs, tmp_path / "cold")
    monkeypatch.setattr(memo, "code_digest", lambda: "0" * 64)  # as if a module of the package were edited
    edited = _run(specs, tmp_path / "edited")
    assert len(measured) == 32
    assert _stripped(edited) == _stripped(cold)

    from acceptance.records import MeasuredCase

    class Unreadable(MeasuredCase):  # the stored record as the memo reads it, and only there
        @classmethod
        def model_validate_json(cls, *args, **kwargs):
            raise ValueError("not JSON")

    monkeypatch.setattr(memo, "MeasuredCase", Unreadable)
    broken = _run(specs, tmp_path / "broken")  # every trial held while it matched, then measured after all
    assert len(measured) == 48
    assert _stripped(broken) == _stripped(cold)


def test_trials_beyond_the_hold_limit_are_measured_as_they_come(tmp_path, monkeypatch, measured):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _folder(tmp_path, 11, EXACT)
    cold = _run(specs, tmp_path / "cold")
    monkeypatch.setattr(memo, "HOLD_BYTES", 8000)  # all trials of the N=31 case, two of the N=257 case
    warm = _run(specs, tmp_path / "warm")
    assert len(measured) == 16 + 8  # the N=257 case outgrew the limit; the N=31 case fit
    assert _stripped(warm) == _stripped(cold)


def test_the_key_text_is_the_same_in_every_process():
    """Sets are written sorted: their iteration order changes with the hash seed from process to process."""
    code = (
        "import hashlib; from pathlib import Path; from acceptance import spec; from acceptance.measure import memo; "
        "specs, _ = spec.load_specs(spec.discover([Path('operator_specs')])); "
        "print(hashlib.sha256(''.join(memo._text(c) + memo._text(spec.rules_for(c)) "
        "for c in spec.expand(specs)).encode()).hexdigest())"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(seen) == 1 and len(next(iter(seen)).strip()) == 64


def test_key_text_writes_sets_sorted_and_leaves_out_fields_hidden_from_repr():
    import dataclasses

    @dataclasses.dataclass
    class Box:
        names: frozenset
        hidden: object = dataclasses.field(default=None, repr=False)

    assert memo._text(Box(frozenset({"b", "a", "c"}), object())) == "Box(names=frozenset({'a', 'b', 'c'}))"
    assert memo._text({"y": {2, 1}, "x": (1, [2])}) == "{'x': tuple[1, list[2]], 'y': set({1, 2})}"


def test_trial_digest_tells_dtype_shape_bytes_and_repeats_apart():
    x = torch.arange(6, dtype=torch.float32)
    base = memo.trial_digest((x,), ())
    assert base == memo.trial_digest((x.clone(),), ())
    assert base != memo.trial_digest((x.reshape(2, 3),), ())
    assert base != memo.trial_digest((x.view(torch.int32),), ())  # same bytes, another dtype
    y = x.clone()
    y[3] = torch.nextafter(y[3], torch.tensor(10.0))
    assert base != memo.trial_digest((y,), ())
    assert base != memo.trial_digest((x,), ((x,),))
    assert memo.trial_digest((x, x), ()) != memo.trial_digest((torch.cat([x, x]),), ())


def test_trial_digest_tells_the_references_apart_from_the_impl_and_each_other():
    """References follow the impl's outputs: a baseline output is never taken for a repeat, an oracle that did
    not run (None) for one that answered nothing, one changed bit of a reference for the same trial."""
    x, b, o = torch.arange(6, dtype=torch.float32), torch.ones(6), torch.zeros(6, dtype=torch.float64)
    full = memo.trial_digest((x,), (), ((b,), (o,)))
    assert full == memo.trial_digest((x.clone(),), (), ((b.clone(),), (o.clone(),)))
    assert full != memo.trial_digest((x,), ((b,),), ((o,),))  # the baseline's output taken as a repeat
    assert full != memo.trial_digest((x,), (), ((o,), (b,)))  # the roles swapped
    assert memo.trial_digest((x,), (), ((b,), None)) != memo.trial_digest((x,), (), ((b,), ()))
    assert memo.trial_digest((x,), (), ((b,), None)) != memo.trial_digest((x,), (), ((b,),))
    changed = o.clone()
    changed.view(torch.int64)[2] ^= 1  # the last bit of one float64 element
    assert full != memo.trial_digest((x,), (), ((b,), (changed,)))
    assert memo.trial_digest((x,), (), ((b,), (o.to("meta"),))) is None


def test_outputs_whose_bytes_cannot_be_read_as_they_are_are_not_memoised():
    x = torch.complex(torch.arange(4.0), torch.ones(4))
    assert memo.trial_digest((x.conj(),), ()) is None
    assert memo.trial_digest((x.to_sparse(),), ()) is None
    q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.quint8)
    assert memo.trial_digest((q,), ()) is None
    assert memo.trial_digest((x,), ((x.conj(),),)) is None
    assert memo.trial_digest((x,), ()) is not None


def test_outputs_off_the_host_are_not_digested():
    """Outputs still on a device (callables run in the runner's process) are measured, not copied to be
    digested; the meta device stands in for a GPU here."""
    x = torch.arange(4.0)
    assert memo.trial_digest((x.to("meta"),), ()) is None
    assert memo.trial_digest((x,), ((x.to("meta"),),)) is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_an_impl_on_the_gpu_reuses_its_measurement_and_in_process_outputs_are_measured(tmp_path, monkeypatch, measured):
    """The worker sends a GPU impl's outputs to the host: a re-run with the same bits reuses the measurement.
    Under ``--no-isolation`` the outputs stay on the GPU and every run measures them."""
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _folder(tmp_path, 6, EXACT)
    cold = _run(specs, tmp_path / "cold", "--device", "cuda")
    assert len(measured) == 2 * 8
    warm = _run(specs, tmp_path / "warm", "--device", "cuda")
    assert len(measured) == 2 * 8
    assert cold["environment"]["device"].startswith("cuda") and _stripped(warm) == _stripped(cold)
    assert _stripped(_run(specs, tmp_path / "fresh", "--device", "cuda", "--no-cache")) == _stripped(cold)
    assert len(measured) == 4 * 8
    for k in (1, 2):
        assert _stripped(_run(specs, tmp_path / f"inproc{k}", "--device", "cuda", "--no-isolation")) == _stripped(cold)
    assert len(measured) == 8 * 8


#: The baseline reads a file at run time, which no fingerprint sees: what it answers can change between runs
#: under the same key (read back from the cache, its entry keeps the old answer until ``cache clear``).
DRIFTING = textwrap.dedent("""\
    from pathlib import Path

    import torch

    def add(a, b):
        return torch.add(a, b)

    def drifting_add(a, b):
        return torch.add(a, b) + float((Path(__file__).parent / "drift.txt").read_text())
    """)


def test_references_computed_again_are_matched_by_their_bytes(tmp_path, monkeypatch, measured):
    """Where a case's reference entries are gone (evicted, never written) and its measurement's is not, the
    references are computed again: the memo matches them by their bytes, so it reuses the measurement when they
    are the same and measures again when they are not."""
    from acceptance.measure import references

    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(references.CaseReferences, "get", lambda self, role, trial: None)  # no entry is found
    specs = _folder(tmp_path, 13, DRIFTING)
    (specs / "memo_add.yaml").write_text(SPEC.replace("SEED", "13").replace("torch:add", "kern.py:drifting_add"))
    (specs / "drift.txt").write_text("0")
    cold = _run(specs, tmp_path / "cold")
    assert len(measured) == 16 and [c["verdict"] for c in cold["cases"]] == ["pass", "pass"]
    warm = _run(specs, tmp_path / "warm")
    assert len(measured) == 16  # the same bytes from the impl and from the references computed again: reused
    assert all(c["timing"]["baseline"] > 0 for c in warm["cases"])  # computed again
    assert _stripped(warm) == _stripped(cold)
    (specs / "drift.txt").write_text("0.5")  # same key, other baseline outputs
    drifted = _run(specs, tmp_path / "drifted")
    assert len(measured) == 32  # measured again, both cases
    assert [c["verdict"] for c in drifted["cases"]] == ["fail", "fail"]
    assert _stripped(drifted) == _stripped(_run(specs, tmp_path / "fresh", "--no-cache"))

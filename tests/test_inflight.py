"""Several batches in flight on one worker: answered in order, given up, resent after a kill, never deadlocked;
the output-folder watch charging a write to the call that made it; the next case sent while one is measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import torch

from acceptance.errors import CaseError
from acceptance.isolation.serve import FolderWatch
from acceptance.isolation.worker import IMPL, REFERENCE, Call, Worker
from acceptance.measure import engine
from acceptance.spec import CallableRef

KERNELS = textwrap.dedent("""
    import os, subprocess, sys, time
    import torch

    def times(x, *more, k=1.0):
        return x * k

    def sleepy(x, seconds=0.0):
        time.sleep(seconds)
        return x.clone()

    def big(x, n=0):
        return torch.arange(n, dtype=torch.float64)

    def writes(x, folder="", name="forged.txt"):
        with open(os.path.join(folder, name), "w") as f:
            f.write("forged")
        return x.clone()

    def append_journal(x, folder=""):
        with open(os.path.join(folder, "journal.jsonl"), "a") as f:
            f.write("{}\\n")
        return x.clone()

    def quick_child(x):
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        return x.clone()
""")

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("inflight")
    (folder / "k.py").write_text(KERNELS)
    return folder / "spec.yaml"


def ref(spec: Path, name: str) -> CallableRef:
    return CallableRef(f"k.py:{name}", str(spec))


def one(spec: Path, fn: str, **params) -> list[Call]:
    return [Call("impl", ref(spec, fn), IMPL, params, CPU)]


def test_batches_in_flight_are_answered_in_the_order_sent(kernels):
    x = torch.arange(5, dtype=torch.float32)
    with Worker() as w:
        batches = [w.submit(t, ((x,),), one(kernels, "times", k=float(t))) for t in range(8)]
        assert w.in_flight == 8
        got = [b.next()[0][0] for b in batches]
        assert w.in_flight == 0
    for t, out in enumerate(got):
        assert torch.equal(out, x * t)


def test_a_kill_loses_nothing_read_later_the_batches_behind_it_are_sent_again(kernels):
    x = torch.ones(3)
    with Worker() as w:
        hung = w.submit(0, ((x,),), one(kernels, "sleepy", seconds=30.0))
        after = [w.submit(t, ((x,),), one(kernels, "times", k=float(t))) for t in (1, 2, 3)]
        with pytest.raises(CaseError, match=r"^impl exceeded the 0\.5 s timeout in trial 0; the worker was killed$"):
            hung.next(timeout=0.5)
        assert [float(b.next(timeout=30)[0][0][0]) for b in after] == [1.0, 2.0, 3.0]


def test_a_discarded_batch_never_answers_a_later_one(kernels):
    x = torch.full((2,), 4.0)
    with Worker() as w:
        dropped = w.submit(0, ((x,),), one(kernels, "times", k=-1.0) * 3)
        kept = w.submit(1, ((x,),), one(kernels, "times", k=0.5))
        dropped.next()  # two of its answers are never read
        dropped.discard()
        assert kept.next()[0][0].tolist() == [2.0, 2.0]
        with pytest.raises(RuntimeError, match="every answer of this batch was read"):
            dropped.next()


def test_a_call_cannot_jump_the_batches_in_flight(kernels):
    x = torch.ones(1)
    with Worker() as w:
        pending = w.submit(0, ((x,),), one(kernels, "times"))
        with pytest.raises(RuntimeError, match="in flight"):
            w.call("impl", ref(kernels, "times"), 1, (x,), {}, device=CPU)
        assert pending.next()[0][0].tolist() == [1.0]
        assert w.call("impl", ref(kernels, "times"), 1, (x,), {"k": 3.0}, device=CPU)[0][0].tolist() == [3.0]


def test_large_answers_and_large_inputs_in_flight_do_not_deadlock(kernels):
    """The worker blocks sending a 64 MB answer the runner has not read; a 16 MB input batch submitted meanwhile
    must not block the runner writing to a worker that is not reading."""
    n = 8_000_000
    x = torch.ones(4)
    y = torch.arange(4_000_000, dtype=torch.float32)
    done: dict = {}

    def work() -> None:
        with Worker() as w:
            first = w.submit(0, ((x,),), one(kernels, "big", n=n))
            second = w.submit(1, ((y,),), one(kernels, "times", k=2.0))
            done["first"] = first.next(timeout=120)[0][0]
            done["second"] = second.next(timeout=120)[0][0]

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(180)
    assert not thread.is_alive(), "the runner and the worker wait on each other"
    assert done["first"].numel() == n and float(done["first"][-1]) == n - 1
    assert torch.equal(done["second"], y * 2)


def test_a_write_to_the_output_folder_is_charged_to_the_call_that_made_it(kernels, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.html").write_text("earlier run")
    x = torch.ones(2)
    with Worker(guard=out) as w:
        calls = [
            Call("impl", ref(kernels, "times"), IMPL, {}, CPU),
            Call("baseline", ref(kernels, "writes"), REFERENCE, {"folder": str(out)}, CPU),
        ]
        batch = w.submit(3, ((x,),), calls)
        batch.next()  # the impl wrote nothing
        (out / "journal.jsonl").write_text("{}\n")  # the run's own journal, between calls: not charged
        with pytest.raises(
            CaseError,
            match=r"^baseline wrote to the output folder in trial 3 \(forged\.txt\); "
            r"the files were removed$",
        ):
            batch.next()
        assert not (out / "forged.txt").exists()
        # the journal appended by a call, and a changed report of an earlier run
        assert w.submit(4, ((x,),), one(kernels, "append_journal", folder=str(out))).next()[0][0].tolist() == [1, 1]
        with pytest.raises(CaseError, match=r"\(report\.html\)"):
            w.submit(5, ((x,),), one(kernels, "writes", folder=str(out), name="report.html")).next()
    assert sorted(p.name for p in out.iterdir()) == ["journal.jsonl"]


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "snapshots"])
def test_the_folder_watch_sees_created_changed_and_renamed_files(tmp_path, inotify):
    watch = FolderWatch(str(tmp_path))
    if not inotify:
        watch._fd = None
    elif watch._fd is None:
        pytest.fail("inotify is available on Linux")
    (tmp_path / "kept.txt").write_text("a")
    watch.start()
    assert watch.written() == []
    assert (tmp_path / "kept.txt").exists()
    watch.start()
    (tmp_path / "kept.txt").write_text("changed, longer")
    (tmp_path / "new.txt").write_text("x")
    (tmp_path / ".tmp").write_text("y")
    os.replace(tmp_path / ".tmp", tmp_path / "results.json")
    (tmp_path / "journal.jsonl").write_text("{}")
    (tmp_path / "gone.txt").write_text("z")
    (tmp_path / "gone.txt").unlink()
    assert watch.written() == ["kept.txt", "new.txt", "results.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal.jsonl"]


def test_a_child_that_already_exited_is_not_a_child_left_running(kernels):
    x = torch.ones(1)
    with Worker() as w:
        assert w.call("impl", ref(kernels, "quick_child"), 0, (x,), {}, device=CPU)[0][0].tolist() == [1.0]


def test_trials_in_flight_fill_the_window_and_give_the_same_trials(kernels):
    """With a worker that makes the inputs from the case's recipe, up to WINDOW trials are in flight while one is
    measured, and every trial holds the tensors of trials run one at a time in this process."""
    from acceptance.spec import expand, load_spec
    from acceptance.spec.inputs import Recipe, generate

    spec_file = kernels.parent / "window.yaml"
    spec_file.write_text(SPEC.format(name="window", impl="times").replace("trials: 12", "trials: 20"))
    spec, problems = load_spec(spec_file)
    assert problems == [], problems
    case = expand([spec])[0]
    seen = []

    class Counting(Worker):
        def submit(self, trial, sets, calls):
            batch = super().submit(trial, sets, calls)
            seen.append(self.in_flight)
            return batch

    roles = engine.Roles(ref(kernels, "times"), ref(kernels, "times"), ref(kernels, "times"))
    with Counting() as w:
        got = [
            (t.impl[0], t.oracle[0])
            for t in engine.run_trials(roles, Recipe(case), 20, device=CPU, params={"k": 2.0}, oracle=True, executor=w)
        ]
    assert max(seen) == engine.WINDOW
    for t, (impl, oracle) in enumerate(got):
        a = generate(case, t)[0]
        assert torch.equal(impl, a * 2) and torch.equal(oracle, a.double() * 2)


SPEC = textwrap.dedent("""
    name: {name}
    category: arithmetic
    impl: k.py:{impl}
    baseline: torch:add
    dtypes: [float32]
    inputs:
      - {{name: a, shape: [N], dist: {{uniform: [-1, 1]}}}}
      - {{name: b, shape: [N], dist: {{uniform: [-1, 1]}}}}
    cases:
      - {{N: 64}}
      - {{N: 65}}
    trials: 12
""")

PIPELINE = textwrap.dedent("""
    import os, torch
    CALLS = [0]

    def add(a, b):
        return a + b

    def breaks_late(a, b):
        CALLS[0] += 1
        if a.numel() == 64 and CALLS[0] >= 4:
            raise ValueError("fourth call")
        return a + b
""")


def _run(folder: Path, out: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "acceptance", "run", str(folder), "--out", str(out), "--no-cache", *args],
        capture_output=True,
        text=True,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    data = json.loads((out / "results.json").read_text())
    return {c["id"]: {k: v for k, v in c.items() if k != "timing"} for c in data["cases"]}


def test_a_case_that_breaks_with_trials_in_flight_leaves_the_next_cases_intact(tmp_path):
    """The first spec's impl raises in its fourth call, with later trials and the next case's first trial already
    sent: those are given up, the worker replaced, and every later case measured as when run alone."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "k.py").write_text(PIPELINE)
    (folder / "a_breaks.yaml").write_text(SPEC.format(name="a_breaks", impl="breaks_late"))
    (folder / "b_add.yaml").write_text(SPEC.format(name="b_add", impl="add"))
    together = _run(folder, tmp_path / "together", "--jobs", "1")
    alone = _run(folder / "b_add.yaml", tmp_path / "alone", "--jobs", "1")
    errors = {k: v["error"] for k, v in together.items() if v["error"]}
    assert list(errors) == ["a_breaks[float32-N=64]"]
    assert errors["a_breaks[float32-N=64]"].startswith("impl raised ValueError: fourth call")
    assert together["a_breaks[float32-N=65]"]["verdict"] == "pass"
    for case_id, result in alone.items():
        assert together[case_id] == result


def test_a_case_sent_ahead_starts_with_the_window_when_its_trials_are_small(kernels):
    """Sent while the case before it is measured, a small case's first WINDOW trials go at once (the worker
    answers them back to back); a case whose inputs exceed START_BYTES starts with one."""
    from acceptance.spec import expand, load_spec
    from acceptance.spec.inputs import Recipe

    spec_file = kernels.parent / "start.yaml"
    spec_file.write_text(
        SPEC.format(name="start", impl="times").replace("  - {N: 64}\n  - {N: 65}", "  - {N: 64}\n  - {N: 131073}")
    )
    spec, problems = load_spec(spec_file)
    assert problems == [], problems
    small, large = expand([spec])
    assert 8 * 2 * 131073 > engine.START_BYTES >= 8 * 2 * 64

    class Recording:
        concurrent = True

        def __init__(self):
            self.trials = []

        def submit(self, trial, sets, calls):
            self.trials.append(trial)
            return object()

    roles = engine.Roles(ref(kernels, "times"), ref(kernels, "times"), ref(kernels, "times"))
    for case, expected in ((small, list(range(engine.WINDOW))), (large, [0])):
        executor = Recording()
        run = engine.run_trials(roles, Recipe(case), 12, device=CPU, params={}, oracle=True, executor=executor)
        run.start()
        assert executor.trials == expected
        run.start()  # once started, never again
        assert executor.trials == expected
    executor = Recording()
    run = engine.run_trials(roles, Recipe(small), 3, device=CPU, params={}, oracle=True, executor=executor)
    run.start()
    assert executor.trials == [0, 1, 2] and run.sent_all


def test_a_repeat_with_the_same_bits_is_not_sent_again_and_arrives_as_its_own_tensor(kernels, monkeypatch):
    """A batch's second call of a role answering the same bits travels as SAME; the runner gives it a copy of
    the first answer. Other bits (a NaN payload, a signed zero) travel in full."""
    import acceptance.isolation.worker as workers
    from acceptance.isolation.protocol import SAME
    from acceptance.isolation.serve import SAME_BYTES, same_outputs

    raw = []
    recv = workers.recv
    monkeypatch.setattr(workers, "recv", lambda conn: raw.append(recv(conn)) or raw[-1])
    x = torch.linspace(-1, 1, 4096, dtype=torch.float32)
    calls = [Call("impl", ref(kernels, "times"), IMPL, {"k": 3.0}, CPU)] * 3
    with Worker() as w:
        batch = w.submit(0, ((x,),), calls)
        outs = [batch.next()[0][0] for _ in calls]
    assert [a.outputs is SAME for a in raw] == [False, True, True]
    assert all(torch.equal(o, x * 3) for o in outs)
    assert outs[0].data_ptr() != outs[1].data_ptr() != outs[2].data_ptr()
    outs[1][0] = 7.0  # each is the runner's own tensor
    assert outs[0][0] == -3.0 and outs[2][0] == -3.0

    raw.clear()  # outputs over SAME_BYTES are not held for the comparison: each repeat travels in full
    n = SAME_BYTES // 8 + 1
    with Worker() as w:
        batch = w.submit(0, ((x,),), [Call("impl", ref(kernels, "big"), IMPL, {"n": n}, CPU)] * 2)
        outs = [batch.next()[0][0] for _ in range(2)]
    assert [a.outputs is SAME for a in raw] == [False, False]
    assert all(torch.equal(o, torch.arange(n, dtype=torch.float64)) for o in outs)

    nan = torch.tensor([float("nan")])
    other_nan = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert not same_outputs((nan,), (other_nan,))
    assert not same_outputs((torch.tensor([0.0]),), (torch.tensor([-0.0]),))
    assert not same_outputs((x,), (x.double(),)) and not same_outputs((x,), (x.reshape(64, 64),))
    assert not same_outputs((x,), (x, x))
    assert same_outputs((x, nan), (x.clone(), nan.clone()))

"""The worker's batch protocol: a trial's calls sent at once, answered call by call, deadlines, errors, threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from acceptance.errors import CaseError
from acceptance.isolation.worker import FLOAT64, IMPL, REFERENCE, Call, Worker
from acceptance.measure import engine
from acceptance.spec import CallableRef

KERNELS = textwrap.dedent("""
    import os, time
    import torch

    def double(x):
        return x * 2

    def plus_one(x):
        return x + 1

    def sleepy(x, seconds=0.0):
        time.sleep(seconds)
        return x.clone()

    def explode(x):
        raise ValueError("boom")

    def scale_in_place(x):
        x.mul_(3)
        return x.clone()

    def dtype_code(x):
        return torch.tensor([str(x.dtype) == "torch.float64"], dtype=torch.int64)

    def threads(x):
        return torch.tensor([torch.get_num_threads()])

    def pid(x):
        return torch.tensor([os.getpid()])
""")

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("kernels")
    (folder / "k.py").write_text(KERNELS)
    return folder / "spec.yaml"  # refs resolve relative to the spec's folder


def ref(spec: Path, name: str) -> CallableRef:
    return CallableRef(f"k.py:{name}", str(spec))


def test_a_batch_answers_each_call_in_order_on_its_inputs(kernels):
    x = torch.arange(6, dtype=torch.float32)
    r = torch.arange(6, dtype=torch.float32) + 10
    with Worker() as w:
        batch = w.submit(
            0,
            ((x,), (r,)),
            [
                Call("impl", ref(kernels, "double"), IMPL, {}, CPU),
                Call("baseline", ref(kernels, "plus_one"), REFERENCE, {}, CPU),
                Call("oracle", ref(kernels, "dtype_code"), FLOAT64, {}, CPU),
            ],
        )
        (impl,), _ = batch.next()
        (base,), _ = batch.next()
        (wide,), _ = batch.next()
    assert torch.equal(impl, x * 2)
    assert torch.equal(base, r + 1)  # the reference set, not the impl's
    assert wide.tolist() == [1]  # the oracle got float64 copies of the reference inputs
    assert batch.done


def test_one_input_set_serves_every_role(kernels):
    x = torch.linspace(-1, 1, 5, dtype=torch.float16)
    with Worker() as w:
        batch = w.submit(
            0,
            ((x,),),
            [
                Call("impl", ref(kernels, "double"), IMPL, {}, CPU),
                Call("baseline", ref(kernels, "plus_one"), REFERENCE, {}, CPU),
            ],
        )
        (impl,), _ = batch.next()
        (base,), _ = batch.next()
    assert torch.equal(impl, x * 2) and torch.equal(base, x + 1)


def test_a_breaking_call_ends_its_batch_and_the_worker_serves_the_next(kernels):
    x = torch.ones(3)
    with Worker() as w:
        batch = w.submit(
            2,
            ((x,),),
            [
                Call("impl", ref(kernels, "explode"), IMPL, {}, CPU),
                Call("baseline", ref(kernels, "pid"), REFERENCE, {}, CPU),
            ],
        )
        with pytest.raises(CaseError, match=r"^impl raised ValueError: boom \(k\.py:\d+\) in trial 2$"):
            batch.next()
        assert batch.done
        first = w.submit(3, ((x,),), [Call("baseline", ref(kernels, "pid"), REFERENCE, {}, CPU)]).next()[0][0]
        second = w.submit(4, ((x,),), [Call("baseline", ref(kernels, "pid"), REFERENCE, {}, CPU)]).next()[0][0]
    assert int(first) == int(second)  # the same worker: an error is an answer, not a crash


def test_an_in_place_write_is_named_and_nothing_runs_on_the_written_inputs(kernels):
    x = torch.ones(4)
    with Worker() as w:
        batch = w.submit(
            1,
            ((x,),),
            [
                Call("impl", ref(kernels, "scale_in_place"), IMPL, {}, CPU),
                Call("baseline", ref(kernels, "plus_one"), REFERENCE, {}, CPU),
            ],
        )
        with pytest.raises(
            CaseError, match=r"^impl modified input 0 \(`x`\) in place \(4 elements changed\) in trial 1$"
        ):
            batch.next(names=["x"])
        assert batch.done
    assert torch.equal(x, torch.ones(4))  # the runner's copy is untouched


def test_an_unread_batch_never_answers_the_next_one(kernels):
    x = torch.full((2,), 5.0)
    with Worker() as w:
        stale = w.submit(
            0,
            ((x,),),
            [
                Call("impl", ref(kernels, "double"), IMPL, {}, CPU),
                Call("baseline", ref(kernels, "plus_one"), REFERENCE, {}, CPU),
            ],
        )
        stale.next()  # the baseline's answer is never read
        (out,), _ = w.submit(1, ((x,),), [Call("impl", ref(kernels, "sleepy"), IMPL, {}, CPU)]).next()
    assert out.tolist() == [5.0, 5.0]  # not the stale x + 1


def test_a_deadline_runs_from_when_the_worker_could_start_the_call(kernels):
    x = torch.zeros(1)
    with Worker() as w:
        batch = w.submit(
            0,
            ((x,),),
            [
                Call("impl", ref(kernels, "sleepy"), IMPL, {"seconds": 0.3}, CPU),
                Call("baseline", ref(kernels, "sleepy"), REFERENCE, {"seconds": 0.3}, CPU),
            ],
        )
        time.sleep(1.0)  # the runner is busy: both calls finish meanwhile, within their 0.6 s each
        batch.next(timeout=0.6)
        batch.next(timeout=0.6)
        late = w.submit(
            2,
            ((x,),),
            [
                Call("impl", ref(kernels, "sleepy"), IMPL, {"seconds": 0.2}, CPU),
                Call("baseline", ref(kernels, "sleepy"), REFERENCE, {"seconds": 30}, CPU),
            ],
        )
        late.next(timeout=5)
        started = time.monotonic()
        with pytest.raises(
            CaseError, match=r"^baseline exceeded the 0\.5 s timeout in trial 2; the worker was killed$"
        ):
            late.next(timeout=0.5)
        assert time.monotonic() - started < 5


def test_the_worker_computes_on_the_threads_it_is_given(kernels):
    x = torch.zeros(1)
    for n in (1, 2):
        with Worker(threads=n) as w:
            (got,), _ = w.call("impl", ref(kernels, "threads"), 0, (x,), {}, device=CPU)
        assert int(got) == n


def test_the_engine_gives_the_same_trials_in_a_worker_and_in_process(kernels):
    """Trials sent ahead to a worker hold the same tensors as trials called one by one in this process."""
    from acceptance.spec.callables import resolve_callable

    def make(t: int):
        g = torch.Generator().manual_seed(100 + t)
        return (torch.randn(7, generator=g),)

    names = ("double", "plus_one", "sleepy")
    refs = engine.Roles(*(ref(kernels, n) for n in names))
    fns = engine.Roles(*(resolve_callable(f"k.py:{n}", kernels) for n in names))
    with Worker() as w:
        remote = [
            (t.impl, t.baseline, t.oracle)
            for t in engine.run_trials(
                refs, make, 5, device=CPU, params={}, oracle=True, executor=w, repeats=1, baseline_repeats=1
            )
        ]
    local = [
        (t.impl, t.baseline, t.oracle)
        for t in engine.run_trials(fns, make, 5, device=CPU, params={}, oracle=True, repeats=1, baseline_repeats=1)
    ]
    assert len(remote) == len(local) == 5
    for t, ((ri, rb, ro), (li, lb, lo)) in enumerate(zip(remote, local, strict=False)):
        x = make(t)[0]
        assert torch.equal(ri[0], x * 2) and torch.equal(li[0], x * 2)
        assert torch.equal(rb[0], x + 1) and torch.equal(lb[0], x + 1)
        assert ro[0].dtype == lo[0].dtype == torch.float64 and torch.equal(ro[0], x.double())


def test_jobs_on_cuda_give_each_gpu_its_own_worker():
    from acceptance.session.executors import default_jobs, job_devices

    cuda, cuda1, cpu = torch.device("cuda"), torch.device("cuda", 1), torch.device("cpu")
    assert default_jobs(cuda, cores=16, gpus=4) == 4  # one job (one worker) per GPU, not per core
    assert default_jobs(cuda1, cores=16, gpus=4) == 1  # one named GPU: one worker
    assert default_jobs(cpu, cores=16, gpus=4) == 16
    assert job_devices(cuda, 4, 4) == [torch.device("cuda", k) for k in range(4)]
    assert job_devices(cuda, 3, 2) == [torch.device("cuda", 0), torch.device("cuda", 1), torch.device("cuda", 0)]
    assert job_devices(cuda1, 3, 4) == [cuda1] * 3
    assert job_devices(cpu, 2, 0) == [cpu, cpu]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_jobs_on_cuda_run_the_library_with_one_worker_per_gpu(tmp_path):
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "acceptance",
            "run",
            "--device",
            "cuda",
            "--only",
            "add*",
            "--no-cache",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    cases = json.loads((tmp_path / "results.json").read_text())["cases"]
    assert cases and all(c["error"] is None and c["verdict"] == "pass" for c in cases)


def test_a_run_computes_on_the_threads_asked_for_whatever_the_jobs(tmp_path):
    """The worker's intra-op threads are --threads (default 1) with one job or several: a CPU baseline whose
    reduction order follows the thread count then gives the same bits for every --jobs."""
    import subprocess
    import sys

    (tmp_path / "kt.py").write_text(
        textwrap.dedent(f"""
        import os, torch
        def add(a, b):
            with open(os.path.join({str(tmp_path)!r}, "threads_%d.txt" % os.getpid()), "w") as f:
                f.write(str(torch.get_num_threads()))
            return a + b
    """)
    )
    (tmp_path / "t.yaml").write_text(
        textwrap.dedent("""
        name: tadd
        category: arithmetic
        impl: kt.py:add
        baseline: torch:add
        dtypes: [float32]
        inputs:
          - {name: a, shape: [N], dist: {uniform: [-1, 1]}}
          - {name: b, shape: [N], dist: {uniform: [-1, 1]}}
        cases:
          - {N: 100}
          - {N: 200}
        trials: 1
    """)
    )
    for args, expected in ((["--jobs", "1"], "1"), (["--jobs", "2"], "1"), (["--jobs", "1", "--threads", "2"], "2")):
        for old in tmp_path.glob("threads_*.txt"):
            old.unlink()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "acceptance",
                "run",
                str(tmp_path / "t.yaml"),
                "--no-cache",
                "--out",
                str(tmp_path / "out"),
                *args,
            ],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        seen = {p.read_text() for p in tmp_path.glob("threads_*.txt")}
        assert seen == {expected}, (args, seen)


def test_the_runner_works_on_its_idle_tasks_while_an_answer_is_not_ready(kernels):
    """While a call runs, the worker's ``idle`` hook is called piece by piece until it has nothing left (it
    returns False) or the answer is ready; the answer is the call's own."""
    pieces = iter(range(3))
    done = []

    def idle() -> bool:
        k = next(pieces, None)
        if k is None:
            return False
        done.append(k)
        return True

    x = torch.arange(4, dtype=torch.float32)
    with Worker() as w:
        w.idle = idle
        (out,), _ = w.submit(0, ((x,),), [Call("impl", ref(kernels, "sleepy"), IMPL, {"seconds": 0.3}, CPU)]).next()
    assert done == [0, 1, 2] and torch.equal(out, x)


_FORKED_WORKER = """
import multiprocessing, os, sys
import torch
from acceptance.isolation import forkserver, worker
from acceptance.isolation.protocol import ObjectRef


def sockets():
    found = []
    for n in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{n}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.append(int(target[8:-1]))
    return torch.tensor(sorted(found), dtype=torch.int64)


if __name__ == "__main__":
    forkserver.fork_here()  # as a job process does: its workers are forked from it
    runner_side, job_side = multiprocessing.Pipe()
    worker.INHERITED.append(job_side)
    w = worker.Worker()
    held, _ = w.call("probe", ObjectRef(sockets), 0, (), {}, device=torch.device("cpu"))
    held = set(held[0].tolist())
    proc, conn = w._running()
    print(int(os.fstat(job_side.fileno()).st_ino in held), int(os.fstat(conn.fileno()).st_ino in held))
    w.finish(timeout=30)
    print(proc.exitcode)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="job processes fork their workers on Linux")
def test_a_worker_forked_from_a_job_holds_none_of_the_jobs_connections(tmp_path):
    """A job forks its workers from itself, so a worker starts with a copy of each of the job's descriptors. It
    closes the job's connection to the runner (the code under test must not be able to answer the runner) and the
    job's end of its own pipe (else it never sees the job close the pipe, and the job waits out ``finish``'s
    timeout, then kills it): the worker holds neither socket, and it exits on its own, with status 0."""
    script = tmp_path / "forked.py"
    script.write_text(_FORKED_WORKER)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "0", "0"]

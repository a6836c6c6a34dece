"""``--executor ray``: the same records as a local run, a lost Ray worker retried and then narrowed to the one case
that kills it, an interrupted driver's finished cases kept, and the usage errors. One local Ray instance of two
CPUs serves the module (started once: ~10 s)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import ray
from click.testing import CliRunner

import acceptance
from acceptance.cli import main
from acceptance.session import cluster
from acceptance.session.run import RunOptions, Session

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "operator_specs"

#: Fields of a run that depend on when, where and how fast it ran; everything else must be equal.
CIRCUMSTANTIAL = {"timing", "environment", "digest"}


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance of two CPUs for the module, the address a second driver connects to."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def substance(value: object) -> object:
    """A results.json document without :data:`CIRCUMSTANTIAL` fields, at any depth."""
    if isinstance(value, dict):
        return {k: substance(v) for k, v in value.items() if k not in CIRCUMSTANTIAL}
    if isinstance(value, list):
        return [substance(v) for v in value]
    return value


class Watch:
    """An observer recording the order of the case loop's events and the executor's status lines."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lines: list[str] = []

    def case_started(self, case) -> None:
        self.events.append(("started", case.id))

    def case_finished(self, case, result):
        self.events.append(("finished", case.id))
        return result

    def status(self, line: str) -> None:
        self.lines.append(line)


def run_session(specs: list[Path], watch: Watch | None = None, **options: object):
    session = Session(RunOptions(**options), [watch] if watch is not None else [])
    session.prepare(specs)
    return session.run()


@pytest.mark.slow
def test_a_ray_run_records_what_a_local_run_records(ray_cluster, tmp_path):
    """Two built-in specs, float32, 12 trials: every verdict, criterion, metric and dual-delta p-value of the Ray
    run equals the local run's (timings and provenance aside); each case starts before it finishes, once."""
    specs = [LIBRARY / "gelu.yaml", LIBRARY / "mul.yaml"]
    common = {"dtypes": ("float32",), "trials": 12, "cache": False}
    local = run_session(specs, out=tmp_path / "local", jobs=2, **common)
    watch = Watch()
    remote = run_session(specs, watch, out=tmp_path / "ray", executor="ray", **common)

    ids = [c.id for c in local.cases]
    assert len(ids) == 8 and [c.id for c in remote.cases] == ids
    a, b = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("local", "ray"))
    assert substance(a) == substance(b)
    # the comparison is not vacuous: the cases were measured and tested
    assert all(c["verdict"] == "pass" and c["metrics"] and c["criteria"] for c in b["cases"])
    records = [r for c in b["cases"] for r in c["dual_delta"]]  # max_hyb and mean_hyb of the 4 gelu cases
    assert len(records) == 8 and all(r["p_value"] is not None and max(r["delta_impl"]) > 0 for r in records)
    for case_id in ids:
        assert watch.events.count(("started", case_id)) == 1
        assert watch.events.index(("started", case_id)) < watch.events.index(("finished", case_id))
    # 8 cases on 2 CPUs: batches of ceil(8 / (4 * 2)) = 1 case, one task each, all done on this one node
    assert watch.lines[-1].startswith("ray tasks: 0 queued; ") and watch.lines[-1].endswith(": 0 running, 8 done")


KILLER = '''\
import os
import signal
import time
from pathlib import Path

import torch


def _ray_worker() -> int:
    """The Ray worker process above this one: the first ancestor whose command line starts with ``ray::``."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            if fh.read().startswith(b"ray::"):
                return pid
        with open(f"/proc/{pid}/stat") as fh:
            pid = int(fh.read().rsplit(")", 1)[1].split()[1])
    raise RuntimeError("not below a Ray worker")


def _kill(marker: Path) -> None:
    marker.write_text(str(int(marker.read_text()) + 1 if marker.exists() else 1))
    os.kill(_ray_worker(), signal.SIGKILL)
    time.sleep(60)


def once(x):
    """Kills its Ray worker the first time it sees 65 elements, then computes."""
    marker = Path(__file__).with_name("once.killed")
    if x.numel() == 65 and not marker.exists():
        _kill(marker)
    return x * 2


def always(x):
    """Kills its Ray worker whenever it sees 65 elements."""
    if x.numel() == 65:
        _kill(Path(__file__).with_name("always.killed"))
    return x * 2


def good(x):
    return x * 2
'''


def killer_spec(name: str) -> str:
    return textwrap.dedent(f"""\
        name: {name}
        category: arithmetic
        impl: killer.py:{name}
        baseline: killer.py:good
        dtypes: [float32]
        inputs:
          - {{name: x, shape: [N], dist: {{uniform: [-1, 1]}}}}
        cases:
          - {{N: 64}}
          - {{N: 65}}
          - {{N: 66}}
          - {{N: 67}}
        trials: 2
        """)


@pytest.mark.slow
def test_a_lost_ray_worker_is_retried_then_narrowed_to_its_case(ray_cluster, tmp_path, monkeypatch):
    """``once`` kills its Ray worker in its first try: the batch runs again and every case passes. ``always`` kills
    it every time: its batch fails twice, runs again case by case, and only the N=65 case is an error naming
    Ray's error; the others of the run are measured and decided."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "killer.py").write_text(KILLER)
    for name in ("once", "always"):
        (folder / f"{name}.yaml").write_text(killer_spec(name))
    monkeypatch.setattr(cluster, "TASKS_PER_SLOT", 1)  # 8 cases on 2 CPUs: batches of 4, one per spec
    res = acceptance.run([folder], out=tmp_path / "out", executor="ray", cache=False)

    verdicts = {c.id: c.verdict for c in res.cases}
    assert len(verdicts) == 8
    assert (folder / "once.killed").read_text() == "1"  # the kill happened, once
    # two tries of the batch of 4, then the N=65 case alone: 3 kills
    assert (folder / "always.killed").read_text() == "3"
    errors = {c.id: c.error for c in res.cases if c.verdict == "error"}
    assert list(errors) == ["always[float32-N=65]"]
    assert errors["always[float32-N=65]"].startswith("the Ray worker measuring this case died: WorkerCrashedError")
    assert all(v == "pass" for k, v in verdicts.items() if k not in errors)
    assert res.summary.exit_code == 1


SLOW = """\
import time


def slow(x):
    time.sleep(0.05)
    return x * 2


def double(x):
    return x * 2
"""


@pytest.mark.slow
def test_sigterm_keeps_the_finished_cases_and_resume_finishes(ray_cluster, tmp_path):
    """A driver stopped by SIGTERM mid-run (connected to a running cluster) exits 143 with the finished cases
    recorded and the run interrupted; resuming measures the rest only."""
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "slow.py").write_text(SLOW)
    cases = "\n".join(f"  - {{N: {n}}}" for n in range(60, 66))
    (folder / "slow.yaml").write_text(
        "name: slow\ncategory: arithmetic\nimpl: slow.py:slow\nbaseline: slow.py:double\ndtypes: [float32]\n"
        f"inputs:\n  - {{name: x, shape: [N], dist: {{uniform: [-1, 1]}}}}\ncases:\n{cases}\ntrials: 6\n"
    )
    out = tmp_path / "out"
    command = [sys.executable, "-m", "acceptance", "run", str(folder), "--out", str(out), "--no-cache"]
    command += ["--executor", "ray", "--ray-address", ray_cluster]
    env = {**os.environ, "CI": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    finished = 0
    for line in proc.stdout:  # the status lines of the finished cases
        finished += line.startswith("[")
        if finished == 1:
            break
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143 and (out / "results.json").exists(), stderr
    res = json.loads((out / "results.json").read_text())
    assert res["interrupted"] is True and 1 <= len(res["cases"]) < 6
    kept = {c["id"] for c in res["cases"]}
    assert set(res["not_run"]) == {f"slow[float32-N={n}]" for n in range(60, 66)} - kept

    watch = Watch()  # resumed from this process, whose Ray workers are warm
    resumed = run_session([folder], watch, out=out, executor="ray", cache=False, resume=True)
    assert sorted(case_id for event, case_id in watch.events if event == "started") == sorted(res["not_run"])
    assert len(resumed.cases) == 6 and resumed.summary.exit_code == 0 and not resumed.interrupted


def test_usage_errors(monkeypatch, tmp_path):
    """``--executor ray`` without Ray installed, or with ``--no-isolation``, and ``--ray-address`` without
    ``--executor ray``: one line each, exit 2, nothing run."""
    spec = LIBRARY / "gelu.yaml"
    dist = re.search(r'^name = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, ["run", str(spec), "--out", str(tmp_path / "out"), *args])

    r = invoke("--executor", "ray", "--no-isolation")
    assert r.exit_code == 2 and "--no-isolation" in r.output and len(r.output.strip().splitlines()) == 1
    r = invoke("--ray-address", "10.0.0.1:6379")
    assert r.exit_code == 2 and "--ray-address: only with --executor ray" in r.output
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    r = invoke("--executor", "ray")
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines() == [
        f"--executor ray needs Ray, which is not installed: pip install '{dist}[ray]'"
    ]
    assert not (tmp_path / "out" / "results.json").exists()


def test_batches_are_consecutive_cases_of_one_spec():
    """Batches never mix specs, keep the run's order, hold at most ceil(n / (4 * slots)) and MAX_BATCH cases."""
    from acceptance.session.load import load
    from acceptance.spec import expand

    specs = load([LIBRARY / "gelu.yaml", LIBRARY / "mul.yaml"])
    cases = [c for c in expand(specs) if c.dtype == "float32"]  # 4 gelu, then 4 mul
    assert [len(b) for b in cluster.batches(cases, slots=1)] == [2, 2, 2, 2]  # ceil(8 / 4) = 2
    assert [len(b) for b in cluster.batches(cases, slots=2)] == [1] * 8
    many = [c for c in cases for _ in range(20)]  # 80 gelu, then 80 mul
    whole = cluster.batches(many, slots=1)  # ceil(160 / 4) = 40 a batch, capped at MAX_BATCH
    assert [len(b) for b in whole] == [cluster.MAX_BATCH] * 20 and cluster.MAX_BATCH == 8
    for b in cluster.batches(cases, slots=1) + whole:
        assert len({c.spec.path for c in b}) == 1
    assert [c.id for b in whole for c in b] == [c.id for c in many]


def test_resources_and_unfit_nodes(tmp_path):
    """One CPU per task on the CPU, one GPU on CUDA; memory only where a spec declares its limit (bytes, the
    largest of the batch); a request no node can meet is named, one a node meets is not."""
    import torch

    from acceptance.session.load import load
    from acceptance.spec import expand

    gelu = expand(load([LIBRARY / "gelu.yaml"]))[:2]
    (tmp_path / "m.yaml").write_text(
        (LIBRARY / "gelu.yaml").read_text(encoding="utf-8").replace("name: gelu", "name: m", 1)
        + "\nmemory_limit_gib: 1.5\n"
    )
    declared = expand(load([tmp_path / "m.yaml"]))[:2]
    assert cluster.resources(torch.device("cpu"), gelu) == {"num_cpus": 1}
    assert cluster.resources(torch.device("cuda", 3), gelu) == {"num_gpus": 1}
    assert cluster.resources(torch.device("cpu"), declared) == {"num_cpus": 1, "memory": 1.5 * 2**30}
    wanted = {"num_gpus": 1, "memory": 2**31}
    small, big = {"CPU": 8.0, "memory": 2.0**32}, {"CPU": 8.0, "GPU": 1.0, "memory": 2.0**30}
    assert cluster.unfit(wanted, [small, big]) == (
        "no node of the Ray cluster has the resources this case needs (GPU=1, memory=2 GiB)"
    )
    assert cluster.unfit(wanted, [small, {**big, "memory": 2.0**31}]) is None


def test_progress_shows_the_status_line_in_a_log_every_few_seconds(monkeypatch, capsys):
    """In a log, the first status line is written to stderr at once, the next ones only once ``STATUS_EVERY_S``
    seconds passed since the last one written; control characters are made visible."""
    import acceptance.cli.progress as progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    monkeypatch.setenv("CI", "true")
    with progress.Progress(3, "3 cases on cpu") as shown:
        shown.status("ray tasks: 2 queued")
        now[0] += progress.STATUS_EVERY_S - 0.1
        shown.status("ray tasks: 1 queued")  # too soon: not written
        now[0] += 0.1
        shown.status("ray tasks: 0 queued; \x1b[31m")
    err = capsys.readouterr().err.splitlines()
    assert err[:2] == ["3 cases on cpu", "ray tasks: 2 queued"]
    assert len(err) == 3 and err[2].startswith("ray tasks: 0 queued; ") and "\x1b" not in err[2]

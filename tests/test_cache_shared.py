"""The reference cache on shared storage (an fsspec URL): round trips on ``memory://`` and ``file://``, runs that
read what another run stored, concurrent writers, torn and foreign entries, the error without fsspec, pickling.

Expected values are the tensors the tests wrote, the bytes a folder cache writes for the same entry (whose
layout tests/test_cache.py checks against ``xxhash``), and runs without a cache.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import pickle
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch
import xxhash

from acceptance.cache import ReferenceCache, key
from acceptance.cache.store import ENV_VAR, default_root
from acceptance.measure import references as R

ROOT = Path(__file__).resolve().parents[1]
fsspec = pytest.importorskip("fsspec")  # installed by the dev extra


def raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.fixture
def memory_url():
    """A fresh ``memory://`` prefix, removed afterwards (the memory filesystem is one per process)."""
    url = f"memory://acceptance-tests/{uuid.uuid4().hex}"
    yield url
    fs = fsspec.filesystem("memory")
    if fs.exists(url):
        fs.rm(url, recursive=True)


def file_url(folder: Path) -> str:
    return folder.resolve().as_uri()  # file:///...


TENSORS = (
    torch.arange(1000, dtype=torch.float32) / 7,
    torch.tensor([[1.5, -0.0], [float("inf"), float("nan")]], dtype=torch.bfloat16),
    torch.arange(6, dtype=torch.int64).reshape(2, 3),
)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_an_entry_on_a_url_comes_back_bit_for_bit_and_holds_a_folders_bytes(tmp_path, memory_url, scheme):
    url = memory_url if scheme == "memory" else file_url(tmp_path / "shared")
    remote, folder = ReferenceCache(url), ReferenceCache(tmp_path / "folder")
    k = key(role="round trip", scheme=scheme)
    assert remote.get(k) is None
    assert remote.put(k, TENSORS) and folder.put(k, TENSORS)
    back = ReferenceCache(url).get(k)  # another object on the same URL: nothing held in memory
    assert back is not None and [raw(b) for b in back] == [raw(t) for t in TENSORS]
    assert [b.dtype for b in back] == [t.dtype for t in TENSORS] and [b.shape for b in back] == [
        t.shape for t in TENSORS
    ]
    stored = fsspec.filesystem(scheme).cat_file(remote.location(k))
    expected = folder.path(k).read_bytes()
    assert stored == expected
    assert stored[-16:] == xxhash.xxh3_128(expected[:-16]).digest()  # ends with the checksum of what precedes it
    info = remote.info()
    assert (info.root, info.entries, info.bytes, info.hits, info.misses) == (url, 1, len(expected), 0, 1)


def test_a_file_url_uses_the_folders_layout_and_leaves_no_temporary_file(tmp_path):
    remote = ReferenceCache(file_url(tmp_path))
    k = key(role="layout")
    remote.put(k, TENSORS)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        f"reference-v2/{k[:2]}/{k}.ref"
    ]
    assert ReferenceCache(tmp_path).get(k) is not None  # a folder cache on the same place reads it


def test_info_clear_and_eviction_on_a_url(memory_url):
    one = sum(t.numel() * t.element_size() for t in TENSORS)
    c = ReferenceCache(memory_url)
    keys = [key(role="evict", i=i) for i in range(4)]
    for k in keys:
        c.put(k, TENSORS)
    size = c.info().bytes // 4
    assert size > one and c.info().entries == 4
    # a cap of 3.5 entries: the 5th write evicts the oldest writes until at most 0.9 * 3.5 = 3.15 entries remain
    small = ReferenceCache(memory_url, max_bytes=int(3.5 * size))
    small.put(key(role="evict", i=4), TENSORS)
    left = [k for k in keys + [key(role="evict", i=4)] if small.get(k) is not None]
    assert left == [keys[2], keys[3], key(role="evict", i=4)]
    assert small.clear() == 3 and small.info().entries == 0


# --------------------------------------------------------------------------- runs

SPEC = ROOT / "operator_specs" / "softmax.yaml"
RUN = ["run", str(SPEC), "--trials", "3", "--dtype", "float16", "--only", "*-M=1*", "--jobs", "1"]


def _results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())


def _stripped(results: dict) -> dict:
    """results.json without when it ran, the command typed, the seconds each case took and the digest."""
    results = json.loads(json.dumps(results))
    results.pop("digest")
    for k in ("start_time", "end_time", "command_line"):
        results["environment"].pop(k)
    for case in results["cases"]:
        case.pop("timing")
    return results


def _cli_run(out: Path, *flags: str) -> dict:
    from click.testing import CliRunner

    from acceptance.cli import main

    r = CliRunner().invoke(main, [*RUN, "--out", str(out), *flags], catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    return _results(out)


def test_a_run_reads_what_a_run_in_another_process_stored_on_a_file_url(tmp_path):
    """The first run is another process (another machine's, on shared storage); the second computes no
    reference: every baseline and oracle output comes from the cache (their seconds are 0), and it writes the
    results of a run without a cache."""
    url = file_url(tmp_path / "shared")
    env = {**os.environ, ENV_VAR: str(tmp_path / "unused")}  # the option, not the variable, names the cache
    first = subprocess.run(
        [sys.executable, "-m", "acceptance", *RUN, "--out", str(tmp_path / "first"), "--cache-dir", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode in (0, 1), first.stderr
    entries = list((tmp_path / "shared").rglob("*.ref"))
    cases = len(_results(tmp_path / "first")["cases"])
    # per case: its inputs' pack (written by the worker), the baseline's, the oracle's, and its measurement
    assert cases == 2 and len(entries) == 4 * cases and not (tmp_path / "unused").exists()
    second = _cli_run(tmp_path / "second", "--cache-dir", url)
    assert all(c["timing"]["baseline"] == 0 and c["timing"]["oracle"] == 0 for c in second["cases"])
    assert all(c["timing"]["impl"] > 0 for c in second["cases"])  # the impl always runs
    plain = _cli_run(tmp_path / "plain", "--no-cache")
    assert _stripped(second) == _stripped(_results(tmp_path / "first")) == _stripped(plain)


def test_a_run_reads_what_the_run_before_stored_on_a_memory_url(tmp_path, memory_url, monkeypatch):
    monkeypatch.setenv(ENV_VAR, memory_url)  # the variable names a URL as well
    cold = _cli_run(tmp_path / "cold")
    assert all(c["timing"]["baseline"] > 0 for c in cold["cases"])
    # per case, as in a folder: its inputs' pack, the baseline's, the oracle's, and its measurement
    assert ReferenceCache(memory_url).info().entries == 4 * len(cold["cases"])
    warm = _cli_run(tmp_path / "warm")
    assert all(c["timing"]["baseline"] == 0 and c["timing"]["oracle"] == 0 for c in warm["cases"])
    assert _stripped(warm) == _stripped(cold)


def _outputs(trial: int) -> tuple[torch.Tensor, ...]:
    return (torch.full((4,), float(trial), dtype=torch.float64),)


BASE = dict(case="op[float32-N=4]", dtype="float32", seed=7, spec="spec-repr", generator="g" * 64, threads=1)
FNS = {"baseline": "b" * 64, "oracle": "o" * 64}


@pytest.mark.parametrize("where", ["folder", "file url"])
def test_references_another_process_stored_after_the_first_trial_are_read_not_computed(tmp_path, where):
    """A case looks for its references right before each trial would compute them: a pack stored meanwhile
    (by another machine on the same storage, here another cache object) serves the trials after."""
    root = tmp_path if where == "folder" else file_url(tmp_path)
    mine = ReferenceCache(root)
    mine.relook_s = 0.0  # a URL looks again at most once a second (test_a_url_looks_again_at_most_once_a_...)
    here = R.CaseReferences(mine, dict(BASE), dict(FNS))
    assert here.get("baseline", 0) is None
    here.put("baseline", 0, _outputs(0))  # computed here
    theirs = R.CaseReferences(ReferenceCache(root), dict(BASE), dict(FNS))
    for t in range(3):
        theirs.put("baseline", t, _outputs(t))
    theirs.close()
    got = here.get("baseline", 1)
    assert got is not None and torch.equal(got[0], _outputs(1)[0])
    assert torch.equal(here.get("baseline", 2)[0], _outputs(2)[0])
    assert here.get("baseline", 3) is None  # not stored by anyone


def test_a_url_looks_again_at_most_once_a_second(memory_url, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(R.time, "monotonic", lambda: clock[0])
    c = ReferenceCache(memory_url)
    here = R.CaseReferences(c, dict(BASE), dict(FNS))
    assert here.get("baseline", 0) is None  # the pack, then trial 0's own entry: 2 looks
    clock[0] += 0.5
    assert here.get("baseline", 1) is None  # half a second later: no look
    assert c.info().misses == 2
    clock[0] += 0.5
    assert here.get("baseline", 2) is None  # a second after the last look: the pack again
    assert c.info().misses == 3


# --------------------------------------------------------------------------- several processes

N_KEYS = 5


def _expected(j: int) -> tuple[torch.Tensor, ...]:
    return (torch.arange(j, j + 100_000, dtype=torch.float32), torch.full((3, 5), j, dtype=torch.int16))


def _hammer(url: str, worker: int, rounds: int, max_bytes: int) -> tuple[int, int, int, int, int]:
    """Get-or-put keys shared between workers, and rewrite one key all of them read; returns (wrong values,
    hits, misses, corrupt, write errors)."""
    c = ReferenceCache(url, max_bytes=max_bytes)
    wrong = hits = 0
    same = key(role="same key", n=0)
    for i in range(rounds):
        j = (i * 7 + worker) % N_KEYS
        k = key(role="concurrency", j=j)
        got = c.get(k)
        if got is None:
            c.put(k, _expected(j))
        else:
            hits += 1
            wrong += [raw(g) for g in got] != [raw(e) for e in _expected(j)]
        c.put(same, _expected(99))  # every worker rewrites one key while the others read it
        got = c.get(same)
        if got is not None:
            hits += 1
            wrong += [raw(g) for g in got] != [raw(e) for e in _expected(99)]
    info = c.info()
    return wrong, hits, info.misses, info.corrupt, info.write_errors


@pytest.mark.parametrize("max_bytes", [2**31, 2_000_000], ids=["no eviction", "evicting"])
def test_concurrent_writers_of_a_file_url_never_show_a_partial_entry(tmp_path, max_bytes):
    url = file_url(tmp_path)
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.starmap(_hammer, [(url, w, 40, max_bytes) for w in range(4)])
    assert [r[0] for r in results] == [0] * 4  # no read ever returned a wrong or partial value
    assert [r[3:] for r in results] == [(0, 0)] * 4  # nothing corrupt, no failed write
    assert sum(r[1] for r in results) > 0
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    c = ReferenceCache(url)
    for j in [*range(N_KEYS), 99]:
        got = c.get(key(role="concurrency", j=j) if j != 99 else key(role="same key", n=0))
        if got is not None:
            assert [raw(g) for g in got] == [raw(e) for e in _expected(j)]
    if max_bytes < 2**31:
        assert c.info().bytes <= 4 * max_bytes  # each process evicts by its own tally: the others' can overshoot


def test_concurrent_threads_on_a_memory_url_never_show_a_partial_entry(memory_url):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda w: _hammer(memory_url, w, 40, 2**31), range(4)))
    assert [r[0] for r in results] == [0] * 4 and [r[3:] for r in results] == [(0, 0)] * 4
    assert sum(r[1] for r in results) > 0


# --------------------------------------------------------------------------- torn and foreign entries


def _tear(url: str, where: str, how: str) -> None:
    fs, path = fsspec.core.url_to_fs(url)
    data = fs.cat_file(where)
    torn = {"truncated": data[: len(data) // 2], "one byte flipped": data[:-40] + bytes([data[-40] ^ 1]) + data[-39:]}
    fs.pipe_file(where, torn.get(how, b"not an entry at all"))


@pytest.mark.parametrize("how", ["truncated", "one byte flipped", "foreign"])
@pytest.mark.parametrize("scheme", ["memory", "file"])
def test_a_torn_or_foreign_entry_is_a_miss_with_one_warning(tmp_path, memory_url, caplog, scheme, how):
    url = memory_url if scheme == "memory" else file_url(tmp_path)
    c = ReferenceCache(url)
    k = key(role="torn")
    c.put(k, TENSORS)
    _tear(url, c.location(k), how)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        assert c.get(k) is None
    warnings = [r for r in caplog.records if r.name == "acceptance.cache"]
    assert len(warnings) == 1 and "corrupt entry" in warnings[0].getMessage() and k in warnings[0].getMessage()
    assert (c.info().corrupt, c.info().hits, c.info().misses) == (1, 0, 1)
    assert c.put(k, TENSORS)  # the next write replaces it
    assert [raw(t) for t in c.get(k)] == [raw(t) for t in TENSORS]


def test_a_truncated_file_under_a_file_url_is_a_miss(tmp_path, caplog):
    c = ReferenceCache(file_url(tmp_path))
    k = key(role="truncated on disk")
    c.put(k, TENSORS)
    path = next(tmp_path.rglob("*.ref"))
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 1)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        assert c.get(k) is None
    assert "corrupt entry" in caplog.text and c.info().corrupt == 1


def test_unreachable_storage_is_a_miss_and_a_failed_write_reported_once(memory_url, caplog, monkeypatch):
    c = ReferenceCache(memory_url)
    fs = fsspec.filesystem("memory")

    def refuse(*args, **kwargs):
        raise ConnectionError("storage unreachable")

    monkeypatch.setattr(type(fs), "cat_file", refuse)
    monkeypatch.setattr(type(fs), "pipe_file", refuse)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        assert c.get(key(i=1)) is None and c.get(key(i=2)) is None
        assert not c.put(key(i=1), TENSORS) and not c.put(key(i=2), TENSORS)
    messages = [r.getMessage() for r in caplog.records if r.name == "acceptance.cache"]
    assert len(messages) == 2 and "cannot read" in messages[0] and "cannot write" in messages[1]
    assert (c.info().misses, c.info().write_errors) == (2, 2)


# --------------------------------------------------------------------------- without fsspec


def _without_fsspec(monkeypatch) -> None:
    for name in [m for m in sys.modules if m == "fsspec" or m.startswith("fsspec.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "fsspec", None)  # import fsspec raises ImportError
    monkeypatch.setitem(sys.modules, "fsspec.core", None)


def test_a_url_without_fsspec_is_a_one_line_error_naming_the_extra(monkeypatch):
    _without_fsspec(monkeypatch)
    with pytest.raises(ValueError) as exc:
        ReferenceCache("s3://bucket/prefix")
    message = str(exc.value)
    assert "\n" not in message and "s3://bucket/prefix" in message and "operator-acceptance[fsspec]" in message
    assert ReferenceCache("s3://bucket/prefix", enabled=False).get(key(i=0)) is None  # --no-cache: not opened


def test_the_cli_says_so_in_one_line(monkeypatch):
    from click.testing import CliRunner

    from acceptance.cli import main

    _without_fsspec(monkeypatch)
    r = CliRunner().invoke(main, ["cache", "info", "--cache-dir", "gs://bucket/prefix"])
    assert r.exit_code == 2  # a usage error, no traceback
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert (
        len(lines) == 1 and "gs://bucket/prefix" in lines[0] and "pip install 'operator-acceptance[fsspec]'" in lines[0]
    )


def test_an_unknown_protocol_is_a_one_line_error(tmp_path):
    with pytest.raises(ValueError, match=r"^nosuchproto://x/y: not a URL fsspec can open: .*nosuchproto"):
        ReferenceCache("nosuchproto://x/y")


def test_a_folder_never_imports_fsspec(tmp_path):
    code = (
        "import sys, torch\n"
        "from acceptance.cache import ReferenceCache, key\n"
        f"c = ReferenceCache({str(tmp_path)!r})\n"
        "c.put(key(i=1), [torch.ones(3)]); assert c.get(key(i=1)) is not None; c.info(); c.clear()\n"
        "print('fsspec' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False"], out.stderr


# --------------------------------------------------------------------------- settings and pickling


def test_the_environment_variable_may_be_a_url(monkeypatch, memory_url):
    monkeypatch.setenv(ENV_VAR, memory_url + "/")
    assert default_root() == memory_url
    assert ReferenceCache().root == memory_url


@pytest.mark.parametrize("scheme", ["memory", "file", "folder"])
def test_cache_settings_pickle_and_rebuild_a_cache_on_the_same_storage(tmp_path, memory_url, scheme):
    from acceptance.session.executors import Settings, cache_settings

    root = {"memory": memory_url, "file": file_url(tmp_path), "folder": str(tmp_path)}[scheme]
    cache = ReferenceCache(root, max_bytes=12345678, enabled=True)
    settings = Settings(torch.device("cpu"), trials=3, cache=cache_settings(cache))
    copy = pickle.loads(pickle.dumps(settings))
    expected_root = root if scheme != "folder" else tmp_path
    assert copy.cache == (expected_root, 12345678, True) == settings.cache
    rebuilt = copy.reference_cache()
    assert rebuilt is not None and (rebuilt.root, rebuilt.max_bytes, rebuilt.enabled) == (expected_root, 12345678, True)
    cache.put(key(role="pickled"), TENSORS)
    assert [raw(t) for t in rebuilt.get(key(role="pickled"))] == [raw(t) for t in TENSORS]


def test_a_pickled_cache_is_a_new_object_on_the_same_root(memory_url):
    c = ReferenceCache(memory_url, max_bytes=1 << 20, read_only=True)
    assert c.get(key(i=5)) is None
    copy = pickle.loads(pickle.dumps(c))
    assert (copy.root, copy.max_bytes, copy.enabled, copy.read_only) == (memory_url, 1 << 20, True, True)
    assert copy.info().misses == 0  # counters are this object's own
    assert not copy.put(key(i=5), TENSORS)  # read-only survives the trip


def test_a_folder_root_is_unchanged(tmp_path):
    """A folder stays a Path (the local code path); ``~`` expands; a Windows-like or relative path is no URL."""
    assert ReferenceCache(tmp_path).root == tmp_path and isinstance(ReferenceCache(str(tmp_path)).root, Path)
    assert ReferenceCache("~/x").root == Path.home() / "x"
    assert ReferenceCache("C:/cache").root == Path("C:/cache") and ReferenceCache("a:b/c").root == Path("a:b/c")
    np.testing.assert_equal(ReferenceCache(tmp_path).relook_s, 0.0)


def test_a_url_cache_has_no_local_path_and_checks_its_keys(memory_url):
    c = ReferenceCache(memory_url)
    with pytest.raises(ValueError, match="is a URL"):
        c.path(key(i=1))
    for bad in ("../../etc/passwd", "A" * 64):
        with pytest.raises(ValueError, match="64 lowercase hex"):
            c.get(bad)
        with pytest.raises(ValueError, match="64 lowercase hex"):
            c.put(bad, TENSORS)

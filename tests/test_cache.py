"""Reference cache: keys, callable fingerprints, bit-exact storage, integrity, eviction, concurrency.

Expected values come from the documented layout and formulas (entry sizes,
the key recipe), from NumPy byte manipulation, or from ``hashlib`` and ``xxhash`` on the
files themselves, never from the code under test.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import logging
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import xxhash

import acceptance
from acceptance import cache as cache_mod
from acceptance.cache import (
    DTYPES,
    EVICT_TO,
    KEY_SCHEME,
    CacheInfo,
    FingerprintError,
    ReferenceCache,
    callable_fingerprint,
    environment,
    key,
)
from acceptance.spec import resolve_callable

PREFIX = 16  # magic (8) + u32 version + u32 header length
DIGEST = 16  # XXH3-128 (format 2)


def entry_size(k: str, layout: list[tuple[str, list[int], int]]) -> int:
    """Bytes of an entry by the documented layout: prefix + header JSON + payload + XXH3-128."""
    header = json.dumps({"key": k, "tensors": [[name, shape] for name, shape, _ in layout]}, separators=(",", ":"))
    payload = sum(int(np.prod(shape, dtype=np.int64)) * itemsize for _, shape, itemsize in layout)
    return PREFIX + len(header.encode()) + payload + DIGEST


def raw(t: torch.Tensor) -> bytes:
    """Row-major bytes of a contiguous tensor."""
    assert t.is_contiguous()
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


# --------------------------------------------------------------------------- round trip


def _random_bytes(rng: np.random.Generator, n: int, dtype: torch.dtype) -> np.ndarray:
    """``n`` elements' worth of random bytes, shape (n, itemsize); bool elements are 0 or 1."""
    if dtype == torch.bool:
        return rng.integers(0, 2, size=(n, 1), dtype=np.uint8)
    return rng.integers(0, 256, size=(n, dtype.itemsize), dtype=np.uint8)


def _tensor(data: np.ndarray, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    if data.size == 0:  # numpy gives empty arrays stride 0, which torch cannot reinterpret
        return torch.empty(shape, dtype=dtype)
    return torch.from_numpy(data.reshape(-1).copy()).view(dtype).reshape(shape)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("name", list(DTYPES))
def test_round_trip_is_bit_exact_for_every_dtype_and_layout(tmp_path, name):
    dtype = DTYPES[name]
    rng = np.random.default_rng(sum(name.encode()))
    tensors, expected = [], []
    for shape in [(), (0,), (2, 0, 3), (5, 7)]:  # 0-d, empty, empty with a zero inside, plain
        n = int(np.prod(shape, dtype=np.int64))
        data = _random_bytes(rng, n, dtype)
        tensors.append(_tensor(data, dtype, shape))
        expected.append((shape, data.tobytes()))
    data = _random_bytes(rng, 5 * 7, dtype).reshape(5, 7, -1)  # transposed view
    tensors.append(_tensor(data, dtype, (5, 7)).t())
    expected.append(((7, 5), data.transpose(1, 0, 2).tobytes()))
    data = _random_bytes(rng, 9, dtype)  # strided slice
    tensors.append(_tensor(data, dtype, (9,))[1::3])
    expected.append(((3,), data[1::3].tobytes()))
    data = _random_bytes(rng, 3, dtype).reshape(1, 3, -1)  # stride-0 broadcast
    tensors.append(_tensor(data, dtype, (1, 3)).expand(4, 3))
    expected.append(((4, 3), np.broadcast_to(data, (4, 3, data.shape[-1])).tobytes()))

    c = ReferenceCache(tmp_path)
    k = key(role="round-trip", dtype=name)
    assert c.put(k, tuple(tensors))
    got = c.get(k)
    assert got is not None and len(got) == len(expected)
    for g, (shape, data) in zip(got, expected, strict=False):
        assert g.dtype == dtype and tuple(g.shape) == shape and g.is_contiguous() and g.device.type == "cpu"
        assert raw(g) == data
    layout = [(name, list(shape), dtype.itemsize) for shape, _ in expected]
    assert os.path.getsize(c.path(k)) == entry_size(k, layout)


def test_an_entry_is_the_documented_bytes_ending_with_their_xxh3_128(tmp_path):
    """Format 2 byte for byte: magic, version 2, header length, the header JSON, the payload, then the canonical
    (big-endian) XXH3-128 of all of it, computed here by the xxhash package."""
    c = ReferenceCache(tmp_path)
    k = key(role="layout")
    a = torch.tensor([1.5, -2.0], dtype=torch.float32)
    b = torch.tensor([[7]], dtype=torch.int16)
    assert c.put(k, (a, b))
    data = c.path(k).read_bytes()
    header = json.dumps({"key": k, "tensors": [["float32", [2]], ["int16", [1, 1]]]}, separators=(",", ":")).encode()
    body = (
        b"ACCREF\r\n"
        + (2).to_bytes(4, "little")
        + len(header).to_bytes(4, "little")
        + header
        + np.array([1.5, -2.0], dtype="<f4").tobytes()
        + np.array([7], dtype="<i2").tobytes()
    )
    assert data == body + xxhash.xxh3_128(body).digest()
    assert len(xxhash.xxh3_128(body).digest()) == DIGEST


def test_conjugate_and_negative_views_are_stored_resolved(tmp_path):
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
    c = ReferenceCache(tmp_path)
    k = key(role="views")
    c.put(k, (z.conj(), z.conj().imag))
    conj, neg_imag = c.get(k)
    assert raw(conj) == np.array([1 - 2j, 3 + 4j], dtype=np.complex64).tobytes()
    assert raw(neg_imag) == np.array([-2.0, 4.0], dtype=np.float32).tobytes()


def test_get_returns_fresh_writable_tensors(tmp_path):
    c = ReferenceCache(tmp_path)
    k = key(role="fresh")
    c.put(k, (torch.arange(4, dtype=torch.float32),))
    (first,) = c.get(k)
    first.add_(100)  # a callable that mutates its inputs must not poison the cache
    (second,) = c.get(k)
    assert second.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert not second.requires_grad


def test_info_counts_hits_misses_entries_and_bytes(tmp_path):
    c = ReferenceCache(tmp_path, max_bytes=10**6)
    k1, k2 = key(i=1), key(i=2)
    assert c.get(k1) is None
    c.put(k1, (torch.zeros(10, dtype=torch.float64),))
    c.put(k2, (torch.zeros(3, dtype=torch.int8), torch.zeros((), dtype=torch.bool)))
    assert c.get(k1) is not None and c.get(k2) is not None and c.get(key(i=3)) is None
    expected = entry_size(k1, [("float64", [10], 8)]) + entry_size(k2, [("int8", [3], 1), ("bool", [], 1)])
    assert c.info() == CacheInfo(
        root=tmp_path,
        enabled=True,
        max_bytes=10**6,
        entries=2,
        bytes=expected,
        stale_bytes=0,
        hits=2,
        misses=2,
        corrupt=0,
        write_errors=0,
    )


# --------------------------------------------------------------------------- put arguments


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_put_rejects_what_it_cannot_store(tmp_path):
    c = ReferenceCache(tmp_path)
    k = key(role="bad")
    with pytest.raises(TypeError, match="tuple or list"):
        c.put(k, torch.zeros(2))
    with pytest.raises(TypeError, match=r"tensors\[1\]: expected a torch.Tensor"):
        c.put(k, (torch.zeros(2), np.zeros(2)))
    with pytest.raises(ValueError, match=r"tensors\[0\] is on meta"):
        c.put(k, (torch.zeros(2, device="meta"),))
    with pytest.raises(TypeError, match=r"tensors\[0\].*sparse"):
        c.put(k, (torch.zeros(2).to_sparse(),))
    with pytest.raises(TypeError, match=r"tensors\[0\].*quint8"):
        c.put(k, (torch.quantize_per_tensor(torch.zeros(2), 0.1, 0, torch.quint8),))
    with pytest.raises(ValueError, match="64 lowercase hex"):
        c.put("../escape", (torch.zeros(2),))
    with pytest.raises(ValueError, match="64 lowercase hex"):
        c.get(k.upper())
    with pytest.raises(ValueError, match="max_bytes"):
        ReferenceCache(tmp_path, max_bytes=0)
    assert not (tmp_path / "reference-v1").exists()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_put_refuses_device_tensors(tmp_path):
    with pytest.raises(ValueError, match=r"tensors\[0\] is on cuda"):
        ReferenceCache(tmp_path).put(key(role="cuda"), (torch.zeros(2, device="cuda"),))


def test_an_entry_larger_than_the_cap_is_not_stored(tmp_path):
    c = ReferenceCache(tmp_path, max_bytes=300)
    assert not c.put(key(n=100), (torch.zeros(100, dtype=torch.float32),))  # 400 payload bytes
    assert c.put(key(n=10), (torch.zeros(10, dtype=torch.float32),))
    assert c.info().entries == 1


def test_write_failure_is_counted_not_raised(tmp_path, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    c = ReferenceCache(blocker)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        assert c.put(key(role="w"), (torch.zeros(2),)) is False
    assert c.info().write_errors == 1
    assert "cannot write" in caplog.text
    assert c.get(key(role="w")) is None


def test_an_unusable_folder_is_reported_once_and_not_tried_again(tmp_path, caplog, monkeypatch):
    """A cache folder that is a file takes no entry: the first failure is logged with its cause, the next
    hundred are counted without a line each, and no file operation is tried for them."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    c = ReferenceCache(blocker)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        assert c.put(key(role="w", trial=0), (torch.zeros(2),)) is False
        opened = []
        real_open = os.open
        monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
        assert not any(c.put(key(role="w", trial=t), (torch.zeros(2),)) for t in range(1, 101))
    assert c.info().write_errors == 101
    lines = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(lines) == 1 and "Not a directory" in lines[0] and "no further entry" in lines[0]
    assert opened == []


def test_an_entry_that_fails_alone_is_reported_once_per_cause(tmp_path, caplog, monkeypatch):
    """A write error that is not about the folder (here EIO from the file system) leaves the cache in use:
    later entries are still written; the same cause is logged once."""
    import errno as errno_mod

    c = ReferenceCache(tmp_path / "cache")
    real_replace = os.replace
    failing = {"n": 2}

    def flaky(src, dst):
        if failing["n"]:
            failing["n"] -= 1
            raise OSError(errno_mod.EIO, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        results = [c.put(key(role="w", trial=t), (torch.full((3,), float(t)),)) for t in range(4)]
    assert results == [False, False, True, True]
    assert c.info().write_errors == 2
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1
    assert torch.equal(c.get(key(role="w", trial=3))[0], torch.full((3,), 3.0))


# --------------------------------------------------------------------------- disabled, root, clear


def test_disabled_cache_never_writes_nor_reads(tmp_path):
    root = tmp_path / "cache"
    k = key(role="disabled")
    off = ReferenceCache(root, enabled=False)
    assert off.put(k, (torch.ones(3),)) is False
    assert off.get(k) is None
    assert not root.exists()

    ReferenceCache(root).put(k, (torch.ones(3),))
    path = off.path(k)
    before = (path.stat().st_mtime_ns, path.read_bytes())
    assert off.get(k) is None  # the entry exists, but a disabled cache does not read it
    assert off.put(k, (torch.zeros(3),)) is False
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == [path.name]


def test_root_from_environment_variable_then_platform_default(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "from-env"))
    assert ReferenceCache().root == tmp_path / "from-env"
    assert ReferenceCache(tmp_path / "explicit").root == tmp_path / "explicit"
    monkeypatch.delenv("ACCEPTANCE_CACHE_DIR")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert ReferenceCache().root == tmp_path / "xdg" / "acceptance"


def test_clear_removes_every_format_version_and_nothing_else(tmp_path):
    c = ReferenceCache(tmp_path)
    for i in range(3):
        c.put(key(i=i), (torch.zeros(4),))
    (tmp_path / "notes.txt").write_text("mine")
    old = tmp_path / "reference-v0" / "ab" / ("ab" + "0" * 62 + ".ref")
    old.parent.mkdir(parents=True)
    old.write_bytes(b"an entry of an older layout")
    info = c.info()
    assert (info.entries, info.stale_bytes) == (3, len(b"an entry of an older layout"))
    assert c.clear() == 4
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (c.info().entries, c.info().bytes, c.info().stale_bytes) == (0, 0, 0)


def test_entries_of_another_format_version_are_never_read(tmp_path):
    c = ReferenceCache(tmp_path)
    k = key(role="format")
    c.put(k, (torch.ones(2),))
    elsewhere = tmp_path / "reference-v1" / k[:2] / f"{k}.ref"
    elsewhere.parent.mkdir(parents=True)
    c.path(k).rename(elsewhere)  # the same bytes, in the folder of another format version
    assert c.get(k) is None
    assert elsewhere.exists() and c.info().corrupt == 0


def test_temporary_files_of_crashed_writers_are_removed_after_an_hour(tmp_path):
    c = ReferenceCache(tmp_path)
    c.put(key(i=0), (torch.zeros(1),))
    folder = c.path(key(i=0)).parent
    old, young = folder / ".old.1.aa.tmp", folder / ".young.2.bb.tmp"
    old.write_bytes(b"x" * 10)
    young.write_bytes(b"x" * 7)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    assert c.info().stale_bytes == 7  # the young one may still be being written
    assert not old.exists() and young.exists()


# --------------------------------------------------------------------------- integrity


def _corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    header_len = int.from_bytes(data[12:16], "little")
    positions = {
        "magic": 0,
        "version": 8,
        "header length": 12,
        "header": PREFIX + 9,
        "first payload byte": PREFIX + header_len,
        "last payload byte": len(data) - DIGEST - 1,
        "digest": len(data) - 1,
    }
    if how in positions:
        data[positions[how]] ^= 0x01
    elif how == "truncated by one byte":
        data = data[:-1]
    elif how == "truncated to half":
        data = data[: len(data) // 2]
    elif how == "prefix only":
        data = data[:PREFIX]
    elif how == "empty":
        data = bytearray()
    elif how == "one byte appended":
        data += b"\0"
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "how",
    [
        "magic",
        "version",
        "header length",
        "header",
        "first payload byte",
        "last payload byte",
        "digest",
        "truncated by one byte",
        "truncated to half",
        "prefix only",
        "empty",
        "one byte appended",
    ],
)
def test_a_corrupt_entry_is_a_miss_deleted_and_counted(tmp_path, caplog, how):
    c = ReferenceCache(tmp_path)
    k = key(role="corrupt")
    tensors = (torch.arange(64, dtype=torch.float32), torch.ones(3, dtype=torch.bfloat16))
    c.put(k, tensors)
    _corrupt(c.path(k), how)
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        assert c.get(k) is None
    assert not c.path(k).exists()
    assert (c.info().corrupt, c.info().misses, c.info().hits) == (1, 1, 0)
    assert "corrupt entry" in caplog.text
    c.put(k, tensors)  # the slot is usable again
    assert raw(c.get(k)[0]) == np.arange(64, dtype=np.float32).tobytes()


def test_an_entry_filed_under_another_key_is_a_miss(tmp_path):
    c = ReferenceCache(tmp_path)
    k1, k2 = key(i=1), key(i=2)
    c.put(k1, (torch.ones(2),))
    c.path(k2).parent.mkdir(parents=True, exist_ok=True)
    c.path(k2).write_bytes(c.path(k1).read_bytes())
    assert c.get(k2) is None and c.info().corrupt == 1
    assert c.get(k1) is not None


def test_a_folder_in_place_of_an_entry_is_a_miss(tmp_path):
    c = ReferenceCache(tmp_path)
    k = key(role="dir")
    c.path(k).mkdir(parents=True)
    assert c.get(k) is None


# --------------------------------------------------------------------------- eviction


def test_least_recently_used_entries_are_evicted_first(tmp_path):
    keys = {name: key(role="lru", name=name) for name in "ABCDE"}
    size = entry_size(keys["A"], [("float32", [10], 4)])  # every entry has this size (same key length)
    cap = int(4.2 * size)
    c = ReferenceCache(tmp_path, max_bytes=cap)
    for name in "ABCD":  # 4 * size <= cap: nothing evicted
        assert c.put(keys[name], (torch.full((10,), float(ord(name))),))
    assert c.info().entries == 4
    assert c.get(keys["A"]) is not None and c.get(keys["C"]) is not None  # last use: B < D < A < C
    assert c.put(keys["E"], (torch.zeros(10),))
    # 5 * size > cap: evict in order B, D, ... until total <= EVICT_TO * cap = 3.78 * size
    assert EVICT_TO * cap < 4 * size and EVICT_TO * cap >= 3 * size
    alive = {name for name, k in keys.items() if c.path(k).exists()}
    assert alive == {"A", "C", "E"}
    assert c.info().bytes == 3 * size


def test_eviction_order_survives_a_new_process_view(tmp_path):
    """Last use is on disk (file modification time), not in the cache object."""
    keys = [key(role="lru2", i=i) for i in range(3)]
    size = entry_size(keys[0], [("float32", [10], 4)])
    writer = ReferenceCache(tmp_path, max_bytes=10 * size)
    for k in keys:
        writer.put(k, (torch.zeros(10),))
    ReferenceCache(tmp_path).get(keys[0])  # another cache object uses the oldest entry
    fresh = ReferenceCache(tmp_path, max_bytes=int(3.5 * size))
    fresh.put(key(role="lru2", i=3), (torch.zeros(10),))  # 4 > 3.5: evict down to <= 3.15 sizes
    assert [writer.path(k).exists() for k in keys] == [True, False, True]


# --------------------------------------------------------------------------- keys


def test_key_is_sha256_of_the_documented_canonical_json():
    parts = {"role": "oracle", "spec": {"b": [1, 2.5], "a": None}, "trial": 3, "dtype": "bfloat16"}
    text = json.dumps(
        {"scheme": KEY_SCHEME, "environment": environment(), "parts": parts},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert key(**parts) == hashlib.sha256(text.encode()).hexdigest()


def test_key_ignores_dict_order_and_tells_value_types_apart():
    assert key(spec={"a": 1, "b": {"x": 1, "y": 2}}) == key(spec={"b": {"y": 2, "x": 1}, "a": 1})
    assert key(a=1, b=2) == key(b=2, a=1)
    assert key(x=1) != key(x=1.0) != key(x=True)
    assert key(x=0.0) != key(x=-0.0)
    assert key(x=(1, 2)) == key(x=[1, 2])
    assert key(x=float("nan")) == key(x=float("nan"))
    assert key(x=np.float32(0.1)) == key(x=0.10000000149011612)  # the float32 nearest 0.1, exactly
    assert key(x=np.int64(7)) == key(x=7)
    assert key(dtype=torch.bfloat16) == key(dtype="torch.bfloat16")


def test_key_refuses_tensors_arrays_and_objects():
    with pytest.raises(TypeError, match=r"key part spec\['w'\] is a Tensor"):
        key(spec={"w": torch.zeros(2)})
    with pytest.raises(TypeError, match="key part x is a ndarray"):
        key(x=np.zeros(2))
    with pytest.raises(TypeError, match="dict keys must be str"):
        key(x={1: "a"})
    with pytest.raises(TypeError, match=r"key part x\[1\] is a object"):
        key(x=[1, object()])


def test_key_changes_with_the_environment(monkeypatch):
    before = key(role="baseline")
    monkeypatch.setattr(acceptance.version, "__version__", acceptance.__version__ + ".post1")
    assert key(role="baseline") != before
    monkeypatch.undo()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert key(role="baseline") != before
    finally:
        torch.set_num_threads(threads)
    assert key(role="baseline") == before


# --------------------------------------------------------------------------- fingerprints


def test_builtin_and_torch_functions_are_identified_by_the_torch_version():
    version = importlib.metadata.version("torch")
    assert callable_fingerprint(torch.matmul)["distribution"] == f"torch=={version}"
    assert callable_fingerprint(torch.nn.functional.gelu)["distribution"] == f"torch=={version}"
    assert callable_fingerprint(torch.Tensor.add)["distribution"] == f"torch=={version}"
    op = callable_fingerprint(torch.ops.aten.add.Tensor)
    assert op == {"op": "OpOverload:aten.add.Tensor", "distribution": f"torch=={version}"}
    assert callable_fingerprint(torch.matmul) != callable_fingerprint(torch.mm)
    assert callable_fingerprint(len)["python"] == sys.version


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_file_module_function_is_identified_by_the_file_bytes(tmp_path):
    src = _write(tmp_path / "kern.py", "def f(x):\n    return x + 1\n\ng = lambda x: x\nh = lambda x: x\n")
    spec = tmp_path / "op.yaml"
    f = resolve_callable("kern.py:f", spec)
    fp = callable_fingerprint(f)
    assert fp["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert fp["function"] == f"{f.__module__}:f" and fp["line"] == 1
    g, h = resolve_callable("kern.py:g", spec), resolve_callable("kern.py:h", spec)
    assert callable_fingerprint(g) != callable_fingerprint(h)  # two lambdas: different lines
    _write(src, "def f(x):\n    return x + 2\n\ng = lambda x: x\nh = lambda x: x\n")  # same size
    assert callable_fingerprint(f)["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest() != fp["sha256"]
    assert callable_fingerprint(f) != fp


def test_an_edited_helper_module_changes_the_fingerprint(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    helper = _write(tmp_path / "cache_helper_mod.py", "SCALE = 2\ndef scale(x):\n    return x * SCALE\n")
    _write(
        tmp_path / "kern.py",
        "import cache_helper_mod\nfrom cache_helper_mod import scale\n\n"
        "def via_module(x):\n    return cache_helper_mod.scale(x)\n\n"
        "def via_name(x):\n    return scale(x)\n",
    )
    try:
        spec = tmp_path / "op.yaml"
        a, b = resolve_callable("kern.py:via_module", spec), resolve_callable("kern.py:via_name", spec)
        before = callable_fingerprint(a), callable_fingerprint(b)
        _write(helper, "SCALE = 3\ndef scale(x):\n    return x * SCALE\n")
        after = callable_fingerprint(a), callable_fingerprint(b)
        assert before[0] != after[0] and before[1] != after[1]
        digest = hashlib.sha256(helper.read_bytes()).hexdigest()
        assert after[0]["globals"]["cache_helper_mod"]["sha256"] == digest
        assert after[1]["globals"]["scale"]["sha256"] == digest
    finally:
        sys.modules.pop("cache_helper_mod", None)


def _make_scaled(k):
    def scaled(x):
        return x * k

    return scaled


class _Scaler:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k

    def apply(self, x):
        return x * self.k


def test_bound_state_is_part_of_the_fingerprint():
    fp = callable_fingerprint
    assert fp(_make_scaled(2)) == fp(_make_scaled(2)) != fp(_make_scaled(3))
    assert fp(functools.partial(torch.add, alpha=2)) != fp(functools.partial(torch.add, alpha=3))
    assert fp(functools.partial(torch.add, torch.ones(3))) == fp(functools.partial(torch.add, torch.ones(3)))
    assert fp(functools.partial(torch.add, torch.ones(3))) != fp(functools.partial(torch.add, torch.zeros(3)))
    assert fp(_Scaler(2).apply) == fp(_Scaler(2).apply) != fp(_Scaler(3).apply)
    assert fp(_Scaler(2)) != fp(_Scaler(3))
    w = torch.nn.Linear(3, 2)
    before = fp(w)
    with torch.no_grad():
        w.weight[0, 0] += 1
    assert fp(w) != before


def test_closure_cycles_terminate_and_opaque_state_is_refused():
    class Node:
        pass

    node = Node()
    node.me = node
    assert callable_fingerprint(functools.partial(torch.add, node)) is not None
    lock = threading.Lock()
    with pytest.raises(FingerprintError, match="no inspectable state"):
        callable_fingerprint(lambda x: lock)
    with pytest.raises(TypeError, match="expected a callable"):
        callable_fingerprint(3)


# --------------------------------------------------------------------------- several processes


def _fresh_process_view(spec_dir: str) -> tuple[str, dict, dict, dict]:
    from acceptance.numerics import oracle

    return (
        key(role="inputs", spec={"seed": 5, "shape": [3, 4]}, trial=2, dtype="float16"),
        callable_fingerprint(oracle.float64_oracle(torch.matmul)),
        callable_fingerprint(oracle.mpmath_oracle("exp", 30)),
        callable_fingerprint(resolve_callable("kern.py:f", Path(spec_dir) / "op.yaml")),
    )


N_KEYS = 6


def _expected(j: int) -> tuple[torch.Tensor, ...]:
    return (torch.arange(j, j + 150_000, dtype=torch.float32), torch.full((3, 5), j, dtype=torch.int16))


def _hammer(root: str, worker: int, rounds: int, max_bytes: int) -> tuple[int, int, int, int]:
    """Get-or-put a few shared keys; returns (wrong values, hits, corrupt, write errors)."""
    c = ReferenceCache(root, max_bytes=max_bytes)
    wrong = hits = 0
    shared = key(role="same key", n=0)
    for i in range(rounds):
        j = (i + worker) % N_KEYS
        k = key(role="concurrency", j=j)
        got = c.get(k)
        if got is None:
            c.put(k, _expected(j))
        else:
            hits += 1
            wrong += any(raw(g) != raw(e) for g, e in zip(got, _expected(j), strict=False))
        c.put(shared, _expected(99))  # every worker rewrites one key while the others read it
        got = c.get(shared)
        if got is not None:
            wrong += any(raw(g) != raw(e) for g, e in zip(got, _expected(99), strict=False))
    info = c.info()
    return wrong, hits, info.corrupt, info.write_errors


@pytest.fixture(scope="module")
def pool():
    with multiprocessing.get_context("spawn").Pool(3) as p:
        yield p


def test_same_key_and_fingerprints_in_a_fresh_process(pool, tmp_path):
    _write(tmp_path / "kern.py", "def f(x):\n    return x * 3\n")
    theirs = pool.apply(_fresh_process_view, (str(tmp_path),))
    assert theirs == _fresh_process_view(str(tmp_path))


@pytest.mark.parametrize("max_bytes", [cache_mod.DEFAULT_MAX_BYTES, 3_000_000], ids=["no eviction", "evicting"])
def test_concurrent_writers_and_readers(pool, tmp_path, max_bytes):
    results = pool.starmap(_hammer, [(str(tmp_path), w, 12, max_bytes) for w in range(3)])
    assert [r[0] for r in results] == [0, 0, 0]  # no reader ever saw a wrong or partial value
    assert [r[2:] for r in results] == [(0, 0)] * 3  # nothing corrupt, no failed write
    assert sum(r[1] for r in results) > 0
    assert not list(tmp_path.rglob("*.tmp"))
    c = ReferenceCache(tmp_path)
    for j in list(range(N_KEYS)) + [99]:
        k = key(role="concurrency", j=j) if j != 99 else key(role="same key", n=0)
        got = c.get(k)
        if got is not None:
            assert [raw(g) for g in got] == [raw(e) for e in _expected(j)]
    if max_bytes < cache_mod.DEFAULT_MAX_BYTES:
        # each process evicts when its own tally passes the cap; the others' writes can overshoot it
        assert c.info().bytes <= 3 * max_bytes
    assert c.info().corrupt == 0


# ----------------------------------------------------------------------------- deferred writes


def test_deferred_entries_wait_for_write_next_and_are_all_written_when_deferring_ends(tmp_path):
    from acceptance.cache import store

    cache = ReferenceCache(tmp_path)
    keys = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(3)]
    tensors = [(torch.full((4,), float(k)),) for k in range(3)]
    cache.put_later(keys[0], tensors[0])  # not deferring: written at once
    assert cache.path(keys[0]).exists()
    cache.defer()
    cache.put_later(keys[1], tensors[1])
    cache.put_later(keys[2], tensors[2])
    assert not cache.path(keys[1]).exists() and not cache.path(keys[2]).exists()
    assert cache.write_next() and cache.path(keys[1]).exists() and not cache.path(keys[2]).exists()  # oldest first
    cache.defer(False)
    assert cache.path(keys[2]).exists() and not cache.write_next()
    for k in range(3):
        assert torch.equal(cache.get(keys[k])[0], tensors[k][0])
    assert store.QUEUED_BYTES == 64 << 20


def test_the_deferred_queue_is_bounded_oldest_written_first(tmp_path, monkeypatch):
    from acceptance.cache import store

    monkeypatch.setattr(store, "QUEUED_BYTES", 100)  # two 40-byte entries fit, a third does not
    cache = ReferenceCache(tmp_path)
    cache.defer()
    keys = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(3)]
    for k in range(3):
        cache.put_later(keys[k], (torch.zeros(10, dtype=torch.float32),))
    assert [cache.path(k).exists() for k in keys] == [True, False, False]


def _held(cache: ReferenceCache, monkeypatch) -> tuple[threading.Event, list[str]]:
    """Make ``cache``'s writes wait for the returned event; the keys it was asked to write, in order."""
    gate, asked = threading.Event(), []
    original = cache.put

    def held(key, tensors):
        asked.append(key)
        assert gate.wait(30)
        return original(key, tensors)

    monkeypatch.setattr(cache, "put", held)
    return gate, asked


def test_a_writer_thread_writes_the_queue_while_the_caller_goes_on(tmp_path, monkeypatch):
    """With :meth:`write_behind`, ``put_later`` returns before the entry is on disk (the thread is held
    here); ``settle`` returns once every entry is written, in order, each read back equal."""
    cache = ReferenceCache(tmp_path)
    gate, asked = _held(cache, monkeypatch)
    cache.write_behind()
    keys = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(3)]
    tensors = [(torch.arange(5, dtype=torch.float64) * k, torch.tensor([k], dtype=torch.int8)) for k in range(3)]
    for k in range(3):
        cache.put_later(keys[k], tensors[k])
    assert not any(cache.path(k).exists() for k in keys) and not cache.write_next()  # the thread's to write
    gate.set()
    cache.settle()
    assert asked == keys
    for k in range(3):
        got = cache.get(keys[k])
        assert torch.equal(got[0], tensors[k][0]) and torch.equal(got[1], tensors[k][1])


def test_a_writer_threads_queue_is_bounded(tmp_path, monkeypatch):
    """Beyond :data:`QUEUED_BYTES` queued, ``put_later`` waits for the thread (held here) to write the oldest."""
    from acceptance.cache import store

    monkeypatch.setattr(store, "QUEUED_BYTES", 100)  # two 40-byte entries fit, a third does not
    cache = ReferenceCache(tmp_path)
    gate, _ = _held(cache, monkeypatch)
    cache.write_behind()
    keys = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(3)]
    for k in range(2):
        cache.put_later(keys[k], (torch.zeros(10, dtype=torch.float32),))
    third = threading.Thread(target=cache.put_later, args=(keys[2], (torch.ones(10, dtype=torch.float32),)))
    third.start()
    third.join(0.5)
    assert third.is_alive()  # waiting: 120 bytes would be queued
    gate.set()
    third.join(30)
    assert not third.is_alive()
    cache.settle()
    assert all(cache.path(k).exists() for k in keys)


def test_an_entry_the_writer_thread_cannot_write_does_not_stop_the_others(tmp_path, caplog):
    cache = ReferenceCache(tmp_path)
    cache.write_behind()
    keys = [hashlib.sha256(str(k).encode()).hexdigest() for k in range(2)]
    with caplog.at_level(logging.WARNING, logger="acceptance.cache"):
        cache.put_later(keys[0], (torch.ones(3).to_sparse(),))  # put() refuses a sparse tensor
        cache.put_later(keys[1], (torch.ones(3),))
        cache.settle()
    assert not cache.path(keys[0]).exists() and torch.equal(cache.get(keys[1])[0], torch.ones(3))
    assert any(keys[0] in r.getMessage() and "tensors[0]" in r.getMessage() for r in caplog.records)


def test_a_disabled_cache_queues_nothing(tmp_path):
    cache = ReferenceCache(tmp_path, enabled=False)
    cache.defer()
    cache.put_later("a" * 64, (torch.zeros(3),))
    assert not cache.write_next() and not list(tmp_path.rglob("*.ref"))


def test_entries_of_an_older_format_count_against_the_cap_and_go_first(tmp_path):
    """After an upgrade, what the previous format left (never read again) is bounded by the cap too: it is
    evicted by last use with the current entries, so the unused old ones go first."""
    keys = [key(role="upgrade", i=i) for i in range(5)]
    size = entry_size(keys[0], [("float32", [10], 4)])
    old = []
    for i, k in enumerate(keys[:3]):  # three entries of a format before this one, last used 3, 2 and 1 hours ago
        path = tmp_path / "reference-v1" / k[:2] / f"{k}.ref"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)
        stamp = time.time() - 3600 * (3 - i)
        os.utime(path, (stamp, stamp))
        old.append(path)
    c = ReferenceCache(tmp_path, max_bytes=int(4.5 * size))
    assert (c.info().entries, c.info().stale_bytes) == (0, 3 * size)
    c.put(keys[3], (torch.zeros(10),))  # 4 sizes on disk: within the cap
    assert all(p.exists() for p in old)
    c.put(keys[4], (torch.zeros(10),))  # 5 > 4.5: evicted down to at most 0.9 * 4.5 = 4.05 sizes
    assert [p.exists() for p in old] == [False, True, True]  # the least recently used, of the old format
    assert c.get(keys[3]) is not None and c.get(keys[4]) is not None
    assert (c.info().entries, c.info().bytes, c.info().stale_bytes) == (2, 2 * size, 2 * size)

"""acceptance.numerics.metrics.load_array: .npy and .pt files, and clear errors naming the file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from acceptance.numerics import metrics as M


def test_npy_round_trip(tmp_path):
    a = np.arange(12, dtype=np.float16).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    got = M.load_array(tmp_path / "a.npy")
    assert isinstance(got, np.ndarray) and got.dtype == np.float16
    np.testing.assert_array_equal(got, a)


def test_pt_tensor_and_single_tensor_dict(tmp_path):
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    torch.save(t, tmp_path / "t.pt")
    torch.save({"out": t, "note": "run 3"}, tmp_path / "d.pt")
    for name in ("t.pt", "d.pt"):
        got = M.load_array(str(tmp_path / name))
        assert got.dtype == torch.bfloat16 and torch.equal(got, t)
    assert M.compute(M.load_array(tmp_path / "t.pt"), M.load_array(tmp_path / "d.pt"))["max_abs"] == 0.0


@pytest.mark.parametrize(
    ("name", "write", "message"),
    [
        ("missing.npy", None, "missing.npy: cannot read"),
        ("a.txt", lambda p: p.write_text("1 2 3"), "a.txt: unsupported file type '.txt'"),
        ("noext", lambda p: p.write_text("1"), "noext: unsupported file type '(no suffix)'"),
        ("bad.npy", lambda p: p.write_bytes(b"not an array"), "bad.npy: cannot read"),
        ("bad.pt", lambda p: p.write_bytes(b"\x00\x01garbage"), "bad.pt: cannot read"),
        ("obj.npy", lambda p: np.save(p, np.array([{}, 1], dtype=object)), "obj.npy: cannot read"),
        ("str.npy", lambda p: np.save(p, np.array(["a", "b"])), "str.npy: dtype <U1 is not supported"),
        ("cplx.pt", lambda p: torch.save(torch.zeros(2, dtype=torch.complex64), p), "cplx.pt: dtype torch.complex64"),
        (
            "two.pt",
            lambda p: torch.save({"a": torch.zeros(1), "b": torch.ones(1)}, p),
            "two.pt: expected a dict with exactly one tensor, found 2 (a, b)",
        ),
        ("none.pt", lambda p: torch.save({"a": 1}, p), "none.pt: expected a dict with exactly one tensor, found 0"),
        ("list.pt", lambda p: torch.save([torch.zeros(1)], p), "list.pt: holds a list, not an array or tensor"),
        (
            "zip.npy",
            lambda p: (np.savez(p.with_suffix(".npz"), x=np.zeros(2)), p.with_suffix(".npz").rename(p)),
            "zip.npy: holds a NpzFile",
        ),
    ],
)
def test_unreadable_files_raise_value_error_naming_the_file(tmp_path, name, write, message):
    path = tmp_path / name
    if write is not None:
        write(path)
    with pytest.raises(ValueError) as info:
        M.load_array(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)

"""One reference cache entry on disk: its bytes, written and read back with every check.

An entry file is ``magic, format version, header length`` (:data:`_PREFIX`), a JSON header naming the key and
each tensor's dtype and shape, the tensors' row-major bytes one after another, and the XXH3-128 checksum of
everything before it (format 2; format 1 had SHA-256 there). :func:`read_entry` checks each part before it
trusts the next (sizes before any allocation).
"""

from __future__ import annotations

import io
import json
import math
import struct
from collections.abc import Sequence

import torch
import xxhash

from acceptance.cache.keys import _contiguous_bytes

#: Version of the on-disk entry layout; entries of another version are never read. Version 2 ends an entry with
#: its XXH3-128 checksum (~17 GB/s on one core where version 1's SHA-256 ran at ~1.8 GB/s: the checksum is there
#: to catch a torn or damaged file, not an adversary, and hashing was most of what reading a warm entry cost).
FORMAT_VERSION = 2

_MAGIC = b"ACCREF\r\n"
_PREFIX = struct.Struct("<8sII")  # magic, format version, header length
_DIGEST = 16  # bytes of the XXH3-128 checksum (its canonical, big-endian form)
SUFFIX = ".ref"
_MAX_HEADER = 1 << 20

#: Dtypes an entry can hold: every plain (non-quantized, byte-addressable) torch dtype
#: present in this torch build, by canonical name (``str(dtype)`` without ``torch.``).
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex32",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e5m2",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
        "float4_e2m1fn_x2",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}


def prepare(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Validate a put's tensors; ``TypeError``/``ValueError`` naming ``tensors[i]``."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (tuple, list)):
        raise TypeError(f"tensors: expected a tuple or list of tensors, got {type(tensors).__name__}")
    out = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{i}]: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"tensors[{i}] is on {t.device}; the reference cache holds CPU tensors")
        if t.layout != torch.strided or t.is_quantized:
            raise TypeError(
                f"tensors[{i}]: a {t.layout} tensor of {t.dtype} cannot be cached (strided, non-quantized tensors only)"
            )
        if dtype_name(t.dtype) not in DTYPES:
            raise TypeError(f"tensors[{i}]: dtype {t.dtype} cannot be cached (supported: {', '.join(DTYPES)})")
        out.append(t.detach())
    return out


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Corrupt(Exception):
    """An entry that fails a check (internal; turned into a miss)."""


def nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    return math.prod(shape) * dtype.itemsize


def _parse_header(raw: bytes, key: str) -> list[tuple[torch.dtype, tuple[int, ...]]]:
    try:
        header = json.loads(raw.decode())
        if header["key"] != key:
            raise Corrupt(f"header names key {header['key']!r}")
        out = []
        for name, shape in header["tensors"]:
            if name not in DTYPES:
                raise Corrupt(f"unknown dtype {name!r}")
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
                raise Corrupt(f"bad shape {shape!r}")
            out.append((DTYPES[name], tuple(shape)))
        return out
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise Corrupt(f"unreadable header: {exc}") from None


#: An open binary file, buffered or not.
BinaryFile = io.RawIOBase | io.BufferedIOBase


def _read_exact(f: BinaryFile, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise Corrupt("file shorter than its header says")
        got += n


def read_entry(f: BinaryFile, size: int, key: str) -> tuple[torch.Tensor, ...]:
    """Read and verify one entry from the open binary file ``f`` of ``size`` bytes."""
    prefix = f.read(_PREFIX.size)
    if len(prefix) != _PREFIX.size:
        raise Corrupt("shorter than the fixed prefix")
    magic, version, header_len = _PREFIX.unpack(prefix)
    if magic != _MAGIC:
        raise Corrupt("bad magic bytes")
    if version != FORMAT_VERSION:
        raise Corrupt(f"format version {version} in the folder of version {FORMAT_VERSION}")
    if header_len > _MAX_HEADER or _PREFIX.size + header_len + _DIGEST > size:
        raise Corrupt("bad header length")
    raw = f.read(header_len)
    if len(raw) != header_len:
        raise Corrupt("truncated header")
    layout = _parse_header(raw, key)
    if _PREFIX.size + header_len + sum(nbytes(d, s) for d, s in layout) + _DIGEST != size:
        raise Corrupt("file size does not match its header")  # checked before any allocation
    h = xxhash.xxh3_128(prefix)
    h.update(raw)
    tensors = []
    for dtype, shape in layout:
        t = torch.empty(shape, dtype=dtype)
        if t.numel():
            buf = t.reshape(-1).view(torch.uint8).numpy().data
            _read_exact(f, buf)
            h.update(buf)
        tensors.append(t)
    digest = f.read(_DIGEST + 1)
    if digest != h.digest():
        raise Corrupt("checksum mismatch")
    return tuple(tensors)


def entry_header(key: str, tensors: Sequence[torch.Tensor]) -> bytes:
    """The JSON header of an entry of ``tensors`` (validated by :func:`prepare`) under ``key``."""
    return json.dumps(
        {"key": key, "tensors": [[dtype_name(t.dtype), list(t.shape)] for t in tensors]}, separators=(",", ":")
    ).encode()


def entry_size(header: bytes, tensors: Sequence[torch.Tensor]) -> int:
    """Bytes of the entry file: prefix, header, the tensors' bytes, digest."""
    return _PREFIX.size + len(header) + sum(nbytes(t.dtype, t.shape) for t in tensors) + _DIGEST


def write_entry(f: BinaryFile, header: bytes, tensors: Sequence[torch.Tensor]) -> None:
    """Write one entry to the open binary file ``f``: the tensors' bytes straight from their memory, the
    XXH3-128 checksum of all that precedes it last."""
    prefix = _PREFIX.pack(_MAGIC, FORMAT_VERSION, len(header))
    h = xxhash.xxh3_128(prefix)
    h.update(header)
    f.write(prefix)
    f.write(header)
    for t in tensors:
        data = _contiguous_bytes(t)
        if data is not None:
            h.update(data)
            f.write(memoryview(data))
    f.write(h.digest())

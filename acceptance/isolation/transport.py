"""How tensors cross the boundary between the runner and a worker process: pickled, their bytes out of band.

A message is one pickle (protocol 5) with the sizes of its out-of-band buffers
in front, then each buffer on its own. A dense CPU tensor travels as (dtype,
shape, its row-major bytes): written to the pipe straight from the tensor's
memory and read into the buffer the received tensor then keeps, so a tensor is
copied once on its way (never shared memory the other side could write back
through). The receiver gets contiguous, writable tensors.

What comes back from a worker (:func:`recv`) is decoded by a restricted unpickler (:class:`_Restricted`): the
only globals a message may name are those of :data:`ALLOWED` (the protocol's answer records, the tensor
rebuild function of this module, torch's dtypes and devices); anything else (a tensor subclass, an object
whose ``__reduce__`` names a function to call) is refused before anything of it runs, and the reader gets
:class:`Refused`. Only the worker decodes the runner's requests with the full pickle
(:func:`recv_request`): they come from the runner, which never runs the code under test.
"""

from __future__ import annotations

import io
import math
import multiprocessing.connection
import pickle
import struct
from collections.abc import Callable
from types import NotImplementedType
from typing import TYPE_CHECKING, Any, cast

import torch

from acceptance.isolation.decode import Refused, Restricted, load

if TYPE_CHECKING:
    from typing_extensions import Buffer

#: What :class:`_Pickler` reduces a tensor to: :func:`_tensor_from` and its arguments.
_TensorReduce = tuple[
    Callable[[torch.dtype, tuple[int, ...], "bytes | bytearray"], torch.Tensor],
    tuple[torch.dtype, tuple[int, ...], "pickle.PickleBuffer | bytes"],
]


def _tensor_from(dtype: torch.dtype, shape: tuple[int, ...], raw: bytes | bytearray) -> torch.Tensor:
    """A fresh, writable, contiguous tensor from its row-major bytes (the other half of :class:`_Pickler`); a
    received ``bytearray`` becomes the tensor's memory as it is. Its arguments are checked first (they may come
    from the code under test): a dtype, a shape of non-negative ints, and exactly ``numel * itemsize`` bytes."""
    if not isinstance(dtype, torch.dtype) or not isinstance(raw, (bytes, bytearray)):
        raise Refused(f"a tensor of {type(dtype).__name__} from {type(raw).__name__}")
    if not isinstance(shape, tuple) or not all(type(n) is int and n >= 0 for n in shape):
        raise Refused(f"a tensor of shape {shape!r}")
    if math.prod(shape) * dtype.itemsize != len(raw):
        raise Refused(f"a {dtype} tensor of shape {shape} from {len(raw)} bytes")
    if not len(raw):
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(raw if isinstance(raw, bytearray) else bytearray(raw), dtype=dtype).reshape(shape)


#: The globals a message from a worker may name, as (module, name): the protocol's answer records, this
#: module's tensor rebuild function, ``torch.device``; and every ``torch.<dtype>`` (checked by type).
ALLOWED = frozenset(
    {
        ("acceptance.isolation.protocol", "Answered"),
        ("acceptance.isolation.protocol", "Broke"),
        ("acceptance.isolation.protocol", "Wrote"),
        ("acceptance.isolation.protocol", "InputsFailed"),
        ("acceptance.isolation.protocol", "Same"),
        ("acceptance.isolation.transport", "_tensor_from"),
        ("torch", "device"),
    }
)


class _Restricted(Restricted):
    """The unpickler of a worker's answers: the globals of :data:`ALLOWED` and torch's dtypes, nothing else."""

    def allowed(self, module: str, name: str) -> Any:  # the allowed class or function, or None
        if (module, name) in ALLOWED:
            return super(Restricted, self).find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        return None


class _Pickler(pickle.Pickler):
    """The standard pickler, but a dense CPU tensor travels as (dtype, shape, its row-major bytes): ~10x faster
    than torch's own reduction (which serialises the storage through ``torch.save``), still a copy each way,
    never shared memory. The bytes go out of band (pickle protocol 5): :func:`send` writes them to the pipe
    straight from the tensor's memory and :func:`recv` reads them into the buffer the new tensor then uses, so
    a tensor is copied once on its way, never held twice more by the pickle. The receiver gets contiguous
    tensors."""

    def reducer_override(self, obj: object) -> _TensorReduce | NotImplementedType:
        if (
            type(obj) is torch.Tensor
            and obj.layout == torch.strided
            and obj.device.type == "cpu"
            and not obj.is_quantized
            and not obj.requires_grad
            and not obj.is_conj()
            and not obj.is_neg()
        ):
            flat = obj.detach().contiguous().reshape(-1)
            # an ndarray exports the buffer protocol (its stubs say so from Python 3.12 on only)
            raw = pickle.PickleBuffer(cast("Buffer", flat.view(torch.uint8).numpy())) if flat.numel() else b""
            return _tensor_from, (obj.dtype, tuple(obj.shape), raw)
        return NotImplemented


_COUNT = struct.Struct("<Q")


def dumps(obj: object) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """(the pickle of ``obj`` with the sizes of its out-of-band buffers in front, the buffers)."""
    buffers: list[pickle.PickleBuffer] = []
    buf = io.BytesIO()
    _Pickler(buf, protocol=5, buffer_callback=buffers.append).dump(obj)
    sizes = [b.raw().nbytes for b in buffers]
    return _COUNT.pack(len(sizes)) + b"".join(_COUNT.pack(n) for n in sizes) + buf.getvalue(), buffers


def size(message: tuple[bytes, list[pickle.PickleBuffer]]) -> int:
    """Bytes :func:`send` writes for ``message`` (the pickle and its buffers, without the per-part headers)."""
    head, buffers = message
    return len(head) + sum(b.raw().nbytes for b in buffers)


def send(conn: multiprocessing.connection.Connection, message: tuple[bytes, list[pickle.PickleBuffer]]) -> None:
    """Send one message of :func:`dumps`: the pickle, then each buffer from its own memory."""
    head, buffers = message
    conn.send_bytes(head)
    for b in buffers:
        conn.send_bytes(b.raw())


def recv(conn: multiprocessing.connection.Connection) -> Any:  # a pickled payload: its reader checks its type
    """Receive one message of :func:`send` from a worker: each buffer read into a fresh ``bytearray``, then
    unpickled by the restricted unpickler (:class:`Refused` for anything outside :data:`ALLOWED`)."""
    payload, buffers = _read(conn)
    return load(_Restricted(io.BytesIO(payload), buffers=buffers))


def recv_request(conn: multiprocessing.connection.Connection) -> Any:  # a pickled payload: its reader checks it
    """Receive one message of :func:`send` from the runner (in a worker) with the full pickle: requests carry
    role references and recipes, and come from the runner, which runs no code under test."""
    payload, buffers = _read(conn)
    return pickle.loads(payload, buffers=buffers)


def _read(conn: multiprocessing.connection.Connection) -> tuple[bytes, list[bytearray]]:
    """The pickle and the out-of-band buffers of one message of :func:`send`."""
    head = conn.recv_bytes()
    (count,) = _COUNT.unpack_from(head)
    sizes = [_COUNT.unpack_from(head, 8 * (1 + k))[0] for k in range(count)]
    buffers = []
    for n in sizes:
        buf = bytearray(n)
        conn.recv_bytes_into(buf)
        buffers.append(buf)
    return head[8 * (1 + count) :], buffers

"""Decoding what a child process that ran the code under test sends back: a pickle restricted to an allow-list.

:class:`Restricted` refuses every global a message names but those its ``allowed`` hook accepts: a class or
function outside it (a tensor subclass, an object whose ``__reduce__`` names ``os.system``) raises
:class:`Refused` before anything of the message runs. :func:`plain` decodes builtin values only (str, numbers,
None, containers), as the import check's child answers. The tensor-carrying variant, with the protocol's
records and torch's rebuild function allowed, is :func:`acceptance.isolation.transport.recv`. This module does
not import torch: ``acceptance validate`` starts without it.
"""

from __future__ import annotations

import io
import pickle
from typing import Any


class Refused(pickle.UnpicklingError):
    """A message from a worker that holds something else than the protocol's records, plain tensors and
    builtin values (a tensor subclass, an object with a reducer of its own)."""


class Restricted(pickle.Unpickler):
    """An unpickler that resolves a global only where :meth:`allowed` returns it (never, here: builtin values and
    containers only, which pickle encodes without naming a global)."""

    def allowed(self, module: str, name: str) -> Any:  # the allowed class or function, or None
        return None

    def find_class(self, module: str, name: str) -> Any:  # the allowed class or function, by name
        found = self.allowed(module, name)
        if found is None:
            raise Refused(f"a message naming {module}.{name}, which is not a plain value, tensor or protocol record")
        return found


def load(unpickler: Restricted) -> object:
    """What ``unpickler`` decodes; :class:`Refused` for a refused global or a malformed message alike."""
    try:
        return unpickler.load()
    except Refused:
        raise
    except Exception as exc:  # a malformed message: whatever the unpickler raised, it is refused
        raise Refused(f"a message that does not decode ({type(exc).__name__}: {exc})") from None


def plain(data: bytes) -> object:
    """A pickle of builtin values only (str, numbers, None, containers); :class:`Refused` for anything naming a
    global."""
    return load(Restricted(io.BytesIO(data)))

"""The ``backward`` section of a spec: gradients checked as outputs of their own.

A spec with ``backward`` checks, besides the forward outputs, one gradient per ``wrt`` entry::

    backward:
      wrt: [x, weight]              # input names; with a module impl, also its parameters by name
      cotangent: {normal: [0, 1]}   # how the output gradients dy are drawn (default normal: [0, 1])
    impl_backward: kernels.py:ln_bwd  # optional hand-written backward: fn(dy, *inputs, **params)

Each trial draws the cotangents ``dy`` (one per floating forward output, of its shape) from the trial's seed
(:func:`cotangent_seed`: the spec seed, the case and the trial, as inputs are), rounds them once to the test
dtype and gives every role the same values (float64 copies to the oracle). Every role returns
``(*forward outputs, *grad)`` with ``grad[k] = sum_j dy_j . d out_j / d wrt_k`` (a vector-Jacobian product);
the gradient outputs are named ``grad[<name>]`` in every report and decided by the category's criteria like
any output. The wrapper that computes them in the process where a role runs is
:class:`acceptance.isolation.grad.BackwardRef`.

This module builds the section (:func:`build`) and checks it against the rest of the spec
(:func:`backward_problems`).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from acceptance.spec.model import Backward, Normal, OperatorSpec

if TYPE_CHECKING:
    from acceptance.spec.schema import SpecModel

#: Test dtypes autograd differentiates in (integer, block-quantized and float8 dtypes are not).
DIFFERENTIABLE: tuple[str, ...] = ("float16", "bfloat16", "float32", "float64")

#: The cotangent distribution when the spec gives none.
DEFAULT_COTANGENT = Normal(0.0, 1.0)


def build(model: SpecModel) -> Backward | None:
    """The :class:`~acceptance.spec.model.Backward` of a validated spec model (``None``: no ``backward``)."""
    if model.backward is None:
        return None
    dist = model.backward.cotangent.to_dist() if model.backward.cotangent is not None else DEFAULT_COTANGENT
    return Backward(tuple(model.backward.wrt), dist, model.impl_backward)


def grad_name(wrt: str) -> str:
    """The name of the gradient output for ``wrt``: ``grad[wrt]``."""
    return f"grad[{wrt}]"


def output_names(backward: Backward | None, outputs: int) -> list[str]:
    """Names of a case's ``outputs`` outputs: ``""`` (unnamed, reported by index) for each forward output, then
    ``grad[name]`` per ``wrt`` entry; all unnamed without ``backward``."""
    if backward is None or outputs < len(backward.wrt):
        return [""] * outputs
    return [""] * (outputs - len(backward.wrt)) + [grad_name(w) for w in backward.wrt]


def cotangent_seed(seed: int) -> int:
    """The seed the cotangents of a trial are drawn from: the first 8 bytes (little-endian) of
    ``sha256(f"{seed}|cotangent")`` for the trial's input seed ``seed``
    (:func:`acceptance.spec.inputs.case_seed`), as a signed 64-bit integer (it travels as an int64 tensor)."""
    word = int.from_bytes(hashlib.sha256(f"{seed}|cotangent".encode()).digest()[:8], "little")
    return word - 2**64 if word >= 2**63 else word


def _is_module(role: object) -> bool:
    return isinstance(role, dict) and "module" in role


def backward_problems(spec: OperatorSpec) -> list[tuple[str, str]]:
    """Problems of a spec's ``backward`` section as (field, message): a ``wrt`` entry that is neither an input
    nor (with a module impl) a parameter name, an entry listed twice, a non-differentiable input or test dtype,
    an mpmath oracle (element-wise values, no gradient), ``impl_backward`` without ``backward``."""
    bw = spec.backward
    if bw is None:
        return []
    found: list[tuple[str, str]] = []
    inputs = {inp.name: inp for inp in spec.inputs}
    for k, name in enumerate(bw.wrt):
        where = f"backward.wrt[{k}]"
        if name in bw.wrt[:k]:
            found.append((where, f"{name!r} is listed twice"))
        elif name in inputs:
            inp = inputs[name]
            if inp.quant is not None or inp.dtype is not None:
                kind = f"quantized ({inp.quant})" if inp.quant else f"of dtype {inp.dtype}"
                found.append((where, f"input {name!r} is {kind}: not differentiable"))
        elif not _is_module(spec.impl):
            names = ", ".join(inputs)
            found.append((where, f"{name!r} is not an input ({names}); parameter names need an nn.Module impl"))
    for dtype in spec.dtypes:
        if dtype not in DIFFERENTIABLE:
            found.append(("dtypes", f"{dtype} is not differentiable; backward needs {', '.join(DIFFERENTIABLE)}"))
    if isinstance(spec.oracle, dict) and "mpmath" in spec.oracle:
        found.append(("oracle", "an mpmath oracle gives values, not gradients: backward needs a torch oracle"))
    if any(em.accumulate is not None for em in spec.emulate.values()):
        found.append(("emulate", "an emulated contraction has no gradient: drop `accumulate` or `backward`"))
    return found


def impl_backward_problems(model: SpecModel) -> list[tuple[str, str]]:
    """``impl_backward`` given without a ``backward`` section."""
    if model.impl_backward is not None and model.backward is None:
        return [("impl_backward", "needs a `backward:` section naming the gradients it returns (wrt)")]
    return []

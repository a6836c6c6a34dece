"""Gradients as outputs: a role's callable wrapped so that it returns ``(*forward outputs, *gradients)``.

A spec with ``backward`` (:mod:`acceptance.spec.backward`) gives each role its inputs followed by the trial's
cotangent seed (an int64 tensor of one element, :func:`acceptance.spec.inputs.generate`). The wrapper, resolved
where the role runs (:class:`BackwardRef`, in the worker or in this process), then

1. runs the forward on the inputs, the ``wrt`` inputs (and module parameters) made leaves that require grad;
2. draws one cotangent ``dy_j`` per floating forward output ``out_j``, of its shape, from the seed
   (:func:`cotangents`: ``PCG64(SeedSequence(seed, spawn_key=(j,)))``, the spec's distribution, rounded once to
   the test dtype as inputs are), then cast to the output's dtype and device: every role gets the same values;
3. returns ``(*out, *grad)``, ``grad[k] = sum_j (dy_j . d out_j / d wrt_k)`` (``torch.autograd.grad``; an
   input the outputs do not depend on gets zeros), or, for a hand-written backward (``impl_backward``),
   ``grad = impl_backward(dy, *inputs, **params)`` after a forward under ``torch.no_grad`` (``dy`` a tuple when
   the forward has several outputs): the impl itself need not be differentiable.

The oracle's wrapper runs inside the float64 conversion (``Float64Ref(BackwardRef(baseline))``), so it
differentiates in float64.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from acceptance.formats import dtypes
from acceptance.formats.roleref import Resolver, RoleRef
from acceptance.isolation.adapters import Adapter
from acceptance.numerics.oracle import Float64Ref
from acceptance.spec.callables import CallableRef
from acceptance.spec.inputs import draw
from acceptance.spec.model import Case, Dist

Tensors = tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class BackwardRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to :func:`with_backward` of ``inner``'s callable.

    ``names``: the spec's input names, in order (the seed follows them); ``wrt``: the gradients returned, in
    order; ``cotangent``: their distribution, with the case's ``symbols`` for its bounds, rounded to ``dtype``
    (the test dtype); ``impl_backward``: a hand-written backward's reference (``None``: autograd)."""

    inner: RoleRef
    names: tuple[str, ...]
    wrt: tuple[str, ...]
    cotangent: Dist
    symbols: tuple[tuple[str, int], ...]
    dtype: str
    impl_backward: RoleRef | None = None

    def resolve(self, cached: Resolver) -> Callable:
        fn = self.inner.resolve(cached)
        hand = self.impl_backward.resolve(cached) if self.impl_backward is not None else None
        return with_backward(fn, self, hand)


#: The last draw of :func:`cotangents`, by what it depends on (distribution, symbols, dtype, seed, output shapes):
#: a trial's calls in one process (the impl's repeats, the baseline, the oracle) draw once.
_LAST: dict[tuple[object, ...], tuple[torch.Tensor | None, ...]] = {}


def cotangents(outs: Tensors, seed: int, ref: BackwardRef) -> tuple[torch.Tensor | None, ...]:
    """One cotangent per output of ``outs``: drawn from ``ref.cotangent`` with the stream ``spawn_key=(j,)`` of
    ``seed`` (taken modulo 2**64), rounded once to ``ref.dtype``, then a fresh copy in ``out_j``'s dtype on its
    device; ``None`` for a non-floating output."""
    shapes = tuple((tuple(o.shape), o.is_floating_point()) for o in outs)
    key = (ref.cotangent, ref.symbols, ref.dtype, seed, shapes)
    drawn = _LAST.get(key)
    if drawn is None:
        drawn = _draw(shapes, seed, ref)
        _LAST.clear()
        _LAST[key] = drawn
    return tuple(
        None if dy is None else dy.to(device=o.device, dtype=o.dtype, copy=True)
        for dy, o in zip(drawn, outs, strict=True)
    )


def _draw(
    shapes: tuple[tuple[tuple[int, ...], bool], ...], seed: int, ref: BackwardRef
) -> tuple[torch.Tensor | None, ...]:
    """The cotangents of :func:`cotangents` as CPU tensors in ``ref.dtype``."""
    made: list[torch.Tensor | None] = []
    symbols = dict(ref.symbols)
    for j, (shape, floating) in enumerate(shapes):
        if not floating:
            made.append(None)
            continue
        bits = np.random.PCG64(np.random.SeedSequence(seed % 2**64, spawn_key=(j,)))
        values = draw(ref.cotangent, math.prod(shape), bits, symbols)
        made.append(dtypes.to_tensor(np.asarray(values, dtype=np.float64), ref.dtype).reshape(shape))
    return tuple(made)


def _as_tuple(value: object, what: str) -> Tensors:
    """A callable's result as a tuple of tensors; ``TypeError`` naming ``what`` gave anything else."""
    outs = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    for k, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"{what} gave {type(out).__name__} at position {k}, expected a Tensor")
    return outs


def _parameters(fn: Callable, names: tuple[str, ...]) -> dict[str, torch.Tensor]:
    """The parameters ``names`` of the module behind ``fn`` (an :class:`Adapter` of a module declaration, set up
    before, or an ``nn.Module``); ``ValueError`` naming what it has for a name it lacks."""
    if not names:
        return {}
    module = fn.module if isinstance(fn, Adapter) else fn if isinstance(fn, torch.nn.Module) else None
    own = dict(module.named_parameters()) if isinstance(module, torch.nn.Module) else {}
    missing = [n for n in names if n not in own]
    if missing:
        have = ", ".join(own) or "none: the impl is not an nn.Module"
        raise ValueError(f"backward.wrt: {missing[0]!r} is neither an input nor a parameter (parameters: {have})")
    return {n: own[n] for n in names}


def with_backward(fn: Callable, ref: BackwardRef, hand: Callable | None = None) -> Callable:
    """``fn`` returning its forward outputs followed by the gradients ``ref.wrt`` (see the module docstring)."""
    index = {name: k for k, name in enumerate(ref.names)}
    params_wrt = tuple(w for w in ref.wrt if w not in index)
    if isinstance(fn, Adapter):
        fn.trainable = params_wrt  # built with these parameters requiring grad (before any compile)

    def backward(*args: torch.Tensor, **params: object) -> Tensors:
        if len(args) != len(ref.names) + 1:
            raise ValueError(f"backward: expected {len(ref.names)} inputs and the cotangent seed, got {len(args)}")
        inputs, seed = args[:-1], int(args[-1].reshape(-1)[0])
        if hand is not None:
            with torch.no_grad():
                outs = _as_tuple(fn(*inputs, **params), "impl")
            dys = cotangents(outs, seed, ref)
            grads = _as_tuple(hand(dys[0] if len(dys) == 1 else dys, *inputs, **params), "impl_backward")
            if len(grads) != len(ref.wrt):
                raise ValueError(f"impl_backward returned {len(grads)} gradients, backward.wrt names {len(ref.wrt)}")
            return (*outs, *grads)
        leaves = tuple(a.detach().requires_grad_(True) if ref.names[k] in ref.wrt else a for k, a in enumerate(inputs))
        with torch.enable_grad():
            if isinstance(fn, Adapter) and fn.module is None and params_wrt:
                fn.setup(*leaves, **params)  # built, compiled and warmed up on leaves that require grad
            outs = _as_tuple(fn(*leaves, **params), "the forward")
            own = _parameters(fn, params_wrt)
            targets = [leaves[index[w]] if w in index else own[w] for w in ref.wrt]
            return (*(o.detach() for o in outs), *_vjp(outs, cotangents(outs, seed, ref), targets))

    backward.__name__ = f"backward({getattr(fn, '__name__', type(fn).__name__)})"
    return backward


def _vjp(outs: Tensors, dys: tuple[torch.Tensor | None, ...], targets: list[torch.Tensor]) -> Tensors:
    """``sum_j dy_j . d out_j / d target`` for each target (zeros where no output depends on it)."""
    pairs = [(o, dy) for o, dy in zip(outs, dys, strict=True) if dy is not None and o.requires_grad]
    if not pairs:
        raise ValueError(
            "no output of the forward requires grad: autograd cannot differentiate it "
            "(a hand-written backward is given with impl_backward)"
        )
    grads = torch.autograd.grad([o for o, _ in pairs], targets, [dy for _, dy in pairs], allow_unused=True)
    return tuple(torch.zeros_like(t) if g is None else g.detach() for g, t in zip(grads, targets, strict=True))


def _backward_ref(inner: RoleRef, case: Case, hand: RoleRef | None = None) -> BackwardRef:
    spec = case.spec
    assert spec.backward is not None  # only a backward spec's roles are wrapped
    names = tuple(inp.name for inp in spec.inputs)
    symbols = tuple(sorted(case.symbols.items()))
    return BackwardRef(inner, names, spec.backward.wrt, spec.backward.cotangent, symbols, case.dtype, hand)


def wrap_roles(impl: RoleRef, baseline: RoleRef, oracle: RoleRef, case: Case) -> tuple[RoleRef, RoleRef, RoleRef]:
    """(impl, baseline, oracle) of a ``backward`` spec's case, each returning its gradients too
    (:class:`BackwardRef`); unchanged without ``backward``. The default float64 oracle differentiates in float64
    (``Float64Ref(BackwardRef(baseline))``); the impl uses the spec's ``impl_backward`` where given."""
    bw = case.spec.backward
    if bw is None:
        return impl, baseline, oracle
    hand = CallableRef(bw.impl_backward, str(case.spec.path)) if bw.impl_backward else None
    if isinstance(oracle, Float64Ref):
        oracle = Float64Ref(_backward_ref(oracle.inner, case))
    else:
        oracle = _backward_ref(oracle, case)
    return _backward_ref(impl, case, hand), _backward_ref(baseline, case), oracle

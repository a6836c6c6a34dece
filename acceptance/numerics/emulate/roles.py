"""Device-faithful baselines: a spec's ``emulate:`` section applied around the baseline and the oracle.

A same-dtype CPU baseline is not what a device computes. :class:`Emulation`
names what the runner does to the baseline (and, for inputs only, to the
oracle) so that any spec can ask for it without writing a new baseline:

* ``ftz_inputs``: floating inputs with ``|x| < threshold`` become a zero of
  the same sign (:func:`acceptance.numerics.emulate.flush_to_zero`) before the
  baseline **and the oracle** see them. A device that flushes its inputs
  computes on those values; the oracle is then "the exact result of the
  device's inputs".
* ``ftz_outputs``: the baseline's floating outputs flushed the same way
  (baseline only: the oracle stays exact).
* ``tf32``: float32 inputs rounded to TF32 (:func:`acceptance.numerics.emulate.round_tf32`,
  the named rounding) before the baseline. Baseline only: TF32 is a loss of
  precision the impl is charged for against the oracle.
* ``accumulate``: the baseline callable is *replaced* by the emulated
  contraction named by ``contraction`` (``acceptance.numerics.emulate.matmul``,
  ``bmm``, ``linear`` or ``conv2d``: exact group sums of ``chunk`` products,
  rounded to the accumulator ``dtype`` with ``rounding``, ``split_k`` parts,
  ``fused``), called with the same tensors and keyword parameters. Baseline
  only: the oracle is the exact contraction of the (flushed) inputs.

Order on the baseline: flush inputs, TF32, compute, flush outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from acceptance.formats.roleref import Resolver, RoleRef
from acceptance.numerics import emulate

#: Contractions the runner can emulate, by the name a spec gives in ``emulate.contraction``.
CONTRACTIONS: dict[str, Callable] = {
    "matmul": emulate.matmul,
    "bmm": emulate.bmm,
    "linear": emulate.linear,
    "conv2d": emulate.conv2d,
}


#: A rounding mode in the words of :meth:`Accumulate.describe`.
_MODE_WORDS = {"nearest": "rounded to nearest", "truncate": "truncated"}


@dataclass(frozen=True)
class Accumulate:
    """How an emulated contraction accumulates (the keyword arguments of :func:`acceptance.numerics.emulate.matmul`)."""

    dtype: str
    chunk: int = 1
    rounding: str = "nearest"
    """The rounding of each add into the accumulator, and of each group's exact sum unless ``group_rounding``."""
    split_k: int = 1
    fused: bool = False
    group_rounding: str | None = None
    """The rounding of each group's exact sum where it differs from ``rounding`` (None: ``rounding``)."""

    @property
    def modes(self) -> tuple[str, str]:
        """(group, accumulate) rounding modes."""
        return (self.group_rounding or self.rounding, self.rounding)

    def describe(self) -> str:
        group, add = (_MODE_WORDS[r] for r in self.modes)
        parts = [f"{self.dtype} accumulator"]
        if self.chunk > 1 and self.fused:
            parts.append(f"groups of {self.chunk} exact products (fused with the accumulator, {add})")
        elif self.chunk > 1:
            added = "" if group == add else f", added {add}"
            parts.append(f"groups of {self.chunk} exact products ({group}){added}")
        elif group == add or self.fused:
            step = "truncating" if self.rounding == "truncate" else "round-to-nearest"
            parts.append(f"{'FMA ' if self.fused else ''}{step} steps")
        else:
            parts.append(f"products {group}, added {add}")
        if self.split_k > 1:
            parts.append(f"split-K {self.split_k}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Emulation:
    """The emulation of one (operator, dtype), thresholds resolved: ``None`` fields are off.

    ``ftz_inputs`` / ``ftz_outputs``: flush threshold (a magnitude); ``ftz_keep_sign``: the zero keeps
    the value's sign; ``tf32``: TF32 rounding mode of float32 inputs; ``accumulate`` with ``contraction``:
    the baseline is the emulated contraction.
    """

    contraction: str | None = None
    ftz_inputs: float | None = None
    ftz_outputs: float | None = None
    ftz_keep_sign: bool = True
    tf32: str | None = None
    accumulate: Accumulate | None = None

    def describe(self) -> str:
        """The emulation in words, e.g. ``"flush inputs |x| < 6.1035e-05 to ±0; matmul with float32
        accumulator, groups of 4 exact products (truncated)"``; ``"none"`` when nothing is emulated."""
        parts = []
        zero = "±0" if self.ftz_keep_sign else "+0"
        if self.ftz_inputs is not None:
            parts.append(f"flush inputs |x| < {self.ftz_inputs:.5g} to {zero}")
        if self.tf32 is not None:
            parts.append(f"float32 inputs rounded to TF32 ({self.tf32})")
        if self.accumulate is not None:
            parts.append(f"emulated {self.contraction}: {self.accumulate.describe()}")
        if self.ftz_outputs is not None:
            parts.append(f"flush outputs |x| < {self.ftz_outputs:.5g} to {zero}")
        return "; ".join(parts) or "none"

    @property
    def touches_oracle(self) -> bool:
        return self.ftz_inputs is not None


def _flush(tensors: tuple, threshold: float | None, keep_sign: bool) -> tuple:
    if threshold is None:
        return tensors
    return tuple(
        emulate.flush_to_zero(t, threshold, keep_sign=keep_sign)
        if isinstance(t, torch.Tensor) and t.is_floating_point()
        else t
        for t in tensors
    )


def _tf32(tensors: tuple, rounding: str | None) -> tuple:
    if rounding is None:
        return tensors
    return tuple(
        emulate.round_tf32(t, rounding) if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t
        for t in tensors
    )


def _contraction(name: str | None, acc: Accumulate) -> Callable[..., object]:
    """The emulated contraction ``name`` accumulating as ``acc`` says, called with the baseline's tensors and
    keyword parameters."""
    assert name is not None  # the spec sets the contraction with the accumulation (a spec error otherwise)
    contraction = CONTRACTIONS[name]

    def contracted(*args: object, **params: object) -> object:
        return contraction(
            *args,
            **params,
            acc_dtype=acc.dtype,
            chunk=acc.chunk,
            rounding={"group": acc.modes[0], "accumulate": acc.modes[1]},
            split_k=acc.split_k,
            fused=acc.fused,
        )

    return contracted


def emulated_baseline(fn: Callable, em: Emulation) -> Callable:
    """``fn`` with ``em`` around it: flushed/TF32 inputs, the emulated contraction in place of ``fn`` when
    ``em.accumulate`` is set, flushed outputs."""
    compute = fn if em.accumulate is None else _contraction(em.contraction, em.accumulate)

    def baseline(*args: object, **params: object) -> object:
        args = _tf32(_flush(args, em.ftz_inputs, em.ftz_keep_sign), em.tf32)
        out = compute(*args, **params)
        if em.ftz_outputs is None:
            return out
        flushed = _flush(tuple(out) if isinstance(out, (tuple, list)) else (out,), em.ftz_outputs, em.ftz_keep_sign)
        return flushed if isinstance(out, (tuple, list)) else flushed[0]

    baseline.__name__ = f"emulated({getattr(fn, '__name__', 'baseline')})"
    return baseline


def emulated_oracle(fn: Callable, em: Emulation) -> Callable:
    """``fn`` on inputs flushed as ``em`` flushes them (the only part of an emulation the oracle shares)."""

    def oracle(*args: object, **params: object) -> object:
        return fn(*_flush(args, em.ftz_inputs, em.ftz_keep_sign), **params)

    oracle.__name__ = f"flushed({getattr(fn, '__name__', 'oracle')})"
    return oracle


def wrap(role: str, fn: Callable, em: Emulation) -> Callable:
    """The callable of ``role`` ("baseline" or "oracle") under ``em``."""
    return emulated_baseline(fn, em) if role == "baseline" else emulated_oracle(fn, em)


@dataclass(frozen=True)
class EmulatedRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to ``inner``'s callable under ``emulation`` as
    :func:`wrap` applies it to ``role`` ("baseline" or "oracle")."""

    inner: RoleRef
    emulation: Emulation
    role: str

    def resolve(self, cached: Resolver) -> Callable:
        return wrap(self.role, self.inner.resolve(cached), self.emulation)


def wrap_roles(impl: RoleRef, baseline: RoleRef, oracle: RoleRef, em: Emulation | None) -> tuple[RoleRef, ...]:
    """(impl, baseline, oracle) references with the emulation ``em`` applied (:class:`EmulatedRef`): the baseline
    always, the oracle where ``em`` touches it (:attr:`Emulation.touches_oracle`)."""
    if em is None:
        return impl, baseline, oracle
    emulated_oracle = EmulatedRef(oracle, em, "oracle") if em.touches_oracle else oracle
    return impl, EmulatedRef(baseline, em, "baseline"), emulated_oracle

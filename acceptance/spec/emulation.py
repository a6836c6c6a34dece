"""The ``emulate:`` section of a spec: its schema, its resolution per dtype, and the checks beyond the schema.

.. code-block:: yaml

    emulate:
      contraction: matmul          # matmul | bmm | linear | conv2d: needed by `accumulate`
      ftz: true                    # or a threshold, or {threshold, inputs, outputs, keep_sign}
      tf32: true                   # or nearest_away | nearest_even | truncate (float32 cases only)
      accumulate: {dtype: float32, chunk: 4, rounding: truncate, split_k: 1, fused: false}
      # or the group sum and the add into the accumulator apart:
      #   rounding: {group: truncate, accumulate: nearest}
      dtypes:                      # per-dtype overrides, key by key; `false` switches a key off
        float32: {ftz: false, tf32: truncate}

``ftz: true`` flushes inputs below the test dtype's smallest normal (float16
``2**-14``, bfloat16 and float32 ``2**-126``); a number is the threshold as
written. The runner knows a spec's operator is a contraction only from
``contraction``: ``accumulate`` without it is a spec error, and so are
spec or case params the emulated contraction does not take.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from acceptance.spec.messages import fail, one_of

if TYPE_CHECKING:  # the emulation (torch) loads only for a spec with an emulate: section
    from acceptance.numerics.emulate.roles import Emulation


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    noun: ClassVar[str] = "field"


class FtzModel(_Strict):
    """``ftz`` as a mapping: the threshold (default: the dtype's smallest normal) and where it applies."""

    threshold: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    inputs: bool = True
    outputs: bool = False
    keep_sign: bool = True


Mode = Literal["nearest", "truncate"]


class RoundingModel(_Strict):
    """``rounding`` as a mapping: the rounding of each group's exact sum and of each add into the accumulator."""

    group: Mode = "nearest"
    accumulate: Mode = "nearest"


class AccumulateModel(_Strict):
    """``accumulate``: the emulated contraction's accumulator (see :func:`acceptance.numerics.emulate.matmul`).
    ``rounding``: one mode for the group sums and the accumulator adds alike, or :class:`RoundingModel`."""

    dtype: Literal["float16", "bfloat16", "float32"]
    chunk: Annotated[int, Field(ge=1)] = 1
    rounding: Mode | RoundingModel = "nearest"
    split_k: Annotated[int, Field(ge=1)] = 1
    fused: bool = False


Ftz = bool | Annotated[float, Field(ge=0, allow_inf_nan=False)] | FtzModel
Tf32 = bool | Literal["nearest_away", "nearest_even", "truncate"]


class EmulateOverride(_Strict):
    """The keys a per-dtype override may set (``false`` switches one off)."""

    ftz: Ftz | None = None
    tf32: Tf32 | None = None
    accumulate: Literal[False] | AccumulateModel | None = None


class EmulateModel(EmulateOverride):
    """The ``emulate:`` section."""

    contraction: str | None = None
    dtypes: dict[str, EmulateOverride] = {}

    @model_validator(mode="after")
    def _contraction_known_and_given(self) -> EmulateModel:
        from acceptance.numerics.emulate.roles import CONTRACTIONS

        if self.contraction is not None and self.contraction not in CONTRACTIONS:
            raise fail(f"contraction: {one_of(self.contraction, tuple(CONTRACTIONS))}")
        wants = [dt for dt, o in self.dtypes.items() if isinstance(o.accumulate, AccumulateModel)]
        if (isinstance(self.accumulate, AccumulateModel) or wants) and self.contraction is None:
            raise fail(
                "accumulate needs `contraction: matmul | bmm | linear | conv2d` in emulate: the runner replaces "
                "the baseline by that emulated contraction and must be told the operator is one"
            )
        return self


def _threshold(value: float | None, dtype: str) -> float:
    import torch

    return float(torch.finfo(getattr(torch, dtype)).smallest_normal) if value is None else float(value)


def resolve(model: EmulateModel | None, dtype: str) -> Emulation | None:
    """The :class:`Emulation` of test dtype ``dtype``: the section's keys with ``dtypes[dtype]``'s over them;
    ``None`` when nothing is emulated. ``tf32`` applies to float32 cases only."""
    if model is None:
        return None
    from acceptance.numerics.emulate.roles import Accumulate, Emulation

    keys = {k: getattr(model, k) for k in ("ftz", "tf32", "accumulate")}
    override = model.dtypes.get(dtype)
    if override is not None:
        keys.update({k: getattr(override, k) for k in keys if getattr(override, k) is not None})
    ftz, tf32, acc = keys["ftz"], keys["tf32"], keys["accumulate"]
    ftz_in = ftz_out = None
    keep_sign = True
    if isinstance(ftz, FtzModel):
        t = _threshold(ftz.threshold, dtype)
        ftz_in, ftz_out, keep_sign = (t if ftz.inputs else None), (t if ftz.outputs else None), ftz.keep_sign
    elif ftz is True:
        ftz_in = _threshold(None, dtype)
    elif ftz is not None and ftz is not False:
        ftz_in = float(ftz)
    mode = None
    if dtype == "float32" and tf32 not in (None, False):
        mode = "nearest_away" if tf32 is True else tf32
    accumulate = None
    if isinstance(acc, AccumulateModel):
        r = acc.rounding
        add, group = (r, None) if isinstance(r, str) else (r.accumulate, r.group)
        accumulate = Accumulate(acc.dtype, acc.chunk, add, acc.split_k, acc.fused, group)
    em = Emulation(
        contraction=model.contraction if accumulate else None,
        ftz_inputs=ftz_in,
        ftz_outputs=ftz_out,
        ftz_keep_sign=keep_sign,
        tf32=mode,
        accumulate=accumulate,
    )
    return None if em == Emulation() else em


def emulation_problems(
    model: EmulateModel | None, dtypes: list[str], params: dict, case_params: list[dict]
) -> list[tuple[str, str]]:
    """What the schema cannot see: override keys that are not dtypes of the spec, and params the emulated
    contraction does not take (it is called as ``fn(*tensors, **params)`` like the baseline)."""
    if model is None:
        return []
    from acceptance.numerics.emulate.roles import CONTRACTIONS

    out = [
        (f"emulate.dtypes.{dt}", f"{dt!r} is not one of the spec's dtypes ({', '.join(dtypes)})")
        for dt in model.dtypes
        if dt not in dtypes
    ]
    if model.contraction is None or not any((r := resolve(model, dt)) and r.accumulate for dt in dtypes):
        return out
    fn = CONTRACTIONS[model.contraction]
    taken = [
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    scheme = set(inspect.signature(CONTRACTIONS["matmul"]).parameters) - {"a", "b"}
    for where, given in [("params", params)] + [(f"cases[{k}].params", p) for k, p in enumerate(case_params)]:
        for name in given:
            if name not in taken or name in scheme:
                out.append(
                    (
                        f"{where}.{name}",
                        f"the emulated {model.contraction} does not take {name!r} "
                        f"(it takes {', '.join(n for n in taken if n not in scheme) or 'only tensors'})",
                    )
                )
    return out

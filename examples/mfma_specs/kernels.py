"""An "MFMA-like" float16 GEMM, emulated on the CPU: the device the study's baselines are built to match.

``mfma_matmul(a, b)``: float16 inputs with ``|x| < 2**-14`` flushed to a zero of
the same sign (MI200's MFMA_F16 flushes subnormal inputs), then along K one
DOT4 step after another, ``D = RZ_fp32(D + a[k]b[k] + ... + a[k+3]b[k+3])``:
the accumulator and four exact products summed exactly, one truncation to
float32 (the DOT4_F32_F16 unit with its accumulator taken in); the float32
result is rounded to float16 (nearest-even). Computed exactly by
:func:`acceptance.numerics.emulate.matmul`.

``plain_matmul(a, b)``: the plain CPU baseline, float16 ``torch.matmul``.
"""

from __future__ import annotations

import torch

from acceptance.numerics import emulate

#: float16's smallest normal, the flush threshold of MFMA_F16 inputs.
FP16_TINY = 2.0**-14


def mfma_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The device: flushed inputs, fused DOT4 steps truncated to float32, float16 out."""
    return emulate.matmul(
        emulate.flush_to_zero(a, FP16_TINY),
        emulate.flush_to_zero(b, FP16_TINY),
        acc_dtype="float32",
        chunk=4,
        rounding="truncate",
        fused=True,
        out_dtype=a.dtype,
    )


def plain_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The plain CPU reference: ``torch.matmul`` in the inputs' dtype (float64 for the oracle)."""
    return torch.matmul(a, b)

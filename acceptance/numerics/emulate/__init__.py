"""Device arithmetic emulated on the CPU: flush-to-zero, TF32 operands, and
contractions whose accumulation rounds the way an accelerator's does.

A CPU baseline in the same dtype is not what a GPU computes. rocMLIR's study
of float16 convolutions on MI100/MI200 traced nearly every element with
relative error >= 1e-3 to three device behaviours: subnormal inputs flushed to
zero by the MFMA units, the order of the partitioned GEMM, and the rounding of
partial sums (the DOT4_F32_F16 units sum four products, then round to float32).
Its CPU reference (``rocMLIR mlir/lib/ExecutionEngine/conv-validation-wrappers.cpp``)
carries the "acc 4" emulation as a switch in the convolution loop. The pieces
here let a baseline do the same:

* :func:`flush_to_zero`: ``|x| < threshold`` becomes a zero with the sign of
  ``x`` (the ``.ftz`` of PTX and LLVM's ``denormal-fp-math=preserve-sign``;
  ``keep_sign=False`` gives the ``+0`` some AMD dot instructions produce).
* :func:`round_tf32`: float32 values rounded to TF32 (8-bit exponent, 10
  explicit mantissa bits).
* :func:`matmul`, :func:`bmm`, :func:`linear`, :func:`conv2d`: contractions in
  a chosen accumulator format (float16, bfloat16, float32). Along K, the
  products are summed **exactly** in groups of ``chunk`` consecutive terms, the
  group sum is rounded once to the accumulator format, and added to the
  running accumulator with one more rounding (``fused=True``: the accumulator
  joins the group's exact sum, one rounding per group, as an FMA for
  ``chunk=1`` and an MFMA/DOT4 step ``D = C + sum of 4 products`` for
  ``chunk=4``). ``rounding`` is round-to-nearest-even or toward zero.
  ``split_k`` partitions K into contiguous parts accumulated separately.
* :func:`round_float64` and :func:`round_sum`: one correct rounding of a
  float64 value, or of the exact sum of several float64 values, to a format.

Exactness. Inputs are float16, bfloat16 or float32, so each product is exact
in float64 (at most 48 significant bits, exponents far inside float64's
range). A sum of float64 values may need more than 53 bits, so group sums are
never formed by plain float64 addition. (1) Two terms: TwoSum gives the exact
sum as ``hi + lo``; it is rounded to 53 bits *toward odd* (``hi`` where
``lo == 0`` or ``hi`` is odd, else the neighbour of ``hi`` toward ``lo``), and
rounding that once more to a format of ``p <= 51`` bits gives the correct
rounding of the exact sum, for nearest-even and toward zero alike (Boldo &
Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
using rounding to odd", IEEE TC 2008). (2) More terms: Rump, Ogita and Oishi's
ExtractVector ("Accurate floating-point summation part I", 2008) splits them,
in a few vectorised passes whatever their number, into float64 levels whose
sum is the exact sum (one level, i.e. an exact float64 sum, for float16
products spanning a few decades). One level is rounded directly, two go
through (1); more are turned by Shewchuk's Grow-Expansion (TwoSum chains,
"Adaptive precision floating-point arithmetic", 1997) into a nonoverlapping
expansion, whose sign is that of its largest component, and a candidate
result from the float64 sum is checked against the neighbouring rounding
boundaries (midpoints for nearest-even, grid points for truncation) by exact
sign tests on the expansion, and moved until none is crossed. No step assumes
a rounding error away.

Formats. Rounding is to the target's grid with gradual underflow
(subnormals kept; flush them with :func:`flush_to_zero` where the device does).
Above the largest finite value, round-to-nearest-even gives ``±inf`` (at and
beyond ``max + ulp/2``, as IEEE 754) and truncation gives ``±max``. An
infinite or NaN product makes that group's sum the float64 sum of its
products (``inf``, or NaN for ``inf - inf`` and ``0 * inf``), and an infinite
accumulator stays infinite (or becomes NaN) by float64 addition.

Cost. The work is O(B·M·N·K) element operations: about ten per product and
extraction pass, a pass covering ``52 - log2(chunk + 2)`` bits of a group's
range (one pass for data within a few decades, two or three for float32
inputs spread over many). The running accumulation is K/chunk
sequential steps over B·M·N elements, about 25 tensor operations each (4 for
float32 with round-to-nearest, which uses the CPU's float32 addition).
Work is tiled so that no tensor of products exceeds :data:`TILE_ELEMENTS`
elements: memory is the float64 copies of the inputs and the B·M·N
accumulator plus O(chunk · TILE_ELEMENTS) scratch. ``benchmarks/emulate.py``
measures it.
"""

from __future__ import annotations

from acceptance.numerics.emulate import contract  # noqa: F401
from acceptance.numerics.emulate.contract import TILE_ELEMENTS, bmm, conv2d, linear, matmul
from acceptance.numerics.emulate.formats import FORMATS, Format, flush_to_zero, round_tf32

# the private ones are re-exported for the tests
from acceptance.numerics.emulate.rounding import _round_exact, _Rounder, round_float64, round_sum  # noqa: F401

__all__ = [
    "Format",
    "FORMATS",
    "TILE_ELEMENTS",
    "flush_to_zero",
    "round_tf32",
    "round_float64",
    "round_sum",
    "matmul",
    "bmm",
    "linear",
    "conv2d",
]

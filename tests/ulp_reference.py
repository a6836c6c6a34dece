"""The ULP unit by the textbook formula, for tests: one ulp of a format at a float64 value rounded to it.

Independent of the package's bit-level engines: the value is rounded to the format with ``rint`` on its
spacing grid, then the exponent of the rounded value (``frexp``) gives the unit; the cap is the number of
finite steps from -max to +max, counted from the format's bit patterns.
"""

from __future__ import annotations

import numpy as np

#: (precision p, emin, emax, largest finite) of the float formats the tests measure in.
FORMATS = {
    "float64": (53, -1022, 1023, float(np.finfo(np.float64).max)),
    "float32": (24, -126, 127, float(np.finfo(np.float32).max)),
    "bfloat16": (8, -126, 127, (2 - 2**-7) * 2.0**127),
    "float16": (11, -14, 15, 65504.0),
    "float8_e4m3fn": (4, -6, 8, 448.0),
    "float8_e5m2": (3, -14, 15, 57344.0),
}

#: Positive finite bit patterns of each format (the steps from 0 to max), from the formats' encodings.
_STEPS = {
    "float64": 0x7FEFFFFFFFFFFFFF,
    "float32": 0x7F7FFFFF,
    "bfloat16": 0x7F7F,
    "float16": 0x7BFF,
    "float8_e4m3fn": 0x7E,
    "float8_e5m2": 0x7B,
}


def cap(dtype: str) -> float:
    """The largest ULP error: the steps from -max to +max."""
    return 2.0 * _STEPS[dtype]


def unit(y: np.ndarray, dtype: str) -> np.ndarray:
    """One ulp of ``dtype`` at each finite float64 ``y`` rounded to ``dtype`` (the smallest subnormal at 0)."""
    p, emin, emax, _ = FORMATS[dtype]
    a = np.abs(np.asarray(y, dtype=np.float64))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        e = np.where(a > 0, np.frexp(a)[1] - 1, emin)
        q = np.ldexp(1.0, np.maximum(e, emin) - (p - 1))
        r = np.rint(a / q) * q  # rounded to the format (ties to even), no overflow clamp
        er = np.where(r > 0, np.frexp(r)[1] - 1, emin)
    return np.ldexp(1.0, np.clip(er, emin, emax) - (p - 1))


def ulp_error(x: np.ndarray, y: np.ndarray, dtype: str) -> np.ndarray:
    """min(|x - y| / unit(y), cap): the package's ULP error, elementwise, for finite x and y."""
    with np.errstate(over="ignore"):
        d = np.abs(np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64))
    return np.minimum(d / unit(y, dtype), cap(dtype))

"""Operator accuracy acceptance and CI gating.

``acceptance.dual_delta`` and ``acceptance.DualDeltaResult`` are the library
entry points of dual-delta testing, ``acceptance.tune`` and ``acceptance.compare``
those of threshold tuning and accuracy regression,
``acceptance.assert_accurate`` (and its ``AccuracyError``) the assertion for hand-written tests; they load on first use so
that the command line starts without importing torch.
"""

from acceptance.version import __version__

__all__ = ["dual_delta", "DualDeltaResult", "tune", "compare", "assert_accurate", "AccuracyError", "__version__"]


def __getattr__(name: str):
    if name in ("dual_delta", "DualDeltaResult"):
        from acceptance.session import dualdelta

        return getattr(dualdelta, name)
    if name == "tune":
        from acceptance.session.tune import tune

        return tune
    if name == "compare":
        from acceptance.session.tune import compare

        return compare
    if name in ("assert_accurate", "AccuracyError"):
        from acceptance.decide import assertions

        return getattr(assertions, name)
    raise AttributeError(f"module 'acceptance' has no attribute {name!r}")

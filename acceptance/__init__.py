"""Operator accuracy acceptance and CI gating.

``acceptance.dual_delta`` and ``acceptance.DualDeltaResult`` are the library
entry points of dual-delta testing, ``acceptance.tune`` and ``acceptance.compare``
those of threshold tuning and accuracy regression; they load on first use so
that the command line starts without importing torch.
"""

__version__ = "0.1.0"

__all__ = ["dual_delta", "DualDeltaResult", "tune", "compare", "__version__"]


def __getattr__(name: str):
    if name in ("dual_delta", "DualDeltaResult"):
        from acceptance import dualdelta

        return getattr(dualdelta, name)
    if name == "tune":
        from acceptance.tuning import tune

        return tune
    if name == "compare":
        from acceptance.tuning import compare

        return compare
    raise AttributeError(f"module 'acceptance' has no attribute {name!r}")

"""Operator accuracy acceptance and CI gating.

The library calls, each loaded on first use so that the command line starts without importing torch:

- ``acceptance.run(specs, ...)``: run operator specs, the one assembled run that ``acceptance run`` calls
  (:func:`acceptance.session.run.run`); ``acceptance.Session`` for finer control;
- ``acceptance.dual_delta`` and ``acceptance.DualDeltaResult``: dual-delta testing without a spec;
- ``acceptance.tune`` and ``acceptance.compare``: threshold tuning and accuracy regression;
- ``acceptance.assert_accurate`` (and its ``AccuracyError``): the assertion for hand-written tests.
"""

from __future__ import annotations

import importlib

from acceptance.version import __version__

#: name -> "module:attribute" of the library calls.
_LAZY = {
    "run": "acceptance.session.run:run",
    "Session": "acceptance.session.run:Session",
    "RunOptions": "acceptance.session.run:RunOptions",
    "dual_delta": "acceptance.session.dualdelta:dual_delta",
    "DualDeltaResult": "acceptance.session.dualdelta:DualDeltaResult",
    "tune": "acceptance.session.tune:tune",
    "compare": "acceptance.session.tune:compare",
    "assert_accurate": "acceptance.decide.assertions:assert_accurate",
    "AccuracyError": "acceptance.decide.assertions:AccuracyError",
}

__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> object:
    if name not in _LAZY:
        raise AttributeError(f"module 'acceptance' has no attribute {name!r}")
    module, _, attr = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attr)

"""Operator specs: load and validate the YAML files, resolve callables, expand cases, and the rules in force.

A spec is one YAML file describing one operator (the reference is
``docs/specs.md``). :func:`load_specs` validates every file with pydantic
models, then checks what a schema cannot see (case symbols, per-case values,
callables, duplicate operator names), and reports every problem of every file
as one :class:`SpecProblem` line naming the file and the field path::

    operator_specs/matmul.yaml: inputs[1].shape[0]: unknown symbol 'Q' (case symbols: K, M, N)

:func:`expand` turns validated specs into :class:`Case` objects, one per
(operator, dtype, case), each with a stable id such as
``matmul[float16-M=128-N=128-K=128]``; :func:`rules_for` gives the rules a
case is judged by.

One module per concern: :mod:`.model` (the validated spec as dataclasses),
:mod:`.yamlio` (reading YAML), :mod:`.expr` (expressions of case symbols),
:mod:`.callables` (``module:attr`` references), :mod:`.schema` and
:mod:`.messages` (validation and its sentences), :mod:`.checks` (what the
schema cannot see), :mod:`.load` (discovery and loading), :mod:`.cases`
(expansion and ids) and :mod:`.defaults` (thresholds and defaults).
"""

from acceptance.errors import SpecError
from acceptance.spec.callables import CallableRef, resolve_callable
from acceptance.spec.cases import case_labels, expand, glob_match
from acceptance.spec.defaults import Rules, Threshold, rules_for
from acceptance.spec.expr import Expr, parse_expr, value_of
from acceptance.spec.load import discover, load_spec, load_specs
from acceptance.spec.model import (
    CATEGORIES,
    Case,
    CaseSpec,
    Choice,
    Dist,
    InputSpec,
    Normal,
    OperatorSpec,
    Preset,
    RandInt,
    Sparse,
    Specials,
    SpecProblem,
    Uniform,
    Waiver,
)

__all__ = [
    "CATEGORIES",
    "CallableRef",
    "Case",
    "CaseSpec",
    "Choice",
    "Dist",
    "Expr",
    "InputSpec",
    "Normal",
    "OperatorSpec",
    "Preset",
    "RandInt",
    "Rules",
    "Sparse",
    "SpecError",
    "SpecProblem",
    "Specials",
    "Threshold",
    "Uniform",
    "Waiver",
    "case_labels",
    "discover",
    "expand",
    "glob_match",
    "load_spec",
    "load_specs",
    "parse_expr",
    "resolve_callable",
    "rules_for",
    "value_of",
]

"""Oracle sanity for ``backward`` specs: ``torch.autograd.gradcheck`` in float64 before anything is judged.

A gradient is only as right as the oracle it is measured against. :func:`check_spec` takes a spec's first case,
trial 0's inputs as float64 leaves, and runs ``torch.autograd.gradcheck`` (fast mode: one random direction
``u`` per input and one random cotangent ``v``, the analytic ``v^T J u`` against the central difference
``(f(x + eps u) - f(x - eps u)) / 2 eps``, eps = 1e-6, atol 1e-5, rtol 1e-3) on the oracle, and on the
baseline where it differs from the oracle's callable and is differentiable. Only the ``wrt`` inputs are
perturbed (module parameters are not). The callables run in this process.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from acceptance.formats.roleref import RoleRef, fresh
from acceptance.measure import roles as faithful
from acceptance.numerics.oracle import Float64Ref
from acceptance.spec import OperatorSpec, expand
from acceptance.spec.inputs import RoleInputs, generate


def _differentiable(fn: Callable, inputs: tuple[torch.Tensor, ...], wrt: list[int], params: dict) -> Callable:
    """``fn`` as a function of the ``wrt`` inputs alone, returning its floating outputs."""

    def f(*leaves: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = list(inputs)
        for k, leaf in zip(wrt, leaves, strict=True):
            args[k] = leaf
        out = fn(*args, **params)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return tuple(o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())

    return f


def _gradcheck(fn: Callable, spec: OperatorSpec, inputs: tuple[torch.Tensor, ...], params: dict) -> str | None:
    """``None`` when ``fn``'s gradients match its finite differences, else why not."""
    assert spec.backward is not None  # only backward specs are checked
    names = [inp.name for inp in spec.inputs]
    wrt = [names.index(w) for w in spec.backward.wrt if w in names]
    if not wrt:
        return None
    leaves = tuple(inputs[k].detach().clone().requires_grad_(True) for k in wrt)
    try:
        ok = torch.autograd.gradcheck(
            _differentiable(fn, inputs, wrt, params), leaves, fast_mode=True, atol=1e-5, rtol=1e-3
        )
    except Exception as exc:  # gradcheck raises GradcheckError with the mismatch; user code may raise anything
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        return f"{type(exc).__name__}: {first}"
    return None if ok else "gradcheck failed"


def _callables(spec: OperatorSpec) -> list[tuple[str, RoleRef]]:
    """(role, reference) of the callables checked: the oracle (the baseline itself for the default float64
    oracle) and the baseline where it is another callable."""
    _, baseline, oracle = faithful.role_refs(spec)
    oracle = oracle.inner if isinstance(oracle, Float64Ref) else oracle
    return [("oracle", oracle)] + ([("baseline", baseline)] if baseline != oracle else [])


def check_spec(spec: OperatorSpec) -> list[str]:
    """Problems found by gradcheck in ``spec`` (empty: its oracle's gradients are right), each naming the spec
    file and the role. A spec without ``backward`` has none."""
    if spec.backward is None:
        return []
    case = expand([spec])[0]
    made = generate(case, 0)
    reference = made.reference if isinstance(made, RoleInputs) else made
    inputs = tuple(t.to(torch.float64) if t.is_floating_point() else t for t in reference[: len(spec.inputs)])
    problems = []
    for role, ref in _callables(spec):
        params = case.params_for(role)
        try:
            fn = fresh(ref)
        except Exception as exc:
            problems.append(f"{spec.path}: {role}: cannot resolve: {exc}")
            continue
        why = _gradcheck(fn, spec, inputs, params)
        if why is not None and (role == "oracle" or "does not require grad" not in why):
            problems.append(f"{spec.path}: {role}: gradients disagree with finite differences in float64 ({why})")
    return problems

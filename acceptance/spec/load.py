"""Loading specs: discover the files, read the YAML, validate with the schema, check beyond it, build the spec."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, cast

from pydantic import TypeAdapter, ValidationError

from acceptance.spec import backward
from acceptance.spec import emulation as emulate_section
from acceptance.spec.axes import case_specs
from acceptance.spec.checks import (
    dtype_problems,
    input_case_problems,
    memory_problems,
    perf_problems,
    quant_problems,
    waiver_problems,
)
from acceptance.spec.kinds import ROLES, JSONValue
from acceptance.spec.messages import field_path, sentence
from acceptance.spec.model import CaseSpec, InputSpec, OperatorSpec, Override, PerfSection, SpecProblem, Waiver
from acceptance.spec.overrides import override_problems
from acceptance.spec.schema import SpecModel, _CaseModel, _InputModel
from acceptance.spec.yamlio import read_yaml


def default_memory_gib() -> float:
    """Half of the machine's physical memory, in GiB: the default memory limit of a worker and of a case."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 / 2


def discover(paths: list[Path]) -> list[Path]:
    """Spec files under ``paths``: a file is taken as is; a folder gives its ``*.yaml``/``*.yml``
    files, recursively, sorted, skipping files and folders whose name starts with ``_`` or ``.``."""
    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(
                f
                for f in p.rglob("*")
                if f.suffix in (".yaml", ".yml")
                and f.is_file()
                and not any(part.startswith(("_", ".")) for part in f.relative_to(p).parts)
            )
        else:
            found.append(p)
    return list(dict.fromkeys(found))


def _build(path: Path, model: SpecModel, inputs: list[InputSpec], cases: list[CaseSpec]) -> OperatorSpec:
    return OperatorSpec(
        path=path,
        name=model.name,
        category=model.category,
        description=model.description,
        impl=model.impl,
        baseline=model.baseline,
        oracle=model.oracle,
        dtypes=list(model.dtypes),
        inputs=inputs,
        params=dict(model.params),
        cases=cases,
        trials=model.trials,
        seed=model.seed,
        thresholds={dt: t.model_dump(exclude_none=True) for dt, t in model.thresholds.items()},
        floors={dt: f.model_dump(exclude_none=True) for dt, f in model.floors.items()},
        invariants=model.invariants.model_dump(exclude_none=True) if model.invariants is not None else None,
        timeout=model.timeout,
        baseline_timeout=model.baseline_timeout,
        oracle_timeout=model.oracle_timeout,
        memory_limit_gib=model.memory_limit_gib if model.memory_limit_gib is not None else default_memory_gib(),
        atomic_runs=model.atomic_runs,
        dual_delta=model.dual_delta.model_dump(exclude_none=True) if model.dual_delta is not None else None,
        waivers=[Waiver(w.match, w.reason, tuple(w.covers), w.expires, w.link) for w in model.waivers],
        role_params=_role_params(model),
        overrides=[
            Override(
                o.match,
                o.thresholds.model_dump(exclude_none=True) if o.thresholds else {},
                o.dual_delta.model_dump(exclude_none=True) if o.dual_delta else {},
                k,
            )
            for k, o in enumerate(model.overrides)
        ],
        emulate={dt: em for dt in model.dtypes if (em := emulate_section.resolve(model.emulate, dt)) is not None},
        deterministic=model.deterministic,
        tier=model.tier,
        reruns=model.reruns,
        backward=backward.build(model),
        perf=cast(PerfSection, {k: v for k, v in dict(model.perf).items() if v is not None})
        if model.perf is not None
        else None,
    )


def _role_params(model: SpecModel | _CaseModel) -> dict[str, dict[str, JSONValue]]:
    """``<role>_params`` of a spec or a case model, by role, roles without any left out."""
    return {role: dict(getattr(model, f"{role}_params")) for role in ROLES if getattr(model, f"{role}_params")}


def _valid_part(data: Mapping[object, object], name: str, failed: set[str | int]) -> object:
    """One top-level field of a spec that failed validation elsewhere, validated on its own
    (``None`` when it is the field that failed)."""
    if name in failed:
        return None
    info = SpecModel.model_fields[name]
    if name not in data:
        return info.get_default(call_default_factory=True)
    params = (info.annotation, *info.metadata)
    annotation = Annotated[params] if info.metadata else info.annotation
    # a field's type with its constraints: a type form, which mypy cannot express
    return TypeAdapter[object](annotation).validate_python(data[name], strict=True)  # type: ignore[arg-type]


def load_spec(
    path: Path, imports: Callable[[str, Path], object] | None = None
) -> tuple[OperatorSpec | None, list[SpecProblem]]:
    """Load and validate one spec file: the spec, or ``None`` and all its problems.

    ``imports(ref, spec_path)`` checks each ``module:attr`` reference, raising :class:`SpecError`
    (default: :func:`~acceptance.spec.resolve_callable` in this process; the command line checks them in a
    child process, :class:`acceptance.isolation.importcheck.ImportCheck`, so that no import of the code under test runs
    in the runner).

    The schema is checked first; inputs and cases, and dtypes and thresholds,
    are checked further whenever they are valid themselves, so one pass reports
    as much as can be known.
    """
    path = Path(path)
    data, problem = read_yaml(path)
    if problem:
        return None, [problem]
    assert data is not None  # read_yaml gives a mapping or a problem
    try:
        return _validate(path, data, imports)
    except RecursionError:
        return None, [SpecProblem(str(path), "", "a YAML alias refers to itself; the spec must be a finite tree")]


def _validate(
    path: Path, data: dict[object, object], imports: Callable[[str, Path], object] | None = None
) -> tuple[OperatorSpec | None, list[SpecProblem]]:
    model: SpecModel | None = None
    inputs_model: list[_InputModel] | None
    cases_model: list[_CaseModel] | None
    dtypes: list[str] | None
    per_dtype: dict[str, Mapping[str, object] | None]
    try:
        model = SpecModel.model_validate(data, context={"spec_path": path, "imports": imports})
        inputs_model, cases_model, dtypes = model.inputs, model.cases, model.dtypes
        per_dtype = {"thresholds": model.thresholds, "floors": model.floors}
        found: list[tuple[str, str]] = []
    except ValidationError as exc:
        errors = exc.errors()
        found = [(field_path(e["loc"]), sentence(e, SpecModel)) for e in errors]
        failed = {e["loc"][0] for e in errors if e["loc"]}
        # each part validated on its own has its field's type
        inputs_model = cast("list[_InputModel] | None", _valid_part(data, "inputs", failed))
        cases_model = cast("list[_CaseModel] | None", _valid_part(data, "cases", failed))
        dtypes = cast("list[str] | None", _valid_part(data, "dtypes", failed))
        per_dtype = {
            name: cast("Mapping[str, object] | None", _valid_part(data, name, failed))
            for name in ("thresholds", "floors")
        }
    inputs: list[InputSpec] | None = None
    cases: list[CaseSpec] | None = None
    if inputs_model is not None and cases_model is not None:
        inputs = [
            InputSpec(
                i.name, tuple(i.shape), i.dist.to_dist(), i.dtype, i.layout, i.quant, i.reference or "dequantized"
            )
            for i in inputs_model
        ]
        cases = case_specs(cases_model, inputs, _role_params)
        found += input_case_problems(inputs, cases)
        if not found:
            found += quant_problems(inputs, cases)
    if dtypes is not None:
        found += dtype_problems(dtypes, {k: v for k, v in per_dtype.items() if v is not None})
    if not found and model is not None and inputs is not None and cases is not None:  # no problem: all are valid
        spec = _build(path, model, inputs, cases)
        found = (
            waiver_problems(spec)
            + memory_problems(spec)
            + override_problems(spec)
            + perf_problems(spec)
            + backward.backward_problems(spec)
            + backward.impl_backward_problems(model)
            + emulate_section.emulation_problems(
                model.emulate, spec.dtypes, spec.params, [c.params for c in spec.cases]
            )
        )
        if not found:
            return spec, []
    return None, [SpecProblem(str(path), f, m) for f, m in found]


def load_specs(
    paths: list[Path], imports: Callable[[str, Path], object] | None = None
) -> tuple[list[OperatorSpec], list[SpecProblem]]:
    """Load every spec file under ``paths`` (see :func:`discover`); ``imports``: as for :func:`load_spec`.

    Returns the valid specs and every problem found in every file (a file with
    a problem gives no spec); operator names must be unique across files.
    """
    problems: list[SpecProblem] = []
    for p in map(Path, paths):
        if p.is_dir() and not discover([p]):
            problems.append(SpecProblem(str(p), "", "no spec files (*.yaml, *.yml) in this folder"))
    specs: list[OperatorSpec] = []
    first: dict[str, Path] = {}
    for path in discover(paths):
        spec, found = load_spec(path, imports)
        problems += found
        if spec is None:
            continue
        if spec.name in first:
            problems.append(
                SpecProblem(str(path), "name", f"operator {spec.name!r} is already defined in {first[spec.name]}")
            )
            continue
        first[spec.name] = path
        specs.append(spec)
    return specs, problems

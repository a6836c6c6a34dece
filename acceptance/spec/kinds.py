"""Schema of the callable kinds a role may declare as a mapping, of per-role params, and of waivers.

A role (``impl``, ``baseline``, ``oracle``) is ``module:attr`` or a mapping with
exactly one of ``fn`` (a ``module:attr`` function), ``module`` (a
``torch.nn.Module`` class) or ``onnx`` (a model file next to the spec), and the
options of that kind; :mod:`acceptance.isolation.adapters` runs it. Messages name the
field, e.g. ``impl.onnx: no such file 'tiny.onnx' next to the spec``.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, TypeAlias, cast

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from acceptance.errors import SpecError
from acceptance.spec.callables import resolve_callable
from acceptance.spec.messages import describe, fail

#: Plain data as YAML and JSON hold it: null, booleans, numbers, strings, lists and string-keyed mappings.
JSONValue: TypeAlias = "None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]"

KINDS = ("fn", "module", "onnx")
ROLES = ("impl", "baseline", "oracle")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    noun: ClassVar[str] = "field"


def check_callable(v: str, info: ValidationInfo) -> str:
    """A callable reference ``module:attr`` / ``file.py:attr``, resolved when the spec's path is known: by the
    context's ``imports`` (e.g. :class:`acceptance.isolation.importcheck.ImportCheck`, in another process), else
    here."""
    context = info.context or {}
    spec_path = context.get("spec_path")
    if spec_path is not None:
        try:
            (context.get("imports") or resolve_callable)(v, spec_path)
        except SpecError as exc:
            raise fail(str(exc)) from None
    return v


def _file(v: str, info: ValidationInfo) -> str:
    spec_path = (info.context or {}).get("spec_path")
    if spec_path is not None and not (Path(spec_path).parent / v).is_file():
        raise fail(f"no such file {v!r} next to the spec ({(Path(spec_path).parent / v).resolve()})")
    return v


def json_like(v: object, where: str = "") -> JSONValue:
    """``v`` when it is plain data (numbers, strings, booleans, null, lists, string-keyed mappings); a
    validation error naming where it is not."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, list):
        return [json_like(x, f"{where}[{i}]") for i, x in enumerate(v)]
    if isinstance(v, dict):
        return _json_mapping(v, where)
    at = f"{where}: " if where else ""
    raise fail(f"{at}{describe(v)} is not a plain value (use numbers, strings, booleans, null, lists, mappings)")


def _json_mapping(v: dict[object, object], where: str) -> dict[str, JSONValue]:
    """A mapping of plain data (:func:`json_like`) with string keys."""
    for k in v:
        if not isinstance(k, str):
            raise fail(f"{where or 'key'} {k!r}: keys must be strings")
    return {cast(str, k): json_like(x, f"{where}.{k}" if where else cast(str, k)) for k, x in v.items()}


def plain_params(v: object) -> dict[str, JSONValue]:
    """A mapping of keyword arguments of plain data (:func:`json_like`)."""
    if not isinstance(v, dict):
        raise fail(f"expected a mapping of keyword arguments, got {describe(v)}")
    return _json_mapping(v, "")


Ref = Annotated[str, AfterValidator(check_callable)]
File = Annotated[str, AfterValidator(_file)]
if TYPE_CHECKING:  # the values the validators give (pydantic sees the validators: the definitions below)
    Mapping = dict[str, JSONValue]
else:
    Mapping = Annotated[object, BeforeValidator(plain_params)]


class CompileOptions(_Model):
    """``compile:`` options: ``torch.compile(fn, backend=, mode=, fullgraph=, dynamic=, options=)`` and Dynamo's
    ``recompile_limit`` for the worker."""

    backend: Annotated[str, Field(min_length=1)] = "inductor"
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    options: Mapping | None = None
    recompile_limit: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _mode_or_options(self) -> CompileOptions:
        if self.mode is not None and self.options is not None:
            raise fail("give mode or options, not both (torch.compile takes one)")
        return self


def _compile(v: object) -> bool | dict[str, JSONValue]:
    """``compile: true`` (defaults) or a mapping of :class:`CompileOptions` (as written)."""
    if isinstance(v, bool):
        return v
    if not isinstance(v, dict):
        raise fail(f"expected true, false or a mapping of torch.compile options, got {describe(v)}")
    try:
        return CompileOptions.model_validate(v).model_dump(exclude_unset=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise fail(f"{where + ': ' if where else ''}{first['msg']}") from None


if TYPE_CHECKING:
    CompileValue = bool | dict[str, JSONValue]
else:
    CompileValue = Annotated[object, BeforeValidator(lambda v: _compile(v))]


class Declaration(_Model):
    """A role declared as a mapping (see :mod:`acceptance.isolation.adapters` for what each field does)."""

    noun: ClassVar[str] = "field of a callable declaration"
    fn: Ref | None = None
    module: Ref | None = None
    onnx: File | None = None
    args: list[object] = []
    kwargs: Mapping = {}
    weights: File | None = None
    weights_seed: Annotated[int, Field(ge=0)] = 0
    compile: CompileValue = False
    allow_eager: bool = False
    providers: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)] | None = None
    setup: Ref | None = None
    setup_timeout: Annotated[float, Field(gt=0)] = 600.0
    warmup: bool | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Declaration:
        given = [k for k in KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise fail(f"give exactly one of fn, module, onnx{f' (got {len(given)})' if given else ''}")
        kind = given[0]
        wrong = [
            f
            for f, kinds in (("args", "module"), ("kwargs", "module"), ("weights", "module"), ("providers", "onnx"))
            if f in self.model_fields_set and kind not in kinds
        ]
        if wrong:
            raise fail(
                f"{wrong[0]} applies to a {'module' if wrong[0] != 'providers' else 'onnx'} declaration, not {kind}"
            )
        if kind == "onnx" and self.compile:
            raise fail("compile applies to fn and module declarations; an ONNX model runs in ONNX Runtime")
        if self.allow_eager and not self.compile:
            raise fail("allow_eager applies only with compile")
        return self

    def plain(self) -> dict[str, JSONValue]:
        """The declaration as written (fields left at their defaults dropped), for the adapter."""
        return self.model_dump(exclude_unset=True, mode="json")


def declaration(v: dict[object, object], info: ValidationInfo) -> dict[str, JSONValue]:
    """A :class:`Declaration` as a plain dict; its first problem as one message with its field path."""
    try:
        return Declaration.model_validate(v, context=info.context).plain()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = f"unknown field {first['loc'][-1]!r} (fields: {', '.join(Declaration.model_fields)})"
            where = ""
        raise fail(f"{where + ': ' if where else ''}{msg}") from None


def declaration_or_ref(v: object, info: ValidationInfo) -> str | dict[str, JSONValue]:
    """A role value: ``module:attr`` (checked) or a :class:`Declaration` (as a plain dict)."""
    if isinstance(v, str):
        return check_callable(v, info)
    if isinstance(v, dict):
        return declaration(v, info)
    raise fail(f"expected module:attr or a mapping with one of fn, module, onnx, got {describe(v)}")


if TYPE_CHECKING:
    RoleValue = str | dict[str, JSONValue]
else:
    RoleValue = Annotated[object, AfterValidator(declaration_or_ref)]


def _date(v: object) -> str:
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, str):
        try:
            return dt.date.fromisoformat(v).isoformat()
        except ValueError:
            pass
    raise fail(f"expected a date YYYY-MM-DD, got {describe(v)}")


if TYPE_CHECKING:
    DateText = str
else:
    DateText = Annotated[object, BeforeValidator(_date)]


class WaiverModel(_Model):
    """A waiver: case ids matching ``match`` whose verdict is one of ``covers`` become skip, until ``expires``."""

    noun: ClassVar[str] = "field of a waiver"
    match: Annotated[str, Field(min_length=1)]
    reason: Annotated[str, Field(min_length=1)]
    covers: Annotated[list[Literal["fail", "error"]], Field(min_length=1)] = ["fail"]
    expires: DateText | None = None
    link: Annotated[str, Field(min_length=1)] | None = None


def merged_params(params: dict, role_params: dict[str, dict], role: str) -> dict:
    """A role's keyword arguments: ``params`` with ``<role>_params`` merged over them."""
    return {**params, **role_params.get(role, {})}

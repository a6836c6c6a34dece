"""Problems in words: how a YAML value reads, close-match hints, and pydantic errors turned into field paths and
sentences."""

from __future__ import annotations

import difflib
import inspect
from types import NoneType
from typing import Annotated, TypeGuard, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails, PydanticCustomError


def fail(message: str) -> PydanticCustomError:
    """A validation error whose message is ``message`` as written."""
    return PydanticCustomError("spec", "{message}", {"message": message})


def is_number(v: object) -> TypeGuard[int | float]:
    """An int or float that is not a bool."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def describe(v: object) -> str:
    """How a YAML value reads in a message: ``string '20'``, ``a mapping``, ..."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return f"boolean {str(v).lower()}"
    if isinstance(v, int):
        return f"integer {v}"
    if isinstance(v, float):
        return f"number {v!r}"
    if isinstance(v, str):
        text = v if len(v) <= 40 else v[:37] + "..."
        return f"string {text!r}"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return f"a {type(v).__name__}"


def one_of(value: str, allowed: tuple[str, ...] | list[str]) -> str:
    """``'x' is not one of a, b (did you mean 'a'?)``."""
    close = difflib.get_close_matches(value, allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{value!r} is not one of {', '.join(allowed)}{hint}"


# --------------------------------------------------------------------------- pydantic errors -> paths and sentences


def field_path(loc: tuple) -> str:
    """A pydantic location as a field path: ``inputs[1].shape[0]``."""
    out = ""
    for item in loc:
        if item == "[key]":
            continue
        out += f"[{item}]" if isinstance(item, int) else (f".{item}" if out else str(item))
    return out


def _unwrap(ann: object) -> object:
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
        elif origin is Union:
            args = [a for a in get_args(ann) if a is not NoneType]
            if len(args) != 1:
                return ann
            ann = args[0]
        else:
            return ann


def model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class validating the mapping at ``loc`` under ``root``, if any."""
    ann: object = root
    for key in loc:
        ann = _unwrap(ann)
        if inspect.isclass(ann) and issubclass(ann, BaseModel):
            info = ann.model_fields.get(key)
            if info is None:
                return None
            ann = info.annotation
        elif get_origin(ann) in (list, dict):
            ann = get_args(ann)[-1]
        else:
            return None
    ann = _unwrap(ann)
    return ann if inspect.isclass(ann) and issubclass(ann, BaseModel) else None


_TYPE_WORDS = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}
_PAIR_FIELDS = {"uniform": "[lo, hi]", "normal": "[mean, std]", "randint": "[lo, hi]", "diff3": "[m1, m2]"}
_BOUND_WORDS = {
    "greater_than": ">",
    "greater_than_equal": ">=",
    "less_than": "<",
    "less_than_equal": "<=",
}


def sentence(err: ErrorDetails, root: type[BaseModel]) -> str:
    """One pydantic error of a document validated by ``root``, as a sentence."""
    kind, loc, ctx = err["type"], err["loc"], err.get("ctx") or {}
    if kind == "spec":
        return ctx["message"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        model = model_at(root, loc[:-1])
        noun = model.noun if model else "field"  # type: ignore[attr-defined]  # every spec model declares its noun
        key = str(loc[-1])
        allowed = list(model.model_fields) if model else []
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else (f" ({noun}s: {', '.join(allowed)})" if allowed else "")
        return f"unknown {noun} {key!r}{hint}"
    if kind in _TYPE_WORDS:
        text = f"expected {_TYPE_WORDS[kind]}, got {describe(err['input'])}"
        if kind == "int_type" and len(loc) == 3 and loc[0] == "cases" and loc[2] != "params":
            text += "; case keys are integer symbols, put keyword arguments under params"
        return text
    if kind in ("too_short", "too_long"):
        got = ctx.get("actual_length")
        if loc[-1] in _PAIR_FIELDS:
            return f"expected 2 values {_PAIR_FIELDS[loc[-1]]}, got {got}"
        if kind == "too_short":
            return f"expected at least {ctx.get('min_length')} item(s), got {got}"
        return f"expected at most {ctx.get('max_length')} item(s), got {got}"
    if kind in _BOUND_WORDS:
        limit = next(iter(ctx.values()))
        return f"must be {_BOUND_WORDS[kind]} {limit:g}, got {describe(err['input'])}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    return err["msg"]

"""Callable kinds beyond functions: ``nn.Module`` classes, ``torch.compile``, ONNX Runtime, setup and warm-up.

A spec role (``impl``, ``baseline``, ``oracle``) is a ``module:attr`` string or
a mapping (a *declaration*, validated by :mod:`acceptance.spec.kinds`)::

    impl:
      module: models.py:TinyMLP      # or  fn: kernels.py:op   or  onnx: tiny.onnx
      args: [16, 32]                 # constructor arguments (module)
      kwargs: {bias: true}
      weights: tiny.pt               # a state_dict; without it, weights drawn with weights_seed
      compile: {backend: inductor, mode: max-autotune-no-cudagraphs, recompile_limit: 8}
      allow_eager: false             # a compiled call that ran eagerly is an error (true: a warning)
      providers: [CPUExecutionProvider]   # onnx
      setup: kernels.py:prepare      # setup(*trial-0 inputs, **params), once per case, not timed
      setup_timeout: 600
      warmup: true                   # the first call, on trial 0's inputs, is not timed

:class:`Adapter` turns a declaration into ``fn(*tensors, **params)``.
:meth:`Adapter.setup` runs once per case before the trials (the engine calls
it with trial 0's inputs, under its own timeout, outside the impl's time): it
builds the module cast to the role's dtype and device (the same weights for
every role: drawn from one seed, or loaded from one file), opens the ONNX
Runtime session, calls the user's ``setup`` (a callable it returns replaces the
function for the case), wraps the result in ``torch.compile`` and makes the
warm-up call.

A compiled callable is watched on every call: a call in which no compiled
graph ran (Dynamo hit its recompile limit and fell back to eager, or compiled
nothing) raises :class:`EagerFallback`, unless the declaration allows eager
(then it is a warning); graph breaks and recompilations (guard failures)
within a case are warnings. Warnings are collected with :meth:`Adapter.take_notes`.

Defaults: a declared baseline-less role gets the impl's declaration run
eagerly (``compile`` dropped) and, for ONNX, on ``CPUExecutionProvider``; the
oracle gets the baseline's declaration on float64 inputs.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import torch

from acceptance.errors import SpecError
from acceptance.formats.roleref import Resolver
from acceptance.spec.callables import resolve_callable

if TYPE_CHECKING:
    import numpy as np
    import onnxruntime

    from acceptance.spec.kinds import JSONValue

#: A spec's value for one role: ``module:attr``, a declaration (a mapping), or ``None`` (not given).
RoleValue: TypeAlias = "str | dict[str, JSONValue] | None"
#: A ``torch.compile`` backend: a graph and its example inputs to the callable that runs the compiled graph.
Backend: TypeAlias = "Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., object]]"

#: Seconds a role's setup may take unless its declaration says ``setup_timeout``.
DEFAULT_SETUP_TIMEOUT = 600.0
#: Seed of the weights of a module declared without ``weights`` or ``weights_seed``.
DEFAULT_WEIGHTS_SEED = 0


class EagerFallback(RuntimeError):
    """A ``torch.compile`` callable ran (part of) a call eagerly although the spec did not allow it."""


@dataclass(frozen=True)
class AdapterRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to the :class:`Adapter` of a declaration: its
    JSON (keys sorted), the spec file it is relative to, the role."""

    declaration_json: str
    spec_path: str
    role: str

    @classmethod
    def of(cls, decl: dict, spec_path: Path, role: str) -> AdapterRef:
        return cls(json.dumps(decl, sort_keys=True), str(spec_path), role)

    def resolve(self, cached: Resolver) -> Adapter:
        return Adapter(json.loads(self.declaration_json), Path(self.spec_path), self.role)


@dataclass(frozen=True)
class SetupRef:
    """A reference to the :meth:`Adapter.setup` of the adapter that ``of`` resolved to in this process before
    (through ``cached``: the worker's own copy, which the case's calls then use)."""

    of: AdapterRef

    def resolve(self, cached: Resolver) -> Callable:
        adapter = cached(self.of)
        assert isinstance(adapter, Adapter)
        return adapter.setup


def default_roles(impl: RoleValue, baseline: RoleValue, oracle: RoleValue) -> tuple[RoleValue, RoleValue, RoleValue]:
    """(impl, baseline, oracle) declarations with the defaults of the module docstring filled in: a missing
    baseline is the impl's declaration run eagerly (ONNX: on the CPU provider); a missing oracle, the
    baseline's declaration (it gets float64 inputs). Strings are returned as they are."""
    if baseline is None:
        baseline = impl
        if isinstance(impl, dict):
            baseline = {k: v for k, v in impl.items() if k not in ("compile", "allow_eager", "warmup")}
            if "onnx" in baseline:
                baseline["providers"] = ["CPUExecutionProvider"]
    if oracle is None and isinstance(baseline, dict):
        oracle = dict(baseline)
    return impl, baseline, oracle


def setup_of(fn_or_ref: object) -> tuple[Callable | SetupRef, float] | None:
    """What the engine calls to set a role up for a case, with its timeout: a :class:`SetupRef` for a reference
    to a declaration, the bound :meth:`Adapter.setup` of an adapter object; ``None`` for anything else (nothing
    to set up)."""
    if isinstance(fn_or_ref, AdapterRef):
        decl = json.loads(fn_or_ref.declaration_json)
        return SetupRef(fn_or_ref), float(decl.get("setup_timeout", DEFAULT_SETUP_TIMEOUT))
    if isinstance(fn_or_ref, Adapter):
        return fn_or_ref.setup, fn_or_ref.setup_timeout
    return None


def take_notes(fn: object) -> list[str]:
    """Warnings an adapter (or the adapter behind a bound ``setup``) collected since last asked; [] otherwise."""
    owner = getattr(fn, "__self__", fn)
    return owner.take_notes() if isinstance(owner, Adapter) else []


# ----------------------------------------------------------------------------- torch.compile watch

_LIMIT_HITS: list[str] = []


class _LimitLog(logging.Handler):
    """Keeps Dynamo's "hit config.recompile_limit" warnings (the only trace its eager fallback leaves)."""

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "hit config." in text:
            _LIMIT_HITS.append(" ".join(line.strip() for line in text.splitlines()[:3]))


_HANDLER: _LimitLog | None = None


def _watch_dynamo_log() -> None:
    global _HANDLER
    if _HANDLER is None:
        _HANDLER = _LimitLog(logging.WARNING)
        logging.getLogger("torch._dynamo").addHandler(_HANDLER)


def _graph_breaks() -> dict[str, int]:
    from torch._dynamo.utils import counters

    return dict(counters["graph_break"])


class _Compiled:
    """``torch.compile(fn, ...)`` through a backend that counts compiled graphs and their executions."""

    def __init__(self, fn: Callable, options: dict):
        options = dict(options or {})
        backend = options.pop("backend", "inductor")
        limit = options.pop("recompile_limit", None)
        if limit is not None:
            torch._dynamo.config.recompile_limit = int(limit)
        mode, inductor_options = options.pop("mode", None), options.pop("options", None)
        self.fullgraph = bool(options.pop("fullgraph", False))
        dynamic = options.pop("dynamic", None)
        real: Backend
        if backend == "inductor":
            real = torch._TorchCompileInductorWrapper(mode, inductor_options, dynamic)
        else:
            real = torch._dynamo.lookup_backend(backend)
        self.graphs = 0
        self.executions = 0

        def counting(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., object]:
            compiled: Callable[..., object] = real(gm, example_inputs)
            self.graphs += 1

            def run(*args: object) -> object:
                self.executions += 1
                return compiled(*args)

            if getattr(compiled, "_boxed_call", False):
                # inductor's calling convention (a list of arguments), the function attribute it reads
                run.__dict__["_boxed_call"] = True
            return run

        _watch_dynamo_log()
        self.fn = torch.compile(fn, backend=counting, fullgraph=self.fullgraph, dynamic=dynamic)


def _onnx_numpy_dtype(type_name: str) -> type[np.generic]:
    import numpy as np

    table: dict[str, type[np.generic]] = {
        "tensor(float)": np.float32,
        "tensor(float16)": np.float16,
        "tensor(double)": np.float64,
        "tensor(int64)": np.int64,
        "tensor(int32)": np.int32,
        "tensor(int8)": np.int8,
        "tensor(uint8)": np.uint8,
        "tensor(bool)": np.bool_,
    }
    if type_name not in table:
        raise ValueError(f"ONNX input type {type_name} is not supported (supported: {', '.join(table)})")
    return table[type_name]


class Adapter:
    """One role of one spec declared as a mapping, as ``fn(*tensors, **params)`` (see the module docstring)."""

    def __init__(self, decl: dict, spec_path: Path, role: str):
        self.decl, self.spec_path, self.role = dict(decl), Path(spec_path), role
        self.setup_timeout = float(decl.get("setup_timeout", DEFAULT_SETUP_TIMEOUT))
        self._master: torch.nn.Module | None = None
        self._session: onnxruntime.InferenceSession | None = None
        self._fn: Callable | None = None
        self._compiled: _Compiled | None = None
        self._notes: list[str] = []
        self._calls = 0
        self.trainable: tuple[str, ...] = ()
        """Parameters of a module built with ``requires_grad`` (the gradients a ``backward`` spec checks)."""
        self.module: torch.nn.Module | None = None
        """The module the last setup built (``None``: not a module declaration, or not set up yet)."""

    def __repr__(self) -> str:
        kind = next((k for k in ("module", "onnx", "fn") if k in self.decl), "fn")
        return f"Adapter({self.role}: {kind} {self.decl.get(kind)!r})"

    # -- building ------------------------------------------------------------------------------------
    def _path(self, name: str, key: str) -> Path:
        path = (self.spec_path.parent / name).resolve()
        if not path.is_file():
            raise SpecError(f"{self.role}.{key}: no such file {name!r} next to the spec ({path})")
        return path

    def _module(self, tensors: tuple) -> torch.nn.Module:
        """The declared module with its weights, cast to the dtype of the first floating input and moved to
        its device (the master copy is built once, in float32 as its constructor makes it)."""
        if self._master is None:
            cls = resolve_callable(self.decl["module"], self.spec_path)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(self.decl.get("weights_seed", DEFAULT_WEIGHTS_SEED)))
                module = cls(*self.decl.get("args", []), **self.decl.get("kwargs", {}))
            if not isinstance(module, torch.nn.Module):
                raise SpecError(
                    f"{self.role}.module: {self.decl['module']!r} made a {type(module).__name__}, not a torch.nn.Module"
                )
            if "weights" in self.decl:
                state = torch.load(self._path(self.decl["weights"], "weights"), map_location="cpu", weights_only=True)
                module.load_state_dict(state, strict=True)
            self._master = module.eval().requires_grad_(False)
        floating = next((t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
        device = tensors[0].device if tensors else torch.device("cpu")
        module = copy.deepcopy(self._master).to(device)
        module = module.to(floating.dtype) if floating is not None else module
        for name, p in module.named_parameters():
            p.requires_grad_(name in self.trainable)
        self.module = module
        return module

    def _onnx(self) -> Callable:
        try:
            import onnxruntime
        except ImportError:
            raise SpecError(
                f"{self.role}.onnx: onnxruntime is not installed (pip install 'acceptance[onnx]')"
            ) from None
        if self._session is None:
            providers = list(self.decl.get("providers", ["CPUExecutionProvider"]))
            missing = [p for p in providers if p not in onnxruntime.get_available_providers()]
            if missing:
                raise SpecError(
                    f"{self.role}.providers: {missing[0]} is not available here (available: "
                    f"{', '.join(onnxruntime.get_available_providers())})"
                )
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            self._session = onnxruntime.InferenceSession(
                str(self._path(self.decl["onnx"], "onnx")), options, providers=providers
            )
        session = self._session
        feeds = [(i.name, _onnx_numpy_dtype(i.type)) for i in session.get_inputs()]

        def run(*tensors: torch.Tensor, **params: object) -> torch.Tensor | tuple[torch.Tensor, ...]:
            if len(tensors) != len(feeds):
                raise ValueError(
                    f"the ONNX model takes {len(feeds)} inputs ({', '.join(n for n, _ in feeds)}), "
                    f"the spec gives {len(tensors)}"
                )
            floating = next((t.dtype for t in tensors if t.is_floating_point()), None)
            arrays = {
                name: t.detach().cpu().numpy().astype(dtype) for (name, dtype), t in zip(feeds, tensors, strict=False)
            }
            outs = session.run(None, arrays)
            device = tensors[0].device
            made = tuple(
                torch.from_numpy(o).to(
                    device=device, dtype=floating if floating is not None and o.dtype.kind == "f" else None
                )
                for o in outs
            )
            return made[0] if len(made) == 1 else made

        return run

    def _base(self, tensors: tuple) -> Callable:
        if "module" in self.decl:
            return self._module(tensors)
        if "onnx" in self.decl:
            return self._onnx()
        return resolve_callable(self.decl["fn"], self.spec_path)

    def setup(self, *tensors: torch.Tensor, **params: object) -> tuple[torch.Tensor, ...]:
        """Prepare the role for a case: build, the user's setup, compile, warm-up. Returns an empty tensor
        (the worker protocol answers with tensors)."""
        fn = self._base(tensors)
        if "setup" in self.decl:
            made = resolve_callable(self.decl["setup"], self.spec_path)(*tensors, **params)
            fn = made if callable(made) else fn
        self._compiled = None
        if self.decl.get("compile") not in (None, False):
            options = self.decl["compile"] if isinstance(self.decl["compile"], dict) else {}
            self._compiled = _Compiled(fn, options)
            fn = self._compiled.fn
        self._fn, self._calls = fn, 0
        if self.decl.get("warmup", self._compiled is not None):
            self(*tensors, **params)
        return (torch.zeros(0),)

    # -- calling ------------------------------------------------------------------------------------
    def __call__(self, *tensors: torch.Tensor, **params: object) -> object:
        """The role's callable on ``tensors`` (its outputs as it returns them: the caller checks them)."""
        if self._fn is None:  # called without a setup (the library API): set up on the first call's inputs
            self.setup(*tensors, **params)
        fn = self._fn
        assert fn is not None  # setup sets it
        if self._compiled is None:
            return fn(*tensors, **params)
        return self._watched(fn, self._compiled, tensors, params)

    def _watched(
        self, fn: Callable, c: _Compiled, tensors: tuple[torch.Tensor, ...], params: dict[str, object]
    ) -> object:
        graphs, executions, hits, breaks = c.graphs, c.executions, len(_LIMIT_HITS), _graph_breaks()
        out = fn(*tensors, **params)
        self._calls += 1
        new_breaks = {k: v - breaks.get(k, 0) for k, v in _graph_breaks().items() if v > breaks.get(k, 0)}
        if new_breaks:
            lines = [line.strip() for line in next(iter(new_breaks)).strip().splitlines() if line.strip()]
            first = "; ".join(lines[:2])
            self._notes.append(
                f"torch.compile: {sum(new_breaks.values())} graph break(s) in call {self._calls} ({first})"
            )
        if c.graphs > graphs and self._calls > 1:
            self._notes.append(
                f"torch.compile recompiled in call {self._calls} (a guard failed: shapes, dtypes or "
                "values differ from an earlier call)"
            )
        if c.executions == executions:
            hit = _LIMIT_HITS[hits] if len(_LIMIT_HITS) > hits else (_LIMIT_HITS[-1] if _LIMIT_HITS else None)
            why = f"{hit}; Dynamo fell back to eager" if hit else "Dynamo compiled no graph for it"
            text = f"torch.compile ran call {self._calls} eagerly: {why}"
            if not self.decl.get("allow_eager", False):
                raise EagerFallback(text + " (raise compile.recompile_limit, or set allow_eager: true)")
            self._notes.append(text)
        return out

    def take_notes(self) -> list[str]:
        """The warnings collected since the last call of this method (duplicates once)."""
        notes, self._notes = list(dict.fromkeys(self._notes)), []
        return notes

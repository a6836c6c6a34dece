"""``--resume`` by content: a journaled case is reused only when what it was measured from is unchanged.

Each journal line holds a case's measurement and its *content key* (:func:`content_key`): the case as the spec
defines it (SHA-256 of its expanded form, trials and seed aside), the trials and the seed, the options that change
a measurement (device, intra-op threads, the sanitizer), the versions of acceptance and torch, and the source of
every callable it runs (:func:`sources`). A resumed run reuses a journaled case only when its key equals the one
the case has now; any other journaled case is measured again, and :func:`reuse` says why, as one line per kind of
reason with the number of cases (``resume: 3 cases re-run: impl source changed (kernels.py)``).

Sources are read without importing the code under test (the runner never imports it): a ``.py`` file next to the
spec counts with every ``.py`` file of its folder (the helpers it may import), a module of a local package with
every ``.py`` file of that package, by SHA-256; an installed module by its distribution's version, the standard
library by Python's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from acceptance import version
from acceptance.cache.keys import FingerprintError, _source, file_sha256
from acceptance.records import MeasuredCase
from acceptance.session.options import RunOptions
from acceptance.spec import Case, OperatorSpec
from acceptance.spec.kinds import JSONValue

#: What a journal line holds: the measured case and its content key (``None``: a line of an older journal).
Entry = tuple[MeasuredCase, "dict[str, JSONValue] | None"]

#: A callable reference inside a spec's ``impl``/``baseline``/``oracle`` (``kernels.py:op``, ``torch:matmul``).
_REF = re.compile(r"^[\w./\\-]+:[\w.]+$")

#: Files of one local package hashed at most (a larger tree is keyed by the files' sizes and times instead).
MAX_FILES = 2000

#: The roles whose callables a key covers, in the order their reasons are shown.
ROLES = ("impl", "baseline", "oracle")


def _refs(value: object) -> list[str]:
    """The callable references in a role's value as the spec holds it (a string, or a mapping that names some)."""
    if isinstance(value, str):
        return [value] if _REF.match(value) else []
    if isinstance(value, dict):
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


def _files(folder: Path, pattern: str) -> dict[str, str]:
    """SHA-256 of the ``.py`` files under ``folder`` matching ``pattern`` (``*.py`` or ``**/*.py``), by their path
    relative to its parent (``kernels/ops.py``); past :data:`MAX_FILES` files, their size and time instead."""
    paths = sorted(p for p in folder.glob(pattern) if p.is_file() and "__pycache__" not in p.parts)
    out: dict[str, str] = {}
    for k, path in enumerate(paths):
        name = path.relative_to(folder.parent).as_posix()
        try:
            if k < MAX_FILES:
                out[name] = file_sha256(path)
            else:
                st = path.stat()
                out[name] = f"{st.st_size}:{st.st_mtime_ns}"
        except OSError as exc:
            out[name] = f"unreadable ({exc.strerror})"
    return out


def _module_files(module: str) -> dict[str, str]:
    """The source identity of importable module ``module``, found without importing it (its top-level package's
    spec): an installed distribution or the standard library by version, a local module or package by its files."""
    top = module.split(".")[0]
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        return {module: "not found"}
    origin = found.origin if found.has_location else None
    try:
        shared = _source(top, origin)
    except FingerprintError:
        shared = {}
    if "distribution" in shared or "python" in shared:
        return {top: next(iter(shared.values()))}
    if found.submodule_search_locations:
        out: dict[str, str] = {}
        for location in found.submodule_search_locations:
            out.update(_files(Path(location), "**/*.py"))
        return out
    return {Path(origin).name: shared.get("sha256", "")} if origin else {top: "built in"}


def sources(
    spec: OperatorSpec, role: str, found: dict[tuple[str, str], dict[str, str]] | None = None
) -> dict[str, str]:
    """The source identity of ``role``'s callables of ``spec`` (see the module's doc): file or module -> digest.
    ``found``: the identities already read in this run, by (folder or module, kind), read once (a module's
    distribution is looked up in 0.1 s; a folder's files are hashed)."""
    found = {} if found is None else found
    out: dict[str, str] = {}
    for ref in _refs(getattr(spec, role)):
        module = ref.rpartition(":")[0]
        if module.endswith(".py"):
            folder = (Path(spec.path).parent / module).resolve().parent
            key = (str(folder), "folder")
            if key not in found:
                found[key] = _files(folder, "*.py")
        else:
            key = (module, "module")
            if key not in found:
                found[key] = _module_files(module)
        out.update(found[key])
    return out


class Keys:
    """Content keys of a run's cases (:func:`content_key`); the sources of each spec, and each spec's text, read
    once per run (a key costs the same whatever the number of cases of its spec)."""

    def __init__(self, options: RunOptions, device: torch.device):
        self.options, self.device = options, device
        self._sources: dict[tuple[int, str], dict[str, str]] = {}
        self._found: dict[tuple[str, str], dict[str, str]] = {}
        self._specs: dict[int, str] = {}

    def sources(self, spec: OperatorSpec, role: str) -> dict[str, str]:
        key = (id(spec), role)
        if key not in self._sources:
            self._sources[key] = sources(spec, role, self._found)
        return self._sources[key]

    def shape(self, case: Case) -> str:
        """The hex SHA-256 of the expanded case, trials, seed and the spec's folder aside: the spec's ``repr``
        (made once per spec) and the case's own fields'."""
        spec = case.spec
        text = self._specs.get(id(spec))
        if text is None:
            neutral = dataclasses.replace(spec, trials=0, seed=0, path=Path(Path(spec.path).name))
            text = self._specs[id(spec)] = repr(neutral)
        own = repr(tuple(getattr(case, f.name) for f in dataclasses.fields(case) if f.name != "spec"))
        return hashlib.sha256(f"{text}\n{own}".encode()).hexdigest()

    def __call__(self, case: Case) -> dict[str, JSONValue]:
        """The content key of ``case``: what its measurement depends on (see the module's doc)."""
        spec = case.spec
        o = self.options
        return {
            "spec": self.shape(case),
            "spec_file": Path(spec.path).name,
            "trials": o.trials if o.trials is not None else spec.trials,
            "seed": spec.seed,
            "options": {"device": str(self.device), "threads": o.threads, "sanitize": o.sanitize},
            "versions": {"acceptance": version.__version__, "torch": torch.__version__},
            "sources": {role: dict(self.sources(spec, role)) for role in ROLES},
        }


def _part(key: dict[str, JSONValue], *path: str) -> dict[str, JSONValue]:
    """The mapping at ``path`` in a content key (empty when a key read from a journal lacks it)."""
    value: JSONValue = key
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value if isinstance(value, dict) else {}


def _changed(was: dict[str, JSONValue], now: dict[str, JSONValue]) -> list[str]:
    """The names whose values differ between two mappings, sorted."""
    return sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k))


def _differs(old: dict[str, JSONValue], new: dict[str, JSONValue]) -> list[tuple[str, str]]:
    """The reasons two content keys differ: (kind, detail) pairs, e.g. ("impl source changed", "kernels.py")."""
    reasons: list[tuple[str, str]] = []
    if old.get("spec") != new.get("spec"):
        reasons.append(("spec changed", str(new.get("spec_file"))))
    for part in ("trials", "seed"):
        if old.get(part) != new.get(part):
            reasons.append((f"{part} changed", f"{old.get(part)} -> {new.get(part)}"))
    for part, kind in (("options", "options changed"), ("versions", "package version changed")):
        was, now = _part(old, part), _part(new, part)
        reasons += [(kind, f"{k} {was.get(k)} -> {now.get(k)}") for k in _changed(was, now)]
    for role in ROLES:
        changed = _changed(_part(old, "sources", role), _part(new, "sources", role))
        reasons += [(f"{role} source changed", name) for name in changed]
    return reasons


def reuse(cases: Sequence[Case], entries: Iterable[Entry], keys: Keys) -> tuple[list[MeasuredCase], list[str]]:
    """The journaled measurements a resumed run reuses, in case order, and what it says about the others: one line
    per kind of reason, with the number of cases it re-runs for that reason and the details (files, values)."""
    last = {measured.id: (measured, key) for measured, key in entries}  # a case journaled twice: the later line
    reused: list[MeasuredCase] = []
    counts: Counter[str] = Counter()
    details: dict[str, list[str]] = {}
    for case in cases:
        if case.id not in last:
            continue
        measured, old = last[case.id]
        if old is None:
            reasons = [("journaled without a content key (an older journal)", "")]
        else:
            reasons = _differs(old, keys(case))
        if not reasons:
            reused.append(measured)
            continue
        for kind in dict.fromkeys(kind for kind, _ in reasons):
            counts[kind] += 1
        for kind, detail in reasons:
            if detail and detail not in details.setdefault(kind, []):
                details[kind].append(detail)
    lines = []
    for kind, n in counts.items():
        shown = details.get(kind, [])
        more = f", +{len(shown) - 3} more" if len(shown) > 3 else ""
        detail = f" ({', '.join(shown[:3])}{more})" if shown else ""
        lines.append(f"resume: {n} case{'s' if n != 1 else ''} re-run: {kind}{detail}")
    return reused, lines


__all__ = ["Entry", "Keys", "reuse", "sources"]

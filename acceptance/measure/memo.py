"""Measurements reused when the impl answers exactly what it answered before: the measurement memo.

:func:`acceptance.measure.case.measure` is a pure function of the case, its rules
and its trials' tensors: the impl's outputs (and its repeats), the baseline's
(and its repeats) and the oracle's. So when all of these are, bit for bit in
every trial, those of a run already measured with the same case, rules,
references and measuring code, the measurement is the one that run recorded,
and it is read back instead of computed again. The baseline's and oracle's
outputs come from the reference cache, or are computed again where their
entries are gone (evicted, never written): either way their bytes are
digested with the impl's. The impl still runs every trial, on the device,
every time: what is reused is arithmetic on identical bytes, never an answer
of the code under test. A changed impl, a nondeterministic impl or
reference, a changed spec, rules, installation or measuring code measures in
full.

Entry of a case (in the :class:`~acceptance.cache.ReferenceCache`, key
``role="measurement"``): a uint8 tensor of the XXH3-128 of each trial's
tensors (:func:`trial_digest`: every output of the impl and its repeats, then
of the baseline, its repeats and the oracle: dtype, shape, then the bytes), one
row per trial, and the measured :class:`~acceptance.records.MeasuredCase` as JSON.
Its key (:func:`acceptance.cache.key`, which adds the installation) holds the
case's reference key (case id, dtype, seed, the reference-relevant spec fields,
the baseline's and oracle's fingerprints, the generator, the worker's threads),
the repr of the case (its whole spec included) and of its rules, the trial
count, the impl's device type, the versions of SciPy and numba, and the
SHA-256 of the source of every module of this package.

While each trial's digest matches the entry's, that trial's measuring waits
(its tensors held, at most :data:`HOLD_BYTES`); the first one that does not
match releases the trials held, which are then measured in order, as they
would have been. Only a case measured without an error is recorded. An impl
on a GPU is memoised like one on the CPU when it runs in its worker, which
sends its outputs to the runner on the host; outputs still on a device
(callables run in the runner's process, ``--no-isolation``) are measured
every run rather than copied to the host to be digested.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
from collections.abc import Mapping
from pathlib import Path

import torch
import xxhash

from acceptance.cache import ReferenceCache, key
from acceptance.formats import dtypes
from acceptance.measure import engine
from acceptance.measure.references import CaseReferences
from acceptance.records import MeasuredCase
from acceptance.spec import Case, Rules

#: Bytes of trial tensors a case may hold while its digests match the memo's.
HOLD_BYTES = 64 << 20

#: Bytes of a trial's digest: XXH3-128, a 128-bit non-cryptographic hash (~17 GB/s on one core, SHA-256 ~1.8):
#: two different outputs of a trial have the same digest with a probability of about 2^-128.
_DIGEST = 16


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """SHA-256 of every ``.py`` file of this package (relative path, then bytes), in path order, with the
    versions of SciPy and numba (the statistics and the element kernels measure with them)."""
    root = Path(__file__).resolve().parents[1]  # the package
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes())
    for dist in ("scipy", "numba"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "-"
        h.update(f"{dist}={version}\0".encode())
    return h.hexdigest()


def trial_digest(
    impl: engine.Tensors, repeats: tuple[engine.Tensors, ...], references: tuple[engine.Tensors | None, ...] = ()
) -> bytes | None:
    """XXH3-128 of a trial's impl outputs and repeats, then of ``references`` (output tuples: the baseline's,
    its repeats, the oracle's; ``None`` for a role that did not run): dtype, shape and bytes of each tensor, in
    order; ``None`` when one is not a CPU tensor, or its bytes cannot be read as they are
    (:func:`acceptance.formats.dtypes.byte_view`; in-process callables may return such tensors)."""
    h = xxhash.xxh3_128()
    h.update(b"%d,%d|" % (len(repeats), len(references)))
    for outs in (impl, *repeats, *references):
        if outs is None:
            h.update(b"-|")
            continue
        h.update(b"%d|" % len(outs))
        for x in outs:
            raw = dtypes.byte_view(x) if isinstance(x, torch.Tensor) and x.device.type == "cpu" else None
            if raw is None:
                return None
            h.update(f"{x.dtype}{tuple(x.shape)}|".encode())
            if raw.numel():
                h.update(raw.numpy().data)
    return h.digest()


def _nbytes(trial: engine.Trial) -> int:
    """Bytes a held trial keeps: its inputs and outputs (:func:`acceptance.measure.engine._nbytes`) and its repeats."""
    repeats = [x for r in (*trial.repeats, *trial.baseline_repeats) for x in r]
    return engine._nbytes(trial) + sum(x.numel() * x.element_size() for x in repeats)


class Memo:
    """The measurement memo of one case (see the module docstring).

    Per trial, :meth:`hold` says whether its measuring waits (``True``) or must be done now, after the trials
    :meth:`release` gives back; :meth:`result` is the recorded measurement when every trial matched, and
    :meth:`record` stores a fresh one."""

    def __init__(self, cache: ReferenceCache, entry: str, trials: int):
        self.cache, self.entry, self.trials = cache, entry, trials
        self.digests: list[bytes | None] = []
        self.held: list[engine.Trial] = []
        self._bytes = 0
        self.expected: list[bytes] | None = None
        self.stored: str | None = None
        found = cache.get(entry)
        if (
            found is not None
            and len(found) == 2
            and found[0].dtype == torch.uint8
            and found[0].dim() == 2
            and tuple(found[0].shape) == (trials, _DIGEST)
            and found[1].dtype == torch.uint8
        ):
            self.expected = [bytes(row) for row in found[0].numpy()]
            self.stored = bytes(found[1].numpy()).decode("utf-8", "replace")
        self.matching = self.expected is not None

    def hold(self, trial: engine.Trial) -> bool:
        """Note ``trial``'s digest; ``True`` when it matches the memo so far (its measuring then waits)."""
        digest = trial_digest(trial.impl, trial.repeats, (trial.baseline, *trial.baseline_repeats, trial.oracle))
        self.digests.append(digest)
        if self.matching:
            size = _nbytes(trial)
            k = len(self.digests) - 1
            if (
                digest is not None
                and self.expected is not None
                and k < len(self.expected)
                and digest == self.expected[k]
                and self._bytes + size <= HOLD_BYTES
            ):
                self.held.append(trial)
                self._bytes += size
                return True
            self.matching = False
        return False

    def release(self) -> list[engine.Trial]:
        """The trials held so far, in order (to be measured now); none are held after."""
        held, self.held, self._bytes = self.held, [], 0
        return held

    def result(self, update: Mapping[str, object]) -> MeasuredCase | None:
        """The recorded measurement with ``update`` applied, when every trial matched; else ``None``."""
        if not (self.matching and len(self.held) == self.trials and self.stored is not None):
            return None
        try:
            found = MeasuredCase.model_validate_json(self.stored)
        except ValueError:
            return None
        return found.model_copy(update=update)

    def record(self, measured: MeasuredCase) -> None:
        """Store a case's fresh measurement (one measured without an error, every trial digested)."""
        if measured.error is not None or len(self.digests) != self.trials or any(d is None for d in self.digests):
            return
        digests = b"".join(d for d in self.digests if d is not None)
        rows = torch.frombuffer(bytearray(digests), dtype=torch.uint8).reshape(self.trials, _DIGEST)
        text = torch.frombuffer(bytearray(measured.model_dump_json().encode()), dtype=torch.uint8)
        self.cache.put_later(self.entry, [rows, text])


def _text(value: object) -> str:
    """``repr`` of ``value`` with every set in sorted order (a set's own order changes from process to process
    with the hash seed), recursing into dataclasses, mappings and sequences."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        inner = ", ".join(f"{f.name}={_text(getattr(value, f.name))}" for f in dataclasses.fields(value) if f.repr)
        return f"{type(value).__name__}({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(sorted(f"{_text(k)}: {_text(v)}" for k, v in value.items())) + "}"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({{{', '.join(sorted(_text(v) for v in value))}}})"
    if isinstance(value, (list, tuple)):
        return f"{type(value).__name__}[{', '.join(_text(v) for v in value)}]"
    return repr(value)


def memo_for(
    case: Case, rules: Rules, references: CaseReferences | None, trials: int, device: torch.device
) -> Memo | None:
    """The memo of ``case`` (``references``: its :class:`acceptance.measure.references.CaseReferences`), or ``None``
    when it has none: no cache, references not cached, a spec or rules without a stable text form. ``device``
    (the impl's) is part of the key: the outputs of one device are never taken for another's."""
    if references is None or references.base is None or not references.cache.enabled:
        return None
    if any(references.fns.get(role) is None for role in ("baseline", "oracle")):
        return None
    text = _text(case) + "|" + _text(rules)  # the case's holds its spec's
    if " at 0x" in text:
        return None
    entry = key(
        role="measurement",
        reference=references.base,
        fns=references.fns,
        spec=text,
        trials=trials,
        device=device.type,
        code=code_digest(),
    )
    return Memo(references.cache, entry, trials)

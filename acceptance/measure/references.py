"""Cached references of a spec run: a case's generated inputs, baseline outputs and oracle outputs on disk.

The run asks :class:`RunReferences` for each case's :class:`CaseReferences`;
the trial engine then takes a trial's baseline and oracle outputs from
the :class:`~acceptance.cache.ReferenceCache` when present, and stores them
when it computed them; the case's inputs come from its :class:`CachedRecipe`,
which reads and writes them where they are made (in the worker). The
implementation's outputs are never cached.

Key of one entry (:func:`acceptance.cache.key`, which adds the installation:
torch, NumPy, acceptance and Python versions, CPU ISA, thread count)::

    role      "inputs" | "baseline" | "oracle"
    case      case id            trial   trial number     dtype   test dtype
    seed      spec seed
    spec      repr of every spec field except those that cannot change a reference
              (impl, thresholds, overrides, floors, dual_delta, deterministic, waivers,
              timeouts, memory limit, atomic runs, trials, tier, perf, description, name,
              category, dtypes, cases, path): inputs, params, baseline, oracle, emulate,
              role_params and any field added later; then the case's own values: its
              keyword arguments, symbols, preset and the baseline's and oracle's
              per-role keyword arguments (the impl's never)
    generator fingerprint of :func:`acceptance.spec.inputs.generate` (its source and helpers)
    fn        for baseline and oracle: SHA-256 of the callable's fingerprint
              (:func:`acceptance.cache.callable_fingerprint`), computed in the worker
              process so the runner never imports the code under test

The inputs, the baseline's and the oracle's outputs of a whole case are one entry each, a *pack*, keyed as
above with ``trial`` "all", when each trial's are small (:data:`PACK_TRIAL_BYTES`, at most
:data:`PACK_BYTES` in all): a run reads and writes one file per case and role instead of one per trial.
Larger outputs get an entry per trial. A pack holds the trials computed so far ((trial, outputs) pairs
after an int64 index), so a run with more trials adds to it and one with fewer reads part of it.

A callable that cannot be fingerprinted, or a spec whose repr shows a memory
address, is simply not cached. Outputs are made contiguous whether they come
from the cache or from the call, so a warm run computes on the same bytes in
the same order as a cold one and writes the same results.json.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

import torch

from acceptance.cache import FingerprintError, FingerprintRef, ReferenceCache, callable_fingerprint, canonical_json, key
from acceptance.cache.store import QUEUED_BYTES, shared
from acceptance.errors import CaseError
from acceptance.formats import dtypes
from acceptance.formats.roleref import RoleRef
from acceptance.isolation.split import RoleWorkers
from acceptance.isolation.worker import IMPL, Call, Worker
from acceptance.spec import CallableRef, Case
from acceptance.spec.inputs import Recipe, RoleInputs

if TYPE_CHECKING:
    from acceptance.measure.engine import Roles

Tensors = tuple[torch.Tensor, ...]

#: Where fingerprints are computed: a case's roles' workers (the reference worker's), or one worker.
Workers = RoleWorkers | Worker

#: Spec fields that cannot change an input, a baseline output or an oracle output.
NOT_IN_KEY = frozenset(
    {
        "path",
        "name",
        "category",
        "description",
        "impl",
        "dtypes",
        "cases",
        "trials",
        "thresholds",
        "floors",
        "invariants",
        "timeout",
        "baseline_timeout",
        "oracle_timeout",
        "memory_limit_gib",
        "atomic_runs",
        "reruns",
        "dual_delta",
        "waivers",
        "overrides",
        "deterministic",
        "tier",
        "perf",
    }
)

#: Roles whose per-role keyword arguments (``<role>_params``) a reference depends on.
KEYED_ROLES = ("baseline", "oracle")

#: Seconds a worker may take to fingerprint one callable (it imports the callable's module first).
FINGERPRINT_TIMEOUT = 120.0

#: Largest outputs (bytes) of one trial that go in the case's pack rather than an entry of their own.
PACK_TRIAL_BYTES = 1 << 20
#: Largest pack (bytes of tensors): the trials beyond get entries of their own.
PACK_BYTES = 32 << 20


def _answered_hex(outs: Tensors) -> str:
    """The hex digest a worker's fingerprint call answers (its ASCII bytes as a uint8 tensor)."""
    return bytes(outs[0].numpy()).decode("ascii")


def _fingerprint_hex(fn: Callable[..., object]) -> str:
    return hashlib.sha256(canonical_json(callable_fingerprint(fn)).encode()).hexdigest()


#: :func:`acceptance.spec.inputs.generate` as a worker reference: its fingerprint comes back with the callables' in
#: the run's first batch (:meth:`RunReferences.prefetch`), so that this process need not read every installed
#: distribution's metadata to compute it (~0.5 s before the first case).
GENERATOR_REF = CallableRef("acceptance.spec.inputs:generate", ".")


@functools.lru_cache(maxsize=1)
def generator_fingerprint() -> str:
    """SHA-256 of :func:`acceptance.spec.inputs.generate`'s fingerprint (its file and the helpers it names)."""
    from acceptance.spec.inputs import generate

    return _fingerprint_hex(generate)


def spec_part(case: Case) -> str | None:
    """The repr of the spec fields and case values a reference depends on (see the module docstring), or
    ``None`` when a repr shows a memory address (an object without a stable text form: such a case is not
    cached)."""
    fields = {f.name: getattr(case.spec, f.name) for f in dataclasses.fields(case.spec) if f.name not in NOT_IN_KEY}
    own = {
        "params": case.params,
        "symbols": case.symbols,
        "preset": case.preset,
        "role_params": {r: case.role_params[r] for r in KEYED_ROLES if r in case.role_params},
    }
    text = repr(sorted(fields.items())) + "|" + repr(_sorted(own))
    return None if " at 0x" in text else text


def _sorted(value: object) -> object:
    """``value`` with every mapping turned into its items sorted by key (a repr independent of insertion order)."""
    if isinstance(value, dict):
        return sorted(((repr(k), _sorted(v)) for k, v in value.items()), key=lambda kv: kv[0])
    return value


class CaseReferences:
    """The references of one case, for :func:`acceptance.measure.engine.run_trials` (``get``/``put``/``close``) and for
    input generation (:meth:`inputs`). ``fns`` maps "baseline"/"oracle" to the callable's fingerprint (``None``:
    not cached); ``base`` is ``None`` when the case is not cached at all."""

    def __init__(self, cache: ReferenceCache, base: dict[str, str | int] | None, fns: dict[str, str | None]):
        self.cache = cache
        self.base = base
        self.fns = fns
        self._packed: dict[str, dict[int, Tensors]] = {}  # role -> trial -> outputs, as read from its pack
        self._fresh: dict[str, dict[int, Tensors]] = {}  # role -> trial -> outputs computed here, to be packed
        self._fresh_bytes: dict[str, int] = {}  # role -> bytes of its fresh trials
        self._alone: dict[str, bool] = {}  # role -> whether trial 0 has an entry of its own (a case of large outputs)
        self._pack_key: dict[str, str | None] = {}  # role -> key of its pack (computed once)
        self._looked: dict[str, float] = {}  # role -> time.monotonic() of the last look at its pack that missed
        self._recipe: CachedRecipe | None = None  # the case's inputs as this process reads and makes them

    def _stored(self, role: str) -> bool:
        """Whether ``role``'s tensors are cached: the cache is on, the case has its key fields, and the role's
        callable a fingerprint (the inputs need none)."""
        return self.base is not None and self.cache.enabled and (role == "inputs" or self.fns.get(role) is not None)

    def _key(self, role: str, trial: int | str) -> str | None:
        if self.base is None or not self._stored(role):
            return None
        return key(role=role, trial=trial, fn=self.fns.get(role), **self.base)

    def _pack(self, role: str, again: bool = False) -> dict[int, Tensors]:
        """The role's pack, read once, or ``again`` (empty when there is none, or it does not hold what its
        index says)."""
        if role not in self._packed or again:
            if role not in self._pack_key:
                self._pack_key[role] = self._key(role, "all")
            k = self._pack_key[role]
            found = self.cache.get(k) if k is not None else None
            self._packed[role] = _unpack(found) if found is not None else {}
            if not self._packed[role]:
                self._looked[role] = time.monotonic()
        return self._packed[role]

    def _relook(self, role: str) -> bool:
        """Whether to look for the role's pack again before a trial is computed: it was missing at the last look
        (another process may have stored it since: a machine sharing the cache, a job on the same case), and
        that look is at least :attr:`acceptance.cache.ReferenceCache.relook_s` old (0 for a folder, where a miss
        costs microseconds: every trial looks)."""
        looked = self._looked.get(role)
        return looked is not None and not self._packed.get(role) and time.monotonic() - looked >= self.cache.relook_s

    def get(self, role: str, trial: int) -> Tensors | None:
        """The role's outputs of ``trial`` if stored, looked up right before the trial would compute them."""
        pack = self._pack(role)
        if trial in pack:
            return pack[trial]
        if trial > 0 and self._relook(role):
            pack = self._pack(role, again=True)
            if trial in pack:
                return pack[trial]
        if not pack and trial > 0 and not self._alone.get(role, False):
            return None  # trials are stored in order: with neither a pack nor trial 0's entry, nothing is stored
        k = self._key(role, trial)  # (a key is a SHA-256 of canonical JSON: asked only where an entry may be)
        if k is None:
            return None
        found = self.cache.get(k)
        if trial == 0:
            self._alone[role] = found is not None
        return found

    def put(self, role: str, trial: int, tensors: Tensors) -> Tensors:
        """Store ``tensors`` (made contiguous) and return them as the trial uses them: in the case's pack
        (written by :meth:`close`) when small, else an entry of their own, written now."""
        tensors = tuple(t.contiguous() for t in tensors)
        if not self._stored(role):
            return tensors
        nbytes = _nbytes(tensors)
        fresh = self._fresh.setdefault(role, {})
        held = self._fresh_bytes.get(role, 0)  # sum(map(_nbytes, fresh.values())), kept as trials come
        if nbytes <= PACK_TRIAL_BYTES and held + nbytes <= PACK_BYTES:
            self._fresh_bytes[role] = held + nbytes - (_nbytes(fresh[trial]) if trial in fresh else 0)
            fresh[trial] = tensors  # the key is computed for the pack only, when it is written
        else:
            k = self._key(role, trial)
            assert k is not None  # the role is stored (checked above), so its trials have keys
            self.cache.put(k, tensors)
            if trial == 0:  # large outputs: each later trial's own entry may be there (another process's)
                self._alone[role] = True
        return tensors

    def close(self) -> None:
        """Write the packs of the roles that computed trials here (with the trials their pack held), and the
        inputs this process made (:meth:`recipe`); the trial engine calls this when a case's trials end, however
        they end."""
        if self._recipe is not None:
            self._recipe.flush()
        for role, fresh in self._fresh.items():
            k = self._key(role, "all")
            if not fresh or k is None:
                continue
            trials = {**self._pack(role), **fresh}
            self.cache.put_later(k, _packed(trials))
            self._packed[role] = trials
        self._fresh, self._fresh_bytes = {}, {}

    def recipe(self, case: Case, trials: int) -> Recipe:
        """The inputs of ``case``'s ``trials`` trials, read from the cache where stored (a
        :class:`CachedRecipe`), or a plain :class:`acceptance.spec.inputs.Recipe` when the case's inputs are not
        cached (no cache; a quantized input, whose packed blocks are not stored)."""
        pack = self._key("inputs", "all")
        if pack is None or any(inp.quant for inp in case.spec.inputs):
            return Recipe(case)
        per_trial = _input_bytes(case)
        if per_trial <= PACK_TRIAL_BYTES and trials * per_trial <= PACK_BYTES:
            keys: dict[int | str, str] = {"all": pack}
        else:
            # every trial's key is a str: the inputs are stored (their pack has a key)
            keys = {k: cast(str, self._key("inputs", k)) for k in range(trials)}
        self._recipe = CachedRecipe(case, self.cache, keys, trials)
        return self._recipe


def _input_bytes(case: Case) -> int:
    """Bytes of one trial's inputs of ``case`` (none quantized): float inputs in the test dtype, the others
    in their own."""
    return sum(
        math.prod(shape) * dtypes.torch_dtype(inp.dtype or case.dtype).itemsize
        for inp, shape in zip(case.spec.inputs, case.shapes, strict=False)
    )


class CachedRecipe(Recipe):
    """The inputs of a case (:class:`acceptance.spec.inputs.Recipe`), read from the reference cache where stored,
    else made by :func:`acceptance.spec.inputs.generate` and stored: the same bits either way.

    ``keys``: ``{"all": key}`` when the case's inputs are one entry, a pack of every trial (each trial's
    inputs at most :data:`PACK_TRIAL_BYTES`, :data:`PACK_BYTES` in all), else ``{trial: key}``, an entry per
    trial. A pack is read once, at the first trial asked for; the trials made here are written as one pack by
    :meth:`flush` once every one of the case's ``trials`` is either read or made (a pack read with fewer
    trials is written again with the new ones); an entry of its own is written as its trial is made.

    Picklable, so that a worker makes (or reads) the inputs where they are used: the copy carries the case,
    the cache folder, its cap and the keys, never what this copy has read or made. In a worker, a thread
    writes the entries (:meth:`acceptance.cache.ReferenceCache.write_behind`) while the calls go on: a trial's
    entry is queued as a copy (the calls may write to their inputs), unless it is too large to wait
    (:data:`acceptance.cache.store.QUEUED_BYTES`), and the worker queues a pack (:meth:`flush`) after the batch
    that completes it, then waits for the writes before it ends
    (:func:`acceptance.cache.store.settle_shared`). In this process :meth:`CaseReferences.close` calls
    :meth:`flush` when the case's trials end.
    """

    def __init__(self, case: Case, cache: ReferenceCache, keys: dict[int | str, str], trials: int):
        super().__init__(case)
        self.root, self.max_bytes, self.keys, self.trials = str(cache.root), cache.max_bytes, keys, trials
        self._store: ReferenceCache | None = cache
        self._forget()

    def _forget(self) -> None:
        self._pack: dict[int, Tensors] | None = None  # trials read from the pack and not handed out yet
        self._read: set[int] = set()  # trials handed out from the pack
        self._made: dict[int, Tensors] = {}  # trials made here, as made (their own copies), for the pack
        self._seen: set[int] = set()  # trials read or made
        self._due = False  # every trial read or made, some made: the pack is to be written

    def __getstate__(self) -> dict[str, object]:
        return {
            "case": self.case,
            "root": self.root,
            "max_bytes": self.max_bytes,
            "keys": self.keys,
            "trials": self.trials,
        }

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._store = None
        self._forget()

    def _cache(self) -> ReferenceCache:
        if self._store is None:  # a copy, unpickled in a worker: the process's own store, with its writer thread
            self._store = shared(self.root, self.max_bytes)
        return self._store

    def __call__(self, trial: int) -> list[torch.Tensor] | RoleInputs:
        if "all" not in self.keys:
            k = self.keys.get(trial)
            found = self._cache().get(k) if k is not None else None
            if found is not None:
                return list(found)
            made = super().__call__(trial)
            if k is not None and isinstance(made, list):
                if _nbytes(made) <= QUEUED_BYTES:  # a copy waits for the writes: the calls may change the inputs
                    self._cache().put_later(k, [t.clone() for t in made])
                else:  # too large to wait (and to copy): written before the calls get it
                    self._cache().put(k, made)
            return made
        if self._pack is None:
            found = self._cache().get(self.keys["all"])
            self._pack = _unpack(found) if found is not None else {}
        if trial in self._pack:
            self._read.add(trial)
            self._seen.add(trial)
            return list(self._pack.pop(trial))  # handed out: the calls may write to them, so not kept
        made = super().__call__(trial)
        if isinstance(made, list):
            self._made[trial] = tuple(t.clone() for t in made)  # as made, whatever the calls do to the inputs
            self._seen.add(trial)
            self._due = len(self._seen) >= self.trials  # trials are numbered 0 .. trials - 1
        return made

    def pending(self) -> int:
        """Bytes of inputs made here that wait for :meth:`flush` to write them (0: nothing to write now)."""
        return sum(map(_nbytes, self._made.values())) if self._due else 0

    def flush(self) -> None:
        """Write the pack once every trial is read or made (see the class docstring); else nothing."""
        if not self._due:
            return
        trials = dict(self._made)
        if self._read:  # the pack read before: its trials stay in it
            found = self._cache().get(self.keys["all"])
            trials = {**(_unpack(found) if found is not None else {}), **trials}
        self._made, self._due, self._seen = {}, False, set(self._read)  # a trial made again later is not a pack
        self._cache().put_later(self.keys["all"], _packed(trials))  # its own copies: nothing changes them


def _nbytes(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _packed(trials: dict[int, Tensors]) -> list[torch.Tensor]:
    """A pack's tensors: an int64 index of (trial, outputs) rows, then each trial's outputs in trial order."""
    order = sorted(trials)
    index = torch.tensor([[t, len(trials[t])] for t in order], dtype=torch.int64).reshape(-1, 2)
    return [index] + [x for t in order for x in trials[t]]


def _unpack(tensors: Tensors) -> dict[int, Tensors]:
    """The trials of a pack (:func:`_packed`); empty when the index does not match the tensors that follow."""
    if not tensors or tensors[0].dtype != torch.int64 or tensors[0].dim() != 2 or tensors[0].shape[1] != 2:
        return {}
    rows = tensors[0].tolist()
    if sum(n for _, n in rows) != len(tensors) - 1 or any(n < 1 for _, n in rows):
        return {}
    out, at = {}, 1
    for t, n in rows:
        out[t] = tuple(tensors[at : at + n])
        at += n
    return out


class RunReferences:
    """The cache of one run and the fingerprints found so far (one worker call per distinct callable)."""

    def __init__(self, cache: ReferenceCache | None = None):
        self.cache = cache if cache is not None else ReferenceCache(enabled=False)
        self._fps: dict[Hashable, str | None] = {}  # RoleRef (worker), id of a callable (in process) -> fingerprint

    def _fingerprint(self, role: str, ref: RoleRef | Callable[..., object], worker: Workers | None) -> str | None:
        """Fingerprint of a role's callable: resolved in the worker (``ref`` a
        :class:`acceptance.formats.roleref.RoleRef`) or, without one, ``ref`` is the callable itself. ``None``
        when it cannot be identified."""
        memo = ref if worker is not None else id(ref)
        if memo in self._fps:
            return self._fps[memo]
        found: str | None = None
        try:
            if worker is None:
                found = _fingerprint_hex(cast(Callable[..., object], ref))  # no worker: the callable itself
            else:
                outs, _ = worker.call(
                    f"{role} fingerprint",
                    FingerprintRef(cast(RoleRef, ref)),  # a worker's roles are references
                    0,
                    (),
                    {},
                    device=torch.device("cpu"),
                    timeout=FINGERPRINT_TIMEOUT,
                )
                found = _answered_hex(outs)
        except (CaseError, FingerprintError, TypeError, ValueError, RecursionError):
            found = None
        self._fps[memo] = found
        return found

    def prefetch(self, roles: Iterable[Roles], worker: Workers | None) -> None:
        """Fingerprint the baseline and oracle callables of every :class:`acceptance.measure.engine.Roles` in ``roles``
        (worker references) not known yet, in one batch to the idle ``worker``: one round trip at the start of
        a run instead of one whenever a case names a callable first, and every case can then get ready while
        the worker answers the case before it (:meth:`known`). A call that breaks leaves its callable without
        a fingerprint, as :meth:`_fingerprint` does; the callables after it are fingerprinted when needed."""
        if not self.cache.enabled or worker is None or worker.in_flight:
            return
        todo: dict[RoleRef, str] = {} if GENERATOR_REF in self._fps else {GENERATOR_REF: "generator"}
        for r in roles:
            for role, ref in (("baseline", r.baseline), ("oracle", r.oracle)):
                try:
                    if ref not in self._fps:
                        todo.setdefault(ref, role)
                except TypeError:  # unhashable (a reference holding a mutable value): left to its turn
                    pass
        if not todo:
            return
        cpu = torch.device("cpu")
        batch = worker.submit(
            0, ((),), [Call(f"{role} fingerprint", FingerprintRef(ref), IMPL, {}, cpu) for ref, role in todo.items()]
        )
        for ref in todo:
            try:
                self._fps[ref] = _answered_hex(batch.next(timeout=FINGERPRINT_TIMEOUT)[0])
            except (CaseError, ValueError):
                self._fps[ref] = None
                batch.discard()
                return

    def known(self, roles: Roles, worker: Workers | None = None) -> bool:
        """Whether :meth:`for_case` for ``roles`` needs no call (the cache is off, or both fingerprints are
        known), so that it may run while the worker is busy with another case."""
        if not self.cache.enabled:
            return True
        return all((ref if worker is not None else id(ref)) in self._fps for ref in (roles.baseline, roles.oracle))

    def for_case(self, case: Case, roles: Roles, worker: Workers | None = None) -> CaseReferences:
        """The references of ``case`` whose callables are ``roles`` (an :class:`acceptance.measure.engine.Roles` of
        references when ``worker`` runs them, of callables otherwise)."""
        if not self.cache.enabled:
            return CaseReferences(self.cache, None, {})
        spec = spec_part(case)
        generator = self._fps.get(GENERATOR_REF) if worker is not None else None
        if generator is None:
            try:
                generator = generator_fingerprint()
            except (FingerprintError, TypeError, ValueError, RecursionError):
                generator = None
        if spec is None or generator is None:
            return CaseReferences(self.cache, None, {})
        seed = case.spec.seed
        threads = getattr(worker, "threads", None) or torch.get_num_threads()  # where the references compute
        base = dict(case=case.id, dtype=case.dtype, seed=seed, spec=spec, generator=generator, threads=threads)
        fns = {
            "baseline": self._fingerprint("baseline", roles.baseline, worker),
            "oracle": self._fingerprint("oracle", roles.oracle, worker),
        }
        return CaseReferences(self.cache, base, fns)

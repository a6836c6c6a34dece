"""A case's baseline and oracle outputs in one cache entry per role (a pack): bit-exact round trips, packs that
grow with more trials, large outputs in entries of their own, a damaged index read as a miss."""

from __future__ import annotations

import pytest
import torch

from acceptance.cache import ReferenceCache
from acceptance.measure import references as R
from acceptance.numerics.oracle import Float64Ref
from acceptance.spec import CallableRef
from acceptance.spec.inputs import generate

BASE = dict(case="op[float32-N=4]", dtype="float32", seed=7, spec="spec-repr", generator="g" * 64, threads=1)
FNS = {"baseline": "b" * 64, "oracle": "o" * 64}


def refs(cache: ReferenceCache) -> R.CaseReferences:
    return R.CaseReferences(cache, dict(BASE), dict(FNS))


def outputs(trial: int, n: int = 5) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(trial)
    return (torch.randn(n, generator=g, dtype=torch.float64), torch.arange(trial + 1, dtype=torch.int32))


def same(a, b) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype
        and x.shape == y.shape
        and torch.equal(x.view(torch.uint8) if x.dim() else x, y.view(torch.uint8) if y.dim() else y)
        for x, y in zip(a, b, strict=False)
    )


def files(cache: ReferenceCache) -> list:
    return sorted(cache.root.rglob("*.ref"))


def test_a_cases_trials_go_in_one_entry_per_role_and_come_back_bit_for_bit(tmp_path):
    cache = ReferenceCache(tmp_path)
    first = refs(cache)
    assert first.get("baseline", 0) is None and first.get("oracle", 0) is None
    for t in range(5):
        first.put("baseline", t, outputs(t))
        first.put("oracle", t, outputs(100 + t))
    assert files(cache) == []  # written when the trials end
    first.close()
    assert len(files(cache)) == 2
    second = refs(cache)
    for t in range(5):
        assert same(second.get("baseline", t), outputs(t)) and same(second.get("oracle", t), outputs(100 + t))
    assert second.get("baseline", 5) is None
    second.close()  # nothing new: nothing written
    assert len(files(cache)) == 2


def test_a_run_with_more_trials_adds_them_to_the_pack(tmp_path):
    cache = ReferenceCache(tmp_path)
    a = refs(cache)
    for t in range(3):
        a.put("baseline", t, outputs(t))
    a.close()
    b = refs(cache)
    for t in range(6):
        if b.get("baseline", t) is None:
            b.put("baseline", t, outputs(t))
    b.close()
    c = refs(cache)
    assert all(same(c.get("baseline", t), outputs(t)) for t in range(6))
    assert len(files(cache)) == 1


def test_large_outputs_get_entries_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "PACK_TRIAL_BYTES", 64)
    cache = ReferenceCache(tmp_path)
    a = refs(cache)
    big = [(torch.full((20,), float(t)),) for t in range(3)]  # 80 bytes a trial
    for t in range(3):
        a.put("oracle", t, big[t])
    assert len(files(cache)) == 3  # written at once
    a.close()
    assert len(files(cache)) == 3
    b = refs(cache)
    assert all(same(b.get("oracle", t), big[t]) for t in range(3))
    empty = R.CaseReferences(ReferenceCache(tmp_path / "other"), dict(BASE), dict(FNS))
    assert empty.get("oracle", 0) is None and empty.get("oracle", 1) is None


def test_a_pack_beyond_its_cap_leaves_the_rest_to_entries_of_their_own(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "PACK_BYTES", 100)
    cache = ReferenceCache(tmp_path)
    a = refs(cache)
    for t in range(6):
        a.put("baseline", t, (torch.full((8,), float(t)),))  # 32 bytes: three fit in 100
    a.close()
    assert len(files(cache)) == 1 + 3
    b = refs(cache)
    assert [float(b.get("baseline", t)[0][0]) for t in range(6)] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_pack_whose_index_does_not_match_is_a_miss(tmp_path):
    cache = ReferenceCache(tmp_path)
    k = refs(cache)._key("baseline", "all")
    cache.put(k, [torch.tensor([[0, 3]], dtype=torch.int64), torch.ones(2)])  # says 3 outputs, holds 1
    assert refs(cache).get("baseline", 0) is None
    cache.put(k, [torch.ones(2)])  # no index at all
    assert refs(cache).get("baseline", 0) is None


def test_an_uncacheable_role_is_never_packed(tmp_path):
    cache = ReferenceCache(tmp_path)
    r = R.CaseReferences(cache, dict(BASE), {"baseline": None, "oracle": "o" * 64})
    r.put("baseline", 0, outputs(0))
    r.close()
    assert files(cache) == [] and r.get("baseline", 0) is None


@pytest.mark.parametrize("stop", [1, 4])
def test_a_case_that_ends_early_keeps_the_trials_it_computed(tmp_path, stop):
    cache = ReferenceCache(tmp_path)
    a = refs(cache)
    for t in range(stop):
        a.put("oracle", t, outputs(t))
    a.close()  # the engine closes whatever ended the trials
    b = refs(cache)
    assert all(same(b.get("oracle", t), outputs(t)) for t in range(stop)) and b.get("oracle", stop) is None


# --------------------------------------------------------------------------- fingerprints fetched at the start


def _hex(fn) -> str:
    import hashlib

    from acceptance.cache import callable_fingerprint, canonical_json

    return hashlib.sha256(canonical_json(callable_fingerprint(fn)).encode()).hexdigest()


def test_every_fingerprint_of_a_run_comes_back_in_one_batch(tmp_path):
    from acceptance.isolation.worker import Worker
    from acceptance.measure.engine import Roles

    where = str(tmp_path / "spec.yaml")
    add, mul, sub = (CallableRef(f"torch:{n}", where) for n in ("add", "mul", "sub"))
    roles = [Roles(add, add, Float64Ref(add)), Roles(mul, mul, Float64Ref(mul)), Roles(add, add, sub)]
    run = R.RunReferences(ReferenceCache(tmp_path / "cache"))
    with Worker() as worker:
        sent = []
        submit = worker.submit
        worker.submit = lambda *a: sent.append(a) or submit(*a)
        run.prefetch(roles, worker)
        # the input generator, add, float64(add), mul, float64(mul), sub: once each
        assert len(sent) == 1 and len(sent[0][2]) == 6
        assert all(run.known(r, worker) for r in roles)
        # the worker's fingerprint of the input generator is the one this process computes
        assert run._fps[R.GENERATOR_REF] == _hex(generate) == R.generator_fingerprint()
        assert worker.in_flight == 0
        generation = worker._generation
        # answered as computed in this process, and never asked again
        assert run._fingerprint("baseline", add, worker) == _hex(torch.add)
        assert run._fingerprint("oracle", sub, worker) == _hex(torch.sub)
        assert run._fingerprint("baseline", mul, worker) != _hex(torch.add)
        run.prefetch(roles, worker)
        assert len(sent) == 1 and worker._generation == generation


def test_a_callable_that_cannot_be_fingerprinted_leaves_the_rest_to_their_turn(tmp_path):
    from acceptance.isolation.worker import Worker
    from acceptance.measure.engine import Roles

    where = str(tmp_path / "spec.yaml")
    add = CallableRef("torch:add", where)
    missing = CallableRef("no_such_module_here:f", where)
    mul = CallableRef("torch:mul", where)
    run = R.RunReferences(ReferenceCache(tmp_path / "cache"))
    with Worker() as worker:
        run.prefetch([Roles(add, add, missing), Roles(mul, mul, mul)], worker)
        assert run.known(Roles(add, add, missing), worker)
        assert run._fps[missing] is None  # uncacheable, as when asked in its turn
        assert not run.known(Roles(mul, mul, mul), worker)  # after the broken call: asked when needed
        assert run._fingerprint("baseline", mul, worker) == _hex(torch.mul)


def test_nothing_is_fetched_without_a_cache(tmp_path):
    from acceptance.measure.engine import Roles

    class NoWorker:
        in_flight = 0

        def submit(self, *a):
            raise AssertionError("no call without a cache")

    add = CallableRef("torch:add", "spec.yaml")
    R.RunReferences(ReferenceCache(tmp_path / "cache", enabled=False)).prefetch([Roles(add, add, add)], NoWorker())


def test_a_miss_computes_the_keys_of_the_pack_and_trial_0_only(tmp_path, monkeypatch):
    """A case with nothing cached asks for its pack and trial 0's entry; once both miss, later trials are
    known to be missing (trials are stored in order) and no key of theirs is computed: a key is a SHA-256 of
    canonical JSON, ~20 us, and a run asks for every role of every trial."""
    asked: list = []
    real = R.key
    monkeypatch.setattr(R, "key", lambda **parts: asked.append((parts["role"], parts["trial"])) or real(**parts))
    r = refs(ReferenceCache(tmp_path))
    assert all(r.get(role, t) is None for t in range(20) for role in ("baseline", "oracle"))
    assert sorted(asked, key=str) == sorted(
        [("baseline", "all"), ("baseline", 0), ("oracle", "all"), ("oracle", 0)], key=str
    )

"""A case's generated inputs in the reference cache: one pack per case (an entry per trial when they are large),
read back bit for bit instead of made again, in this process and in the worker that makes them; what a call
writes to its inputs never reaches the cache; a pack grows with more trials; quantized inputs are not cached."""

from __future__ import annotations

import pickle
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.cache import ReferenceCache
from acceptance.cache.store import settle_shared, shared
from acceptance.isolation.worker import Worker
from acceptance.measure import engine
from acceptance.measure import references as R
from acceptance.spec import CallableRef, expand, inputs, load_spec

BASE = dict(case="op[bfloat16-N=37]", dtype="bfloat16", seed=11, spec="spec-repr", generator="g" * 64, threads=1)
FNS = {"baseline": "b" * 64, "oracle": "o" * 64}
CPU = torch.device("cpu")

SPEC = textwrap.dedent("""
    name: {name}
    category: arithmetic
    impl: k.py:first
    baseline: k.py:first
    dtypes: [bfloat16]
    inputs:
      - {{name: a, shape: [N], dist: {{normal: [0, 3]}}}}
      - {{name: i, shape: [3, N], dtype: int32, dist: {{randint: [-50, 50]}}}}
      - {{name: s, shape: [N], dist: {{specials: {{values: [nan, inf, -0.0], fraction: 0.3, of: {{uniform: [-1, 1]}}}}}}}}
    cases:
      - {{N: {n}}}
    seed: {seed}
""")  # noqa: E501

KERNELS = "def first(a, *rest):\n    return a.clone()\n"


def case_of(tmp_path: Path, name: str = "incache", n: int = 37, seed: int = 11):
    folder = tmp_path / "specs"
    folder.mkdir(exist_ok=True)
    (folder / "k.py").write_text(KERNELS)
    path = folder / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, n=n, seed=seed))
    spec, problems = load_spec(path)
    assert problems == [], problems
    return expand([spec])[0]


def bits(tensors) -> list[tuple]:
    """(dtype, shape, raw bytes) of each tensor: equal exactly when the tensors are the same bit for bit (NaN
    payloads and signed zeros included)."""
    return [(t.dtype, tuple(t.shape), t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()) for t in tensors]


@pytest.fixture
def made(monkeypatch):
    """Trials for which this process called :func:`acceptance.spec.inputs.generate`."""
    calls: list[int] = []
    original = inputs.generate

    def counting(case, trial):
        calls.append(trial)
        return original(case, trial)

    monkeypatch.setattr(inputs, "generate", counting)
    return calls


def test_a_cases_inputs_are_one_pack_read_back_bit_for_bit(tmp_path, made):
    case = case_of(tmp_path)
    expected = [bits(inputs.generate(case, t)) for t in range(6)]
    made.clear()
    cache = ReferenceCache(tmp_path / "cache")
    first = R.CaseReferences(cache, dict(BASE), dict(FNS))
    recipe = first.recipe(case, 6)
    assert isinstance(recipe, R.CachedRecipe) and list(recipe.keys) == ["all"]
    assert [bits(recipe(t)) for t in range(6)] == expected and made == list(range(6))
    assert not list(cache.root.rglob("*.ref"))  # the pack is written when the case's trials end
    first.close()
    assert len(list(cache.root.rglob("*.ref"))) == 1
    made.clear()
    again = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 6)
    assert [bits(again(t)) for t in range(6)] == expected and made == []  # read, not made


def test_what_a_call_writes_to_its_inputs_never_reaches_the_cache(tmp_path):
    case = case_of(tmp_path)
    cache = ReferenceCache(tmp_path / "cache")
    refs = R.CaseReferences(cache, dict(BASE), dict(FNS))
    recipe = refs.recipe(case, 3)
    for t in range(3):
        a, i, s = recipe(t)
        a.fill_(7.0), i.zero_(), s.mul_(-1)  # an impl writing to its inputs in place
    refs.close()
    again = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 3)
    assert [bits(again(t)) for t in range(3)] == [bits(inputs.generate(case, t)) for t in range(3)]


def test_a_run_with_more_trials_adds_them_to_the_pack(tmp_path, made):
    case = case_of(tmp_path)
    cache = ReferenceCache(tmp_path / "cache")
    refs = R.CaseReferences(cache, dict(BASE), dict(FNS))
    short = refs.recipe(case, 3)
    [short(t) for t in range(3)]
    refs.close()
    made.clear()
    refs = R.CaseReferences(cache, dict(BASE), dict(FNS))
    longer = refs.recipe(case, 5)
    got = [bits(longer(t)) for t in range(5)]
    assert made == [3, 4]  # the first three read from the pack
    refs.close()
    assert len(list(cache.root.rglob("*.ref"))) == 1  # the same pack, rewritten with five trials
    expected = [bits(inputs.generate(case, t)) for t in range(5)]
    made.clear()
    third = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 5)
    assert [bits(third(t)) for t in range(5)] == got == expected and made == []


def test_large_inputs_get_an_entry_per_trial_written_as_they_are_made(tmp_path, made, monkeypatch):
    case = case_of(tmp_path, n=300)
    # one trial: 300 bfloat16 + 900 int32 + 300 bfloat16 = 4800 bytes
    assert R._input_bytes(case) == 300 * 2 + 3 * 300 * 4 + 300 * 2
    monkeypatch.setattr(R, "PACK_TRIAL_BYTES", 4799)
    cache = ReferenceCache(tmp_path / "cache")
    recipe = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 4)
    assert sorted(recipe.keys) == [0, 1, 2, 3]
    first = bits(recipe(0))
    assert len(list(cache.root.rglob("*.ref"))) == 1  # written at once, no close needed
    made.clear()
    again = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 4)
    assert bits(again(0)) == first and made == []
    assert bits(again(1)) == bits(inputs.generate(case, 1)) and made[0] == 1  # not stored yet: made


def test_a_whole_case_over_the_pack_cap_gets_entries_per_trial(tmp_path, monkeypatch):
    case = case_of(tmp_path, n=300)
    monkeypatch.setattr(R, "PACK_BYTES", 4800 * 4 - 1)  # three trials fit, four do not
    cache = ReferenceCache(tmp_path / "cache")
    assert list(R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 3).keys) == ["all"]
    assert sorted(R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 4).keys) == [0, 1, 2, 3]


def test_uncached_and_quantized_cases_make_their_inputs(tmp_path):
    case = case_of(tmp_path)
    cache = ReferenceCache(tmp_path / "cache")
    assert type(R.CaseReferences(cache, None, {}).recipe(case, 2)) is inputs.Recipe  # not cached
    off = ReferenceCache(tmp_path / "off", enabled=False)
    assert type(R.CaseReferences(off, dict(BASE), dict(FNS)).recipe(case, 2)) is inputs.Recipe
    folder = tmp_path / "specs"
    (folder / "q.yaml").write_text(
        textwrap.dedent("""
        name: qcase
        category: quantized
        impl: k.py:first
        baseline: k.py:first
        dtypes: [float32]
        inputs:
          - {name: w, shape: [4, 64], dist: {normal: [0, 1]}, quant: q4_0}
        cases: [{}]
    """)
    )
    spec, problems = load_spec(folder / "q.yaml")
    assert problems == [], problems
    quantized = expand([spec])[0]
    assert type(R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(quantized, 2)) is inputs.Recipe


def test_a_pickled_recipe_carries_its_keys_and_nothing_it_read_or_made(tmp_path):
    case = case_of(tmp_path)
    cache = ReferenceCache(tmp_path / "cache")
    recipe = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 2)
    recipe(0), recipe(1)
    assert recipe.pending() > 0
    copy = pickle.loads(pickle.dumps(recipe))
    assert (copy.keys, copy.trials, copy.root, copy.max_bytes) == (recipe.keys, 2, str(cache.root), cache.max_bytes)
    assert copy.pending() == 0 and copy._made == {} and copy._pack is None
    assert len(pickle.dumps(copy)) < len(pickle.dumps(recipe)) + 1  # state never travels
    assert bits(copy(1)) == bits(inputs.generate(case, 1))


WORKER_KERNELS = "def first(a, *rest):\n    return a.clone()\n"


def test_the_worker_reads_the_inputs_from_the_cache_and_writes_those_it_made(tmp_path):
    """A planted pack (each trial's ``a`` plus one) is what the worker's calls get; a case with nothing stored is
    made in the worker and its pack is written before the worker ends."""
    planted_case = case_of(tmp_path, name="planted", seed=5)
    fresh_case = case_of(tmp_path, name="fresh", seed=6)
    cache = ReferenceCache(tmp_path / "cache")
    spec_file = str(planted_case.spec.path)
    ref = CallableRef("k.py:first", spec_file)
    roles = engine.Roles(ref, ref, ref)
    base = dict(BASE, case=planted_case.id)
    planted_refs = R.CaseReferences(cache, base, dict(FNS))
    planted = planted_refs.recipe(planted_case, 4)
    plants = {
        t: tuple(x + 1 if x.is_floating_point() else x for x in inputs.generate(planted_case, t)) for t in range(4)
    }
    assert cache.put(planted.keys["all"], R._packed(plants))
    fresh_refs = R.CaseReferences(cache, dict(BASE, case=fresh_case.id), dict(FNS))
    fresh = fresh_refs.recipe(fresh_case, 4)
    with Worker() as w:
        got = [t.impl[0] for t in engine.run_trials(roles, planted, 4, device=CPU, params={}, oracle=False, executor=w)]
        assert all(bits([g]) == bits([plants[t][0]]) for t, g in enumerate(got))  # the cache's, not made
        made = [t.impl[0] for t in engine.run_trials(roles, fresh, 4, device=CPU, params={}, oracle=False, executor=w)]
        w.finish()
    stored = R._unpack(ReferenceCache(tmp_path / "cache").get(fresh.keys["all"]))
    assert sorted(stored) == [0, 1, 2, 3]
    for t in range(4):
        assert bits(stored[t]) == bits(inputs.generate(fresh_case, t))
        assert bits([made[t]]) == bits([inputs.generate(fresh_case, t)[0]])


def test_specials_survive_the_round_trip(tmp_path):
    """NaN payloads, infinities and signed zeros of a specials input come back as they were made."""
    case = case_of(tmp_path, n=500)
    cache = ReferenceCache(tmp_path / "cache")
    refs = R.CaseReferences(cache, dict(BASE), dict(FNS))
    recipe = refs.recipe(case, 2)
    made_s = recipe(0)[2]
    recipe(1)
    refs.close()
    read_s = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 2)(0)[2]
    values = made_s.float().numpy()
    assert np.isnan(values).any() and np.isinf(values).any() and (np.signbit(values) & (values == 0)).any()
    assert bits([read_s]) == bits([made_s])


def test_a_trial_made_again_after_the_pack_is_written_leaves_the_pack_whole(tmp_path):
    """A trial asked for again once the case's pack is written (the runner makes a trial's inputs again to say
    which elements a call changed) is not written as a pack of its own over the whole one."""
    case = case_of(tmp_path)
    cache = ReferenceCache(tmp_path / "cache")
    refs = R.CaseReferences(cache, dict(BASE), dict(FNS))
    recipe = refs.recipe(case, 4)
    [recipe(t) for t in range(4)]
    refs.close()
    recipe(2)
    assert recipe.pending() == 0
    refs.close()
    stored = R._unpack(cache.get(recipe.keys["all"]))
    assert sorted(stored) == [0, 1, 2, 3]
    assert all(bits(stored[t]) == bits(inputs.generate(case, t)) for t in range(4))


@pytest.mark.parametrize("per_trial", [True, False])
def test_in_a_worker_a_thread_writes_the_inputs_as_they_were_made(tmp_path, monkeypatch, per_trial):
    """A recipe unpickled in a worker queues its entries for the writer thread of the process's store (held
    here, so that the calls come first): the calls get the inputs at once, and what they write to them in place
    never reaches the entries written afterwards."""
    case = case_of(tmp_path, n=300)
    if per_trial:
        monkeypatch.setattr(R, "PACK_TRIAL_BYTES", 4799)
    cache = ReferenceCache(tmp_path / "cache")
    recipe = pickle.loads(pickle.dumps(R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 3)))
    assert (sorted(recipe.keys) == [0, 1, 2]) == per_trial
    store = shared(str(cache.root), cache.max_bytes)
    gate, original = threading.Event(), store.put
    monkeypatch.setattr(store, "put", lambda key, tensors: gate.wait(30) and original(key, tensors))
    for t in range(3):
        a, i, s = recipe(t)
        a.fill_(7.0), i.zero_(), s.mul_(-1)  # an impl writing to its inputs in place
    recipe.flush()
    assert not list(cache.root.rglob("*.ref"))  # queued: nothing waited for the disk
    gate.set()
    settle_shared()
    assert len(list(cache.root.rglob("*.ref"))) == (3 if per_trial else 1)
    again = R.CaseReferences(cache, dict(BASE), dict(FNS)).recipe(case, 3)
    assert [bits(again(t)) for t in range(3)] == [bits(inputs.generate(case, t)) for t in range(3)]

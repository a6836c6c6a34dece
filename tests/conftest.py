"""Test session set-up: runs write their reference cache under the session's temporary folder, never into the
user's cache folder, and run the impl on the CPU unless a test names a device (on a machine with a GPU,
``--device auto`` would pick it for callables written for the host; the CUDA tests pass ``--device cuda``).

The suite runs under pytest-xdist (``-n auto --dist loadfile`` in pyproject's ``addopts``): one worker process
per CPU, a test file's tests all in one worker, in file order, so a module-scoped fixture (one end-to-end run
that several tests read) runs once and the tests of a file see each other as they do in a plain run. Each worker
has its own temporary folders, reference cache and fork server. ``-n 0`` runs everything in this process.
"""

import os

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per CPU this process may run on (``os.sched_getaffinity``), hyperthreads included
    (pytest-xdist alone counts physical cores when psutil is installed: 1 on a 2-vCPU CI runner).
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS") or not hasattr(os, "sched_getaffinity"):
        return None
    return max(1, len(os.sched_getaffinity(0)))


@pytest.fixture(autouse=True, scope="session")
def _reference_cache_in_tmp(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path_factory.mktemp("reference-cache")))
    mp.setenv("ACCEPTANCE_DEVICE", "cpu")
    yield
    mp.undo()


#: The test files that take longest (``--durations`` on 2 cores), started first under xdist so that no long file
#: is left to run alone at the end while the other workers idle; the other files follow in collection order.
LONGEST_FIRST = [
    "test_mutation_seeds.py",
    "test_builtin_library.py",
    "test_doc_snippets.py",
    "test_atomic_reruns.py",
    "test_cli.py",
    "test_faults.py",
    "test_pytest_route.py",
    "test_lifecycle.py",
    "test_action_steps.py",
    "test_cli_habits.py",
]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under xdist (a worker's collection; every worker orders it the same), the files of
    :data:`LONGEST_FIRST` first, in that order; a file's own tests keep their order."""
    if not hasattr(config, "workerinput"):
        return
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for a module's browser tests (:func:`fixtures.browser.chromium`)."""
    from fixtures.browser import chromium

    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one intra-op thread in this process for a module's tests (``--no-isolation`` runs compute here),
    then the count it had."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

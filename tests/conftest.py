"""Test session set-up: runs write their reference cache under the session's temporary folder, never into the
user's cache folder, and run the impl on the CPU unless a test names a device (on a machine with a GPU,
``--device auto`` would pick it for callables written for the host; the CUDA tests pass ``--device cuda``)."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _reference_cache_in_tmp(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path_factory.mktemp("reference-cache")))
    mp.setenv("ACCEPTANCE_DEVICE", "cpu")
    yield
    mp.undo()

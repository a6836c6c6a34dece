"""Test session set-up: runs write their reference cache under the session's temporary folder, never into the
user's cache folder."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _reference_cache_in_tmp(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path_factory.mktemp("reference-cache")))
    yield
    mp.undo()

"""``assert_accurate`` failures read like ``torch.testing.assert_close``'s: the message, at the caller's line."""

import subprocess
import sys
import traceback
from pathlib import Path

import pytest
import torch

from acceptance import AccuracyError, assert_accurate

ROOT = Path(__file__).resolve().parents[1]


def test_a_pass_returns_and_a_failure_is_raised_from_one_thin_frame():
    x = torch.linspace(-3, 3, 257, dtype=torch.float32)
    assert assert_accurate(x.clone(), x, category="activation") is None
    with pytest.raises(AccuracyError) as info:
        assert_accurate(x * 1.01, x, category="activation")
    frames = traceback.extract_tb(info.value.__traceback__)
    assert [f.name for f in frames][1:] == ["assert_accurate"]  # the checking code leaves no frame behind
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_pytest_shows_the_test_line_and_the_message_not_this_package(tmp_path):
    test = tmp_path / "test_gelu.py"
    test.write_text(
        "import torch\nfrom acceptance import assert_accurate\n\n"
        "def test_gelu():\n"
        "    x = torch.linspace(-3, 3, 257)\n"
        "    assert_accurate(x * 1.01, x, category='activation')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:acceptance", str(test)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "assert_accurate(x * 1.01, x, category='activation')" in out
    assert "AccuracyError: Tensor-likes are not accurate (float32 activation)!" in out
    assert "acceptance/decide" not in out and "accuracy_failure" not in out and "rules = Rules(" not in out
    failure = out[out.index("_ test_gelu _") : out.index("short test summary")]
    assert len(failure.splitlines()) < 25, failure

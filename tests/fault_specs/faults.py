"""Impls that misbehave, one fault each: the gate must record each case as an error with the cause and go on."""

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch


def good(x):
    return x * 2


def steady(x):
    """``good`` at 5 ms a call: a run of a few cases of 40 trials lasts long enough to be stopped in the middle,
    whatever the cache already holds."""
    time.sleep(0.005)
    return x * 2


def exits_zero(x):
    sys.exit(0)


def hard_exit_zero(x):
    os._exit(0)


def hard_exit_one(x):
    os._exit(1)


def segfault(x):
    ctypes.string_at(0)


def raises_keyboard_interrupt(x):
    raise KeyboardInterrupt


def swallows_everything_and_hangs(x):
    """Catches every exception, alarms included, and never returns."""
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        try:
            time.sleep(0.05)
        except BaseException:
            pass


def native_busy_loop(x):
    """Blocks in native code with signals blocked: nothing but SIGKILL ends it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGALRM})
    libc = ctypes.CDLL(None)
    libc.pause()


def mutates_input(x):
    x[:3] = 7.0
    return x * 2


def allocates_too_much(x):
    torch.empty(8 * 2**30, dtype=torch.uint8).fill_(1)  # 8 GiB, past the 1 GiB limit of its spec
    return x * 2


def closes_stdout(x):
    """Closes the process's stdout (every call; the second finds it closed already)."""
    sys.stdout.close()
    try:
        os.close(1)
    except OSError:
        pass
    return x * 2


def leaves_a_child(x):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    return x * 2


def writes_to_the_output_folder(x):
    out = Path(os.environ.get("ACCEPTANCE_TEST_OUT", "."))
    (out / "results.json").write_text('{"forged": true}')
    return x * 2


def forges_a_log_line(x):
    raise ValueError("bad\n::error file=x.py,line=1::forged annotation\x1b[31m red \u202e evil" + "y" * 100_000)


def returns_a_string(x):
    return "not a tensor"

"""Nothing the code under test prints can forge a line of a CI log: on GitHub Actions the run switches workflow
commands off with a one-time token before the first case, on only around its own annotations, and on at the end;
user strings reach every output sanitized."""

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from acceptance.cli.group import WorkflowCommands
from acceptance.records import Results
from acceptance.report import github
from acceptance.wording import one_line, safe, visible_controls

SPECS = Path(__file__).parent / "integrity_specs"
STOP = re.compile(r"^::stop-commands::(.+)$")


def _active_commands(log: str) -> list[str]:
    """The lines GitHub would run as workflow commands: walk the log as its parser does, checking that every
    stop token is new (not in the log before) and that commands end switched on."""
    token, active = None, []
    lines = log.splitlines()
    for n, line in enumerate(lines):
        if token is not None:
            if line == f"::{token}::":
                token = None
            continue
        stop = STOP.match(line)
        if stop:
            token = stop.group(1)
            assert len(token) >= 32 and token not in "\n".join(lines[:n]), f"predictable token {token!r}"
        elif line.startswith("::"):
            active.append(line)
    assert token is None, "workflow commands left switched off at the end"
    return active


def test_forged_commands_fall_between_a_fresh_stop_token_and_its_resume(tmp_path):
    env = dict(os.environ, GITHUB_ACTIONS="true", FORGE_TARGET="1")
    spec = SPECS / "forge.yaml"
    out = subprocess.run(
        [sys.executable, "-m", "acceptance", "run", str(spec), "--out", str(tmp_path / "o"), "--annotations"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        timeout=300,
    )
    log = out.stdout.decode("utf-8")
    assert out.returncode == 1, log
    assert log.count("forged after its own stop") >= 2  # the impl wrote to the runner's output (through /proc)
    active = _active_commands(log)
    assert active and all(line.startswith(f"::error file={spec},title=forge float32") for line in active), active
    assert len(active) == 1  # our one annotation, nothing forged
    for raw in ("\x1b", "\x07", "\u202e"):  # the case's param value carries them; the log shows them escaped
        assert raw not in log
    assert "\\u202e" in log and "\\x1b" in log


def test_the_guard_prints_nothing_off_github_actions():
    stream = io.StringIO()
    with WorkflowCommands(stream, enabled=False) as commands:
        commands.emit(["::error::ours"])
    assert stream.getvalue() == "::error::ours\n"


def test_the_guard_switches_commands_on_only_around_the_runners_own():
    stream = io.StringIO()
    with WorkflowCommands(stream, enabled=True) as commands:
        stream.write("::error::forged\n")
        commands.emit(["::error::ours"])
        stream.write("::error::forged later\n")
    assert _active_commands(stream.getvalue()) == ["::error::ours"]
    tokens = re.findall(r"::stop-commands::(\w+)", stream.getvalue())
    assert len(tokens) == 2 and tokens[0] != tokens[1]


def test_every_sanitizer_path_escapes_bidi_and_control_characters():
    hostile = "id\u202eevil\x1b[2J\x07\u2066x"
    for text in (visible_controls(hostile), safe(hostile), one_line(hostile), github.md_escape(hostile)):
        assert not set("\u202e\x1b\x07\u2066") & set(text), text
        assert "\\u202e" in text and "\\x1b" in text and "\\x07" in text


def test_annotations_and_the_job_summary_escape_a_hostile_case_id():
    fixture = Path(__file__).parent / "fixtures" / "recorded_run.json"
    from acceptance.session import results as results_mod

    res: Results = results_mod.load(fixture, warn=lambda _: None)
    bad = next(c for c in res.cases if c.verdict == "fail")
    hostile = bad.model_copy(update={"id": bad.id + "\u202e\x1b[31m\x07::error::x"})
    res = res.model_copy(update={"cases": [hostile]})
    for text in github.annotations(res) + [github.render_summary(res)]:
        assert not set("\u202e\x1b\x07") & set(text), text

"""Hostile input is refused fast and cleanly: spec files over the size, depth or alias-expansion limits exit 2
naming the file; a full disk is one line that keeps what was written; journal lines that are not UTF-8 are
skipped naming the line; a symbolic link in place of the lock is refused and its target left alone."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.isolation import JOURNAL, LOCK
from acceptance.session import results as results_mod
from acceptance.spec import yamlio

SPECS = Path(__file__).parent / "integrity_specs"
HEAD = "name: hostile\ncategory: arithmetic\nimpl: torch:add\n"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def _bomb():
    """Nine levels of nine aliases: 9**9 (about 3.9e8) leaves once expanded, in under 400 bytes."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n" + HEAD


HOSTILE = {
    "alias bomb": (_bomb, "with its aliases expanded"),
    "params nested 20000 deep": (lambda: HEAD + "params: {p: " + "[" * 20000 + "]" * 20000 + "}\n", "nested deeper"),
    "block mappings nested 200 deep": (
        lambda: HEAD + "params:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(200)) + "  " * 201 + "v\n",
        "nested deeper",
    ),
    "a 2 MiB spec": (lambda: HEAD + "# padding\n" * (2 * 2**20 // 10), "larger than"),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_specs_exit_2_naming_the_file(tmp_path, name):
    text, message = HOSTILE[name]
    spec = tmp_path / "hostile.yaml"
    spec.write_text(text())
    for command in ("validate", "run"):
        args = (command, spec) + (("--out", tmp_path / "out") if command == "run" else ())
        r = invoke(*args)
        assert r.exit_code == 2, r.output
        assert f"{spec}:" in r.output and message in r.output and "Traceback" not in r.output


def test_the_limits_leave_ordinary_specs_alone():
    size = max(p.stat().st_size for p in Path("operator_specs").rglob("*.yaml"))
    assert size < yamlio.MAX_BYTES // 16
    r = invoke("validate", "operator_specs")
    assert r.exit_code == 0, r.output


def test_the_alias_limit_counts_expanded_nodes(tmp_path):
    """A list of n aliases to a list of m scalars expands to 1 + n * (m + 1) nodes plus the anchor's m + 1: under
    the limit it loads, one level of aliases more and it is refused."""
    m = 99
    anchor = "base: &b [" + ", ".join(["1"] * m) + "]\n"
    n_ok = (yamlio.MAX_NODES // 2) // (m + 1)
    (tmp_path / "ok.yaml").write_text(anchor + "many: [" + ", ".join(["*b"] * n_ok) + "]\n")
    data, problem = yamlio.read_yaml(tmp_path / "ok.yaml")
    assert problem is None and data is not None and len(data["many"]) == n_ok
    n_bad = yamlio.MAX_NODES // (m + 1) + 1
    (tmp_path / "bad.yaml").write_text(anchor + "many: [" + ", ".join(["*b"] * n_bad) + "]\n")
    data, problem = yamlio.read_yaml(tmp_path / "bad.yaml")
    assert data is None and problem is not None and "aliases expanded" in str(problem)


def test_deep_results_json_is_refused_without_a_traceback(tmp_path):
    (tmp_path / "deep.json").write_text('{"schema_version": 3, "x": ' + "[" * 100000 + "]" * 100000 + "}")
    r = invoke("report", tmp_path / "deep.json")
    assert r.exit_code == 2 and "deep.json: cannot read results" in r.output and "Traceback" not in r.output


def _full_disk_after(monkeypatch, calls):
    """The journal's writes raising ENOSPC from the ``calls``-th on (one write per case; its fsyncs come in
    groups)."""
    real, count = results_mod._write_all, [0]

    def write_all(fd, data):
        count[0] += 1
        if count[0] >= calls:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(results_mod, "_write_all", write_all)


def test_a_full_disk_while_journaling_is_one_line_and_keeps_the_journal(tmp_path, monkeypatch):
    _full_disk_after(monkeypatch, 3)
    out = tmp_path / "out"
    r = invoke("run", SPECS / "six.yaml", "--out", out, "--no-isolation", "--jobs", "1")
    assert r.exit_code == 2 and "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if "No space left on device" in line]
    assert len(errors) == 1 and str(out / JOURNAL) in errors[0] and "--resume" in errors[0]
    lines = (out / JOURNAL).read_text().splitlines()
    assert len(lines) >= 2 and all(json.loads(line)["case"]["id"].startswith("six[") for line in lines[:2])


def test_a_full_disk_while_writing_reports_keeps_results_json(tmp_path, monkeypatch):
    real = results_mod.write_text

    def write_text(path, text, **kw):
        if Path(path).name == "report.html":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, text, **kw)

    monkeypatch.setattr(results_mod, "write_text", write_text)
    out = tmp_path / "out"
    r = invoke("run", SPECS / "six.yaml", "--out", out, "--no-isolation", "--jobs", "1")
    assert "Traceback" not in r.output
    assert f"{out / 'report.html'}: cannot write: No space left on device; results.json is intact" in r.output
    assert len(results_mod.load(out / "results.json").cases) == 6 and (out / "junit.xml").stat().st_size > 0
    assert not (out / "report.html").exists()

    def no_space(path, text, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results_mod, "write_text", no_space)
    r = invoke("report", out / "results.json", "--junit", tmp_path / "j.xml")
    assert r.exit_code == 2 and r.output.strip().endswith(
        f"{tmp_path / 'j.xml'}: cannot write: No space left on device"
    )


def test_journal_lines_that_are_not_utf8_are_skipped_naming_the_line(tmp_path):
    out = tmp_path / "out"
    r = invoke("run", SPECS / "six.yaml", "--out", out, "--no-isolation", "--jobs", "1")
    assert r.exit_code == 0, r.output
    good = (out / JOURNAL).read_bytes().splitlines(keepends=True)
    assert len(good) == 6
    (out / JOURNAL).write_bytes(good[0] + b'{"id": "\xff\xfe"}\n' + good[1] + b"not json at all\n" + good[2])
    folder = results_mod.OutputFolder(out, resume=True)
    try:
        kept, bad = folder.journaled()
    finally:
        folder.close()
    assert [c.id for c, _ in kept] == [json.loads(line)["case"]["id"] for line in good[:3]]
    assert bad == [2, 4]
    r = invoke("run", SPECS / "six.yaml", "--out", out, "--no-isolation", "--jobs", "1", "--resume")
    assert r.exit_code == 0 and "2 journal lines skipped" in r.output and "line 2, 4)" in r.output
    assert "Traceback" not in r.output
    assert len(results_mod.load(out / "results.json").cases) == 6


def test_a_lock_symlinked_out_of_the_folder_is_refused_and_its_target_untouched(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).symlink_to(target)
    r = invoke("run", SPECS / "six.yaml", "--out", out, "--no-isolation", "--jobs", "1")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"--out {out}: cannot open {LOCK}: a symbolic link; refusing to follow it" in r.output
    assert target.read_text() == "keep me\n"


def test_a_journal_symlinked_out_of_the_folder_is_not_written_through(tmp_path):
    target = tmp_path / "elsewhere.jsonl"
    target.write_text("")
    out = tmp_path / "out"
    out.mkdir()
    (out / JOURNAL).symlink_to(target)
    r = invoke("run", SPECS / "six.yaml", "--out", out, "--no-isolation", "--jobs", "1", "--resume")
    assert r.exit_code == 2 and "a symbolic link; refusing to follow it" in r.output and "Traceback" not in r.output
    assert target.read_text() == ""


def test_python_dash_m_reports_a_hostile_spec_in_one_line(tmp_path):
    spec = tmp_path / "bomb.yaml"
    spec.write_text(_bomb())
    out = subprocess.run(
        [sys.executable, "-m", "acceptance", "validate", str(spec)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr and f"{spec}:" in out.stderr

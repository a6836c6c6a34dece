"""results.json written case by case is the one-piece writer's bytes; measured cases held compactly decide as
the whole-run decision does; the journal's group commit."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from fixtures.report_results import many_failures, mixed_results
from pydantic_core import to_json

from acceptance.records import MeasuredCase, Results
from acceptance.session import results as results_mod
from acceptance.session.results import OutputFolder, chunks, dumps


def awkward_text() -> Results:
    """A run whose strings hold what could trip a writer that splices text: newlines, quotes, backslashes, the
    cases marker itself, bidi controls, U+2028, non-ASCII."""
    res = mixed_results()
    odd = 'line one\nline two "cases": [] \\ \u202e\u2028 é 数 \x1b[31m'
    first = res.cases[0].model_copy(update={"reasons": [odd], "description": odd, "warnings": [odd, ""]})
    env = res.environment.model_copy(update={"command_line": odd})
    return res.model_copy(update={"cases": [first, *res.cases[1:]], "environment": env})


@pytest.mark.parametrize("make", [mixed_results, lambda: many_failures(120), awkward_text])
def test_streamed_results_json_is_the_one_piece_writers_bytes(make, tmp_path):
    res = make()
    streamed = b"".join(chunks(res))
    assert streamed == dumps(res).encode("utf-8")
    # the digest, computed here from the file: sha256 of the compact JSON of the document without "digest"
    doc = json.loads(streamed)
    digest = doc.pop("digest")
    assert digest == "sha256:" + hashlib.sha256(to_json(doc)).hexdigest()
    path = tmp_path / "results.json"
    sha = results_mod.write_chunks(path, chunks(res))
    assert sha == hashlib.sha256(path.read_bytes()).hexdigest()
    assert Results.model_validate_json(path.read_bytes()).cases == res.cases


def test_streamed_results_json_without_cases(tmp_path):
    res = mixed_results().model_copy(update={"cases": []})
    text = b"".join(chunks(res)).decode()
    assert text == dumps(res) and '"cases": [],' in text
    assert len(json.loads(text)["cases"]) == 0


def _measured(case_id: str) -> MeasuredCase:
    return MeasuredCase(
        id=case_id,
        operator="op",
        category="arithmetic",
        spec_file="op.yaml",
        dtype="float32",
        params={},
        trials=3,
        seed=0,
    )


def test_the_journal_commits_in_groups_and_at_sync(tmp_path, monkeypatch):
    synced: list[int] = []
    clock = [100.0]
    monkeypatch.setattr(results_mod.os, "fsync", lambda fd: synced.append(fd))
    monkeypatch.setattr(results_mod.time, "monotonic", lambda: clock[0])
    folder = OutputFolder(tmp_path / "out")
    try:
        for k in range(130):
            compact = folder.append(_measured(f"op[{k}]"), {"k": k})
            # every line is in the file (the operating system has it) the moment append returns
            assert json.loads((tmp_path / "out" / "journal.jsonl").read_bytes().splitlines()[-1])["case"] == json.loads(
                compact
            )
        assert len(synced) == 2  # after the 64th and the 128th line
        folder.sync_due()
        assert len(synced) == 2  # the two waiting lines are not 0.2 s old
        clock[0] += 0.25
        folder.sync_due()
        assert len(synced) == 3
        folder.append(_measured("op[130]"))
        clock[0] += 0.2
        folder.append(_measured("op[131]"))  # the oldest waiting line is 0.2 s old: synced now
        assert len(synced) == 4
        folder.append(_measured("op[132]"))
        folder.sync()
        folder.sync()  # nothing waits: no second fsync
        assert len(synced) == 5
    finally:
        folder.close()
    lines = (tmp_path / "out" / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 133


def test_closing_the_folder_syncs_what_waits(tmp_path, monkeypatch):
    synced: list[int] = []
    monkeypatch.setattr(results_mod.os, "fsync", lambda fd: synced.append(fd))
    folder = OutputFolder(tmp_path / "out")
    folder.append(_measured("op[0]"))
    assert synced == []
    folder.close()
    assert len(synced) == 1


def _escaped_by_hand(text: str) -> str:
    """What visible_controls promises, character by character: C0/C1 controls but tab, newline and carriage
    return as \\xNN; lone surrogates, U+FFFE, U+FFFF and the bidi controls and line/paragraph separators as
    \\uNNNN; everything else as it is."""
    bidi = {0x061C, 0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}
    out = []
    for ch in text:
        c = ord(ch)
        if ch in "\t\n\r":
            out.append(ch)
        elif c < 0x20 or 0x7F <= c <= 0x9F:
            out.append(f"\\x{c:02x}")
        elif 0xD800 <= c <= 0xDFFF or c in (0xFFFE, 0xFFFF) or c in bidi:
            out.append(f"\\u{c:04x}")
        else:
            out.append(ch)
    return "".join(out)


@pytest.mark.parametrize(
    "text",
    [
        "matmul[float16-M=128-N=128-K=4096]",
        "",
        "é 数 ∞ ≤ — non-ASCII, printable",
        "tab\there, newline\nthere, return\r",
        "ansi \x1b[31mred\x1b[0m bell \x07 del \x7f c1 \x85\x9b",
        "bidi \u202ereversed\u202c isolate \u2066x\u2069 marks \u200e\u200f\u061c",
        "line\u2028separator and paragraph\u2029separator",
        "lone \ud800 surrogate, non-characters \ufffe\uffff",
        "nbsp\u00a0 soft hyphen\u00ad zero width\u200b",  # printable or not, not escaped
    ],
)
def test_visible_controls_escapes_exactly_the_controls(text):
    from acceptance.wording import visible_controls

    assert visible_controls(text) == _escaped_by_hand(text)


def test_visible_controls_on_every_code_point():
    from acceptance.wording import visible_controls

    for start in range(0, 0x110000, 0x1000):
        block = "".join(map(chr, range(start, start + 0x1000)))
        assert visible_controls(block) == _escaped_by_hand(block), hex(start)
        for ch in block[::97]:  # one character alone takes the fast path when it is printable
            assert visible_controls(ch) == _escaped_by_hand(ch)


def test_cases_held_compactly_decide_as_the_whole_run_decision(tmp_path):
    """Every measured case kept as compact JSON and decided one at a time (Holm over the run's p-values first)
    gives the CaseResults that deciding the measured objects together gives (decide_all: Holm by apply_holm)."""
    from acceptance.decide.run import decide_all
    from acceptance.session.observers import Observer
    from acceptance.session.options import RunOptions
    from acceptance.session.run import Session
    from acceptance.spec import rules_for

    class Seen(Observer):
        def __init__(self):
            self.measured = []

        def case_finished(self, case, result):
            self.measured.append((result, rules_for(case)))
            return result

    seen = Seen()
    options = RunOptions(
        out=tmp_path / "out", dtypes=("float16",), only="*N=4097*", trials=6, isolate=False, jobs=1, cache=False
    )
    session = Session(options, [seen])
    session.prepare([Path(__file__).resolve().parents[1] / "operator_specs" / "gelu.yaml"])
    session.measure()
    session.close()
    assert len(seen.measured) == 2 and sum(len(m.dual_delta) for m, _ in seen.measured) >= 2
    assert [k.json for k in session.measured] == [m.model_dump_json().encode() for m, _ in seen.measured]
    expected = decide_all(seen.measured)
    assert session.decide() == expected
    adjusted = [r.p_adjusted for c in expected for r in c.dual_delta]
    assert all(p is not None for p in adjusted)  # Holm ran over the records

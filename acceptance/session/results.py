"""results.json: writing, reading and merging the one canonical record of a run.

Every reporter (console, JUnit XML, HTML, GitHub job summary, sign-off)
renders from :class:`~acceptance.records.Results` alone, so ``acceptance
report results.json`` can re-render any of them later and shards can be merged
by merging results.

``schema_version`` is bumped on any incompatible change. Version 1 files
(before criteria carried their ``kind`` and diff3 thresholds were pairs) are
upgraded on reading; readers refuse versions they do not know.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import re
import socket
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from acceptance.errors import OutputError, ResultsError
from acceptance.isolation import JOURNAL, LOCK
from acceptance.records import SCHEMA_VERSION, CaseResult, MeasuredCase, Results, WaiverRecord


def dumps(results: Results) -> str:
    """``results`` as the text of a results.json: strict JSON (no NaN or Infinity literals), one space of
    indent per level, UTF-8, written by pydantic-core (5x faster than the json module on 4 MB)."""
    return results.model_dump_json(indent=1) + "\n"


def write(results: Results, path: Path) -> Path:
    """Write ``results.json`` atomically (temp file in the same folder, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".results-", suffix=".json", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.chmod(tmp, 0o666 & ~umask)  # a normal file's mode, not mkstemp's 0600
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(dumps(results))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


_CURRENT = re.compile(rb'\s*\{\s*"schema_version"\s*:\s*%d\s*[,}]' % SCHEMA_VERSION)


def load(path: Path) -> Results:
    """Read and validate a ``results.json``; raise :class:`ResultsError` naming the file."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read results: {exc}") from None
    if _CURRENT.match(raw[:200]):  # the common case, parsed and validated in one pass by pydantic-core (3x faster)
        try:
            with _collector_paused():
                return Results.model_validate_json(raw)
        except Exception:  # pydantic.ValidationError: fall through for the detailed message
            pass
    try:
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read results: {exc}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version == 1:
        data = _upgrade_v1(data)
    elif version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {version!r} is not supported (expected 1 or {SCHEMA_VERSION})")
    try:
        with _collector_paused():
            return Results.model_validate(data)
    except Exception as exc:  # pydantic.ValidationError
        raise ResultsError(f"{path}: invalid results: {exc}") from None


def files_of(path: Path) -> list[Path]:
    """The results files a path names: a file itself; a folder's ``results.json``, else every ``results*.json``
    below it (the shards of a sharded run, in path order). :class:`ResultsError` naming the path when it does not
    exist or the folder holds none."""
    path = Path(path)
    if not path.exists():
        raise ResultsError(f"{path}: no such file or directory")
    if not path.is_dir():
        return [path]
    files = [path / "results.json"] if (path / "results.json").is_file() else sorted(path.rglob("results*.json"))
    if not files:
        raise ResultsError(f"{path}: no results.json in this folder")
    return files


def load_run(path: Path) -> Results:
    """The run a path names (see :func:`files_of`): one file read, or a folder's shards read and merged."""
    parts = [load(f) for f in files_of(path)]
    return parts[0] if len(parts) == 1 else merge(parts)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused, then restored as it was: a results.json of a few MB becomes
    ~10^5 objects, none of them cyclic garbage, and the collector's passes over them while they are made cost
    about as much as the parse itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def merge(parts: list[Results]) -> Results:
    """Merge shards: cases concatenated (by id, later shards win), earliest start, latest end."""
    if not parts:
        raise ValueError("merge needs at least one results file")
    by_id: dict[str, CaseResult] = {}
    for part in parts:
        for case in part.cases:
            by_id[case.id] = case
    env = parts[0].environment.model_copy(
        update={
            "start_time": min(p.environment.start_time for p in parts),
            "end_time": max(p.environment.end_time for p in parts),
        }
    )
    cases = list(by_id.values())
    from acceptance.decide.verdict import summarize  # here, so that `acceptance report` starts without torch

    return Results(environment=env, summary=summarize(cases), cases=cases, waivers=_merged_waivers(parts))


def _merged_waivers(parts: list[Results]) -> list[WaiverRecord]:
    """The waivers of all shards, each once: applied when it applied in any shard, with every case it waived."""
    by_key: dict[tuple[str, str, str], WaiverRecord] = {}
    for part in parts:
        for w in part.waivers:
            key = (w.spec_file, w.match, w.reason)
            old = by_key.get(key)
            if old is None:
                by_key[key] = w
                continue
            status = "applied" if "applied" in (old.status, w.status) else old.status
            by_key[key] = old.model_copy(update={"status": status, "cases": list(dict.fromkeys(old.cases + w.cases))})
    return list(by_key.values())


_V1_PAIR = re.compile(r"^threshold \((.*)\)$")


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:  # a seam: JSON as read, before validation
    """A version 1 document as version 2: each criterion gets its ``kind`` (v1 told dual-delta gates by a
    ``"dual_delta "`` metric prefix and wrote diff3's pair threshold into the note), and records their
    decision fields as they were.

    ``data`` is the JSON document as read, its shape not yet known (the seam before validation checks it)."""
    for case in data.get("cases") or []:
        for c in case.get("criteria") or []:
            metric = c.get("metric", "")
            if metric.startswith("dual_delta "):
                c["kind"], c["metric"] = "dual_delta", metric.removeprefix("dual_delta ")
            elif metric in ("nan_mismatch", "inf_mismatch"):
                c["kind"] = "placement"
            elif metric == "diff4":
                c["kind"] = "diff4"
            pair = _V1_PAIR.match(c.get("note") or "")
            if c.get("threshold") is None and pair:
                c["threshold"] = [float(x) for x in pair.group(1).split(", ")]
                c["note"] = None
    data["schema_version"] = SCHEMA_VERSION
    return data


# ----------------------------------------------------------------------------- the output folder and the journal


class OutputFolder:
    """An output folder held by one run: created and tested for writing first, locked (a second run on it
    fails naming the holder), its stale reports removed, and a journal of finished cases.

    ``resume``: keep the journal of an earlier run (its cases are not run again); ``keep``: file names
    that are not stale (the report files of this run are rewritten at the end anyway).
    """

    def __init__(self, path: Path, *, resume: bool = False, stale: tuple[str, ...] = ()):
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write-test-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise OutputError(f"--out {self.path}: cannot write there: {exc.strerror or exc}") from None
        self._lock = open(self.path / LOCK, "a+", encoding="utf-8")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.seek(0)
            holder = self._lock.read().strip() or "another process"
            self._lock.close()
            raise OutputError(
                f"--out {self.path}: in use by another run ({holder}); wait for it or use another folder"
            ) from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        self._lock.flush()
        for name in ("results.json", *stale) + (() if resume else (JOURNAL,)):
            (self.path / name).unlink(missing_ok=True)
        self._journal: BinaryIO | None = None

    def journaled(self) -> tuple[list[tuple[MeasuredCase, dict[str, Any] | None]], list[int]]:
        """The journal's entries, each a measured case with the content key it was measured from (``None`` in a
        journal written before keys were), and the numbers (from 1) of the lines that hold no entry (cut short
        by a crash, or corrupt), which are skipped."""
        path = self.path / JOURNAL
        if not path.exists():
            return [], []
        out: list[tuple[MeasuredCase, dict[str, Any] | None]] = []
        bad: list[int] = []
        for number, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
                if isinstance(data, dict) and set(data) == {"key", "case"} and isinstance(data["key"], dict):
                    out.append((MeasuredCase.model_validate(data["case"]), data["key"]))
                else:  # a line of a journal written before content keys
                    out.append((MeasuredCase.model_validate(data), None))
            except ValueError:  # json.JSONDecodeError, pydantic.ValidationError
                bad.append(number)
        return out, bad

    def append(self, case: MeasuredCase, key: dict[str, Any] | None = None) -> None:
        """Add a measured case and its content key to the journal, on disk (fsync) before this returns."""
        if self._journal is None:
            self._journal = open(self.path / JOURNAL, "a+b")
            if self._journal.tell() > 0:  # a line an earlier run's kill cut short stays a line of its own
                self._journal.seek(-1, os.SEEK_END)
                if self._journal.read(1) != b"\n":
                    self._journal.write(b"\n")
        measured = case.model_dump_json()
        line = measured if key is None else f'{{"key": {json.dumps(key, sort_keys=True)}, "case": {measured}}}'
        self._journal.write(line.encode() + b"\n")
        self._journal.flush()
        os.fsync(self._journal.fileno())

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
        self._lock.close()

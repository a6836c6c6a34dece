"""results.json: writing, reading and merging the one canonical record of a run.

Every reporter (console, JUnit XML, HTML, GitHub job summary, sign-off)
renders from :class:`~acceptance.records.Results` alone, so ``acceptance
report results.json`` can re-render any of them later and shards can be merged
by merging results.

``schema_version`` is bumped on any incompatible change. Version 1 files
(before criteria carried their ``kind`` and diff3 thresholds were pairs) and
version 2 files (before the digest and the plan) are upgraded on reading, with
a warning that their content cannot be checked; readers refuse versions they
do not know.

Readers trust content, not names: a file's ``digest`` (sha256 of the canonical
JSON of everything else) must match, every case's verdict must be the one its
criteria give (:func:`acceptance.decide.verdict.allowed_verdicts`) and the
summary the one its cases give; shards merge only when every shard of one plan
is there once and finished (:func:`merge_problems`), and a merge of shards
decides the run again as one Holm family.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from acceptance.errors import EXIT_FAIL, OutputError, ResultsError
from acceptance.isolation import JOURNAL, LOCK
from acceptance.records import SCHEMA_VERSION, CaseResult, MeasuredCase, Plan, Results, WaiverRecord
from acceptance.wording import safe

#: Where a reader's warnings go (a file without a digest, a journal line skipped): one line each.
Warn = Callable[[str], None]


def warn_stderr(message: str) -> None:
    """A warning as one line on standard error."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def content_digest(results: Results, *, as_read: bool = False) -> str:
    """``'sha256:'`` and the hex sha256 of the canonical JSON of ``results`` without its ``digest``: the compact
    JSON pydantic-core writes (fields in schema order, no whitespace, UTF-8 unescaped, floats in their shortest
    round-trip form, non-finite floats as strings), which is ``pydantic_core.to_json`` of the document as
    written, ``digest`` removed. ``as_read``: ``results`` was read from a file, and only the fields the file
    held count (a file of an earlier version keeps its digest when fields are added). Hashed a case at a time:
    the document without its cases, serialized once, around each case serialized by itself."""
    frame = results.model_copy(update={"cases": []})
    head, marker, tail = frame.model_dump_json(exclude={"digest"}, exclude_unset=as_read).partition('"cases":[]')
    assert marker, "Results has a cases field"
    sha = hashlib.sha256(head.encode("utf-8", "surrogatepass") + b'"cases":[')
    for k, case in enumerate(results.cases):
        sha.update((b"," if k else b"") + case.model_dump_json(exclude_unset=as_read).encode("utf-8", "surrogatepass"))
    sha.update(b"]" + tail.encode("utf-8", "surrogatepass"))
    return "sha256:" + sha.hexdigest()


def ids_digest(ids: Sequence[str]) -> str:
    """The hex sha256 of case ids joined by newlines (a plan's ``digest`` and ``part_digest``)."""
    return hashlib.sha256("\n".join(ids).encode("utf-8", "surrogatepass")).hexdigest()


_NO_DIGEST = f'{{\n "schema_version": {SCHEMA_VERSION},\n "digest": null,'


def dumps(results: Results) -> str:
    """``results`` as the text of a results.json, its ``digest`` set (:func:`content_digest`): strict JSON (no
    NaN or Infinity literals), one space of indent per level, UTF-8, written by pydantic-core (5x faster than
    the json module on 4 MB)."""
    text = results.model_copy(update={"digest": None}).model_dump_json(indent=1) + "\n"
    assert text.startswith(_NO_DIGEST)  # the first two fields of Results
    return text.replace('"digest": null', f'"digest": "{content_digest(results)}"', 1)


def write_text(path: Path, text: str, *, prefix: str = ".tmp-") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temp file in the same folder, then renamed over
    ``path``, so a symbolic link there is replaced, never followed, and a full disk leaves the old file whole.
    The file gets a normal mode (0666 less the umask), not mkstemp's 0600."""
    write_chunks(path, [text.encode("utf-8")], prefix=prefix)
    return Path(path)


def write(results: Results, path: Path) -> Path:
    """Write ``results.json`` atomically (:func:`write_text`), its digest set: the bytes of :func:`dumps`, made
    case by case (:func:`chunks`), so that no whole-file text is held."""
    write_chunks(path, chunks(results), prefix=".results-")
    return path


_CASES = '"cases": []'


def chunks(results: Results) -> Iterator[bytes]:
    """The UTF-8 bytes of :func:`dumps` (``results`` as a results.json, its digest set), a piece at a time: the
    document without its cases is serialized once with ``cases`` empty, and each case by itself (its indented
    JSON shifted two levels, as the whole document's serializer nests it). The digest (:func:`content_digest`)
    is hashed case by case first; so the cases are serialized twice, as :func:`dumps` does, but one at a
    time."""
    frame = results.model_copy(update={"digest": None, "cases": []})
    text = frame.model_dump_json(indent=1) + "\n"
    assert text.startswith(_NO_DIGEST)  # the first two fields of Results
    text = text.replace('"digest": null', f'"digest": "{content_digest(results)}"', 1)
    head, marker, tail = text.partition(_CASES)
    assert marker, "Results has a cases field"
    if not results.cases:
        yield text.encode("utf-8", "surrogatepass")
        return
    yield (head + '"cases": [').encode("utf-8", "surrogatepass")
    for k, case in enumerate(results.cases):
        body = case.model_dump_json(indent=1).replace("\n", "\n  ")
        yield (("," if k else "") + "\n  " + body).encode("utf-8", "surrogatepass")
    yield ("\n ]" + tail).encode("utf-8", "surrogatepass")


def write_chunks(path: Path, pieces: Iterable[bytes], *, prefix: str = ".tmp-") -> str:
    """Write ``pieces`` to ``path`` atomically, as :func:`write_text` writes a text; the hex sha256 of the bytes
    written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=path.suffix, dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    sha = hashlib.sha256()
    try:
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "wb", buffering=1 << 20) as fh:
            for piece in pieces:
                sha.update(piece)
                fh.write(piece)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return sha.hexdigest()


def cannot_write(path: Path, exc: OSError) -> OutputError:
    """The one-line error of a write that failed (a full disk: ``No space left on device``)."""
    return OutputError(f"{path}: cannot write: {exc.strerror or exc}")


_CURRENT = re.compile(rb'\s*\{\s*"schema_version"\s*:\s*%d\s*[,}]' % SCHEMA_VERSION)


def load(path: Path, *, warn: Warn = warn_stderr) -> Results:
    """Read a ``results.json`` and check that its content can be trusted: its digest (:func:`content_digest`)
    and its verdicts (:func:`verify`); raise :class:`ResultsError` naming the file (and the case) otherwise. A
    file written before digests (version 1 or 2) is upgraded and accepted with a warning to ``warn``.

    The objects read are moved out of the cyclic collector's reach (``gc.freeze``; refcounting still frees
    them): a 20,000-case file is ~5 million objects, and each full pass over them (which comparing or rendering
    triggers as it allocates) cost seconds. Records hold no reference cycles, so nothing is lost."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read results: {exc.strerror or exc}") from None
    res = _current(raw) if _CURRENT.match(raw[:200]) else None
    upgraded = False
    if res is None:
        res, upgraded = _read_slowly(raw, path, warn)
    if not upgraded and res.digest != content_digest(res, as_read=True):
        raise ResultsError(
            f"{path}: its content does not match its digest (changed after it was written, or cut short); refusing it"
        )
    verify(res, path)
    gc.freeze()  # its objects live as long as the record: the collector's full passes no longer walk them
    return res


def _current(raw: bytes) -> Results | None:
    """A file of the current version, parsed and validated in one pass by pydantic-core (3x faster than the json
    module and validation); ``None`` when it is not valid (:func:`_read_slowly` then says why)."""
    try:
        with collector_paused():
            return Results.model_validate_json(raw)
    except ValueError:  # pydantic.ValidationError, recursion limit included
        return None


def _read_slowly(raw: bytes, path: Path, warn: Warn) -> tuple[Results, bool]:
    """A file read by the json module, and whether it was upgraded from an earlier version (with a warning that
    it has no digest); or the reason it cannot be read, naming it."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ResultsError(f"{path}: cannot read results: {why}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version in (1, 2):
        warn(f"{path}: schema_version {version} has no digest: its content cannot be checked")
        data = _upgrade_v1(data) if version == 1 else data
        data["schema_version"] = SCHEMA_VERSION
    elif version != SCHEMA_VERSION:
        raise ResultsError(f"{path}: schema_version {version!r} is not supported (expected 1 to {SCHEMA_VERSION})")
    try:
        with collector_paused():
            res = Results.model_validate(data)
    except (ValueError, RecursionError) as exc:  # pydantic.ValidationError is a ValueError
        raise ResultsError(f"{path}: invalid results: {exc}") from None
    return res, version != SCHEMA_VERSION


def verify(res: Results, path: Path | str) -> None:
    """Refuse (:class:`ResultsError` naming ``path`` and the case) a record whose content contradicts itself: a
    case whose verdict is not the one its criteria and error give (:func:`acceptance.decide.verdict.contradiction`),
    or a summary that is not the one its cases give (:func:`acceptance.decide.verdict.summarize`, with the
    comparison gate when there is one)."""
    from acceptance.decide import verdict  # here, so that `acceptance report` starts without torch

    for case in res.cases:
        why = verdict.contradiction(case)
        if why:
            raise ResultsError(f"{path}: case {safe(case.id, 200)}: {why}; refusing it")
    stopped = (res.summary.exit_code or EXIT_FAIL) if res.interrupted else None
    expected = verdict.summarize(res.cases, interrupted=stopped)
    if res.comparison is not None:
        expected = verdict.gate_comparison(expected, res.comparison)
    if expected != res.summary:
        raise ResultsError(
            f"{path}: the summary ({res.summary.verdict}, {res.summary.failed} failed, {res.summary.errors} "
            f"errors, exit code {res.summary.exit_code}) is not the one its cases give ({expected.verdict}, "
            f"{expected.failed} failed, {expected.errors} errors, exit code {expected.exit_code}); refusing it"
        )


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


def load_run(path: Path, *, allow_partial: bool = False, warn: Warn = warn_stderr) -> Results:
    """The run a path names (see :func:`files_of`): one file read, or a folder's shards read and merged
    (:func:`merge`)."""
    files = files_of(path)
    parts = [load(f, warn=warn) for f in files]
    if len(parts) == 1:
        return parts[0]
    return merge(parts, names=[str(f) for f in files], allow_partial=allow_partial, warn=warn)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused, then restored as it was: a results.json of a few MB becomes
    ~10^5 objects (10^7 for 20,000 cases), none of them cyclic garbage, and the collector's passes over them
    while they are made cost about as much as the parse itself (a full pass is proportional to every object
    alive, so passes while a run's records grow make the cost quadratic)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def merge(
    parts: list[Results], *, names: Sequence[str] = (), allow_partial: bool = False, warn: Warn = warn_stderr
) -> Results:
    """Merge the results of several parts of one run (``names``: their files, for messages).

    Shards (a :class:`~acceptance.records.Plan` with ``shard`` K/N) merge only when every shard 1..N of one plan
    is there once and finished (:func:`merge_problems`); their cases then come in the whole run's order (each
    shard's plan records its cases' positions), checked against the plan's digest, and are decided again as one
    run (:func:`_redecided`: Holm over every dual-delta record of every shard), so the merge decides as the
    unsharded run; shards written before positions keep their own decisions, with a warning. Whole runs (no
    shard) merge as one run: cases by id (later files win). Any other merge raises :class:`ResultsError`
    listing the problems, unless ``allow_partial``: the merge is then ``interrupted`` (never a pass),
    ``not_run`` lists the cases known not to have run and ``plan.missing_shards``
    the shards that were not there, and each problem goes to ``warn``."""
    if not parts:
        raise ValueError("merge needs at least one results file")
    names = list(names) or [f"part {k + 1}" for k in range(len(parts))]
    problems, missing = merge_problems(parts, names)
    if problems and not allow_partial:
        raise ResultsError(
            *problems, "refusing to merge an incomplete run (--allow-partial merges it as interrupted, never a pass)"
        )
    for problem in problems:
        warn(f"{problem} (merged as interrupted)")
    by_id: dict[str, CaseResult] = {}
    for part in parts:
        for case in part.cases:
            by_id[case.id] = case
    cases = _in_plan_order(parts, by_id) if not problems else list(by_id.values())
    cases, waivers = _redecided(parts, cases, warn)
    env = parts[0].environment.model_copy(
        update={
            "start_time": min(p.environment.start_time for p in parts),
            "end_time": max(p.environment.end_time for p in parts),
        }
    )
    from acceptance.decide.verdict import summarize  # here, so that `acceptance report` starts without torch

    incomplete = bool(problems) or any(p.interrupted for p in parts)
    codes = [p.summary.exit_code for p in parts if p.interrupted]
    not_run = [i for p in parts for i in p.not_run if i not in by_id]
    return Results(
        environment=env,
        summary=summarize(cases, interrupted=(codes[0] if codes else EXIT_FAIL) if incomplete else None),
        cases=cases,
        interrupted=incomplete,
        not_run=list(dict.fromkeys(not_run)),
        waivers=waivers,
        plan=_merged_plan(parts, [c.id for c in cases], missing),
    )


def _shard(part: Results) -> tuple[int, int] | None:
    """(K, N) of a shard; ``None`` for a whole run or a file without a plan."""
    if part.plan is None or part.plan.shard is None:
        return None
    k, n = part.plan.shard
    return k, n


def _holm_per_shard(parts: list[Results]) -> bool:
    """Whether some shard was written before shards recorded their cases' positions (and the waiver facts a
    re-decision needs): such a merge keeps each shard's own decisions."""
    return any(_shard(p) is not None and p.plan is not None and p.plan.positions is None for p in parts)


def _redecided(
    parts: list[Results], cases: list[CaseResult], warn: Warn
) -> tuple[list[CaseResult], list[WaiverRecord]]:
    """The merged cases and waivers. Shards: decided again as one run
    (:func:`acceptance.decide.run.redecide_all`: Holm over every dual-delta record of every shard, the run's
    family), and the waivers' records after it (what a waiver did follows the verdicts: :func:`_rewaived`);
    shards written before positions (:func:`_holm_per_shard`) keep their own, with a warning. Whole runs: as
    written."""
    waivers = _merged_waivers(parts)
    if _holm_per_shard(parts):
        warn(
            "shards written before a merge re-decided the run as one Holm family: each keeps the verdicts of Holm "
            "over its own cases (run the shards again with this version to decide them as one run)"
        )
        return cases, waivers
    if _shard(parts[0]) is None:
        return cases, waivers
    from acceptance.decide.run import redecide_all

    decided = redecide_all(cases)
    return decided, _rewaived(waivers, decided)


def _rewaived(waivers: list[WaiverRecord], cases: list[CaseResult]) -> list[WaiverRecord]:
    """Each waiver's record after the cases were decided again, as :func:`acceptance.decide.waivers.waiver_records`
    makes it: an expired one lists the failed or errored cases it matches; an active one is ``applied`` with the
    cases it turned into skip, else ``unmatched``."""
    from acceptance.spec.cases import glob_match

    out = []
    for w in waivers:
        mine = [c for c in cases if c.spec_file == w.spec_file and glob_match(c.id, w.match)]
        if w.status == "expired":
            out.append(w.model_copy(update={"cases": [c.id for c in mine if c.verdict in ("fail", "error")]}))
            continue
        waived = [c.id for c in mine if c.verdict == "skip" and c.waiver == w.reason]
        out.append(w.model_copy(update={"status": "applied" if waived else "unmatched", "cases": waived}))
    return out


def merge_problems(parts: list[Results], names: Sequence[str]) -> tuple[list[str], list[int]]:
    """What keeps ``parts`` from merging into one finished run, one line each naming the file, and the
    missing shards K: an interrupted part; a part with a shard and one without; a shard of another plan (a
    different ``plan.digest`` or N: foreign); a shard given twice; a shard missing; a shard whose case list is
    not the one its plan gives."""
    problems = [
        f"{name}: interrupted ({len(p.not_run)} cases not run); finish it with --resume"
        for name, p in zip(names, parts, strict=True)
        if p.interrupted
    ]
    shards = [(name, p, _shard(p)) for name, p in zip(names, parts, strict=True)]
    sharded = [(name, p, kn) for name, p, kn in shards if kn is not None]
    if not sharded:
        return problems, []
    whole = [name for name, _, kn in shards if kn is None]
    if whole:
        problems.append(f"{whole[0]}: a whole run (no --shard) merged with shards of a run ({sharded[0][0]})")
    ref_name, ref, (_, n) = sharded[0]
    assert ref.plan is not None
    seen: dict[int, str] = {}
    for name, p, (k, n_k) in sharded:
        assert p.plan is not None
        if p.plan.digest != ref.plan.digest or n_k != n:
            problems.append(
                f"{name}: shard {k}/{n_k} of another run (plan {p.plan.digest[:12]}, not {ref.plan.digest[:12]} "
                f"of {ref_name}): a foreign shard"
            )
        elif (p.plan.positions is None) != (ref.plan.positions is None):
            old, new = (name, ref_name) if p.plan.positions is None else (ref_name, name)
            problems.append(
                f"{old}: a shard written before shards were balanced by cost, merged with {new} written after: "
                "their cases are not split alike; run every shard with one version"
            )
        elif k in seen:
            problems.append(f"{name}: shard {k}/{n} given twice (also {seen[k]})")
        else:
            seen[k] = name
            if not p.interrupted and not _holds_its_plan(p):
                problems.append(f"{name}: shard {k}/{n} does not hold the cases its plan lists")
    missing = [k for k in range(1, n + 1) if k not in seen]
    for k in missing:
        size = _shard_size(ref.plan, k, n)
        problems.append(f"shard {k}/{n} missing: {size} of the run's {ref.plan.cases} cases are in no file given")
    return problems, missing


def _holds_its_plan(part: Results) -> bool:
    """Whether a finished shard holds the cases its plan lists: their ids' digest, and one position each."""
    assert part.plan is not None
    positions = part.plan.positions
    if positions is not None and len(positions) != len(part.cases):
        return False
    return ids_digest([c.id for c in part.cases]) == part.plan.part_digest


def _shard_size(plan: Plan, k: int, n: int) -> int:
    """Cases of shard ``k`` of ``n``: as the plan records them, else (shards written before) every N-th case."""
    if plan.shard_cases is not None and len(plan.shard_cases) == n:
        return plan.shard_cases[k - 1]
    return len(range(k - 1, plan.cases, n))


def _in_plan_order(parts: list[Results], by_id: dict[str, CaseResult]) -> list[CaseResult]:
    """The cases of complete shards in the whole run's order (each at its position in the run, as its shard's plan
    records it; in shards written before positions were, shard K holds cases K-1, K-1+N, ...), checked
    against the plan's digest (:class:`ResultsError` when they are not that run's cases); whole runs: as
    merged."""
    order: dict[str, int] = {}
    for part in parts:
        kn = _shard(part)
        if kn is None or part.plan is None:
            return list(by_id.values())
        k, n = kn
        positions = part.plan.positions or range(k - 1, part.plan.cases, n)
        order.update({c.id: at for c, at in zip(part.cases, positions, strict=False)})
    cases = sorted(by_id.values(), key=lambda c: order[c.id])
    plan = parts[0].plan
    assert plan is not None
    if len(cases) != plan.cases or ids_digest([c.id for c in cases]) != plan.digest:
        raise ResultsError(f"the shards' cases are not the ones their plan ({plan.digest[:12]}) lists; refusing them")
    return cases


def _merged_plan(parts: list[Results], ids: list[str], missing: list[int]) -> Plan | None:
    """The plan of a merge: the shards' whole run (``missing_shards`` when some were not there); none for
    whole runs merged."""
    plan = parts[0].plan
    if plan is None or _shard(parts[0]) is None:
        return None
    return Plan(cases=plan.cases, digest=plan.digest, part_digest=ids_digest(ids), missing_shards=missing)


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
    """A version 1 document as version 2 (which :func:`load` reads as the current version, its ``digest`` and
    ``plan`` absent): each criterion gets its ``kind`` (v1 told dual-delta gates by a
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
    return data


# ----------------------------------------------------------------------------- the output folder and the journal

#: The journal's group commit: its lines are fsynced together once this many wait ...
SYNC_CASES = 64
#: ... or once the oldest waiting line is this many seconds old, whichever comes first (and at every stop).
SYNC_SECONDS = 0.2


class OutputFolder:
    """An output folder held by one run: created and tested for writing first, locked (a second run on it
    fails naming the holder), its stale reports removed, and a journal of finished cases.

    ``resume``: keep the journal of an earlier run (its cases are not run again); ``keep``: file names
    that are not stale (the report files of this run are rewritten at the end anyway).
    """

    def __init__(self, path: Path, *, resume: bool = False, stale: tuple[str, ...] = (), warn: Warn = warn_stderr):
        self.path = Path(path)
        self.warn = warn
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write-test-{os.getpid()}"
            os.close(_open_here(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            probe.unlink()
        except OSError as exc:
            raise OutputError(f"--out {self.path}: cannot write there: {exc.strerror or exc}") from None
        self._lock = self._open_lock()
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
        self._journal_fd: int | None = None
        self._waiting = 0  # journal lines written but not yet fsynced
        self._oldest = 0.0  # when the oldest of them was written (time.monotonic)

    def _open_lock(self) -> TextIO:
        """The lock file, opened without following a symbolic link (:func:`_open_here`)."""
        try:
            fd = _open_here(self.path / LOCK, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise OutputError(f"--out {self.path}: cannot open {LOCK}: {exc.strerror or exc}") from None
        return open(fd, "r+", encoding="utf-8")

    def journaled(self) -> tuple[list[tuple[MeasuredCase, dict[str, Any] | None]], list[int]]:
        """The journal's entries, each a measured case with the content key it was measured from (``None`` in a
        journal written before keys were), and the numbers (from 1) of the lines that hold no entry (cut short
        by a crash, not UTF-8, or corrupt), which are skipped. The journal is opened without following a
        symbolic link (:func:`_open_here`)."""
        path = self.path / JOURNAL
        if not path.exists():
            return [], []
        try:
            with open(_open_here(path, os.O_RDONLY), "rb") as fh:
                raw = fh.read()
        except OSError as exc:
            raise OutputError(f"{path}: cannot read the journal: {exc.strerror or exc}") from None
        out: list[tuple[MeasuredCase, dict[str, Any] | None]] = []
        bad: list[int] = []
        for number, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line.decode("utf-8"))
                if isinstance(data, dict) and set(data) == {"key", "case"} and isinstance(data["key"], dict):
                    out.append((MeasuredCase.model_validate(data["case"]), data["key"]))
                else:  # a line of a journal written before content keys
                    out.append((MeasuredCase.model_validate(data), None))
            except ValueError:  # UnicodeDecodeError, json.JSONDecodeError, pydantic.ValidationError
                bad.append(number)
        return out, bad

    def append(self, case: MeasuredCase, key: dict[str, Any] | None = None) -> bytes:
        """Add a measured case and its content key to the journal; the case's compact JSON is returned (what the
        line holds under ``case``). The line goes to the operating system in one write before this returns (a
        kill of this process loses nothing written), and to the disk by group commit: an fsync once
        :data:`SYNC_CASES` lines wait or the oldest waiting line is :data:`SYNC_SECONDS` old, and always at
        :meth:`sync` (the end of the case loop, a stop, before results.json). A write that fails (a full disk)
        is an :class:`OutputError` (the lines before it stay in the journal)."""
        measured = case.model_dump_json().encode("utf-8", "surrogatepass")
        line = (
            measured
            if key is None
            else b'{"key": %s, "case": %s}' % (json.dumps(key, sort_keys=True).encode(), measured)
        )
        try:
            fd = self._journal_fd if self._journal_fd is not None else self._open_journal()
            _write_all(fd, line + b"\n")
            now = time.monotonic()
            if not self._waiting:
                self._oldest = now
            self._waiting += 1
            if self._waiting >= SYNC_CASES or now - self._oldest >= SYNC_SECONDS:
                self._fsync(fd)
        except OSError as exc:
            raise self._cannot_write(exc) from None
        return measured

    def sync(self) -> None:
        """Every journal line written so far on disk (fsync), when some wait; an :class:`OutputError` when that
        fails."""
        if self._journal_fd is None or not self._waiting:
            return
        try:
            self._fsync(self._journal_fd)
        except OSError as exc:
            raise self._cannot_write(exc) from None

    def sync_due(self) -> None:
        """:meth:`sync` when the oldest waiting line is :data:`SYNC_SECONDS` old (called as cases start, so that a
        line waits no longer than that while the next case runs long)."""
        if self._waiting and time.monotonic() - self._oldest >= SYNC_SECONDS:
            self.sync()

    def _open_journal(self) -> int:
        """The journal, opened for appending without following a symbolic link; a line an earlier run's kill cut
        short is ended first, so that it stays a line of its own (skipped on reading)."""
        fd = _open_here(self.path / JOURNAL, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                _write_all(fd, b"\n")
        except OSError:
            os.close(fd)
            raise
        self._journal_fd = fd
        return fd

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)
        self._waiting = 0

    def _cannot_write(self, exc: OSError) -> OutputError:
        return OutputError(
            f"{self.path / JOURNAL}: cannot write the journal: {exc.strerror or exc}; the cases before are kept "
            "there (free space, then finish the run with --resume)"
        )

    def close(self) -> None:
        """The journal synced (:meth:`sync`; a failure there is left: what could be written is written) and
        closed, and the folder's lock released."""
        if self._journal_fd is not None:
            with contextlib.suppress(OSError, OutputError):
                self.sync()
            with contextlib.suppress(OSError):
                os.close(self._journal_fd)
            self._journal_fd = None
        self._lock.close()


def _write_all(fd: int, data: bytes) -> None:
    """``data`` written to ``fd`` whole (``os.write`` again after a short write)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_here(path: Path, flags: int) -> int:
    """``os.open`` of a run's own file without following a symbolic link (``O_NOFOLLOW``): a link there, which
    could point out of the output folder, is refused with ``ELOOP`` named in words."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(exc.errno, "a symbolic link; refusing to follow it out of the folder", str(path)) from None
        raise

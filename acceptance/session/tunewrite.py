"""Writing proposed thresholds into spec files, so that the git diff is exactly the new thresholds.

The file is read and written with ruamel.yaml's round-trip mode: comments, key
order, quoting, flow and block styles and the layout survive, and only the
keys ``thresholds.<dtype>.<metric>`` that change are touched (a missing
``thresholds`` section or dtype entry is added at the end of its mapping).
A number is written as :func:`acceptance.decide.proposal.number_text` writes it (``0.02``, ``5e-5``); an expression
as a plain string. Writing is atomic (a temporary file in the same folder,
then ``os.replace``), and a file whose bytes changed since they were read is
not overwritten.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap

from acceptance.decide.proposal import Proposal, number_text
from acceptance.errors import OutputError


@dataclass(frozen=True)
class Edit:
    """One threshold to set: ``thresholds.<dtype>.<metric> = value`` (a number, or an expression's text)."""

    dtype: str
    metric: str
    value: float | str


class _Number(float):
    """A float written as a plain YAML 1.2 float in :func:`~acceptance.decide.proposal.number_text`'s form
    (``5e-5``)."""


def _yaml() -> YAML:
    yaml = YAML()  # round trip
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(
        _Number, lambda r, d: r.represent_scalar("tag:yaml.org,2002:float", number_text(float(d)))
    )
    return yaml


def _same(old, new) -> bool:
    if isinstance(new, str) or isinstance(old, str):
        return str(old).strip() == str(new).strip()
    return isinstance(old, (int, float)) and not isinstance(old, bool) and float(old) == float(new)


def apply(text: str, edits: Iterable[Edit]) -> str:
    """The spec text with the edits applied (pure); unchanged text when every value is already in place."""
    yaml = _yaml()
    data = yaml.load(text)
    changed = False
    for e in edits:
        section = data.get("thresholds")
        if section is None:
            section = data["thresholds"] = CommentedMap()
        entry = section.get(e.dtype)
        if entry is None:
            entry = section[e.dtype] = CommentedMap()
            if getattr(section, "fa", None) is not None and section.fa.flow_style():
                entry.fa.set_flow_style()
        if e.metric in entry and _same(entry[e.metric], e.value):
            continue
        entry[e.metric] = e.value if isinstance(e.value, str) else _Number(e.value)
        changed = True
    if not changed:
        return text
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def edits_for(proposals: Iterable[Proposal]) -> dict[Path, list[Edit]]:
    """Per spec file, the edits that set every proposal. A spec's threshold holds for every output, so the
    proposals of one dtype and metric for several outputs (a ``backward`` spec's gradients) become one edit:
    the largest number among them (an expression, when one is proposed, is kept as the first proposed)."""
    chosen: dict[tuple[Path, str, str], float | str] = {}
    for p in proposals:
        key = (Path(p.spec_file), p.dtype, p.metric)
        old = chosen.get(key)
        if old is None or (isinstance(old, float) and isinstance(p.proposed, float) and p.proposed > old):
            chosen[key] = p.proposed
        elif isinstance(old, float) and isinstance(p.proposed, str):
            chosen[key] = p.proposed
    out: dict[Path, list[Edit]] = {}
    for (path, dtype, metric), value in chosen.items():
        out.setdefault(path, []).append(Edit(dtype, metric, value))
    return out


def diff(path: Path, before: str, after: str) -> str:
    """A unified diff of the change, ``a/<path>`` against ``b/<path>``."""
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}"
        )
    )


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes (what :func:`write` compares to refuse a file changed since it was read)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write(path: Path, edits: Iterable[Edit], *, read_sha256: str | None = None, dry_run: bool = False) -> str:
    """Apply the edits to the spec file at ``path``; return the diff (empty when nothing changes).

    Atomic: the new text goes to a temporary file beside it, then replaces it. Raises :class:`OutputError`
    naming the file when it cannot be read or written, or when its bytes changed since they were read: since
    ``read_sha256`` (the digest when the spec was loaded, before its cases ran) when given, and in any case
    since this call read it.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise OutputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if read_sha256 is not None and digest != read_sha256:
        raise OutputError(f"{path}: changed since it was read; not overwritten (run tune again)")
    before = raw.decode("utf-8")
    after = apply(before, edits)
    if after == before or dry_run:
        return diff(path, before, after)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(after)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o7777)
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise OutputError(f"{path}: changed since it was read; not overwritten (run tune again)")
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return diff(path, before, after)

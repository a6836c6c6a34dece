"""GitHub Actions output: the job summary (Markdown) and ``::error`` annotations.

The summary goes to ``$GITHUB_STEP_SUMMARY`` (GitHub accepts at most 1 MiB per
step); annotations are workflow commands printed to stdout, pointing at the
spec file of each failing case.
"""

import re

from acceptance.records import CaseResult, Results, Verdict, sorted_failures_first
from acceptance.report import perf
from acceptance.report.text import deciding_criterion, headline, overall_line
from acceptance.wording import counted, criterion_text, one_line, visible_controls

CELL_LIMIT = 300

#: GitHub's limit on ``$GITHUB_STEP_SUMMARY``: 1 MiB per step (a larger summary is not shown); the summary keeps
#: under :data:`SUMMARY_MAX_BYTES` and lists at most :data:`SUMMARY_MAX_ROWS` failing cases, failures first.
GITHUB_SUMMARY_LIMIT = 1024 * 1024
SUMMARY_MAX_BYTES = 900_000
SUMMARY_MAX_ROWS = 1000
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")


def md_escape(text: str, limit: int = CELL_LIMIT) -> str:
    r"""Plain text made safe for one Markdown table cell.

    One line (:func:`text.one_line`, cut to ``limit`` characters); ``&``, ``<``,
    ``>`` and ``@`` as HTML character references (no raw HTML, no mentions);
    the characters that start emphasis, code, links, math or a new cell
    (``\ ` * _ [ ] | ~ $``) backslash-escaped.
    """
    flat = one_line(text, limit)
    flat = flat.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("@", "&#64;")
    return _MD_SPECIAL.sub(r"\\\1", flat)


def md_code(text: str, limit: int = CELL_LIMIT) -> str:
    """Text as one Markdown code span, shown literally: one line, cut to ``limit`` characters, and no
    backslash escapes (a code span would show them); the fence is one backtick longer than the longest run
    of backticks in the text, with a space inside it when the text starts or ends with a backtick."""
    flat = one_line(text, limit)
    fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _verdict_mark(verdict: Verdict) -> str:
    return {"pass": "✅", "fail": "❌", "error": "💥", "skip": "⏭️"}[verdict]


def _deciding_cell(case: CaseResult) -> str:
    c = deciding_criterion(case)
    if case.verdict == "fail" and c is not None and c.passed is False:
        return criterion_text(c)
    return headline(case)


def _row(case: CaseResult) -> str:
    assert case.verdict is not None  # results hold decided cases
    return (
        f"| {_verdict_mark(case.verdict or '')} {case.verdict} | {md_escape(case.operator)} | {md_escape(case.dtype)} "
        f"| {md_escape(case.id)} | {md_escape(_deciding_cell(case))} |"
    )


def render_summary(
    results: Results,
    *,
    artifact_url: str | None = None,
    max_bytes: int = SUMMARY_MAX_BYTES,
    max_rows: int = SUMMARY_MAX_ROWS,
) -> str:
    """Markdown job summary: verdict, counts, provenance, the timing table of a bench run, a table of failures
    and errors (failures first).

    Never longer than ``max_bytes`` (UTF-8) nor ``max_rows`` table rows: the
    rows that do not fit are replaced by one line ``… N more failures and
    errors: see report.html in the artifact``.
    """
    s, env = results.summary, results.environment
    head = [
        f"## {'✅' if s.verdict == 'pass' else '❌'} Operator accuracy: {s.verdict.upper()}",
        "",
        md_escape(overall_line(results), 500),
        "",
        f"Device: {md_escape(env.device)} ({md_escape(env.device_name)}) · torch {md_escape(env.torch)}"
        + (f" · commit {md_escape(env.git_commit[:12])}" if env.git_commit else ""),
    ]
    if artifact_url:
        head += ["", f"Full reports (HTML, JUnit XML, results.json): [artifact](<{artifact_url.replace('>', '%3E')}>)"]
    if results.comparison is not None:
        from acceptance.report.comparison import markdown

        head += ["", markdown(results.comparison, limit=20).rstrip()]
    vacuous = [c for c in results.cases if c.verdict == "pass" and c.vacuous]
    if vacuous:
        head += [
            "",
            f"⚠️ {counted(len(vacuous), 'case')} passed vacuously (nothing compared, or a constant answer where the "
            f"oracle varies; `--strict` fails them), e.g. {md_escape(vacuous[0].id)}: "
            f"{md_escape(vacuous[0].vacuous or '')}",
        ]
    timings = perf.markdown(results)
    if timings:
        head += ["", timings.rstrip("\n")]
    bad = [c for c in sorted_failures_first(results.cases) if c.verdict in ("fail", "error")]
    described = {c.operator: c.description for c in bad if c.description}
    if described:
        head += ["", *(f"- **{md_escape(op)}**: {md_escape(text, 300)}" for op, text in list(described.items())[:20])]
    stale = [w for w in results.waivers if w.status != "applied"]
    if stale:
        head += [
            "",
            f"Waivers that waived nothing: {len(stale)} ("
            + ", ".join(f"{md_escape(w.operator)} {md_code(w.match, 80)} {w.status}" for w in stale[:5])
            + (", …" if len(stale) > 5 else "")
            + ")",
        ]
    if not bad:
        return "\n".join(head) + "\n"
    head += [
        "",
        "### Failures and errors",
        "",
        "| Verdict | Operator | dtype | Case | Deciding metric vs threshold |",
        "|---|---|---|---|---|",
    ]
    text = "\n".join(head) + "\n"
    text += _table_rows(bad, len(text.encode("utf-8")), max_bytes, max_rows, artifact_url)
    if len(text.encode("utf-8")) > max_bytes:
        raise ValueError(
            f"max_bytes={max_bytes} is too small for the summary header ({len(text.encode('utf-8'))} bytes)"
        )
    return text


def _table_rows(bad: list[CaseResult], used: int, max_bytes: int, max_rows: int, artifact_url: str | None) -> str:
    """The table's rows after ``used`` bytes of summary: as many as fit ``max_bytes`` and ``max_rows``, then one
    line for the rest (:func:`_more_line`)."""
    text = ""
    for i, case in enumerate(bad):
        row = _row(case) + "\n"
        rest = len(bad) - i - 1
        tail = _more_line(rest, artifact_url) if rest else ""
        if i >= max_rows or used + len(row.encode("utf-8")) + len(tail.encode("utf-8")) > max_bytes:
            return text + _more_line(len(bad) - i, artifact_url)
        text += row
        used += len(row.encode("utf-8"))
    return text


def _more_line(n: int, artifact_url: str | None) -> str:
    where = f"[the artifact](<{artifact_url.replace('>', '%3E')}>)" if artifact_url else "the artifact"
    what = "failure or error" if n == 1 else "failures and errors"
    return f"\n… {n} more {what}: see report.html in {where}\n"


def escape_data(text: str) -> str:
    """Workflow-command data: ``%`` → ``%25``, CR → ``%0D``, LF → ``%0A`` (GitHub's documented escaping)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Workflow-command property value: :func:`escape_data` plus ``:`` → ``%3A`` and ``,`` → ``%2C``."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(file: str, title: str, message: str) -> str:
    file, title, message = (visible_controls(x) for x in (file, title, message))
    return f"::error file={escape_property(file)},title={escape_property(title)}::{escape_data(message)}"


def annotations(results: Results, *, limit: int = 10) -> list[str]:
    """At most ``limit`` ``::error`` workflow commands, one per failing or erroring case, at its spec file.

    When more cases fail than fit, the last command says how many more
    (and names the first case it stands for). Titles and messages are one
    line; control characters are shown as ``\\xNN`` and the rest escaped as
    GitHub documents (:func:`escape_data`, :func:`escape_property`).
    """
    bad = [c for c in sorted_failures_first(results.cases) if c.verdict in ("fail", "error")]
    if limit < 1 or not bad:
        return []
    individual = bad if len(bad) <= limit else bad[: limit - 1]
    out = [
        _command(
            c.spec_file,
            one_line(f"{c.operator} {c.dtype}: {c.verdict}", 200),
            one_line(f"{c.id}: {headline(c)}", 2000),
        )
        for c in individual
    ]
    if len(bad) > len(individual):
        rest = bad[len(individual) :]
        out.append(
            _command(
                rest[0].spec_file,
                f"{len(rest)} more failing case{'s' if len(rest) != 1 else ''}",
                one_line(
                    f"{len(rest)} more case{'s' if len(rest) != 1 else ''} failed or errored, starting with "
                    f"{rest[0].id}: {headline(rest[0])}; see the job summary",
                    2000,
                ),
            )
        )
    return out

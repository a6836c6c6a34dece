"""Reporters: every file rendered from :class:`~acceptance.records.Results` alone, in one registry.

``acceptance run`` writes the reporters marked ``default`` into its output
folder; ``acceptance report`` offers each one as an option (``--junit PATH``,
...). A reporter's module is imported only when it renders, so the command
line starts without loading Jinja2 or the SVG code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pydantic loads only when a reporter renders
    from acceptance.records import Results


@dataclass(frozen=True)
class Context:
    """What a reporter may need beyond the results: the digest of the results.json it renders, a link to
    the uploaded reports."""

    results_sha256: str | None = None
    artifact_url: str | None = None


@dataclass(frozen=True)
class Reporter:
    """One output file: its name in the output folder, its ``acceptance report`` option, and how to render it."""

    name: str
    filename: str
    help: str
    target: str  # "module:function", called as function(results, **{field: context.field for field in uses})
    uses: tuple[str, ...] = ()
    default: bool = False

    def render(self, results: Results, context: Context = Context()) -> str:
        module, _, function = self.target.partition(":")
        render: Callable[..., str] = getattr(importlib.import_module(module), function)
        return render(results, **{name: getattr(context, name) for name in self.uses})


REPORTERS: tuple[Reporter, ...] = (
    Reporter(
        "junit",
        "junit.xml",
        "Write JUnit XML (junit-10.xsd) here.",
        "acceptance.report.junit:render_junit",
        default=True,
    ),
    Reporter(
        "html",
        "report.html",
        "Write the HTML report here.",
        "acceptance.report.html:render_html",
        ("results_sha256",),
        default=True,
    ),
    Reporter(
        "summary",
        "summary.md",
        'Write the GitHub job summary (Markdown) here, e.g. "$GITHUB_STEP_SUMMARY".',
        "acceptance.report.github:render_summary",
        ("artifact_url",),
    ),
    Reporter(
        "signoff",
        "signoff.html",
        "Write the release sign-off here.",
        "acceptance.report.signoff:render_signoff",
        ("results_sha256",),
    ),
)

BY_NAME: dict[str, Reporter] = {r.name: r for r in REPORTERS}


def prepare(reporters: tuple[Reporter, ...] = REPORTERS) -> None:
    """Import the default reporters' modules, and let each one that has a module-level ``prepare()`` do its work
    ahead (the HTML report compiles its template: ~0.3 s with the import). ``acceptance run`` calls this in a
    thread while it measures, so that the reports render as soon as the last case is decided."""
    for reporter in reporters:
        if reporter.default:
            module = importlib.import_module(reporter.target.partition(":")[0])
            getattr(module, "prepare", lambda: None)()

"""pytest plugin: operator specs as test items, one per case (registered through the ``pytest11`` entry point).

``pytest operator_specs/`` collects every spec file under the paths named on
the command line and runs each case as an item whose name is the case id
(``gelu[float16-N=4097]``), so ``-k``, ``-x``, ``--lf`` and pytest-xdist
(``-n 4``) work as usual. pytest's ``-k`` has no ``=`` in a word, so each item
also carries its id without ``=`` as a keyword (``gelu[float16-N4097]``; a
``-k`` holding ``=`` is a usage error saying so). A YAML file is taken as a spec only when

- it lies under a path given on the command line (never under ``testpaths``
  or the invocation folder alone), and under one of the ini option
  ``acceptance_specs`` paths when that option is set, and
- its top level has both ``category`` and ``impl`` (other YAML is left alone).

A spec with problems is a collection error listing them. An item fails with
the case's reasons (then its full account); a waived case is skipped with the
waiver; what the code under test reported without breaking (torch.compile
graph breaks, an allowed eager fallback) becomes a pytest warning. Each case
is decided alone (the dual-delta p-values are Holm-corrected over the case's
own records, not over the session). ``--acceptance-out DIR`` writes
results.json and the default reports of the session once (under xdist, the
controller, from every worker's cases); a session stopped early (``-x``,
Ctrl-C) is recorded ``interrupted`` with the selected cases not run.

Options: ``--acceptance-device`` (auto | cpu | cuda[:N]; default ``$ACCEPTANCE_DEVICE``, else auto),
``--acceptance-trials N``, ``--acceptance-tier default|large`` (repeatable; default: the default tier, as
``acceptance run``), ``--acceptance-no-isolation`` (call the code under test in the pytest process).
"""

from __future__ import annotations

import json
import os
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    import torch

    from acceptance.isolation.importcheck import ImportCheck
    from acceptance.protocols import Executor
    from acceptance.spec import Case

_RESULT_KEY = "acceptance_result"


class AcceptanceWarning(UserWarning):
    """Something the code under test reported without failing the case (e.g. a torch.compile graph break)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("acceptance", "operator accuracy specs")
    group.addoption(
        "--acceptance-device",
        default=os.environ.get("ACCEPTANCE_DEVICE") or "auto",
        help="Device of the impl: auto | cpu | cuda | cuda:N (default: $ACCEPTANCE_DEVICE, else auto).",
    )
    group.addoption("--acceptance-trials", type=int, default=None, help="Trials per case (overrides the specs).")
    group.addoption(
        "--acceptance-tier",
        action="append",
        choices=("default", "large"),
        default=None,
        help="Collect the specs of this tier (repeatable; default: 'default'; 'large' holds LLM-sized shapes).",
    )
    group.addoption(
        "--acceptance-no-isolation",
        action="store_true",
        help="Call the code under test in the pytest process instead of a worker process.",
    )
    group.addoption(
        "--acceptance-out",
        default=None,
        metavar="DIR",
        help="Write results.json, junit.xml and report.html of the spec cases here.",
    )
    parser.addini(
        "acceptance_specs",
        type="paths",
        default=[],
        help="Only YAML files under these paths are collected as operator specs.",
    )


def _under(path: Path, roots: list[Path]) -> bool:
    path = path.resolve()
    return any(path == r or r in path.parents for r in (Path(r).resolve() for r in roots))


def _explicit_args(config: pytest.Config) -> list[Path]:
    """Paths the user named on the command line (not ``testpaths``, not the invocation folder)."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return []
    return [Path(config.invocation_params.dir, a.split("::")[0]) for a in config.args]


def _looks_like_spec(path: Path) -> bool:
    from acceptance.spec.yamlio import read_yaml

    data, problem = read_yaml(path)
    return problem is not None or (isinstance(data, dict) and "category" in data and "impl" in data)


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix not in (".yaml", ".yml") or file_path.name.startswith(("_", ".")):
        return None
    config = parent.config
    if not _under(file_path, _explicit_args(config)):
        return None
    only = config.getini("acceptance_specs")
    if only and not _under(file_path, list(only)):
        return None
    if not _looks_like_spec(file_path):
        return None
    return SpecFile.from_parent(parent, path=file_path)


class SpecProblems(Exception):
    """A spec file that does not validate; the problems, one per line."""


class SpecFile(pytest.File):
    """One spec file: one :class:`CaseItem` per case."""

    def collect(self):
        from acceptance.spec import expand, load_spec

        spec, problems = load_spec(self.path, _imports(self.config))
        if spec is None or problems:
            raise SpecProblems("\n".join(str(p) for p in problems))
        if spec.tier not in (self.config.getoption("acceptance_tier") or ["default"]):
            return  # as `acceptance run`: a `tier: large` spec runs only when asked
        for case in expand([spec]):
            yield CaseItem.from_parent(self, name=case.id, case=case)

    def repr_failure(self, excinfo: pytest.ExceptionInfo, style: str | None = None) -> str:
        if isinstance(excinfo.value, SpecProblems):
            return f"invalid operator spec:\n{excinfo.value}"
        return str(super().repr_failure(excinfo))


class CaseFailed(Exception):
    """A case that failed or errored; the message is its reasons and its full account."""


#: What the plugin keeps per pytest process (per xdist worker): the executor of its cases, the import check of
#: its specs' modules, the impl's device, the session's start.
_EXECUTOR = pytest.StashKey["Executor"]()
_IMPORTS = pytest.StashKey["ImportCheck"]()
_DEVICE = pytest.StashKey["torch.device"]()
_START = pytest.StashKey[datetime]()


def _executor(config: pytest.Config) -> Executor:
    """The session's executor: one worker process for every case of this pytest process (its own with xdist), or
    this process with ``--acceptance-no-isolation``."""
    if _EXECUTOR not in config.stash:
        from acceptance.session.executors import InProcess, OneWorker, Settings

        settings = Settings(_device(config), config.getoption("acceptance_trials"))
        isolate = not config.getoption("acceptance_no_isolation")
        config.stash[_EXECUTOR] = OneWorker(settings, keep=True) if isolate else InProcess(settings)
    return config.stash[_EXECUTOR]


def _imports(config: pytest.Config) -> ImportCheck | None:
    """The session's :class:`~acceptance.isolation.importcheck.ImportCheck`: a spec's modules are imported in a
    child process to be checked, so that one exiting at import cannot end the session (closed once collected);
    ``None`` with ``--acceptance-no-isolation`` (the code under test then runs here)."""
    if config.getoption("acceptance_no_isolation"):
        return None
    if _IMPORTS not in config.stash:
        from acceptance.isolation.importcheck import ImportCheck

        config.stash[_IMPORTS] = ImportCheck()
    return config.stash[_IMPORTS]


class CaseItem(pytest.Item):
    """One case of a spec: measured, decided, and reported as a pytest outcome."""

    def __init__(self, *, case: Case, **kwargs: Any):  # a seam: pytest's node arguments, passed through
        """``kwargs``: pytest's own node arguments from ``from_parent``, passed through as they come (a seam)."""
        super().__init__(**kwargs)
        self.case = case
        self.add_marker(pytest.mark.acceptance)
        self.extra_keyword_matches.add(keyword_id(case.id))

    def runtest(self) -> None:
        from acceptance.report.text import case_details
        from acceptance.session.run import run_cases

        config = self.config
        try:
            device = _device(config)
        except pytest.UsageError as exc:
            raise CaseFailed(f"error: {exc}") from None
        # each case is decided alone: Holm over its own dual-delta records
        (result,) = run_cases([self.case], device, executor=_executor(config))
        self.user_properties.append((_RESULT_KEY, result.model_dump_json()))
        for note in result.warnings:
            warnings.warn(AcceptanceWarning(f"{self.case.id}: {note}"), stacklevel=1)
        if result.verdict == "skip":
            pytest.skip(result.reasons[0] if result.reasons else "skipped")
        if result.verdict in ("fail", "error"):
            raise CaseFailed(
                "\n".join(
                    [f"{result.verdict}: {r}" if k == 0 else f"  {r}" for k, r in enumerate(result.reasons)]
                    + ["", case_details(result)]
                )
            )

    def repr_failure(self, excinfo: pytest.ExceptionInfo, style: str | None = None) -> str:
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"acceptance case {self.case.id}"


def keyword_id(case_id: str) -> str:
    """The case id as pytest's ``-k`` can spell it: without its ``=`` signs (``gelu[float16-N1-LO-1-HI1]`` for
    ``gelu[float16-N=1-LO=-1-HI=1]``), a keyword of the case's item besides its name."""
    return case_id.replace("=", "")


def pytest_configure(config: pytest.Config) -> None:
    keyword = config.getoption("keyword", "") or ""
    if "=" in keyword:  # pytest's -k grammar has no '=' in a word; its own message names only the character
        raise pytest.UsageError(
            f"-k {keyword!r}: pytest's -k cannot hold '='; a spec case also matches its id without '=' "
            f"(N=1 as N1, e.g. -k {keyword.replace('=', '')!r})"
        )
    config.addinivalue_line("markers", "acceptance: a case of an operator spec (acceptance plugin)")
    config.stash[_START] = datetime.now(timezone.utc)
    _RESULTS.clear()


def pytest_collection_finish(session: pytest.Session) -> None:
    check = session.config.stash.get(_IMPORTS, None)
    if check is not None:  # every spec is collected: its child is not needed any more
        check.close()
    if not hasattr(session.config, "workerinput") and any(isinstance(item, CaseItem) for item in session.items):
        _device(session.config)  # a device that is not one ends the session here (an xdist worker: in each case)


def _device(config: pytest.Config) -> torch.device:
    """``--acceptance-device`` as a torch device, resolved once per process; a usage error otherwise."""
    device = config.stash.get(_DEVICE, None)
    if device is None:
        from acceptance.device import resolve_device

        try:
            device = resolve_device(
                config.getoption("acceptance_device"), option="--acceptance-device (or $ACCEPTANCE_DEVICE)"
            )
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.stash[_DEVICE] = device
    return device


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":  # on the xdist controller too: user_properties travel with the report
        for key, value in report.user_properties:
            if key == _RESULT_KEY:
                _RESULTS.append(str(value))


_RESULTS: list[str] = []
_SELECTED: list[str] = []  # the case ids selected to run (spec items; on the xdist controller, a worker's)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    executor = session.config.stash.get(_EXECUTOR, None)
    if executor is not None and hasattr(executor, "close"):
        executor.close()
    check = session.config.stash.get(_IMPORTS, None)
    if check is not None:
        check.close()
    out = session.config.getoption("acceptance_out")
    if out and _RESULTS and not hasattr(session.config, "workerinput"):  # the xdist controller or a plain run
        stopped = session.shouldfail or session.shouldstop or exitstatus == pytest.ExitCode.INTERRUPTED
        _write(Path(out), session.config, stopped=bool(stopped))


@pytest.hookimpl(trylast=True)  # after -k and -m deselected theirs
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    _SELECTED[:] = [item.name for item in items if isinstance(item, CaseItem)]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    """On the xdist controller: the node ids a worker selected (every worker collects the same)."""
    _SELECTED[:] = [i.split("::", 1)[1] for i in ids if "::" in i]


def _write(out: Path, config: pytest.Config, *, stopped: bool = False) -> None:
    """results.json and the default reports of the session's cases (the xdist controller gathers every worker's),
    through the run's own assembly: waivers applied, the session's real start and end recorded. A session that
    ``stopped`` early (``-x``, Ctrl-C) is ``interrupted``, never a pass, with the selected cases not run listed."""
    from acceptance.records import CaseResult
    from acceptance.session.run import RunOptions, Session, write_reports
    from acceptance.spec import load_spec

    cases = list({c.id: c for c in (CaseResult.model_validate(json.loads(v)) for v in _RESULTS)}.values())
    session = Session(RunOptions(command_line="pytest " + " ".join(config.invocation_params.args)))
    session.device = _device(config)
    for path in dict.fromkeys(c.spec_file for c in cases):
        spec, _ = load_spec(Path(path), imports=lambda ref, spec_path: None)  # its callables are not imported here
        if spec is not None:
            session.specs.append(spec)
    start = config.stash.get(_START, None) or datetime.now(timezone.utc)
    res = session.results(cases, start=start, end=datetime.now(timezone.utc))
    if stopped:
        from acceptance.decide.verdict import summarize
        from acceptance.errors import EXIT_FAIL, EXIT_INTERRUPTED

        ran = {c.id for c in cases}
        code = EXIT_FAIL if res.summary.failed or res.summary.errors else EXIT_INTERRUPTED
        update = {"interrupted": True, "not_run": [i for i in _SELECTED if i not in ran]}
        res = res.model_copy(update={**update, "summary": summarize(res.cases, interrupted=code)})
    write_reports(res, out)

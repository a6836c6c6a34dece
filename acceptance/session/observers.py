"""Observers of the case loop (:class:`acceptance.protocols.CaseObserver`): what happens around every case
whatever executor measures it, in this order: the sanitizer, the output-folder guard, the journal.

Progress on standard error is the command line's observer (:mod:`acceptance.cli.progress`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from pathlib import Path

from acceptance.isolation.serve import remove_written, snapshot
from acceptance.measure import sanitize
from acceptance.records import MeasuredCase
from acceptance.session.results import OutputFolder
from acceptance.spec import Case
from acceptance.spec.kinds import JSONValue


class Observer:
    """An observer that does nothing: subclasses override what they watch."""

    def case_started(self, case: Case) -> None:
        pass

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        return result


class Sanitizer(Observer):
    """``--sanitize``: each measured impl runs once more under compute-sanitizer (:mod:`acceptance.measure.sanitize`);
    a finding makes the case an error."""

    def __init__(self, device: str):
        self.device = device

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        return sanitize.check(case.id, case.spec.path, result, self.device)


class FolderGuard(Observer):
    """For callables run in this process (a worker checks each call itself): a case during which a file of the
    output folder appears or changes (other than the run's own journal and lock) is an error, and the file is
    removed."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.before: dict[str, dict[str, tuple[int, int]]] = {}

    def case_started(self, case: Case) -> None:
        self.before[case.id] = snapshot(self.folder)

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        touched = remove_written(self.folder, self.before.pop(case.id, {}))
        if not touched:
            return result
        return result.model_copy(
            update={
                "error": f"the code under test wrote to the output folder during this case ({', '.join(touched)}); "
                "the files were removed"
            }
        )


class Journal(Observer):
    """Every finished case in the journal the moment it finishes
    (:meth:`acceptance.session.results.OutputFolder.append`: written at once, fsynced by group commit), with the
    content key it was measured from (``keys``: :class:`acceptance.session.resume.Keys`), so that ``--resume``
    reuses it only while that content is unchanged."""

    def __init__(self, folder: OutputFolder, keys: Callable[[Case], dict[str, JSONValue]] | None = None):
        self.folder, self.keys = folder, keys
        #: the last cases journaled by this run, each with the compact JSON the journal holds: a signal that stops
        #: the loop after a case is journaled but before the loop kept it loses nothing
        #: (:meth:`acceptance.session.run.Session.measure`); the loop keeps each case before the next finishes
        self.recorded: deque[tuple[Case, MeasuredCase, bytes | None]] = deque(maxlen=8)

    def case_started(self, case: Case) -> None:
        self.folder.sync_due()

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        key = self.keys(case) if self.keys is not None else None
        self.recorded.append((case, result, None))  # first: a signal in the middle of the write keeps it too
        self.recorded[-1] = (case, result, self.folder.append(result, key))
        return result

    def compact(self, result: MeasuredCase) -> bytes | None:
        """The compact JSON the journal wrote for ``result`` (this very object), when it is one of the last
        journaled."""
        for _, journaled, measured in reversed(self.recorded):
            if journaled is result:
                return measured
        return None

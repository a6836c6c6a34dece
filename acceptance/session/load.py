"""A run's specs: discovered, validated and their callables' imports checked in a child process; the cases a run
selects from them. Light to import: ``acceptance list`` and ``validate`` start without torch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from acceptance.errors import SpecError, UsageError
from acceptance.session import startup

if TYPE_CHECKING:
    from acceptance.session.options import RunOptions
    from acceptance.spec import Case, OperatorSpec

#: The specs a run reads when it names none.
DEFAULT_SPECS = Path("operator_specs")


def load(paths: Sequence[Path] = (), meanwhile: Sequence[Callable[[], object]] = ()) -> list[OperatorSpec]:
    """Discover and validate specs; a :class:`SpecError` with one line per problem. The code under test is
    imported for the check in a child process (:mod:`acceptance.isolation.importcheck`), never in this one.
    ``meanwhile``: work started in threads as the check begins, for the time this process waits on it."""
    startup.launch_workers()  # the check's child starts from the fork server: its preload overlaps with our imports
    from acceptance import spec
    from acceptance.isolation.importcheck import load_checked

    chosen = list(paths) or [DEFAULT_SPECS]
    missing = [p for p in chosen if not p.exists()]
    if missing:
        raise UsageError(*(f"{p}: no such file or directory" for p in missing))
    files = spec.discover(chosen)
    if not files:
        raise UsageError(f"{', '.join(map(str, chosen))}: no spec files (*.yaml) found")
    for work in meanwhile:
        startup.meanwhile(work)
    specs, problems = load_checked(files)
    if problems:
        raise SpecError(*(str(p) for p in problems), f"{len(problems)} problem(s) in the specs; nothing was run")
    return specs


def select_tiers(specs: Sequence[OperatorSpec], tiers: Sequence[str] = ()) -> list[OperatorSpec]:
    """The specs of the given tiers (``default`` when none is given): ``tier: large`` specs run only when asked."""
    wanted = set(tiers or ("default",))
    return [s for s in specs if s.tier in wanted]


def plan_cases(specs: Sequence[OperatorSpec], options: RunOptions) -> tuple[list[Case], list[Case]]:
    """The cases of the whole run (every shard) and those of this run's shard (the same list without
    ``--shard``): its seed, reruns, dtypes, ``--only`` glob, seeds and ``-k`` expression
    (:mod:`acceptance.session.keyword`) applied, then the shard."""
    from acceptance import spec

    if options.seed is not None:
        specs = [dataclasses.replace(s, seed=options.seed) for s in specs]
    if options.reruns is not None:
        specs = [dataclasses.replace(s, reruns=options.reruns) for s in specs]
    everything = spec.expand(list(specs), dtypes=list(options.dtypes) or None, only=options.only)
    if options.seeds > 1:
        from acceptance.spec.axes import with_seeds

        everything = with_seeds(everything, options.seeds)
    if options.keyword:
        everything = select_keyword(everything, options.keyword)
    cases = everything
    if options.shard is not None:
        k, n = options.shard
        cases = everything[k - 1 :: n]
    if not cases:
        o = options
        given = [f"--only {o.only!r}" if o.only else "", f"--dtype {', '.join(o.dtypes)}" if o.dtypes else ""]
        given += [f"-k {o.keyword!r}" if o.keyword else "", f"--shard {o.shard[0]}/{o.shard[1]}" if o.shard else ""]
        given = [g for g in given if g]
        raise UsageError(f"no case matches {', '.join(given)}; nothing run" if given else "the specs hold no case")
    return everything, cases


def select_keyword(cases: Sequence[Case], expression: str) -> list[Case]:
    """The cases whose id ``expression`` selects (:func:`acceptance.session.keyword.parse`); a usage error (exit
    2) naming the column where a malformed expression goes wrong."""
    from acceptance.session.keyword import KeywordError, parse

    try:
        keyword = parse(expression)
    except KeywordError as exc:
        raise UsageError(*exc.lines()) from None
    return [c for c in cases if keyword.matches(c.id)]

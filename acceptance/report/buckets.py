"""The relative-error buckets of several cases side by side, as rocMLIR's accuracy study tabulates them.

One row per case that carries buckets and shares its case label (dtype,
symbols, params, preset: the id without the operator) with a case of another
operator, so the same inputs judged against different baselines (a plain
one, an emulated one) sit next to each other; rows are grouped by label, each
with the operator, the baseline's emulation, the count per bucket of
``|e − b| / |b|`` over all elements and trials, and the count at or above 1e-3.
"""

from __future__ import annotations

from acceptance.records import REL_ERROR_BUCKETS, CaseResult

#: Bucket labels in order ('=0', '<1e-6', ..., '>1').
LABELS: tuple[str, ...] = ("=0", *(label for label, _ in REL_ERROR_BUCKETS), ">1")
#: Buckets holding relative errors >= 1e-3.
AT_LEAST_1E3: tuple[str, ...] = tuple(label for label, upper in REL_ERROR_BUCKETS if upper > 1e-3) + (">1",)
#: Most rows shown.
MAX_ROWS = 400


def label_of(case_id: str) -> str:
    """The case label of an id: ``mfma_plain[float16-M=64-preset=r0]`` -> ``float16-M=64-preset=r0``."""
    return case_id[case_id.index("[") + 1 : -1] if "[" in case_id and case_id.endswith("]") else case_id


def at_least_1e3(buckets: dict[str, int]) -> int:
    """Elements with relative error >= 1e-3."""
    return sum(buckets.get(k, 0) for k in AT_LEAST_1E3)


def bucket_table(cases: list[CaseResult]) -> dict[str, object]:
    """``{"labels": [...], "groups": [(label, [row, ...]), ...], "hidden": n}``; a row is
    ``{"operator", "id", "emulation", "counts": [...], "bad": n, "verdict"}``. Empty groups when no two
    operators share a case label."""
    by_label: dict[str, list[CaseResult]] = {}
    for case in cases:
        if case.rel_error_buckets:
            by_label.setdefault(label_of(case.id), []).append(case)
    groups, shown, hidden = [], 0, 0
    for label, members in by_label.items():
        if len({c.operator for c in members}) < 2:
            continue
        rows = []
        for c in sorted(members, key=lambda c: c.operator):
            if shown >= MAX_ROWS:
                hidden += 1
                continue
            shown += 1
            rows.append(
                {
                    "operator": c.operator,
                    "id": c.id,
                    "emulation": c.emulation or "none (as written)",
                    "counts": [c.rel_error_buckets.get(k, 0) for k in LABELS],
                    "bad": at_least_1e3(c.rel_error_buckets),
                    "verdict": c.verdict,
                }
            )
        if rows:
            groups.append((label, rows))
    return {"labels": list(LABELS), "groups": groups, "hidden": hidden}

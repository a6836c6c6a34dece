"""Two results.json files compared case by case: every verdict, metric, criterion and dual-delta statistic.

    python benchmarks/same_results.py OLD NEW [--without-criteria KIND ...] [--show N]

What legitimately differs between two runs of the same cases is left out: when they ran and on which host (the
``environment``), each case's seconds (``timing``) and the warnings the code under test printed. Floats are
compared exactly (NaN equal to NaN). ``--without-criteria KIND`` drops the criteria of that kind from both
files first (e.g. a kind one of the two versions does not have). Prints every difference (at most ``--show``)
and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

#: Case fields that differ from run to run of the same cases.
VOLATILE = ("timing", "warnings")


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def differences(a: object, b: object, path: str) -> list[str]:
    """Every leaf where ``a`` and ``b`` differ, as ``path: old != new``."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                side = "new" if key in b else "old"
                out.append(f"{path}.{key}: only in {side}")
            else:
                out += differences(a[key], b[key], f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        out = [f"{path}: {len(a)} items != {len(b)}"] if len(a) != len(b) else []
        for k, (x, y) in enumerate(zip(a, b, strict=False)):  # the lengths are compared above
            out += differences(x, y, f"{path}[{k}]")
        return out
    return [] if _same(a, b) else [f"{path}: {a!r} != {b!r}"]


def comparable(path: Path, without: set[str]) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.pop("environment", None)
    for case in data["cases"]:
        for key in VOLATILE:
            case.pop(key, None)
        case["criteria"] = [c for c in case.get("criteria", []) if c.get("kind") not in without]
    return data


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--without-criteria", action="append", default=[], metavar="KIND")
    parser.add_argument("--show", type=int, default=40)
    args = parser.parse_args(argv)
    without = set(args.without_criteria)
    old, new = comparable(args.old, without), comparable(args.new, without)
    found = differences(
        {k: v for k, v in old.items() if k != "cases"}, {k: v for k, v in new.items() if k != "cases"}, ""
    )
    ids_old, ids_new = [c["id"] for c in old["cases"]], [c["id"] for c in new["cases"]]
    if ids_old != ids_new:
        found.append(f"case ids or their order differ ({len(ids_old)} old, {len(ids_new)} new)")
    by_id = {c["id"]: c for c in new["cases"]}
    for case in old["cases"]:
        if case["id"] in by_id:
            found += differences(case, by_id[case["id"]], case["id"])
    print(f"{args.old} vs {args.new}: {len(ids_old)} cases, {len(found)} differences")
    for line in found[: args.show]:
        print("  " + line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

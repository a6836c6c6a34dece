"""How the runner's cost grows with the number of cases: synthetic libraries of N tiny cases, run and measured.

    python benchmarks/scale.py [--sizes 300,3000,20000] [--jobs 2] [--trials 3] [--out scale.md] [--keep DIR]
                               [--no-browser] [--no-compare] [--no-merge] [--profile 3000]

For each size N it writes a spec folder of N tiny CPU cases (``torch:add`` on 1 to 100 float32 elements, 100
cases per spec file), runs ``acceptance run --jobs J --no-cache`` on it once and measures:

- wall: seconds of the whole ``acceptance run``; post-run: seconds from the end of the case loop to the
  process's exit (deciding, results.json, every report);
- runner CPU: the runner process's own user+system seconds (its workers excluded), per case, and the part of
  it spent after the case loop;
- runner peak RSS: the runner process's own ``ru_maxrss`` (reported by a wrapper from inside the process at
  exit; the workers, forked from it, are not counted), and per case;
- the sizes of results.json, the journal, report.html, junit.xml and summary.md;
- ``acceptance report`` (results.json to report.html and summary.md, a fresh interpreter), ``acceptance
  compare`` of the run with itself, and a 4-shard merge (``acceptance report s1 s2 s3 s4 --merged``; the shards
  are cut from the run's results.json by this script, as ``--shard K/4`` would have written them), each wall
  seconds, CPU seconds of the process and its peak RSS;
- the HTML report in headless Chromium (``playwright``, the system Chromium): seconds to the ``load`` event and
  to the first case row visible (skipped, with a note, when either is absent).

Then, per measure, the growth exponent b of ``measure = a * N**b`` (least squares over log N, log measure; a
linear cost has b = 1), and writes the table as Markdown to ``--out`` (and standard output). Wall-clock
figures on a shared machine move by tens of percent (and by several times on an overloaded one: the load
average is printed); the CPU seconds and the exponents over a 60x range of sizes are what to read.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PER_SPEC = 100
CHROMIUM = os.environ.get("ACCEPTANCE_CHROMIUM", "/usr/bin/chromium")

#: Runs ``python -m acceptance ARGS`` and, at exit, writes the process's own CPU seconds, ru_maxrss (KiB) and
#: when its case loop ended to the file named by $SCALE_STATS (only the process that started: not a fork); with
#: $SCALE_PROFILE, a cProfile of everything after the case loop goes to that file.
WRAPPER = r"""
import atexit, json, os, resource, runpy, sys, time
main_pid, stats, marks = os.getpid(), os.environ["SCALE_STATS"], {}
profile = None
def report():
    if os.getpid() != main_pid:
        return
    if profile is not None:
        profile.disable()
        profile.dump_stats(os.environ["SCALE_PROFILE"])
    ru = resource.getrusage(resource.RUSAGE_SELF)
    marks.update(cpu=ru.ru_utime + ru.ru_stime, maxrss_kib=ru.ru_maxrss, end=time.time())
    with open(stats, "w") as fh:
        json.dump(marks, fh)
atexit.register(report)
try:
    from acceptance.session import run as run_mod
    measure = run_mod.Session.measure
    def timed(self, *a, **k):
        global profile
        try:
            return measure(self, *a, **k)
        finally:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            marks.update(loop_end=time.time(), loop_cpu=ru.ru_utime + ru.ru_stime, loop_maxrss_kib=ru.ru_maxrss)
            if os.environ.get("SCALE_PROFILE"):
                import cProfile
                profile = cProfile.Profile()
                profile.enable()
    run_mod.Session.measure = timed
except ImportError:
    pass
sys.argv = ["acceptance", *sys.argv[1:]]
runpy.run_module("acceptance", run_name="__main__", alter_sys=True)
"""


def library(folder: Path, n: int) -> Path:
    """A spec folder of ``n`` cases: ``torch:add`` on M float32 elements (M = 1..100), 100 cases per spec."""
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(math.ceil(n / PER_SPEC)):
        count = min(PER_SPEC, n - k * PER_SPEC)
        cases = "\n".join(f"  - {{M: {m + 1}}}" for m in range(count))
        (folder / f"tiny{k:04d}.yaml").write_text(
            f"name: tiny{k:04d}\ncategory: arithmetic\nimpl: torch:add\ndtypes: [float32]\n"
            "inputs:\n  - {name: a, shape: [M], dist: {uniform: [-1, 1]}}\n"
            "  - {name: b, shape: [M], dist: {uniform: [-1, 1]}}\n"
            f"cases:\n{cases}\ntrials: 3\nseed: 0\n"
        )
    return folder


def acceptance(
    args: list[str], stats: Path, *, log: Path, profile: Path | None = None
) -> tuple[float, dict[str, float]]:
    """Run ``acceptance ARGS`` under the wrapper: (wall seconds, the wrapper's figures); ``profile``: where the
    cProfile of the work after the case loop goes."""
    env = dict(os.environ, SCALE_STATS=str(stats), PYTHONPATH=str(ROOT), SCALE_PROFILE=str(profile or ""))
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-c", WRAPPER, *args], cwd=ROOT, env=env, stdout=out, stderr=out)
    wall = time.time() - start
    if proc.returncode not in (0, 1):
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"acceptance {' '.join(args[:2])} failed ({proc.returncode}):\n{tail}")
    figures = json.loads(stats.read_text())
    figures["start"] = start
    return wall, figures


def shards(results: Path, folder: Path, n: int = 4) -> list[Path]:
    """``results`` cut into ``n`` shards as ``--shard K/n`` writes them: each shard's plan lists the positions of
    its cases in the whole run and every shard's size, so the merge re-decides the run as one Holm family (the
    cases are dealt round robin here: the merge's cost does not depend on which shard holds a case)."""
    sys.path.insert(0, str(ROOT))
    from acceptance.decide.verdict import summarize
    from acceptance.records import Plan
    from acceptance.session import results as results_mod

    whole = results_mod.load(results)
    assert whole.plan is not None
    sizes = [len(whole.cases[k - 1 :: n]) for k in range(1, n + 1)]
    paths = []
    for k in range(1, n + 1):
        cases = whole.cases[k - 1 :: n]
        plan = Plan(
            shard=[k, n],
            cases=whole.plan.cases,
            digest=whole.plan.digest,
            part_digest=results_mod.ids_digest([c.id for c in cases]),
            positions=list(range(k - 1, len(whole.cases), n)),
            shard_cases=sizes,
        )
        part = whole.model_copy(update={"cases": cases, "plan": plan, "summary": summarize(cases)})
        paths.append(results_mod.write(part, folder / f"shard{k}" / "results.json"))
    return paths


def browser_times(html: Path) -> tuple[float | None, float | None, str]:
    """Seconds to the ``load`` event and to the first case row visible in headless Chromium; a note when not
    measured."""
    if not Path(CHROMIUM).exists():
        return None, None, f"no Chromium at {CHROMIUM}"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, None, "no playwright package"
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            start = time.perf_counter()
            page.goto(html.as_uri(), wait_until="load", timeout=600_000)
            loaded = time.perf_counter() - start
            page.locator("#cases-table tbody tr, table tbody tr").first.wait_for(state="visible", timeout=600_000)
            rows = time.perf_counter() - start
        finally:
            browser.close()
    return loaded, rows, ""


def size_of(path: Path) -> float:
    """MB (10^6 bytes) of ``path``; 0 when absent."""
    return path.stat().st_size / 1e6 if path.exists() else 0.0


def measure(n: int, work: Path, args: argparse.Namespace) -> dict[str, float]:
    """Every figure of one size."""
    lib, out = library(work / f"lib{n}", n), work / f"run{n}"
    run_args = ["run", str(lib), "--out", str(out), "--jobs", str(args.jobs), "--trials", str(args.trials)]
    profile = work / f"post-run{n}.prof" if n in args.profile else None
    wall, fig = acceptance([*run_args, "--no-cache"], work / "stats.json", log=work / f"run{n}.log", profile=profile)
    if profile is not None:
        print(f"post-run profile: {profile} (python -m pstats)", file=sys.stderr)
    row = {
        "wall s": wall,
        "post-run s": fig["end"] - fig.get("loop_end", fig["end"]),
        "runner CPU ms/case": 1e3 * fig["cpu"] / n,
        "post-run CPU s": fig["cpu"] - fig.get("loop_cpu", fig["cpu"]),
        "runner peak RSS MB": fig["maxrss_kib"] * 1024 / 1e6,
        "loop peak RSS MB": fig.get("loop_maxrss_kib", 0) * 1024 / 1e6,
    }
    for name in ("results.json", "journal.jsonl", "report.html", "junit.xml"):
        row[f"{name} MB"] = size_of(out / name)
    results = out / "results.json"
    again = ["report", str(results), "--html", str(work / "rerender.html"), "--summary", str(work / "summary.md")]
    wall, fig = acceptance(again, work / "stats.json", log=work / "report.log")
    row["summary.md MB"] = size_of(work / "summary.md")
    row["report s"], row["report CPU s"], row["report RSS MB"] = wall, fig["cpu"], fig["maxrss_kib"] * 1024 / 1e6
    if not args.no_compare:
        wall, fig = acceptance(["compare", str(results), str(results)], work / "stats.json", log=work / "cmp.log")
        row["compare s"], row["compare CPU s"], row["compare RSS MB"] = wall, fig["cpu"], fig["maxrss_kib"] * 1024 / 1e6
    if not args.no_merge:
        parts = [str(p) for p in shards(results, work / f"shards{n}")]
        merge_args = ["report", *parts, "--merged", str(work / "merged.json")]
        wall, fig = acceptance(merge_args, work / "stats.json", log=work / "merge.log")
        row["merge s"], row["merge CPU s"], row["merge RSS MB"] = wall, fig["cpu"], fig["maxrss_kib"] * 1024 / 1e6
    if not args.no_browser:
        loaded, rows, note = browser_times(out / "report.html")
        if note:
            print(f"browser: {note}", file=sys.stderr)
        else:
            row["HTML load s"], row["HTML rows s"] = float(loaded or 0), float(rows or 0)
    return row


def exponent(sizes: list[int], values: list[float]) -> float | None:
    """b of ``value = a * N**b``: the least-squares slope of log(value) on log(N); None below two positive
    points."""
    pts = [(math.log(n), math.log(v)) for n, v in zip(sizes, values, strict=True) if v > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def table(sizes: list[int], rows: list[dict[str, float]]) -> str:
    """The figures as a Markdown table: one line per measure, one column per size, the exponent, and the
    marginal cost per case between the two largest sizes ((value(N2) - value(N1)) / (N2 - N1), in thousandths of
    the measure's unit: KB per case for MB, ms per case for s)."""
    names = list(dict.fromkeys(k for r in rows for k in r))
    lines = [
        "| measure | " + " | ".join(f"N={n}" for n in sizes) + " | exponent | marginal /case (x1e-3) |",
        "|---|" + "---:|" * (len(sizes) + 2),
    ]
    for name in names:
        values = [r.get(name, 0.0) for r in rows]
        b = exponent(sizes, values)
        cells = " | ".join(f"{v:.3g}" for v in values)
        marginal = (
            ""
            if len(sizes) < 2 or "/case" in name
            else f"{1e3 * (values[-1] - values[-2]) / (sizes[-1] - sizes[-2]):.3g}"
        )
        lines.append(f"| {name} | {cells} | {'' if b is None else f'{b:.2f}'} | {marginal} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="300,3000,20000", help="case counts, comma-separated")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", type=Path, help="also write the Markdown table here")
    ap.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-compare", action="store_true")
    ap.add_argument("--no-merge", action="store_true")
    ap.add_argument(
        "--profile", default="", help="sizes whose run profiles its post-run work (cProfile, into the work folder)"
    )
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    args.profile = {int(s) for s in args.profile.split(",") if s.strip()}
    if not sizes or min(sizes) < 1:
        raise SystemExit("--sizes: give positive case counts, e.g. 300,3000")
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = []
        for n in sizes:
            print(f"N={n} ...", file=sys.stderr, flush=True)
            rows.append(measure(n, work, args))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    text = f"jobs {args.jobs}, trials {args.trials}, {os.cpu_count()} CPUs, load average at the end {load}\n\n"
    text += table(sizes, rows)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

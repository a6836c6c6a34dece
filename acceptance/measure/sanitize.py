"""``--sanitize``: the impl of each case run once more under NVIDIA compute-sanitizer (memcheck, racecheck).

On a CUDA device with ``compute-sanitizer`` on PATH, :func:`check` runs, per
tool, ``compute-sanitizer --tool T --print-limit 20 python -m acceptance.measure.sanitize
SPEC CASE_ID DEVICE``: a fresh process that loads the spec, draws trial 0's
inputs, calls the impl (with the spec's input layouts) on the device and
synchronises. :func:`findings` reads the tool's report; a finding makes the
case an ``error`` carrying the tool's first report lines. The run fails when
the sanitizer cannot run at all, too: a sanitizer that did not look is never
a pass. :func:`unavailable` says why sanitizing is impossible here (no CUDA
device, no tool), for the command line to refuse ``--sanitize`` with it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from acceptance.records import MeasuredCase

#: The tools run, in order.
TOOLS: tuple[str, ...] = ("memcheck", "racecheck")
#: Report lines kept in a case's error.
FIRST_LINES = 6
#: Seconds one sanitized run may take (instrumented kernels run 10-100x slower).
TIMEOUT = 600.0

_PREFIX = "========="
_SUMMARY = re.compile(r"^(ERROR|RACECHECK|LEAK) SUMMARY:\s*(\d+)\s+(error|hazard)")
_ERRORS_IN_PARENS = re.compile(r"\((\d+) errors?, (\d+) warnings?\)")


def unavailable(device_type: str) -> str | None:
    """Why ``--sanitize`` cannot run here, or ``None`` when it can."""
    if device_type != "cuda":
        return (
            f"--sanitize needs a CUDA device (the impl runs on {device_type}); "
            "compute-sanitizer checks GPU kernels only"
        )
    if shutil.which("compute-sanitizer") is None:
        return "--sanitize: compute-sanitizer is not on PATH (it ships with the CUDA toolkit, e.g. /usr/local/cuda/bin)"
    return None


def findings(report: str) -> tuple[int, list[str]]:
    """(number of errors, the first report lines) of one compute-sanitizer run's output.

    Report lines are those starting with ``=========`` (the tool's prefix), without the prefix, the
    banner and blank ones. The count is the ``ERROR SUMMARY: N errors`` of memcheck, or for racecheck's
    ``RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)`` the errors E; when no summary is
    printed (the process died), every ``Error``/``Invalid`` line counts.
    """
    lines = [line[len(_PREFIX) :].strip() for line in report.splitlines() if line.startswith(_PREFIX)]
    lines = [line for line in lines if line and line != "COMPUTE-SANITIZER"]
    count: int | None = None
    body = []
    for line in lines:
        m = _SUMMARY.match(line)
        if m:
            inner = _ERRORS_IN_PARENS.search(line)
            n = int(inner.group(1)) if inner else int(m.group(2))
            count = (count or 0) + n
        else:
            body.append(line)
    if count is None:
        count = sum(1 for line in body if line.startswith(("Error", "Invalid", "Program hit", "Race")))
    return count, body[:FIRST_LINES]


def check(case_id: str, spec_path: Path, result: MeasuredCase, device: str) -> MeasuredCase:
    """``result`` unchanged when every tool is clean; else a copy with ``error`` = the tool's first lines."""
    if result.error is not None:
        return result
    for tool in TOOLS:
        cmd = [
            "compute-sanitizer",
            "--tool",
            tool,
            "--print-limit",
            "20",
            sys.executable,
            "-m",
            "acceptance.measure.sanitize",
            str(spec_path),
            case_id,
            device,
        ]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return result.model_copy(update={"error": f"compute-sanitizer --tool {tool} could not finish: {exc}"})
        n, first = findings(done.stdout + "\n" + done.stderr)
        if n or (done.returncode != 0 and not first):
            shown = " | ".join(first) or (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return result.model_copy(
                update={
                    "error": f"compute-sanitizer {tool}: {n} error(s) in the impl "
                    f"(exit status {done.returncode}): {shown}"
                }
            )
    return result


def _main(argv: list[str]) -> int:  # pragma: no cover - runs under compute-sanitizer on a GPU
    """``python -m acceptance.measure.sanitize SPEC CASE_ID DEVICE``: the impl once on trial 0's inputs."""
    import torch

    from acceptance.measure import roles as faithful
    from acceptance.spec import expand, load_spec
    from acceptance.spec.axes import with_seeds
    from acceptance.spec.inputs import RoleInputs, generate

    spec_path, case_id, device = argv
    spec, problems = load_spec(Path(spec_path))
    if spec is None:
        print("\n".join(map(str, problems)), file=sys.stderr)
        return 2
    base_id, _, k = case_id.partition("@seed+")
    case = next(c for c in expand([spec]) if c.id == base_id)
    if k:
        case = with_seeds([case], int(k) + 1)[-1]
    impl, baseline, oracle = faithful.resolved(faithful.wrap_roles(*faithful.role_refs(spec), case))
    dev = torch.device(device)
    made = generate(case, 0)
    impl(*(t.to(dev) for t in (made.impl if isinstance(made, RoleInputs) else made)), **case.params)
    torch.cuda.synchronize(dev)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(_main(sys.argv[1:]))

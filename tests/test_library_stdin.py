"""``acceptance.run()`` from a script read on standard input (``python - < script``, a heredoc in CI): the main
module has no file, which multiprocessing's fork server would try to import in every worker it starts."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import acceptance
res = acceptance.run([{spec!r}], device="cpu", dtypes=("float32",), jobs={jobs})
print("verdicts", sorted(c.verdict for c in res.cases))
"""


def test_run_from_a_script_on_stdin_measures_in_workers():
    spec = str(ROOT / "examples" / "quickstart")
    for jobs in (1, 2):
        done = subprocess.run(
            [sys.executable, "-"],
            input=SCRIPT.format(spec=spec, jobs=jobs),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        # the README's quickstart: the blocked GELU fails at N=1000 and passes at N=1024, in float32 as in float16
        assert done.stdout.strip().splitlines()[-1] == "verdicts ['fail', 'pass']"

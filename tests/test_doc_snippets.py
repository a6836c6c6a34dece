"""Docs that run: every code block of README.md and docs/*.md marked runnable, and every ``examples/*.py``.

A block is runnable when the line before its opening fence is ``<!-- runnable -->`` (it must exit 0) or
``<!-- runnable: exit N -->`` (it must exit N). ``python`` blocks run with this interpreter, ``sh``/``bash``
blocks with ``bash -eo pipefail``, both from the repository root with this interpreter's ``bin`` first on
``PATH`` and a temporary reference cache. Blocks that need a GPU, the network or minutes stay unmarked.
The examples are run here once (marked ``slow``); no runnable block runs them again.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if p.name != "__init__.py")
MARKER = re.compile(r"^<!-- runnable(?:: exit (\d+))? -->\n```(\w+)\n(.*?)^```", re.M | re.S)
LOOSE_MARKER = re.compile(r"^<!-- runnable", re.M)
COMMANDS = {"python": [sys.executable, "-c"], "sh": ["bash", "-eo", "pipefail", "-c"]}
COMMANDS["bash"] = COMMANDS["sh"]


@dataclass(frozen=True)
class Block:
    """One runnable code block: where it is, its language, its code and the exit status it must end with."""

    path: Path
    line: int
    language: str
    code: str
    exit: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"


def runnable_blocks(path: Path) -> list[Block]:
    """The marked blocks of one Markdown file; a marker not followed by a fenced block of a known language is
    an error (it would silently test nothing)."""
    text = path.read_text(encoding="utf-8")
    blocks = [
        Block(path, text.count("\n", 0, m.start()) + 2, m[2], m[3], int(m[1] or 0)) for m in MARKER.finditer(text)
    ]
    assert len(blocks) == len(LOOSE_MARKER.findall(text)), f"{path}: a runnable marker is not before a code block"
    for b in blocks:
        assert b.language in COMMANDS, f"{b}: cannot run a {b.language!r} block"
    return blocks


def environment(cache: Path) -> dict[str, str]:
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return os.environ | {"PATH": path, "ACCEPTANCE_CACHE_DIR": str(cache), "PYTHONHASHSEED": "0"}


def run_block(block: Block, cache: Path, timeout: float = 300) -> None:
    """Run ``block`` from the repository root; raise AssertionError naming the file and line when its exit
    status is not the one it promises."""
    done = subprocess.run(
        [*COMMANDS[block.language], block.code],
        cwd=ROOT,
        env=environment(cache),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == block.exit, (
        f"{block}: exit {done.returncode}, expected {block.exit}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


BLOCKS = [b for path in DOCS for b in runnable_blocks(path)]


def test_the_docs_mark_runnable_blocks():
    assert len(BLOCKS) >= 3
    assert {b.language for b in BLOCKS} >= {"python", "sh"}
    for b in BLOCKS:  # the examples run once, below
        assert "examples/" not in b.code or ".py" not in b.code, f"{b} runs an example again"


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_runnable_block(block, tmp_path):
    run_block(block, tmp_path / "cache")


@pytest.mark.slow
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example, tmp_path):
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=ROOT,
        env=environment(tmp_path / "cache"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_broken_snippet_fails_the_harness(tmp_path):
    doc = tmp_path / "broken.md"
    doc.write_text(
        "Works:\n\n<!-- runnable -->\n```python\nprint(1 + 1)\n```\n\n"
        "Broken:\n\n<!-- runnable -->\n```python\nfrom acceptance.spec.inputs import to_dtype\n```\n\n"
        "Fails as promised:\n\n<!-- runnable: exit 3 -->\n```sh\nexit 3\n```\n"
    )
    good, broken, promised = runnable_blocks(doc)
    run_block(good, tmp_path)
    run_block(promised, tmp_path)
    with pytest.raises(AssertionError, match=r"broken\.md:11: exit 1, expected 0[\s\S]*ImportError"):
        run_block(broken, tmp_path)
    stray = tmp_path / "stray.md"
    stray.write_text("<!-- runnable -->\nnot a code block\n")
    with pytest.raises(AssertionError, match="not before a code block"):
        runnable_blocks(stray)

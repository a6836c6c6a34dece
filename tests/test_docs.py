"""The docs match the code: generated tables are fresh, hand-written field tables list exactly the model's
fields, links and anchors resolve, every module is placed in the architecture page, and the README keeps the
set-up commands CI runs and the example output a real run prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance import docgen, records
from acceptance.cli import main
from acceptance.spec import schema

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))
ALL_MD = [README, *PAGES]

FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """The text with fenced code blocks blanked out (line count kept)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else line)
    return "\n".join(out)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text (links and images as their text, code spans without
    backticks, inline HTML dropped), lower-cased, punctuation removed except '-' and '_', spaces as '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file; repeated slugs get -1, -2, ... as on GitHub."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        out.add(slug if n == 0 else f"{slug}-{n}")
        seen[slug] = n + 1
    return out


def links(path: Path) -> list[str]:
    """Targets of inline links and images outside code (code spans removed first)."""
    text = re.sub(r"`[^`]*`", "", prose(path.read_text(encoding="utf-8")))
    return re.findall(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)", text)


# ----------------------------------------------------------------------------- generated tables


@pytest.mark.parametrize("path", ALL_MD, ids=lambda p: p.name)
def test_no_generated_block_is_stale(path):
    """`python -m acceptance.docgen` would change nothing: every table that restates code matches the code."""
    _, stale = docgen.render(path.read_text(encoding="utf-8"), str(path))
    assert stale == [], f"{path.name}: stale generated blocks {stale}; run python -m acceptance.docgen"


def test_every_generator_is_used_in_the_docs():
    used = set()
    for path in ALL_MD:
        used |= {m.group("name") for m in docgen.BLOCK.finditer(path.read_text(encoding="utf-8"))}
    assert set(docgen.GENERATORS) - used == set()


def test_docgen_flags_a_stale_block():
    """The check above can fail: a block with an outdated body is reported by name."""
    stale_doc = (
        "# t\n\n<!-- generated: exit-codes -->\n| code | meaning |\n|---|---|\n| 0 | ok |\n<!-- end generated -->\n"
    )
    fresh, stale = docgen.render(stale_doc)
    assert stale == ["exit-codes"]
    assert "| 130 |" in fresh and docgen.render(fresh)[1] == []


# ----------------------------------------------------------------------------- hand-written field tables


def first_table_names(path: Path, heading: str) -> list[str]:
    """The backticked names in the first column of the first table under the heading ``heading``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"^#+\s+{re.escape(heading)}\s*$", line))
    names, in_table = [], False
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            in_table = True
            cell = line.split("|")[1].strip()
            m = re.fullmatch(r"`([^`]+)`", cell)
            if m:
                names.append(m.group(1))
        elif in_table:
            break
    return names


@pytest.mark.parametrize(
    "model",
    [
        records.Environment,
        records.Summary,
        records.WorstElement,
        records.Describe,
        records.StatTest,
        records.Timing,
        records.Diff4Counts,
    ],
    ids=lambda m: m.__name__,
)
def test_results_page_lists_exactly_the_fields_of_each_record(model):
    assert first_table_names(DOCS / "results.md", model.__name__) == list(model.model_fields)


@pytest.mark.parametrize(
    "heading,model",
    [
        ("Fields", schema.SpecModel),
        ("Inputs", schema._InputModel),
        ("Distributions", schema._DistModel),
        ("Dual-delta", schema._DualDeltaModel),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_specs_page_lists_exactly_the_keys_of_the_schema(heading, model):
    names = first_table_names(DOCS / "specs.md", heading)
    keys = [name.split(":")[0] for name in names]  # the distributions table writes `uniform: [lo, hi]`
    assert keys == list(model.model_fields)


# ----------------------------------------------------------------------------- links and anchors


def test_github_slug_follows_githubs_rules():
    assert github_slug("Use it in your repository") == "use-it-in-your-repository"
    assert github_slug("`acceptance run`") == "acceptance-run"
    assert github_slug("results.json") == "resultsjson"
    assert (
        github_slug("Proof that the gate works: the mutation suite") == "proof-that-the-gate-works-the-mutation-suite"
    )
    assert github_slug("The gate: non-inferiority") == "the-gate-non-inferiority"
    assert github_slug("diff4_counts and [links](x.md)") == "diff4_counts-and-links"


@pytest.mark.parametrize("path", ALL_MD, ids=lambda p: p.name)
def test_every_relative_link_resolves(path):
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == []


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "# Title\n\n[ok](#title) [bad](#nope) [gone](missing.md) `[code](ignored.md)`\n```\n[fenced](ignored.md)\n```\n"
    )
    assert links(page) == ["#title", "#nope", "missing.md"]
    assert anchors(page) == {"title"}


def test_readme_links_every_docs_page():
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    assert {p.resolve() for p in PAGES} <= linked


# ----------------------------------------------------------------------------- README


def readme_setup_lines() -> list[str]:
    text = README.read_text(encoding="utf-8").split("## Set-up", 1)[1]
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.strip().splitlines()


def ci_lines() -> tuple[str, str, str]:
    """(venv creation, install, test) as `.ci/run` runs them."""
    lines = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    venv = next(line for line in lines if line.startswith("python3 -m venv"))
    install = next(line for line in lines if "pip install" in line and "torch" in line)
    test = next(line for line in lines if "-m pytest" in line)
    return venv, install, test


def test_readme_is_short():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_readme_setup_commands_are_the_ones_ci_runs():
    venv, install, test = ci_lines()
    quiet_free = re.sub(r"\s--quiet\b", "", install)
    assert readme_setup_lines() == [f"{venv} && {quiet_free}", test]
    assert readme_setup_lines() == [
        'python3 -m venv .venv && .venv/bin/pip install torch==2.13.0 -e ".[dev]"',
        ".venv/bin/python -m pytest -q",
    ]


def _machine_free(lines: list[str]) -> list[str]:
    """A run's console lines less those whose digits depend on the CPU's float32 GELU, which is the float32
    cases' baseline: its error in the far negative tail (where 1 + erf(x/sqrt 2) cancels) differs from one
    x86 machine to another. Left out: the dual-delta reasons, the output folder, and of each float32 case every
    reason but its header and the impl's own diff1 and diff2 (the impl's errors do not involve the baseline)."""
    out, float32 = [], False
    for line in lines:
        if line.startswith("wrote ") or line.strip().startswith("dual-delta"):
            continue
        if not line.startswith(" "):
            float32 = line.startswith("FAIL  ") and "[float32-" in line
            out.append(line)
        elif not float32:
            out.append(line)
        elif line.strip().startswith(("diff1 ", "diff2 ")):
            out.append(line.split(", baseline ", 1)[0])
    return out


def test_readme_example_output_is_what_a_run_prints(tmp_path):
    """The quickstart block of the README is what `acceptance run examples/quickstart` prints, but for the
    lines whose digits depend on the machine's float32 GELU (:func:`_machine_free`)."""
    text = README.read_text(encoding="utf-8")
    block = text.split("$ .venv/bin/acceptance run examples/quickstart --out reports/quickstart\n", 1)[1]
    documented = block.split("```", 1)[0].splitlines()
    result = CliRunner().invoke(
        main,
        ["run", str(ROOT / "examples" / "quickstart"), "--out", str(tmp_path), "--device", "cpu"],
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    # the README shows a terminal, where a progress bar on stderr stands for the status lines of a log
    status = [line for line in result.stdout.splitlines() if line.startswith("[") and "/4] " in line[:7]]
    printed = _machine_free([line for line in result.stdout.splitlines() if line not in status])
    failed = sorted(line.split()[1] for line in printed if line.startswith("FAIL  "))
    assert sorted(line.split()[2] for line in status if line.split()[1] == "FAIL") == failed
    assert sorted(line.split()[1] for line in status) == ["FAIL", "FAIL", "PASS", "PASS"]
    assert printed == _machine_free(documented)
    assert (
        sum("float32 activation default); against the oracle rounded to float32: impl 0.2" in line for line in printed)
        == 1
    )  # noqa: E741
    assert sum(l.startswith("      ") for l in printed) >= 9  # every reason of the float16 case  # noqa: E741
    assert len([l for l in documented if l.strip().startswith("dual-delta")]) == 4  # noqa: E741


# ----------------------------------------------------------------------------- architecture


def test_every_module_is_named_in_the_architecture_page():
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    package = ROOT / "acceptance"
    missing = [
        str(p.relative_to(package))
        for p in sorted(package.rglob("*.py"))
        if f"`{p.relative_to(package).as_posix()}`" not in page
    ]
    assert missing == []

"""Docs that are generated from code and data stay in step with it; links resolve;
the product's text carries no build history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nodecert import docgen
from support.env import REPO

DOCS = sorted((REPO / "docs").glob("*.md"))
GENERATED = docgen.generated_docs()  # README.md and docs/*.md


@pytest.mark.parametrize("doc", GENERATED, ids=lambda p: p.name)
def test_generated_tables_match_the_code(doc: Path) -> None:
    text = doc.read_text()
    assert docgen.render(text) == text, (
        f"{doc.name} is out of date: run `python -m nodecert.docgen`, review, commit")


def test_every_generator_is_used_and_a_stale_table_is_caught() -> None:
    used = {m.group("name") for d in GENERATED for m in docgen.BLOCK.finditer(d.read_text())}
    assert used == set(docgen.GENERATORS)
    stale = "<!-- BEGIN GENERATED: faults -->\n| old |\n<!-- END GENERATED: faults -->"
    assert docgen.render(stale) != stale  # the test above can fail


def test_readme_is_the_entry_and_its_links_resolve() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 230
    for doc in [REPO / "README.md", *DOCS]:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / target).exists(), f"{doc.name}: broken link {target}"
    assert {f"docs/{d.name}" for d in DOCS} <= set(re.findall(r"\((docs/[a-z-]+\.md)", readme))


NARRATION = re.compile(r"\b(issue ?#?\d+|issues? \d|session \d|wave \d)\b", re.I)


def test_the_product_never_narrates_how_it_was_built() -> None:
    """No issue numbers or process history in code, data or docs (CHANGELOG aside)."""
    roots = ["src", "validators", "roles", "playbooks", "inventory", "stacks", "docs",
             "benchmarks", "README.md", "pyproject.toml"]
    hits = []
    for root in roots:
        base = REPO / root
        for path in [base] if base.is_file() else sorted(base.rglob("*")):
            if not path.is_file() or path.suffix not in (".py", ".md", ".yml", ".yaml",
                                                          ".json", ".j2", ".toml", ".ini",
                                                          ".sh", ".cfg"):
                continue
            for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if NARRATION.search(line) or "shared/reference" in line:
                    hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:80]}")
    assert hits == []

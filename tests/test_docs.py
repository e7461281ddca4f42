"""The docs stay true and render: ``docs/reference.md`` is what ``build_parser`` prints
(``scripts/docs_reference.py``), ``docs/settings.md`` what ``supervisor.settings`` declares
(``scripts/docs_settings.py``); in every page code fences are balanced, every ``<details>`` is
closed, every table row has its header's number of cells and relative links point at files that
exist; the README stays short and links every page of ``docs/``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = sorted([README, REPO / "CHANGELOG.md", REPO / "contrib" / "README.md", *(REPO / "docs").glob("*.md")])
README_MAX_LINES = 250


def _lines(page: Path) -> list[str]:
    return page.read_text(encoding="utf-8").splitlines()


def _name(page: Path) -> str:
    return str(page.relative_to(REPO))


def _outside_fences(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, text) of every line that is not inside a fenced code block."""
    out: list[tuple[int, str]] = []
    fence: str | None = None
    for no, line in enumerate(lines, 1):
        m = re.match(r"\s*(`{3,}|~{3,})", line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence) and not line.strip()[len(mark):].strip():
                fence = None
            continue
        if fence is None:
            out.append((no, line))
    return out


@pytest.mark.parametrize(("script", "page", "source"), [
    ("docs_reference.py", "docs/reference.md", "the parser"),
    ("docs_settings.py", "docs/settings.md", "supervisor/settings.py"),
])
def test_generated_reference_is_current(script: str, page: str, source: str) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / script), "--check"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, (
        f"{page} differs from {source}; run: python scripts/{script}\n"
        + result.stdout[-4000:] + result.stderr[-2000:]
    )


def test_readme_is_short_and_links_every_page() -> None:
    lines = _lines(README)
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines; keep it under {README_MAX_LINES}"
    text = "\n".join(lines)
    unlinked = [_name(p) for p in (REPO / "docs").glob("*.md") if f"]({_name(p)})" not in text]
    assert not unlinked, f"README.md does not link: {unlinked}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_code_fences_are_balanced(page: Path) -> None:
    fence: tuple[int, str] | None = None
    for no, line in enumerate(_lines(page), 1):
        m = re.match(r"\s*(`{3,}|~{3,})", line)
        if not m:
            continue
        mark = m.group(1)
        if fence is None:
            fence = (no, mark)
        elif mark[0] == fence[1][0] and len(mark) >= len(fence[1]) and not line.strip()[len(mark):].strip():
            fence = None
    assert fence is None, f"{_name(page)}: the code fence opened on line {fence[0]} is never closed"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_details_block_is_closed_and_has_a_summary(page: Path) -> None:
    stack: list[int] = []
    for no, line in _outside_fences(_lines(page)):
        for tag in re.findall(r"</?details>", re.sub(r"`[^`]*`", "", line)):  # not inside code spans
            if tag == "<details>":
                stack.append(no)
                assert "<summary>" in line and "</summary>" in line, f"{_name(page)}:{no}: <details> without a summary"
            else:
                assert stack, f"{_name(page)}:{no}: </details> without an open <details>"
                stack.pop()
    assert not stack, f"{_name(page)}: <details> opened on line(s) {stack} never closed"


def _cells(row: str) -> int:
    """Cells of a GFM table row: split on pipes not escaped with a backslash (GFM splits inside
    code spans too, so a literal pipe in a cell must be written ``\\|``)."""
    body = row.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return len(re.split(r"(?<!\\)\|", body))


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_tables_have_consistent_rows(page: Path) -> None:
    lines = _outside_fences(_lines(page))
    problems = []
    i = 0
    while i < len(lines) - 1:
        no, head = lines[i]
        _, sep = lines[i + 1]
        if head.lstrip().startswith("|") and re.fullmatch(r"\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*", sep):
            width = _cells(head)
            if _cells(sep) != width:
                problems.append(f"line {no + 1}: separator has {_cells(sep)} cells, header {width}")
            j = i + 2
            while j < len(lines) and lines[j][1].lstrip().startswith("|") and lines[j][0] == lines[j - 1][0] + 1:
                if _cells(lines[j][1]) != width:
                    problems.append(f"line {lines[j][0]}: {_cells(lines[j][1])} cells, header has {width}")
                j += 1
            i = j
        else:
            i += 1
    assert not problems, f"{_name(page)} tables:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_point_at_files(page: Path) -> None:
    missing = []
    for no, line in _outside_fences(_lines(page)):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:|#", target):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                missing.append(f"line {no}: {target}")
    assert not missing, f"{_name(page)} links to files that do not exist:\n" + "\n".join(missing)

"""README.md stays true to the parser and renders: the command reference is regenerated from
``build_parser`` (``scripts/readme_reference.py``), code fences are balanced, every ``<details>``
is closed, every table row has its header's number of cells, and relative links point at files
that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"


def _lines() -> list[str]:
    return README.read_text(encoding="utf-8").splitlines()


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


def test_command_reference_is_generated_from_the_parser() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "readme_reference.py"), "--check"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, (
        "README.md's command reference differs from the parser; run: python scripts/readme_reference.py\n"
        + result.stdout[-4000:] + result.stderr[-2000:]
    )


def test_code_fences_are_balanced() -> None:
    fence: tuple[int, str] | None = None
    for no, line in enumerate(_lines(), 1):
        m = re.match(r"\s*(`{3,}|~{3,})", line)
        if not m:
            continue
        mark = m.group(1)
        if fence is None:
            fence = (no, mark)
        elif mark[0] == fence[1][0] and len(mark) >= len(fence[1]) and not line.strip()[len(mark):].strip():
            fence = None
    assert fence is None, f"README.md: the code fence opened on line {fence[0]} is never closed"


def test_every_details_block_is_closed_and_has_a_summary() -> None:
    stack: list[int] = []
    for no, line in _outside_fences(_lines()):
        for tag in re.findall(r"</?details>", re.sub(r"`[^`]*`", "", line)):  # not inside code spans
            if tag == "<details>":
                stack.append(no)
                assert "<summary>" in line and "</summary>" in line, f"README.md:{no}: <details> without a summary"
            else:
                assert stack, f"README.md:{no}: </details> without an open <details>"
                stack.pop()
    assert not stack, f"README.md: <details> opened on line(s) {stack} never closed"


def _cells(row: str) -> int:
    """Cells of a GFM table row: split on pipes not escaped with a backslash (GFM splits inside
    code spans too, so a literal pipe in a cell must be written ``\\|``)."""
    body = row.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    return len(re.split(r"(?<!\\)\|", body))


def test_tables_have_consistent_rows() -> None:
    lines = _outside_fences(_lines())
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
    assert not problems, "README.md tables:\n" + "\n".join(problems)


def test_relative_links_point_at_files() -> None:
    missing = []
    for no, line in _outside_fences(_lines()):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:|#", target):
                continue
            if not (REPO / target.split("#")[0]).exists():
                missing.append(f"line {no}: {target}")
    assert not missing, "README.md links to files that do not exist:\n" + "\n".join(missing)

#!/usr/bin/env python3
"""Regenerate ``docs/reference.md``, the command reference, from hermesd's real parser.

The page holds every visible command's ``--help`` (``supervisor.cli.main.build_parser``), one
``<details>`` block per command, nested verbs (``hermesd profile list``) included and hidden helpers
(names starting with ``_``) left out. Help is formatted at a fixed width of 80 columns with colour
off, so the text does not depend on the terminal this runs in.

    python scripts/docs_reference.py           # rewrite docs/reference.md
    python scripts/docs_reference.py --check   # exit 1 when it is stale

``tests/test_docs.py`` runs the check, so a parser change without a regenerated page fails the suite.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HEADING = "# Command reference"
REFERENCE = REPO / "docs" / "reference.md"
INTRO = (
    "Every command's `--help`, as the parser prints it (`hermesd COMMAND --help` shows the same).\n"
    "This page is generated: after changing a command, run `python scripts/docs_reference.py`\n"
    "(`tests/test_docs.py` fails while it is stale)."
)
WIDTH = "80"


def _help_text(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip("\n")


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The visible subcommands of ``parser``, in the order the parser lists them."""
    out: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:  # only those with help: hidden ones are absent
                name = choice.dest
                if not name.startswith("_"):
                    out.append((name, action.choices[name]))
    return out


def _blocks(parser: argparse.ArgumentParser, prefix: str) -> list[str]:
    blocks: list[str] = []
    for name, sub in _subparsers(parser):
        title = f"{prefix} {name}"
        text = _help_text(sub)
        if "```" in text:
            raise SystemExit(f"docs_reference: the help of {title!r} contains a code fence")
        blocks.append(f"<details><summary><code>{title}</code></summary>\n\n```\n{text}\n```\n\n</details>")
        blocks.extend(_blocks(sub, title))
    return blocks


def render() -> str:
    """The whole section, heading included, ending with one newline."""
    os.environ["COLUMNS"] = WIDTH  # argparse wraps at the terminal width
    os.environ["NO_COLOR"] = "1"  # newer Pythons colour help on a terminal
    os.environ["PYTHON_COLORS"] = "0"
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from supervisor.cli.main import build_parser

    parser = build_parser()
    parts = [HEADING, INTRO, *_blocks(parser, "hermesd")]
    return "\n\n".join(parts) + "\n"


def main(argv: list[str] | None = None, *, out: Path = REFERENCE, render: Callable[[], str] = render,
         source: str = "the parser") -> int:
    """Rewrite ``out`` from ``render``, or with ``--check`` exit 1 when it is stale (also for
    ``scripts/docs_settings.py``, whose page comes from the settings' declaration)."""
    script = Path(sys.argv[0]).name
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help=f"exit 1 when docs/{out.name} is stale")
    ap.add_argument("--out", type=Path, default=out, help=f"default: the repository's docs/{out.name}")
    args = ap.parse_args(argv)
    current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    wanted = render()
    if current == wanted:
        if not args.check:
            print(f"{args.out}: already current")
        return 0
    if args.check:
        diff = difflib.unified_diff(current.splitlines(), wanted.splitlines(), f"{args.out.name} (now)",
                                    f"{args.out.name} (from {source})", lineterm="", n=1)
        print("\n".join(list(diff)[:80]))
        print(f"\n{args.out}: stale; run: python scripts/{script}", file=sys.stderr)
        return 1
    args.out.write_text(wanted, encoding="utf-8")
    print(f"{args.out}: regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())

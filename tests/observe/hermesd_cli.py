"""``hermesd`` with the observe commands, for tests, whether or not they are wired into the CLI yet.

Runs the real ``main`` (so exit codes and error wording are the real ones) with a parser that has
``events`` and ``metrics``: the real parser if it already does, else the real one plus
:func:`supervisor.observe.cli.register`.
"""

from __future__ import annotations

import sys

from supervisor.cli import main as cli_main
from supervisor.observe import cli as observe_cli

_original = cli_main.build_parser


def build_parser():
    parser = _original()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    if "events" not in sub.choices:
        observe_cli.register(sub)
    return parser


cli_main.build_parser = build_parser

if __name__ == "__main__":
    sys.exit(cli_main.main(sys.argv[1:]))

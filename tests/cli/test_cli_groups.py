"""The command table in ``supervisor.cli.main``: parsing one command builds only its group, and the
groups are exactly what the full parser holds, so the fast path can never parse differently."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from supervisor.cli.main import GROUPS, build_parser


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def shape(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    """Every argument of a (sub)parser, nested subcommands included, as comparable tuples."""
    out: list[tuple[object, ...]] = []
    for a in parser._actions:
        out.append((type(a).__name__, tuple(a.option_strings), a.dest, a.nargs, a.default, a.help))
        if isinstance(a, argparse._SubParsersAction):
            for name, child in a.choices.items():
                out.append(("sub", name, tuple(shape(child))))
    return out


def test_groups_are_the_full_parser_in_order() -> None:
    full = commands(build_parser())
    assert list(full) == [name for _module, names in GROUPS for name in names]


@pytest.mark.parametrize("module,names", GROUPS, ids=[m.rsplit(".", 1)[-1] for m, _ in GROUPS])
def test_one_command_builds_its_group_only(module: str, names: tuple[str, ...]) -> None:
    full = commands(build_parser())
    for name in names:
        only = commands(build_parser([name, "--root", "/nowhere"]))
        if module == "supervisor.cli.completion":  # walks the whole tree
            assert list(only) == list(full)
            continue
        assert list(only) == list(names)
        assert shape(only[name]) == shape(full[name])


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h", "status"], ["status", "--help"], ["statsu"], ["--version"]])
def test_no_command_help_or_typo_builds_everything(argv: list[str]) -> None:
    assert list(commands(build_parser(argv))) == list(commands(build_parser()))


def test_status_does_not_load_other_commands(tmp_path: object) -> None:
    """What the table is for: ``hermesd status`` imports neither completion nor export nor doctor nor OpenSSL."""
    code = (
        "import sys\n"
        "from supervisor.cli.main import main\n"
        f"rc = main(['status', '--root', {str(tmp_path)!r}])\n"
        "print(sorted(m for m in ('supervisor.cli.completion', 'supervisor.ops.export', 'supervisor.cli.deps',"
        " 'supervisor.doctor', '_hashlib') if sys.modules.get(m) is not None))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout + out.stderr

"""How long ``start``, ``stop`` and ``restart`` wait for named profiles by default: one rule.

A gateway that needs 68 s to run made ``start coder`` fail where ``restart coder`` would have
waited for it (60 s against 600 s). The handlers are run for real, on a root with no daemon: each
resolves its wait before it asks the daemon, then fails with "not running".
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from supervisor.cli import daemon
from supervisor.cli.main import build_parser
from supervisor.exits import Failure
from tests.harness import make_root


def waited(root: Path, *argv: str) -> float:
    args = build_parser(list(argv)).parse_args([*argv, "--root", str(root)])
    with pytest.raises(Failure, match="not running"):
        args.func(args)
    return float(args.timeout)


def test_named_profiles_are_waited_for_alike(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    waits = {verb: waited(root, verb, "coder") for verb in ("start", "restart", "stop")}
    assert waits == dict.fromkeys(waits, daemon.PROFILE_WAIT_S)
    assert waited(root, "start", "coder", "--timeout", "5") == 5.0  # given: as given


def test_start_s_help_states_both_defaults() -> None:
    """``start`` waits for profiles as long as ``restart`` does, and for the daemon less: its help says both."""
    sub = next(a for a in build_parser(["start"])._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["start"].format_help().split())
    assert f"default {daemon.PROFILE_WAIT_S:g} for profiles, {daemon.DAEMON_READY_S:g} for the daemon" in text

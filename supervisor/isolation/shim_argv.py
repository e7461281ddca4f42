"""The shim's command line: what the daemon spawns for a confined gateway, and how to read it back.

``<python> -E -s -S <enter.py> <plan> -- <argv…>`` (:mod:`supervisor.isolation.enter` is the shim).
Apart from the shim itself because reading a command line back (:func:`unwrap`, which every identity
check of a gateway calls) must not load the confinement code the shim applies (``confine``,
``kernel``: ctypes, Landlock, seccomp). Standard library only, and importable by the shim in script
mode (``-S``, siblings on ``sys.path[0]``).
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing (and re) costs the shim 2 ms
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any, Protocol

    class Plan(Protocol):  # supervisor.isolation.planning's, named by shape: planning imports this module
        def to_json(self) -> dict[str, Any]: ...

# The shim's exit codes when the command never ran (see :mod:`supervisor.isolation.enter`); here, so
# the daemon reads a gateway's exit without loading the confinement code.
EXIT_CANNOT_CONFINE = 125
EXIT_CANNOT_EXEC = 126
EXIT_NOT_FOUND = 127
# The plan format the shim reads; 2: writes denied by default (``writable``, ``private``, ``tmpdir``).
PLAN_VERSION = 2

ENTER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "enter.py")
_PY_FLAGS = ("-E", "-s", "-S")
_MARSHAL_TAG = "m4:"


def wrap_argv(plan: Plan | dict[str, Any], argv: Sequence[str], *, python: str | None = None) -> list[str]:
    """The command the daemon spawns for ``argv`` under ``plan`` (a Plan or its JSON dict).

    ``off`` returns ``argv`` unchanged (no shim, no cost); ``unavailable`` raises ``ValueError``
    (the daemon must hold the profile and show ``plan.reason`` instead of spawning).
    """
    return with_shim(shim_words(plan, python=python), argv)


def with_shim(words: Sequence[str], argv: Sequence[str]) -> list[str]:
    """``argv`` behind the shim's ``words`` (from :func:`shim_words`)."""
    if words and not argv:
        raise ValueError("empty command")
    return [*words, *argv]


def shim_words(plan: Plan | dict[str, Any], *, python: str | None = None) -> tuple[str, ...]:
    """What :func:`wrap_argv` puts before the command (nothing for ``off``), so that a caller
    spawning under one plan again and again (the daemon's respawns) encodes the plan once."""
    data = plan if isinstance(plan, dict) else plan.to_json()
    mechanism = data.get("mechanism")
    if mechanism == "off":
        return ()
    if mechanism == "unavailable":
        raise ValueError(f"profile {data.get('profile')!r} cannot be started: {data.get('reason')}")
    return (python or sys.executable, *_PY_FLAGS, ENTER_SCRIPT, encode_plan(data), "--")


def encode_plan(data: dict[str, Any]) -> str:
    """The plan as one argv word: marshal (built into the interpreter, so the shim needs neither
    ``json`` nor the ``re`` it imports: 6 ms per spawn) in hex, tagged with its format.
    The shim also accepts plain JSON (``{…}``), for people running it by hand."""
    return _MARSHAL_TAG + marshal.dumps(data, 4).hex()


def decode_plan(word: str) -> dict[str, Any]:
    if word.startswith(_MARSHAL_TAG):
        data = marshal.loads(bytes.fromhex(word[len(_MARSHAL_TAG):]))
    else:
        import json  # a plan written by hand: the shim's own (marshalled) plans never pay for json and re

        data = json.loads(word)
    if not isinstance(data, dict):
        raise ValueError("the plan is not an object")
    return data


def unwrap(cmdline: Sequence[str]) -> list[str] | None:
    """The command a shim will exec, when ``cmdline`` is a shim's command line; else ``None``."""
    try:
        i = list(cmdline).index(ENTER_SCRIPT)
    except ValueError:
        return None
    rest = list(cmdline[i + 1 :])
    if len(rest) >= 2 and rest[1] == "--":
        return rest[2:]
    return None

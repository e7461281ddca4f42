"""``hermesd status`` exit codes, from the document alone (a pure function)."""

from __future__ import annotations

from pathlib import Path

from supervisor.status import exit_code, make_row


def doc(*rows: dict, running: bool = True, answering: bool | None = None) -> dict:
    sup: dict = {"pid": 1, "running": running}
    if answering is not None:
        sup["answering"] = answering
    return {"root": "/r", "supervisor": sup, "profiles": list(rows)}


def row(name: str, state: str = "running", **extra) -> dict:
    return make_row(name, Path("/nonexistent") / name, state=state, should_run=True, **extra)


def test_everything_running_is_0():
    assert exit_code(doc(row("a"), row("b"))) == 0


def test_a_profile_that_should_run_and_does_not_is_1():
    assert exit_code(doc(row("a"), row("b", "held"))) == 1


def test_a_running_gateway_missing_a_platform_library_is_1():
    """Issue #9: upstream never starts a platform whose library is missing; that is not healthy."""
    missing = [{"platform": "discord", "missing": ["discord"], "install": "python -m pip install discord.py"}]
    assert exit_code(doc(row("a"), row("b", requirements_missing=missing))) == 1


def test_daemon_down_is_3_and_not_answering_is_4():
    assert exit_code(doc(row("a"), running=False)) == 3
    assert exit_code(doc(row("a"), answering=False)) == 4

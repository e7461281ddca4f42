"""Fixtures for the real-gateway end-to-end tests (``hermes gateway run`` from hermes-agent)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.helpers import HERMES, PidFiles


@pytest.fixture
def hermes() -> Path:
    if not HERMES.exists():
        pytest.fail(f"hermes-agent is a test dependency but {HERMES} is missing: install '.[test]'")
    return HERMES


@pytest.fixture
def pidfiles() -> Iterator[PidFiles]:
    """Processes a test starts outside hermesd's tag (hooks, a fork bomb's members): killed by PID."""
    p = PidFiles()
    try:
        yield p
    finally:
        p.kill_all()


def make_real_root(tmp: Path, names: tuple[str, ...]) -> Path:
    root = tmp / "root"
    (root / "profiles").mkdir(parents=True)
    for name in names:
        (root / "profiles" / name).mkdir()
    return root

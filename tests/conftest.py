"""Shared fixtures: a temporary root with a running hermesd that is always cleaned up."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import Hermesd, make_root, write_config


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = make_root(tmp_path)
    write_config(r)
    return r


@pytest.fixture
def hermesd_factory(tmp_path: Path) -> Iterator:
    made: list[Hermesd] = []

    def make(root: Path, env: dict[str, str] | None = None, start: bool = True) -> Hermesd:
        d = Hermesd(root, env)
        made.append(d)
        return d.start() if start else d

    yield make
    for d in reversed(made):
        d.close()


def pytest_configure(config: pytest.Config) -> None:
    """Give SIGINT back its default when the suite was started with it ignored.

    A shell without job control starts background commands (``cmd &``, nohup, some CI runners)
    with SIGINT ignored; an ignored signal stays ignored across exec, and Python then installs no
    KeyboardInterrupt handler. The tests that stop ``status --watch`` or ``events -f`` with
    SIGINT, as a user's Ctrl-C would, then wait on a child that cannot hear it. A handled signal is
    reset to the default at exec, so every child the tests start hears SIGINT again.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the hermes under test when HERMESD_TEST_HERMES points the real-gateway tests elsewhere."""
    chosen = os.environ.get("HERMESD_TEST_HERMES")
    return f"real gateway: {chosen} (HERMESD_TEST_HERMES)" if chosen else None

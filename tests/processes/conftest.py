"""Fixtures shared by the tests of one gateway process."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[Any]]]:
    """The processes a test starts with a stdin pipe and appends here; each exits on EOF, so closing
    its stdin ends it without a signal, and the teardown waits for every one."""
    started: list[subprocess.Popen[Any]] = []
    yield started
    for p in started:
        if p.stdin:
            p.stdin.close()
        p.wait(10)

"""Fixtures for the limits tests: tagged process trees that are always killed by PID."""

from __future__ import annotations

import pytest

from tests.limits.helpers import Trees


@pytest.fixture
def trees(tmp_path):
    t = Trees(tmp_path)
    try:
        yield t
    finally:
        t.close()

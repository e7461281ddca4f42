"""Fixtures for the profile model tests: real folders in ``tmp_path``, real processes when needed."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from profile_helpers import PYTHON, CliResult, FakeLiveGateway, make_profile

from supervisor.cli.common import Commands
from supervisor.cli.profile import declare
from supervisor.cli.profile_verbs import Context


@pytest.fixture
def empty_root(tmp_path: Path) -> Path:
    """An empty Hermes root with its ``profiles`` folder."""
    r = tmp_path / "root"
    (r / "profiles").mkdir(parents=True)
    return r


@pytest.fixture
def alias_dir(tmp_path: Path) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    return d


@pytest.fixture
def profile() -> Callable[..., Path]:
    return make_profile


@pytest.fixture
def cli(
    capsys: pytest.CaptureFixture[str], alias_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., CliResult]:
    """Run ``hermesd profile ...`` through a tiny argparse root, as the supervisor's CLI does.

    The wrapper directory is pinned to a temp folder so nothing is ever written to ~/.local/bin,
    and ``HOME`` too, so the machine's own ``~/.local/bin`` (upstream's aliases) is never read.
    """
    monkeypatch.setenv("HERMESD_WRAPPER_DIR", str(alias_dir))
    monkeypatch.setenv("HOME", str(alias_dir.parent / "home"))

    def run(*argv: str, stop_gateway: Callable[[str, Path], None] | None = None) -> CliResult:
        parser = argparse.ArgumentParser(prog="hermesd")
        sub = parser.add_subparsers(dest="cmd")
        declare(Commands(sub), Context(stop_gateway=stop_gateway, upstream_python=lambda root: PYTHON()))
        args = parser.parse_args(list(argv))
        capsys.readouterr()
        rc = args.func(args)
        captured = capsys.readouterr()
        return CliResult(rc, captured.out, captured.err)

    return run


@pytest.fixture
def live_gateway_for() -> Iterator[Callable[[Path], FakeLiveGateway]]:
    made: list[FakeLiveGateway] = []

    def start(home: Path) -> FakeLiveGateway:
        gw = FakeLiveGateway(home)
        made.append(gw)
        return gw

    yield start
    for gw in made:
        gw.stop()



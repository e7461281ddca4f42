"""Shared fixtures: a temporary root with a running hermesd that is always cleaned up, and a home of
its own for every test.

The suite must pass, and leave no trace, in any account: a new one (no ``~/.cache``, no
``~/.hermes``) as much as a developer's. So every test runs with ``HOME`` a fresh temporary folder
and without the variables that would point Hermes or hermesd elsewhere in the account; processes
the tests start inherit that. The session then checks that the real home gained nothing in the
folders programs write to (``~/.hermes``, ``~/.cache``, ``~/.local``, ``~/.config``, its top level)
and that nothing in ``~/.hermes`` changed: a test that writes there fails the run, by name of
the path. A process started without ``HOME`` falls back to the account's home in the password
database, so when that is another folder (a run with ``HOME`` pointed elsewhere) its ``.hermes`` is
watched too. ``HERMESD_TEST_OUTPUT`` names a folder the run was asked to write its results into
(scripts/test-releases.sh: the release's results folder in its cache); what appears there is not a
trace.
"""

from __future__ import annotations

import os
import pwd
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from tests.harness import Hermesd, make_root, write_config

pytest_plugins = ("tests.tiers",)

# pytest rewrites the asserts of every test module it imports and keeps the result in __pycache__
# (ignored by git) unless bytecode writing is off; with PYTHONDONTWRITEBYTECODE set it kept nothing,
# and each worker rewrote every module again at every run (15 CPU-seconds of collection a worker
# instead of 5, on 2 cores). Only this process: what the tests start keeps the variable.
sys.dont_write_bytecode = False

# Hypothesis' default 200 ms deadline per example is a timed assert: on a loaded machine (other work,
# a run under `nice -n 10`) an example takes longer and fails for no bug. The property tests check
# properties; speed is the benchmarks' (docs/performance.md).
hypothesis_settings.register_profile("hermesd", deadline=None)
hypothesis_settings.load_profile("hermesd")

# Variables that would send Hermes or hermesd into the account's own folders whatever HOME says.
_ACCOUNT_VARIABLES = ("HERMES_HOME", "HERMES_KANBAN_HOME", "HERMES_SHARED_AUTH_DIR", "HERMES_GATEWAY_LOCK_DIR",
                      "HERMES_BIN", "HERMESD_WRAPPER_DIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
                      "XDG_STATE_HOME", "XDG_RUNTIME_DIR")
_WATCHED = (".hermes", ".cache", ".local", ".config")
_SNAPSHOT_LIMIT = 500_000  # entries; a home with more is compared on the first ones walked
_REAL_HOMES = pytest.StashKey[list[tuple[Path, tuple[str, ...], dict[str, int | None]]]]()


@pytest.fixture(autouse=True)
def _own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets an empty home of its own (outside its ``tmp_path``, which some tests list)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    for name in _ACCOUNT_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return home


def home_snapshot(home: Path, watched: tuple[str, ...] = _WATCHED) -> dict[str, int | None]:
    """Every path under the ``watched`` folders of ``home`` (files with their mtime, folders with
    None) and the names at its top level: what a test could have left in an account."""
    out: dict[str, int | None] = {}
    try:
        top = os.listdir(home)
    except OSError:
        return out
    for name in top:
        if name in watched or watched == _WATCHED:
            out[name] = None
    for folder in watched:
        base = home / folder
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, home)
            for d in dirnames:
                out[os.path.join(rel, d)] = None
            for f in filenames:
                path = os.path.join(dirpath, f)
                try:
                    out[os.path.join(rel, f)] = os.lstat(path).st_mtime_ns
                except OSError:
                    continue
            if len(out) > _SNAPSHOT_LIMIT:
                break
    return out


def home_changes(before: dict[str, int | None], after: dict[str, int | None]) -> list[str]:
    """New paths anywhere watched; changed or removed ones under ``.hermes`` (other programs on the
    machine may rewrite their own caches meanwhile, but nothing but Hermes writes ``~/.hermes``)."""
    changes = [f"new: {p}" for p in sorted(set(after) - set(before))]
    for p in sorted(before):
        if p == ".hermes" or p.startswith(".hermes/"):
            if p not in after:
                changes.append(f"removed: {p}")
            elif after[p] != before[p]:
                changes.append(f"changed: {p}")
    return changes


def _inside(path: Path, folder: Path) -> bool:
    return os.path.abspath(path).startswith(os.path.abspath(folder).rstrip("/") + "/")


def watched_homes(home: str | None, account: str | None) -> list[tuple[Path, tuple[str, ...]]]:
    """The real homes to watch and which folders in each: ``HOME`` in full; the password
    database's home too, for its ``.hermes`` only (other programs of the account may write the
    rest meanwhile), when it is another folder: a process started without ``HOME`` writes there."""
    homes: list[tuple[Path, tuple[str, ...]]] = [(Path(home), _WATCHED)] if home else []
    if account and all(Path(account) != h for h, _ in homes):
        homes.append((Path(account), (".hermes",)))
    return homes


def pytest_sessionstart(session: pytest.Session) -> None:
    """Snapshot the real home; under pytest-xdist only the controller does, before any worker runs
    and after every one has ended, so one check covers the whole run."""
    if hasattr(session.config, "workerinput"):
        return
    try:
        account = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        account = None
    homes = watched_homes(os.environ.get("HOME"), account)
    session.config.stash[_REAL_HOMES] = [(h, w, home_snapshot(h, w)) for h, w in homes]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when the real home gained anything (see the module docstring)."""
    asked = os.environ.get("HERMESD_TEST_OUTPUT")
    for home, watched, before in session.config.stash.get(_REAL_HOMES, []):
        changes = [c for c in home_changes(before, home_snapshot(home, watched))
                   if not (asked and _inside(home / c.split(": ", 1)[1], Path(asked)))]
        if not changes:
            continue
        shown = "\n  ".join(changes[:50]) + (f"\n  … and {len(changes) - 50} more" if len(changes) > 50 else "")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        text = f"the tests wrote into the real home {home} (every test has its own HOME):\n  {shown}"
        if reporter is not None:
            reporter.write_sep("=", "real home changed", red=True)
            reporter.write_line(text)
        else:
            print(text)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED



@pytest.fixture
def fake_root(tmp_path: Path) -> Path:
    """A root with profiles ``coder`` and ``writer`` (and default) whose hermesd.yaml runs the fake
    gateway (``tests/fakegw``) with fast restarts: what the daemon tests start a hermesd on."""
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

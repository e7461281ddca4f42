"""Both watcher strategies against real folders: the events the daemon acts on, and only those."""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

import pytest

from supervisor.watch import inotify as watch_inotify
from supervisor.watch.choose import make_watcher
from supervisor.watch.classify import FsEvents
from supervisor.watch.inotify import InotifyWatcher, parse_events
from supervisor.watch.watchfiles import WatchfilesWatcher

BACKENDS = [InotifyWatcher, WatchfilesWatcher]


async def collect(watcher_cls, root: Path, homes: list[Path], action, settle: float = 1.5) -> FsEvents:
    seen = FsEvents()

    def on_events(ev: FsEvents) -> None:
        seen.rescan |= ev.rescan
        seen.config |= ev.config
        seen.profiles |= ev.profiles

    w = watcher_cls(root, on_events)
    w.follow(homes)
    await asyncio.sleep(0.3)  # the watchfiles thread needs a moment to arm its watches
    try:
        action()
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        w.close()
    return seen


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    (root / "profiles" / "coder").mkdir(parents=True)
    return root, [root, root / "profiles" / "coder"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_profile_files_folders_and_config(backend, tree):
    root, homes = tree

    def act() -> None:
        (root / "profiles" / "coder" / ".env").write_text("A=1\n")
        (root / "config.yaml").write_text("x: 1\n")
        (root / "profiles" / "new").mkdir()
        (root / "hermesd.yaml").write_text("stop_timeout: 5\n")

    ev = asyncio.run(collect(backend, root, homes, act))
    assert ev.profiles == {"coder", "default"} and ev.rescan and ev.config


@pytest.mark.parametrize("backend", BACKENDS)
def test_noise_triggers_nothing(backend, tree):
    root, homes = tree

    def act() -> None:
        coder = root / "profiles" / "coder"
        (coder / "gateway_state.json").write_text("{}")
        (coder / "state.db").write_bytes(b"x")
        (coder / "logs").mkdir()
        (coder / "logs" / "gateway.log").write_text("x")
        (root / "gateway.pid").write_text("1")
        (coder / "gateway_state.json").read_text()

    ev = asyncio.run(collect(backend, root, homes, act))
    assert not ev


@pytest.mark.parametrize("backend", BACKENDS)
def test_deleted_profile_folder_is_a_rescan(backend, tree):
    root, homes = tree
    ev = asyncio.run(collect(backend, root, homes, lambda: shutil.rmtree(root / "profiles" / "coder")))
    assert ev.rescan


def test_inotify_is_chosen_on_linux(tree):
    root, _homes = tree
    assert watch_inotify.available()
    assert isinstance(make_watcher(root, lambda ev: None), InotifyWatcher)


def test_parse_events():
    import struct

    def ev(wd: int, mask: int, name: bytes) -> bytes:
        padded = name + b"\0" * (16 - len(name))
        return struct.pack("iIII", wd, mask, 0, len(padded)) + padded

    buf = ev(1, watch_inotify.IN_CREATE, b"coder") + ev(2, watch_inotify.IN_CLOSE_WRITE, b".env")
    assert parse_events(buf) == [(1, watch_inotify.IN_CREATE, "coder"), (2, watch_inotify.IN_CLOSE_WRITE, ".env")]
    assert parse_events(b"") == [] and parse_events(b"\x01\x02") == []


def test_gateway_files_come_first_and_bursts_are_throttled(tree):
    """A gateway's state file is reported without the editors' debounce (a start-up slot frees when
    a gateway runs), yet a gateway rewriting it in a loop cannot make the daemon react to each write."""
    root, homes = tree
    coder = root / "profiles" / "coder"
    batches: list[FsEvents] = []

    async def scenario() -> None:
        w = InotifyWatcher(root, batches.append)
        w.follow(homes)
        try:
            (coder / ".env").write_text("A=1\n")  # written first, delivered after the debounce
            for i in range(200):
                tmp = coder / ".gateway_state.json.tmp"
                tmp.write_text(f'{{"n": {i}}}')
                tmp.rename(coder / "gateway_state.json")
            deadline = time.monotonic() + 10
            while not any(b.profiles for b in batches) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            w.close()

    asyncio.run(scenario())
    assert batches and batches[0].states == {"coder"} and not batches[0].profiles
    assert any(b.profiles == {"coder"} for b in batches)
    state_batches = [b for b in batches if b.states]
    assert 1 <= len(state_batches) < 20  # 200 writes, coalesced


def test_gateway_file_budget_per_folder(tree):
    """The budget itself, on an explicit clock: a burst, then one batch per STATE_THROTTLE_S, per folder."""
    from supervisor.watch.classify import STATE_BURST, STATE_THROTTLE_S

    root, _homes = tree
    w = InotifyWatcher(root, lambda ev: None)
    assert [w._spend("/a", 100.0) for _ in range(STATE_BURST)] == [0.0] * STATE_BURST
    assert w._spend("/a", 100.0) == pytest.approx(STATE_THROTTLE_S)
    assert w._spend("/b", 100.0) == 0.0  # another gateway's folder has its own budget
    # Once the debt is paid back in time, the folder is back to one batch per STATE_THROTTLE_S ...
    assert w._spend("/a", 100.0 + 2 * STATE_THROTTLE_S) == pytest.approx(0.0, abs=1e-9)
    assert w._spend("/a", 100.0 + 2 * STATE_THROTTLE_S) == pytest.approx(STATE_THROTTLE_S)
    # ... and after a quiet spell the whole burst is available again, never more.
    assert [w._spend("/a", 1000.0) for _ in range(STATE_BURST + 1)][-2:] == [0.0, pytest.approx(STATE_THROTTLE_S)]

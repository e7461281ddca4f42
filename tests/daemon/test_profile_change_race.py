"""Delete and rename of a running profile never bring the old folder back (issue #9).

Upstream's gateway removes ``gateway.pid`` (and releases ``gateway.lock``) early in its shutdown and
then still writes ``logs/gateway-exit-diag.log`` into its home, ``mkdir -p`` first: a stop that
waited for the PID file moved or deleted the folder while the process was about to recreate part
of it, the watcher saw the folder again and hermesd started a second gateway for the old name. The
stop now waits for the process itself (pidfd, ``supervisor/ops/stopper.py``).

Two tests, for two different proofs:

- ``test_profile_change_waits_for_the_gateway_process``: the regression test. Fake gateways whose
  tail after removing their files (``exit_tail``) outlasts every other wait in the stop path, the
  stopper's 10 s wait for the profile's tagged leftovers included (the gateway is tagged too), so
  a stop that watches ``gateway.pid`` returns while the process still runs, every time: the command
  is then refused by the re-check in ``profiles/lifecycle.py`` (or, without that re-check, the
  folder would come back). A rename and a delete at once, so the tail is paid once: ~15 s of wall
  time, ~3 CPU-seconds with pytest's own start.
- ``test_delete_and_rename_running_gateways_without_resurrection``: the same operations on real
  hermes-agent gateways, two profiles at a time, two rounds (the second on a daemon that already saw
  a whole round of renames and deletes): the whole path with upstream's real shutdown, which no fake
  proves. It is not a regression test for the wait: upstream's tail after ``gateway.pid`` is short,
  and the leftover wait and the re-check cover it (with the pidfd wait swapped for a ``gateway.pid``
  poll it passed; it failed only once the leftover wait was removed as well).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fakegw import write_behaviour
from tests.harness import tagged_pids, wait_for, write_config

HERMES = Path(sys.executable).parent / "hermes"
ROUNDS = 2
WIDTH = 2


def _served(d) -> set[str]:
    return {r["name"] for r in d.status()["profiles"]}


# Seconds the fake gateway stays alive after removing gateway.pid and releasing gateway.lock. More
# than the 10 s the stopper then gives the profile's tagged leftovers (the gateway is tagged too, so
# that wait alone would hide a stop that watched gateway.pid), with 2 s to spare for a loaded
# machine. Wall time only: the fakes sleep through it, and both commands run at once.
TAIL = 12.0


def _change(d, fake_root: Path, pid: int, verb: str, *args: str) -> tuple[bool, subprocess.CompletedProcess[str]]:
    """Run ``profile VERB ARGS --stop``; whether gateway ``pid`` had exited when it returned."""
    pid_fd = os.pidfd_open(pid)  # taken before the stop: the PID cannot be reused under it
    try:
        done = d.cli("profile", verb, *args, "--stop", "--root", str(fake_root), timeout=90)
        return bool(select.select([pid_fd], [], [], 0)[0]), done
    finally:
        os.close(pid_fd)


def test_profile_change_waits_for_the_gateway_process(fake_root: Path, hermesd_factory):
    """``profile rename|delete --stop`` returns only once the old gateway process has exited, and
    its late write landed in the folder before the folder moved (rename) or went (delete)."""
    profiles = fake_root / "profiles"
    for name in ("coder", "writer"):
        write_behaviour(profiles / name, exit_tail=TAIL)
    write_config(fake_root, stop_timeout=60, profiles={"default": {"enabled": False}})
    d = hermesd_factory(fake_root)
    old = d.wait_running("coder", "writer", timeout=30)
    for name in ("coder", "writer"):  # read once at start: the renamed profile's next gateway has no tail
        write_behaviour(profiles / name)

    ops = {"coder": ("rename", "coder", "editor"), "writer": ("delete", "writer", "-y")}
    with ThreadPoolExecutor(len(ops)) as pool:  # each command waits on its own gateway's tail
        results = {name: pool.submit(_change, d, fake_root, old[name], *op) for name, op in ops.items()}
    for name, future in results.items():
        gone, done = future.result()
        assert gone, (f"profile {ops[name][0]} {name} returned while its gateway (PID {old[name]}) still ran",
                      done.returncode, done.stderr)
        assert done.returncode == 0, (name, done.returncode, done.stdout, done.stderr)
        assert not (profiles / name).exists(), f"{name} still there after profile {ops[name][0]}"

    # The tail's write went into the folder before it moved: the proof the tail ran at all.
    diag = profiles / "editor" / "logs" / "gateway-exit-diag.log"
    assert old["coder"] in [json.loads(line)["pid"] for line in diag.read_text().splitlines()]
    new = d.wait_running("editor", timeout=30)
    assert new["editor"] not in old.values()
    wait_for(lambda: not _served(d) & {"coder", "writer"}, 10, what="old names gone from status")
    assert sorted(p.name for p in profiles.iterdir()) == ["editor"]
    assert tagged_pids(fake_root) == [new["editor"]]


@pytest.mark.slow
@pytest.mark.real_gateway
def test_delete_and_rename_running_gateways_without_resurrection(fake_root: Path, hermesd_factory):
    for extra in ("coder", "writer"):
        (fake_root / "profiles" / extra).rmdir()
    write_config(fake_root, command=[str(HERMES)], stop_timeout=60, profiles={"default": {"enabled": False}})
    profiles = fake_root / "profiles"
    d = hermesd_factory(fake_root)
    for rnd in range(ROUNDS):
        old = [f"r{rnd}p{i}" for i in range(WIDTH)]
        new = [f"r{rnd}q{i}" for i in range(WIDTH)]
        for name in old:
            done = d.cli("profile", "create", name, "--root", str(fake_root), "--no-alias")
            assert done.returncode == 0, done.stderr
        first = d.wait_running(*old, timeout=120)

        for a, b in zip(old, new, strict=True):
            done = d.cli("profile", "rename", a, b, "--stop", "--root", str(fake_root), timeout=240)
            assert done.returncode == 0, (a, done.stdout, done.stderr)
            assert not (profiles / a).exists(), f"round {rnd}: {a} still there right after the rename"
        second = d.wait_running(*new, timeout=120)
        assert not set(first.values()) & set(second.values())
        # The old names stay gone once the new gateways run: no folder, no row, no process for them.
        for a in old:
            assert not (profiles / a).exists(), f"round {rnd}: {a} came back after the rename"
        wait_for(lambda old=old: not _served(d) & set(old), 10, what="old names gone from status")

        for b in new:
            done = d.cli("profile", "delete", b, "-y", "--stop", "--root", str(fake_root), timeout=240)
            assert done.returncode == 0, (b, done.stdout, done.stderr)
        wait_for(lambda new=new: not _served(d) & set(new), 10, what="deleted profiles gone from status")
        wait_for(lambda: not tagged_pids(fake_root), 20, what="no gateway left after the deletes")
        assert not [p.name for p in profiles.iterdir()], f"round {rnd}: resurrected {list(profiles.iterdir())}"

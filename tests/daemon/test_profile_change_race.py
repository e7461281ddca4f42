"""Delete and rename of a running profile never bring the old folder back (issue #9).

Upstream's gateway removes ``gateway.pid`` early in its shutdown and then still writes
``logs/gateway-exit-diag.log`` into its home: a stop that waited for the PID file moved or deleted
the folder while the process was about to recreate part of it, the watcher saw the folder again and
hermesd started a second gateway for the old name. The stop now waits for the process itself
(pidfd). Real gateways, because the late write is upstream's. The race is not rare: before the fix
every rename and every delete of a running gateway lost it (3 times out of 3, issue #9), so each
operation here is a case on its own; two profiles at a time, two rounds (4 renames, 4 deletes,
each followed by a check that nothing was resurrected; the second round on a daemon that already
saw a whole round of renames and deletes). Five rounds of four (40 real gateway start-ups, about
100 CPU-seconds) repeated the same cases.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.harness import tagged_pids, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]

HERMES = Path(sys.executable).parent / "hermes"
ROUNDS = 2
WIDTH = 2


def _served(d) -> set[str]:
    return {r["name"] for r in d.status()["profiles"]}


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

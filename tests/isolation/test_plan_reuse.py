"""A respawn reuses its profile's confinement plan only while everything the plan is made from is the
same: the files the plan reads at each spawn (a planted link, a board moved) still change it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.daemon.domains import Domains, Prepared, gateway_plan
from supervisor.isolation.shim_argv import decode_plan, unwrap
from supervisor.layout import Layout
from supervisor.settings import IsolationSettings, Limits


@pytest.fixture
def domains(tmp_path: Path) -> Iterator[tuple[Domains, Path]]:
    root = tmp_path / "root"
    (root / "profiles" / "alpha").mkdir(parents=True)
    (root / "profiles" / "beta").mkdir(parents=True)
    d = Domains(root, Layout(root))
    d.start(b"0123456789abcdef")
    try:
        yield d, root
    finally:
        d.teardown()


def _prepare(d: Domains, root: Path, settings: IsolationSettings) -> Prepared:
    env = {"HOME": str(root.parent), "PATH": os.environ.get("PATH", "")}
    out = d.prepare("alpha", root / "profiles" / "alpha", ["/bin/true", "gateway", "run"], env,
                    isolation=settings, limits=Limits(), other_homes=(root / "profiles" / "beta",))
    assert isinstance(out, Prepared), out
    return out


def test_same_inputs_reuse_the_plan_and_a_planted_link_does_not(domains: tuple[Domains, Path]) -> None:
    d, root = domains
    settings = IsolationSettings(shared_auth=True)
    first = _prepare(d, root, settings)
    again = _prepare(d, root, settings)
    assert again.plan is first.plan  # reused, not planned again
    assert again.argv == first.argv
    # The reused plan is the one planning from scratch gives.
    fresh = gateway_plan(d.layout, "alpha", root / "profiles" / "alpha",
                         {"HOME": str(root.parent), "PATH": os.environ.get("PATH", "")},
                         probe=d.probe, isolation=settings,  # type: ignore[arg-type]
                         other_homes=(root / "profiles" / "beta",), install_paths=d.install_paths)
    assert fresh == first.plan
    if not first.plan.enforced:
        pytest.skip(f"no confinement on this host ({first.plan.reason}): the plan has no channels to close")
    assert dict(first.plan.channels)["shared_auth"] == "open"

    # The default profile owns the root: it replaces shared/ by a link. The next spawn must see it.
    (root / "elsewhere").mkdir()
    (root / "shared").symlink_to("elsewhere")
    linked = _prepare(d, root, settings)
    assert linked.plan is not first.plan
    assert dict(linked.plan.channels)["shared_auth"].startswith("closed: ")
    assert d.isolation["alpha"]["shared_auth"].startswith("closed: ")
    shim_plan = decode_plan(linked.argv[linked.argv.index("--") - 1])
    assert shim_plan["channels"]["shared_auth"].startswith("closed: ")
    assert unwrap(linked.argv) == ["/bin/true", "gateway", "run"]

    # Other settings: planned again as well.
    other = _prepare(d, root, IsolationSettings(shared_auth=False))
    assert other.plan is not linked.plan
    assert dict(other.plan.channels)["shared_auth"] == "closed"

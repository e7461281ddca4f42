"""The shim itself never mounts (or grants Landlock access) through a link below the root.

The daemon closes a linked channel in the plan (``PlanInputs.linked``), but the link can appear
between the plan and the spawn: here the plan still exposes ``shared/`` and ``kanban/`` while the
default profile has replaced them by links to another home and to ``.hermesd``. Under both
mechanisms the confined process must reach neither (before, the namespace bind-mounted what the
link pointed at, and Landlock alone granted its real path).
"""

from __future__ import annotations

import os

import pytest

from tests.isolation.conftest import MECHANISMS, Tree, need


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_linked_channels_are_not_put_back(tree: Tree, facts, mechanism: str) -> None:
    need(facts, mechanism)
    root = tree.root
    (root / "kanban" / "default-board").mkdir(parents=True)
    (root / "shared").mkdir()
    plan = tree.plan(facts, "a", mechanism)  # planned while both were real folders
    assert any(e.path == f"{root}/shared" for e in plan.expose)
    os.rename(root / "shared", root / "shared.real")
    os.rename(root / "kanban", root / "kanban.real")
    os.symlink("profiles/b", root / "shared")
    os.symlink(".hermesd", root / "kanban")
    r = tree.run(plan, f"cat {root}/shared/.env; echo; ls -a {root}/kanban/; echo; cat {root}/kanban/state.json; "
                       "echo done")
    assert r.returncode == 0 and "done" in r.stdout, (r.returncode, r.stderr)
    assert "secret-of-b" not in r.stdout, r.stdout
    assert "state.json" not in r.stdout and "{}" not in r.stdout.split("done")[0].split(), r.stdout
    assert "symbolic link" in r.stderr, r.stderr  # the shim says what it left out


def test_a_linked_home_is_refused(tree: Tree, facts) -> None:
    """The profile's own home as a link: nothing runs (exit 125), rather than a mount of the target."""
    need(facts, "namespace+landlock")
    plan = tree.plan(facts, "a")
    home = tree.home("a")
    os.rename(home, home.with_name("a.real"))
    os.symlink("b", home)
    r = tree.run(plan, "cat .env; echo ran")
    assert r.returncode == 125 and "ran" not in r.stdout, (r.returncode, r.stdout, r.stderr)
    assert "symbolic link" in r.stderr

"""A profile writes a config.yaml nested 150,000 levels into its own home (issue 33, hole 1).

Before the bound, libyaml's composer recursed once per level in C and the daemon died with SIGSEGV
within seconds, then every command that read the profile died the same way: no supervisor, and no
view that could say which profile did it. Now the file is refused from the parser's events, as a
problem of that profile named with its path, while the other profile's gateway keeps its PID and
every view (``status``, ``doctor``, ``profile list``, ``export``, ``standalone --ahead --dry-run``) answers.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.faults.helpers import converged
from tests.harness import make_root, wait_for, write_config

DEEP = 150_000
BOMB = "agent: " + "[" * DEEP + "]" * DEEP + "\n"  # 300 KB, within the 1 MiB file cap


def test_a_config_nested_150000_levels_is_one_profiles_problem(tmp_path: Path, hermesd_factory, faults) -> None:
    root = make_root(tmp_path, ("coder", "writer"))
    write_config(root, restart={"initial_delay": 0.2, "max_delay": 2.0, "healthy_after": 0.3, "jitter": 0.0},
                 profiles={"default": {"enabled": False}})
    d = hermesd_factory(root)
    pids = d.wait_running("coder", "writer")
    target = root / "profiles" / "writer" / "config.yaml"
    target.write_text(BOMB)
    faults.inject()

    # The running writer keeps its gateway (last good files) and status names the file.
    def reported() -> dict | None:
        r = d.row("writer")
        return r if any(str(target) in p for p in r["file_problems"]) else None

    row = wait_for(reported, 15, what="writer's config.yaml in status")
    assert row["pid"] == pids["writer"] and "nested more than 200 levels deep" in " ".join(row["file_problems"])
    # Its gateway dies: held, never restarted on a file hermesd cannot read.
    os.kill(pids["writer"], 9)
    held = wait_for(lambda: (r := d.row("writer"))["state"] == "held" and r, 15, what="writer held")
    assert str(target) in held["reason"] and "nested more than" in held["reason"], held
    alive = d.proc is not None and d.proc.poll() is None
    ok = faults.check(alive and d.row("coder")["pid"] == pids["coder"], "the daemon died or coder was restarted")
    assert ok, d.log_text()

    assert_every_view_names(d, root, target, tmp_path, faults)

    # A daemon started with the file already there (where ``hermesd start`` died with -11): it adopts
    # coder's gateway, PID and all, and holds writer naming the file.
    out = d.cli("stop", "--keep-children")
    assert out.returncode == 0 and d.proc is not None and d.proc.wait(20) == 0, out
    again = hermesd_factory(root)
    again.wait_running("coder")
    assert again.row("coder")["pid"] == pids["coder"]
    held = again.wait_state("writer", "held")
    assert str(target) in held["reason"] and "nested more than" in held["reason"], held
    assert_every_view_names(again, root, target, tmp_path, faults)
    converged(again, root, {"coder"}, faults)
    assert again.row("coder")["pid"] == pids["coder"]


def assert_every_view_names(d, root: Path, target: Path, tmp_path: Path, faults) -> None:
    """Every view answers without a traceback and names the file and the problem."""
    views = {
        "status": d.cli("status"),
        "status --json": d.cli("status", "--json"),
        "doctor": d.cli("doctor"),
        "profile list": d.cli("profile", "list", "--root", str(root)),
        "export compose": d.cli("export", "compose"),
        "export kubernetes": d.cli("export", "kubernetes"),
        "export systemd": d.cli("export", "systemd", "--out", str(tmp_path / "units")),
        "standalone --ahead --dry-run": d.cli("standalone", "--ahead", "--dry-run"),
    }
    faults.inject(len(views))
    for name, out in views.items():
        said = out.stdout + out.stderr
        ok = out.returncode >= 0 and "Traceback" not in said and f"{target}:1: refused YAML: nested more than" in said
        faults.check(ok, f"{name}: exit {out.returncode}: {said[-300:]}")
        assert ok, (name, out)
    # Exports refuse a tree hermesd itself would hold, naming the profile (exit 2, as for any hold).
    for name in ("export compose", "export kubernetes", "export systemd"):
        assert views[name].returncode == 2 and "profile 'writer': config_error" in views[name].stderr

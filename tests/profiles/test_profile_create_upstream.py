"""``hermesd profile create`` makes what upstream's ``hermes profile create`` makes, config migration included.

The comparison runs upstream's own ``create_profile`` on a twin root (in this process, with
``HOME``/``HERMES_HOME`` pointing at temp folders) and hermesd's create, which runs the same
function in a helper process inside a scratch root, and compares the resulting trees byte for
byte: moving upstream into a scratch root and feeding it a mirror of the source changes nothing.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import stat
import sys
import time
from pathlib import Path

import pytest
import yaml
from profile_helpers import PYTHON, make_profile

from profiles.errors import ProfileError
from profiles.lifecycle import create_profile
from profiles.upstream import calls
from supervisor.cli.common import Commands
from supervisor.cli.profile import declare
from supervisor.cli.profile_verbs import Context

up = pytest.importorskip("hermes_cli.profiles")
LATEST = __import__("hermes_cli.config", fromlist=["DEFAULT_CONFIG"]).DEFAULT_CONFIG["_config_version"]

CONFIGS = {
    "no-version": "model: test\n",
    "old-write-mode": "_config_version: 27\nmemory:\n  write_mode: approve\nmodel:\n  default: some/model\n",
    "current": f"_config_version: {LATEST}\nmodel: test\n",
    "broken-yaml": "model: [unclosed\n",
    "empty": "",
}


def tree(home: Path) -> dict[str, bytes | None]:
    """Every entry under ``home``: file bytes, or ``None`` for a folder (upstream's backup time stamps masked)."""
    return {
        re.sub(r"\.corrupt\.\d{8}-\d{6}\.bak$", ".corrupt.STAMP.bak", str(p.relative_to(home))):
            (p.read_bytes() if p.is_file() else None)
        for p in sorted(home.rglob("*"))
    }


def upstream_create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str] | None,
                    **kwargs: object) -> Path:
    home = tmp_path / "uphome"
    root = home / ".hermes"
    if files is not None:
        make_profile(root, "src", files)
    with monkeypatch.context() as m:
        m.setenv("HOME", str(home))
        m.setenv("HERMES_HOME", str(root))
        return up.create_profile("dst", no_alias=True, **kwargs)


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_clone_migrates_like_upstream(empty_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      case: str) -> None:
    files = {"config.yaml": CONFIGS[case], ".env": "KEY=val\nexport OTHER=x\n", "SOUL.md": "soul"}
    make_profile(empty_root, "src", files)
    monkeypatch.setenv("HOME", str(tmp_path / "hermesd-home"))
    result = create_profile("dst", empty_root, clone_from="src", python=PYTHON)
    theirs = upstream_create(tmp_path, monkeypatch, files, clone_from="src", clone_config=True)
    mine = empty_root / "profiles" / "dst"
    assert tree(mine) == tree(theirs)
    assert stat.S_IMODE((mine / ".env").stat().st_mode) == 0o600
    if case in ("no-version", "old-write-mode", "empty"):
        assert result.migrated == f"config.yaml migrated from schema v{27 if case == 'old-write-mode' else 0} " \
                                  f"to v{LATEST} (hermes-agent 0.19.0)"
        assert yaml.safe_load((mine / "config.yaml").read_text())["_config_version"] == LATEST
    else:
        assert result.migrated is None
    if case == "old-write-mode":
        assert "write_approval" in (mine / "config.yaml").read_text()


@pytest.mark.parametrize("kwargs", [{}, {"no_skills": True}, {"clone_from": "src", "clone_all": True}])
def test_blank_and_full_copies_are_upstreams(empty_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             kwargs: dict[str, object]) -> None:
    files = {"config.yaml": "model: test\n", "skills/a/SKILL.md": "a", "workspace/w.txt": "w", "logs/x.log": "l"}
    make_profile(empty_root, "src", files)
    create_profile("dst", empty_root, python=PYTHON, **kwargs)  # type: ignore[arg-type]
    theirs = upstream_create(tmp_path, monkeypatch, files, **kwargs)
    assert tree(empty_root / "profiles" / "dst") == tree(theirs)


def test_a_release_that_lacks_a_flag_refuses_rather_than_drops_it(empty_root: Path, tmp_path: Path) -> None:
    with pytest.raises(calls.UpstreamCallError, match=r"create_profile\(\) of hermes-agent 0.19.0 takes no surprise"):
        calls.call(PYTHON(), "create_profile", {"name": "dst", "surprise": True}, work_root=tmp_path / "r",
                   work_home=tmp_path)
    assert not (tmp_path / "r").exists()


def test_a_hung_helper_is_killed_with_its_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    # ``sh -c SCRIPT`` takes the helper's "-c" and code as $0 and $1: it starts a grandchild and hangs.
    hang = ["/bin/sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"]
    with pytest.raises(calls.UpstreamCallError, match=r"did not finish within 0\.5 s"):
        calls.create_profile(hang, "dst", work_root=tmp_path / "r", work_home=tmp_path, clone_from=None,
                             clone_all=False, clone_config=False, no_skills=False, description=None, timeout=0.5)
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 10  # SIGKILL is delivered at once, the exit takes a moment
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.01)
    if alive(grandchild):
        os.kill(grandchild, signal.SIGKILL)
        pytest.fail(f"pid {grandchild} of the helper's group survived the deadline")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in "ZX"


def test_cli_create_runs_upstream_in_the_injected_interpreter(empty_root: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    make_profile(empty_root, "src", {"config.yaml": "model: test\n"})
    asked: list[Path] = []

    def python(r: Path) -> list[str]:
        asked.append(r)
        return [sys.executable]

    parser = argparse.ArgumentParser(prog="hermesd")
    declare(Commands(parser.add_subparsers()), Context(upstream_python=python))
    args = parser.parse_args(["profile", "create", "dst", "--clone-from", "src", "--no-alias",
                              "--root", str(empty_root)])
    assert args.func(args) == 0
    assert asked == [empty_root.resolve()]
    assert f"to v{LATEST}" in capsys.readouterr().out

    parser = argparse.ArgumentParser(prog="hermesd")
    declare(Commands(parser.add_subparsers()), Context())
    args = parser.parse_args(["profile", "create", "other", "--no-alias", "--root", str(empty_root)])
    assert args.func(args) == 2
    assert "no way to run hermes-agent" in capsys.readouterr().err
    assert not (empty_root / "profiles" / "other").exists()


def test_names_and_the_source_are_checked_before_the_interpreter_is_asked(empty_root: Path) -> None:
    def never() -> list[str]:
        raise AssertionError("the interpreter was asked before the checks")

    make_profile(empty_root, "taken")
    for name, kwargs in (("../evil", {}), ("taken", {}), ("dst", {"clone_from": "ghost"})):
        with pytest.raises(ProfileError):
            create_profile(name, empty_root, python=never, **kwargs)  # type: ignore[arg-type]

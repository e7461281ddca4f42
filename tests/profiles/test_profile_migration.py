"""``create --clone`` migrates the copied config.yaml exactly as upstream's ``hermes profile create --clone``.

The comparison runs upstream's own ``create_profile(clone_config=True)`` on a twin root (in this
process, with ``HOME``/``HERMES_HOME`` pointing at temp folders) and hermesd's create with the
migration run in the gateway's interpreter (the ``hermes`` of this virtualenv), then compares the
resulting files byte for byte.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import yaml
from profile_helpers import make_profile

from profiles.lifecycle import create_profile
from profiles.migration import default_gateway_command, gateway_interpreter, migrate_cloned_config

up = pytest.importorskip("hermes_cli.profiles")
HERMES = str(Path(sys.executable).with_name("hermes"))
LATEST = __import__("hermes_cli.config", fromlist=["DEFAULT_CONFIG"]).DEFAULT_CONFIG["_config_version"]

CONFIGS = {
    "no-version": "model: test\n",
    "old-write-mode": "_config_version: 27\nmemory:\n  write_mode: approve\nmodel:\n  default: some/model\n",
    "current": f"_config_version: {LATEST}\nmodel: test\n",
    "broken-yaml": "model: [unclosed\n",
    "empty": "",
}


def tree(home: Path) -> dict[str, bytes | None]:
    """Every entry under ``home``: file bytes, or ``None`` for a folder."""
    return {
        str(p.relative_to(home)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(home.rglob("*"))
    }


def upstream_clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> Path:
    home = tmp_path / "uphome"
    root = home / ".hermes"
    make_profile(root, "src", files)
    with monkeypatch.context() as m:
        m.setenv("HOME", str(home))
        m.setenv("HERMES_HOME", str(root))
        return up.create_profile("dst", clone_from="src", clone_config=True, no_alias=True)


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_clone_migrates_like_upstream(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    files = {"config.yaml": CONFIGS[case], ".env": "KEY=val\nexport OTHER=x\n", "SOUL.md": "soul"}
    make_profile(root, "src", files)
    monkeypatch.setenv("HOME", str(tmp_path / "hermesd-home"))
    result = create_profile(
        "dst", root, clone_from="src", migrate=lambda home: migrate_cloned_config(home, [HERMES])
    )
    theirs = upstream_clone(tmp_path, monkeypatch, files)
    mine = root / "profiles" / "dst"
    assert tree(mine) == tree(theirs)
    assert stat.S_IMODE((mine / ".env").stat().st_mode) == 0o600
    assert result.migration is not None and result.migration.ok
    if case in ("no-version", "old-write-mode"):
        assert result.migration.status == "migrated" and result.migration.after == LATEST
        assert yaml.safe_load((mine / "config.yaml").read_text())["_config_version"] == LATEST
    if case == "old-write-mode":
        assert "write_approval" in (mine / "config.yaml").read_text()


def test_clone_all_is_not_migrated(root: Path) -> None:
    make_profile(root, "src", {"config.yaml": "model: test\n"})
    calls: list[Path] = []
    create_profile("dst", root, clone_from="src", clone_all=True, migrate=lambda h: calls.append(h))  # type: ignore[arg-type,func-returns-value]
    assert calls == [] and (root / "profiles" / "dst" / "config.yaml").read_text() == "model: test\n"


def test_unavailable_interpreter_keeps_the_copy_and_says_why(root: Path, tmp_path: Path) -> None:
    not_python = tmp_path / "hermes"
    not_python.write_text("#!/bin/sh\nexit 0\n")
    not_python.chmod(0o755)
    make_profile(root, "src", {"config.yaml": "model: test\n"})
    result = create_profile("dst", root, clone_from="src",
                            migrate=lambda home: migrate_cloned_config(home, [str(not_python)]))
    assert (root / "profiles" / "dst" / "config.yaml").read_text() == "model: test\n"
    assert result.migration is not None and result.migration.status == "unavailable"
    assert any("copied without migration" in w for w in result.warnings)


def test_interpreter_without_hermes_agent_is_unavailable(tmp_path: Path) -> None:
    home = tmp_path / "p"
    home.mkdir()
    (home / "config.yaml").write_text("model: test\n")
    bare = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else None
    if bare is None:
        pytest.skip("no system python3")
    result = migrate_cloned_config(home, [bare, "-m", "hermes_cli.main"])
    assert result.status == "unavailable" and "cannot import hermes-agent" in result.detail
    assert (home / "config.yaml").read_text() == "model: test\n"


def test_gateway_interpreter_forms(tmp_path: Path) -> None:
    venv_python = str(Path(sys.executable).with_name(Path(sys.executable).name))
    assert gateway_interpreter([HERMES]) is not None
    assert Path(gateway_interpreter([HERMES]) or "").resolve() == Path(venv_python).resolve()
    assert gateway_interpreter([sys.executable, "-m", "hermes_cli.main"]) == sys.executable
    env_script = tmp_path / "hermes-env"
    env_script.write_text("#!/usr/bin/env python3\nprint()\n")
    assert gateway_interpreter([str(env_script)], path_env=str(Path(sys.executable).parent)) is not None
    long_form = tmp_path / "hermes-long"
    long_form.write_text(f"#!/bin/sh\n'''exec' \"{sys.executable}\" \"$0\" \"$@\"\n' '''\n")
    assert gateway_interpreter([str(long_form)]) == sys.executable
    shell = tmp_path / "hermes-sh"
    shell.write_text("#!/bin/sh\nexec something\n")
    assert gateway_interpreter([str(shell)]) is None
    assert gateway_interpreter([]) is None
    assert default_gateway_command(path_env=str(Path(HERMES).parent)) == [HERMES]


def test_cli_clone_uses_the_injected_gateway_command(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from profiles.cli import register

    make_profile(root, "src", {"config.yaml": "model: test\n"})
    asked: list[Path] = []

    def command(r: Path) -> list[str]:
        asked.append(r)
        return [HERMES]

    parser = argparse.ArgumentParser(prog="hermesd")
    register(parser.add_subparsers(), gateway_command=command)
    args = parser.parse_args(["profile", "create", "dst", "--clone-from", "src", "--no-alias", "--root", str(root)])
    assert args.func(args) == 0
    assert asked == [root.resolve()]
    assert f"to v{LATEST}" in capsys.readouterr().out

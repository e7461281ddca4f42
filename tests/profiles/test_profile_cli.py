"""``hermesd profile ...`` through a real argparse tree: output, exit codes, one-line errors."""

from __future__ import annotations

import io
import stat
import sys
from pathlib import Path

import pytest
from profile_helpers import make_profile

from profiles.discovery import read_active_profile
from wrappers.scripts import list_wrappers


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("hermesd: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_create_list_show(cli, empty_root: Path, alias_dir: Path) -> None:
    r = cli("profile", "create", "Coder", "--description", "Writes code.", "--root", str(empty_root))
    assert r.rc == 0 and f"created at {empty_root / 'profiles' / 'coder'}" in r.out
    assert f"Alias created: {alias_dir / 'coder'}" in r.out
    (empty_root / "profiles" / "test").mkdir()

    r = cli("profile", "list", "--root", str(empty_root))
    assert r.rc == 0
    lines = r.out.splitlines()
    assert any(line.startswith("*default") for line in lines)
    assert any(line.startswith(" coder") and "Writes code." in line and "coder" in line for line in lines)
    assert "skipped: 'test' (reserved name)" in r.out

    data = cli("profile", "list", "--json", "--root", str(empty_root)).json()
    assert [p["name"] for p in data["profiles"]] == ["default", "coder"]  # type: ignore[index]
    assert data["unserved"] == [  # type: ignore[index]
        {"name": "test", "path": str(empty_root / "profiles" / "test"), "reason": "reserved name"}]

    shown = cli("profile", "show", "coder", "--json", "--root", str(empty_root)).json()
    assert shown["description"] == "Writes code." and shown["aliases"] == ["coder"]  # type: ignore[index]
    assert shown["gateway_pid"] is None and shown["path"] == str(empty_root / "profiles" / "coder")  # type: ignore[index]

    r = cli("profile", "show", "coder", "--root", str(empty_root))
    assert "Profile: coder" in r.out and "Alias:   coder" in r.out


def test_create_clone_warns_about_copied_credentials(cli, empty_root: Path) -> None:
    (empty_root / ".env").write_text("DISCORD_BOT_TOKEN=super-secret-token\n")
    r = cli("profile", "create", "twin", "--clone", "--no-alias", "--root", str(empty_root))
    assert r.rc == 0
    assert "discord-bot-token" in r.err and "super-secret-token" not in r.err + r.out
    assert stat.S_IMODE((empty_root / "profiles" / "twin" / ".env").stat().st_mode) == 0o600


def test_create_errors_are_one_line(cli, empty_root: Path) -> None:
    for argv in (["create", "test"], ["create", "default"], ["create", "a/b"], ["create", "x", "--clone-from", "ghost"],
                 ["create", "x", "--clone", "--clone-all"]):
        r = cli("profile", *argv, "--root", str(empty_root))
        if argv[-1] == "--clone-all":
            assert r.rc == 0, r.err  # upstream: --clone-all wins over --clone
            continue
        assert r.rc == 2
        one_error_line(r.err)
    make_profile(empty_root, "coder")
    r = cli("profile", "create", "coder", "--root", str(empty_root))
    assert "already exists" in one_error_line(r.err)


def test_alias_collision_on_create_is_a_warning(cli, empty_root: Path, alias_dir: Path) -> None:
    (alias_dir / "coder").write_text("#!/bin/sh\n")
    r = cli("profile", "create", "coder", "--root", str(empty_root))
    assert r.rc == 0 and "not created" in r.err and (empty_root / "profiles" / "coder").is_dir()
    assert (alias_dir / "coder").read_text() == "#!/bin/sh\n"


def test_alias_verbs(cli, empty_root: Path, alias_dir: Path) -> None:
    make_profile(empty_root, "coder")
    r = cli("profile", "alias", "coder", "--name", "cdr", "--root", str(empty_root))
    assert r.rc == 0 and (alias_dir / "cdr").exists()
    r = cli("profile", "alias", "--list", "--root", str(empty_root))
    assert r.out.strip() == f"cdr -> coder  ({alias_dir / 'cdr'})"
    r = cli("profile", "alias", "coder", "--name", "gateway", "--root", str(empty_root))
    assert "subcommand" in one_error_line(r.err)
    r = cli("profile", "alias", "ghost", "--root", str(empty_root))
    assert "'ghost'" in one_error_line(r.err)
    r = cli("profile", "alias", "coder", "--remove", "--root", str(empty_root))
    assert "Removed alias 'cdr'" in r.out and not (alias_dir / "cdr").exists()
    r = cli("profile", "alias", "coder", "--remove", "--root", str(empty_root))
    assert "No alias for 'coder'" in r.out
    assert cli("profile", "alias", "--root", str(empty_root)).rc == 2


def test_delete(cli, empty_root: Path, alias_dir: Path, live_gateway_for, monkeypatch: pytest.MonkeyPatch) -> None:
    cli("profile", "create", "coder", "--root", str(empty_root))
    cli("profile", "use", "coder", "--root", str(empty_root))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # nothing piped: EOF cancels, as upstream
    r = cli("profile", "delete", "coder", "--root", str(empty_root))
    assert r.rc == 1 and "Cancelled." in r.out and (empty_root / "profiles" / "coder").is_dir()

    gw = live_gateway_for(empty_root / "profiles" / "coder")
    typed = io.StringIO("coder\n")
    monkeypatch.setattr(sys, "stdin", typed)  # the name is ready to be typed, but is never asked for
    r = cli("profile", "delete", "coder", "--root", str(empty_root))
    assert r.rc == 2 and "gateway is running" in one_error_line(r.err)
    assert "to confirm" not in r.out and "permanently deletes" not in r.out and typed.tell() == 0
    r = cli("profile", "delete", "coder", "-y", "--root", str(empty_root))
    assert "gateway is running" in one_error_line(r.err)
    r = cli("profile", "delete", "coder", "-y", "--stop", "--root", str(empty_root))
    assert "--stop is not available" in one_error_line(r.err)

    stopped: list[str] = []

    def stop(name: str, home: Path) -> None:
        stopped.append(name)
        gw.stop()

    r = cli("profile", "delete", "coder", "-y", "--stop", "--root", str(empty_root), stop_gateway=stop)
    assert r.rc == 0, r.err
    assert stopped == ["coder"] and not (empty_root / "profiles" / "coder").exists()
    assert "Alias removed: coder" in r.out and "Active profile reset" in r.out
    assert list(alias_dir.iterdir()) == [] and read_active_profile(empty_root) == "default"
    r = cli("profile", "delete", "default", "-y", "--root", str(empty_root))
    assert "default" in one_error_line(r.err)


def test_rename(cli, empty_root: Path, alias_dir: Path) -> None:
    cli("profile", "create", "coder", "--root", str(empty_root))
    cli("profile", "use", "coder", "--root", str(empty_root))
    r = cli("profile", "rename", "coder", "builder", "--root", str(empty_root))
    assert r.rc == 0 and "Alias updated: builder" in r.out and "Active profile updated: builder" in r.out
    assert [w.alias for w in list_wrappers(alias_dir, empty_root)] == ["builder"]
    r = cli("profile", "rename", "builder", "default", "--root", str(empty_root))
    one_error_line(r.err)


def test_use(cli, empty_root: Path) -> None:
    make_profile(empty_root, "coder")
    assert cli("profile", "use", "Coder", "--root", str(empty_root)).out.strip() == "Switched to: coder"
    r = cli("profile", "use", "--root", str(empty_root))  # upstream: NAME is required
    assert r.rc == 2 and "needs NAME" in one_error_line(r.err)
    assert read_active_profile(empty_root) == "coder"
    assert cli("profile", "use", "default", "--root", str(empty_root)).rc == 0
    assert read_active_profile(empty_root) == "default"
    cli("profile", "use", "coder", "--root", str(empty_root))
    assert cli("profile", "use", "--clear", "--root", str(empty_root)).rc == 0
    assert not (empty_root / "active_profile").exists()
    assert "'ghost'" in one_error_line(cli("profile", "use", "ghost", "--root", str(empty_root)).err)


def test_export_import(cli, empty_root: Path, tmp_path: Path, alias_dir: Path) -> None:
    make_profile(empty_root, "coder", {"SOUL.md": "soul", ".env": "A=1\n"})
    out = tmp_path / "backup"
    r = cli("profile", "export", "coder", "-o", str(out), "--root", str(empty_root))
    assert r.rc == 0 and (tmp_path / "backup.tar.gz").exists()
    r = cli("profile", "import", str(tmp_path / "backup.tar.gz"), "--name", "restored", "--root", str(empty_root))
    assert r.rc == 0 and (empty_root / "profiles" / "restored" / "SOUL.md").read_text() == "soul"
    assert not (empty_root / "profiles" / "restored" / ".env").exists()
    assert (alias_dir / "restored").exists()
    r = cli("profile", "import", str(tmp_path / "backup.tar.gz"), "--name", "again", "--no-alias",
            "--root", str(empty_root))
    assert r.rc == 0 and not (alias_dir / "again").exists()
    r = cli("profile", "import", str(tmp_path / "missing.tar.gz"), "--root", str(empty_root))
    assert "not found" in one_error_line(r.err)


def test_root_defaults_to_the_environment(cli, empty_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_profile(empty_root, "coder")
    monkeypatch.setenv("HERMES_HOME", str(empty_root / "profiles" / "coder"))
    data = cli("profile", "list", "--json").json()
    assert data["root"] == str(empty_root)  # type: ignore[index]
    assert [p["name"] for p in data["profiles"]] == ["default", "coder"]  # type: ignore[index]
    assert [p["active"] for p in data["profiles"]] == [False, True]  # type: ignore[index]
    r = cli("profile")
    assert r.rc == 0 and "Active profile: coder" in r.out


def test_malformed_files_show_as_problems_not_crashes(cli, empty_root: Path) -> None:
    make_profile(empty_root, "broken", {"config.yaml": "model: [unclosed\n", "profile.yaml": "description: [x\n"})
    r = cli("profile", "list", "--root", str(empty_root))
    assert r.rc == 0 and "broken" in r.out and "config.yaml" in r.out
    shown = cli("profile", "show", "broken", "--json", "--root", str(empty_root)).json()
    assert len(shown["problems"]) == 2  # type: ignore[index]


def test_what_a_profile_wrote_is_shown_escaped(cli, empty_root: Path) -> None:
    """A description, model, provider or distribution field that carries escape sequences or line breaks
    (the profile's agent writes these files) is printed escaped: no forged line, no terminal control."""
    make_profile(empty_root, "evil", {
        "config.yaml": 'model:\n  default: "gpt\\e[2J\\rProfile: forged"\n  provider: "p\\e]0;owned\\a"\n',
        "profile.yaml": 'description: "nice\\e[31m\\nAbout:   forged"\n',
        "distribution.yaml": 'name: "d\\e[1m"\nversion: "1\\r2"\nauthor: "a\\nSource:       forged"\n'
                             'env_requires:\n  - {name: "K\\e[0m", description: "x\\ry", default: "v\\n"}\n',
    })
    for argv in (("show", "evil"), ("list",), ("describe", "evil"), ("info", "evil")):
        r = cli("profile", *argv, "--root", str(empty_root))
        assert r.rc == 0, r.err
        assert "\x1b" not in r.out and "\r" not in r.out and "\x07" not in r.out, (argv, r.out)
        assert "forged" not in "".join(line for line in r.out.splitlines() if line.startswith(("Profile:", "About:",
                                                                                                 "Source:"))
                                       and "\\" not in line), (argv, r.out)
    show = cli("profile", "show", "evil", "--root", str(empty_root)).out
    assert "Model:   gpt\\x1b[2J\\rProfile: forged (p\\x1b]0;owned\\x07)" in show
    assert "About:   nice\\x1b[31m\\nAbout:   forged" in show
    info = cli("profile", "info", "evil", "--root", str(empty_root)).out
    assert "Distribution: d\\x1b[1m" in info and "Author:       a\\nSource:       forged" in info
    assert "  K\\x1b[0m (required) - x\\ry" in info and "default: v\\n" in info

"""Create (blank, clone, clone-all) through upstream's own code, delete and rename, on real folders.

Create runs hermes-agent 0.19.0's ``create_profile`` in this virtualenv's interpreter (a real
helper process); what a profile gets is upstream's, read from upstream's module where it names it.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import yaml
from profile_helpers import PYTHON, FakeLiveGateway, env_for, make_profile, scratch_left

from profiles.discovery import read_active_profile, set_active_profile
from profiles.errors import (
    GatewayRunningError,
    InvalidNameError,
    ProfileExistsError,
    ProfileNotFoundError,
    UnsafePathError,
)
from profiles.lifecycle import create_profile
from profiles.meta import read_profile_meta
from profiles.upstream.calls import UpstreamCallError
from wrappers.follow import delete_profile, rename_profile
from wrappers.scripts import create_wrapper, list_wrappers

up = pytest.importorskip("hermes_cli.profiles")
TOKEN = "123456:telegram-secret-token"


def tree(home: Path) -> set[str]:
    return {str(p.relative_to(home)) for p in home.rglob("*")}


def model_of(home: Path) -> object:
    """The model a (possibly migrated) config.yaml names."""
    model = yaml.safe_load((home / "config.yaml").read_text())["model"]
    return model["default"] if isinstance(model, dict) else model


# --------------------------------------------------------------------------- create


def test_blank_create_is_upstreams(empty_root: Path) -> None:
    result = create_profile("Coder", empty_root, description="  Writes code.  ", python=PYTHON)
    home = empty_root / "profiles" / "coder"
    assert result.path == home and result.mode == "blank" and result.source is None
    assert result.release == "0.19.0"
    assert all((home / sub).is_dir() for sub in up._PROFILE_DIRS)
    assert stat.S_IMODE((home / ".env").stat().st_mode) == 0o600
    assert (home / ".env").read_text().startswith("#")
    from hermes_cli.default_soul import DEFAULT_SOUL_MD

    assert (home / "SOUL.md").read_text() == DEFAULT_SOUL_MD
    assert read_profile_meta(home)["description"] == "Writes code."
    assert result.credential_kinds == [] and result.warnings == []
    assert scratch_left(empty_root) == []


@pytest.mark.parametrize("name", ["default", "Default", "test", "../evil", "sudo", ""])
def test_create_refuses_bad_names(empty_root: Path, name: str) -> None:
    with pytest.raises(InvalidNameError):
        create_profile(name, empty_root, python=PYTHON)
    assert list((empty_root / "profiles").iterdir()) == []


def test_create_refuses_existing(empty_root: Path, tmp_path: Path) -> None:
    make_profile(empty_root, "coder")
    with pytest.raises(ProfileExistsError, match="coder"):
        create_profile("coder", empty_root, python=PYTHON)
    (empty_root / "profiles" / "linked").symlink_to(tmp_path)
    with pytest.raises(ProfileExistsError):
        create_profile("linked", empty_root, python=PYTHON)


def test_clone_copies_config_and_memories_only(empty_root: Path) -> None:
    src = make_profile(
        empty_root,
        "src",
        {
            "config.yaml": "model: gpt\n",
            ".env": f"TELEGRAM_BOT_TOKEN={TOKEN}\n",
            "SOUL.md": "soul",
            "skills/coding/SKILL.md": "skill",
            "memories/MEMORY.md": "mem",
            "memories/USER.md": "user",
            "memories/other.md": "not copied",
            "sessions/s1.json": "{}",
            "state.db": "db",
            "logs/gateway.log": "log",
        },
    )
    os.chmod(src / ".env", 0o644)
    result = create_profile("dst", empty_root, clone_from="src", python=PYTHON)
    home = result.path
    assert result.mode == "clone" and result.source == "src"
    for rel in (".env", "SOUL.md", "skills/coding/SKILL.md", "memories/MEMORY.md", "memories/USER.md"):
        assert (home / rel).read_text() == (src / rel).read_text()
    assert model_of(home) == "gpt"
    for rel in ("memories/other.md", "sessions/s1.json", "state.db", "logs/gateway.log"):
        assert not (home / rel).exists()
    assert stat.S_IMODE((home / ".env").stat().st_mode) == 0o600
    assert result.credential_kinds == ["telegram-bot-token"]
    assert len(result.warnings) == 1
    assert "telegram-bot-token" in result.warnings[0] and TOKEN not in result.warnings[0]
    # the source is untouched: the mirror upstream read shared its inodes and is gone
    assert stat.S_IMODE((src / ".env").stat().st_mode) == 0o644
    assert (src / "config.yaml").read_text() == "model: gpt\n" and (src / "config.yaml").stat().st_nlink == 1
    assert scratch_left(empty_root) == []


def test_clone_source_defaults_to_active_profile(empty_root: Path) -> None:
    (empty_root / "config.yaml").write_text("model: root-model\n")
    make_profile(empty_root, "writer", {"config.yaml": "model: writer-model\n"})
    env = env_for(empty_root)
    assert create_profile("a", empty_root, clone=True, env=env, python=PYTHON).source == "default"
    assert model_of(empty_root / "profiles" / "a") == "root-model"
    set_active_profile("writer", empty_root)
    assert create_profile("b", empty_root, clone=True, env=env, python=PYTHON).source == "writer"
    assert model_of(empty_root / "profiles" / "b") == "writer-model"


def test_clone_from_missing_source(empty_root: Path) -> None:
    with pytest.raises(ProfileNotFoundError, match="ghost"):
        create_profile("dst", empty_root, clone_from="ghost", python=PYTHON)
    assert scratch_left(empty_root) == [] and not (empty_root / "profiles" / "dst").exists()


def test_clone_all_from_default_excludes_infrastructure_history_and_runtime(empty_root: Path) -> None:
    files = {
        "config.yaml": "a: 1\n",
        ".env": "DISCORD_BOT_TOKEN=discord-token-value\n",
        "SOUL.md": "soul",
        "skills/x/SKILL.md": "s",
        "cron/jobs.json": "[]",
        "state.db": "", "state.db-wal": "", "state.db-shm": "",
        "sessions/a.json": "", "backups/b.tar": "", "state-snapshots/s": "", "checkpoints/c": "",
        "hermes-agent/setup.py": "", ".worktrees/w": "", "bin/tirith": "", "node_modules/m/i.js": "",
        "active_profile": "coder\n",
        ".hermesd/state.json": "{}",
        "gateway.pid": "{}", "gateway.lock": "", "gateway_state.json": "{}",
        ".gateway-planned-stop.json": "{}", ".drain_request.json": "{}", "processes.json": "[]",
        "state/gateway.heartbeat": "{}", "state/keep.json": "{}",
        "plugins/__pycache__/m.pyc": "", "plugins/p.py": "", "plugins/x.pyc": "", "run.sock": "", "w.tmp": "",
    }
    for rel, text in files.items():
        (empty_root / rel).parent.mkdir(parents=True, exist_ok=True)
        (empty_root / rel).write_text(text)
    make_profile(empty_root, "coder", {"config.yaml": "sibling"})
    os.mkfifo(empty_root / "a.fifo")

    result = create_profile("full", empty_root, clone_all=True, clone_from="default", python=PYTHON)
    assert result.mode == "clone-all"
    assert tree(result.path) == {
        "config.yaml", ".env", "SOUL.md", "skills", "skills/x", "skills/x/SKILL.md", "cron", "cron/jobs.json",
        "state", "state/keep.json", "plugins", "plugins/p.py",
    }
    assert (result.path / "config.yaml").read_text() == "a: 1\n"  # a full copy is not migrated (upstream)
    assert stat.S_IMODE((result.path / ".env").stat().st_mode) == 0o600
    assert result.credential_kinds == ["discord-bot-token"]


def test_clone_all_from_named_profile_keeps_its_bin_and_profiles_folders(empty_root: Path) -> None:
    make_profile(empty_root, "src", {"bin/tool": "x", "profiles/note": "y", "sessions/s": "", "gateway.pid": "1"})
    result = create_profile("dst", empty_root, clone_all=True, clone_from="src", python=PYTHON)
    assert tree(result.path) == {"bin", "bin/tool", "profiles", "profiles/note", ".env", "SOUL.md"}
    assert result.credential_kinds == [] and result.warnings == []


def test_clone_reports_malformed_copied_config_as_warning(empty_root: Path) -> None:
    make_profile(empty_root, "src", {"config.yaml": "platforms: [unclosed\n"})
    result = create_profile("dst", empty_root, clone_from="src", python=PYTHON)
    assert result.path.is_dir()
    assert (result.path / "config.yaml").read_text() == "platforms: [unclosed\n"
    assert "config.yaml" in result.warnings[0]


@pytest.mark.parametrize("mode", ["clone", "clone_all"])
def test_a_clone_follows_no_link_out_of_its_source(empty_root: Path, tmp_path: Path, mode: str) -> None:
    """A source's .env linked to another profile's (or any link that can climb out) is left out and named."""
    bravo = make_profile(empty_root, "bravo", {".env": f"TELEGRAM_BOT_TOKEN={TOKEN}\n"})
    outside = tmp_path / "shared-skills"
    (outside / "evil").mkdir(parents=True)
    (outside / "evil" / "SKILL.md").write_text("from outside")
    src = make_profile(empty_root, "alpha", {"config.yaml": "model: m\n", "skills/own/SKILL.md": "own",
                                       "memories/MEMORY.md": "mem"})
    (src / ".env").symlink_to(bravo / ".env")
    (src / "skills" / "abs").symlink_to(outside / "evil")
    (src / "skills" / "climb").symlink_to("../../bravo")
    (src / "skills" / "own" / "alias.md").symlink_to("SKILL.md")  # stays inside: kept as a link
    result = create_profile("dst", empty_root, clone_from="alpha", clone_all=mode == "clone_all", python=PYTHON)
    home = result.path
    assert TOKEN not in (home / ".env").read_text() and not (home / ".env").is_symlink()
    assert stat.S_IMODE((home / ".env").stat().st_mode) == 0o600
    assert not os.path.lexists(home / "skills" / "abs") and not os.path.lexists(home / "skills" / "climb")
    assert os.readlink(home / "skills" / "own" / "alias.md") == "SKILL.md"
    assert (home / "skills" / "own" / "alias.md").read_text() == "own"
    assert result.credential_kinds == []
    named = " ".join(result.warnings)
    for rel in (".env", "skills/abs", "skills/climb"):
        assert repr(rel) in named
    assert "own" not in named
    assert (bravo / ".env").read_text() == f"TELEGRAM_BOT_TOKEN={TOKEN}\n"  # the victim is untouched


def test_a_clone_keeps_no_set_id_bit(empty_root: Path) -> None:
    src = make_profile(empty_root, "src", {"skills/tool/run.sh": "#!/bin/sh\n"})
    os.chmod(src / "skills" / "tool" / "run.sh", 0o6755)
    for flags in ({"clone_from": "src"}, {"clone_from": "src", "clone_all": True}):
        name = "c" + str(len(flags))
        home = create_profile(name, empty_root, python=PYTHON, **flags).path
        assert stat.S_IMODE((home / "skills" / "tool" / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((src / "skills" / "tool" / "run.sh").stat().st_mode) == 0o6755


@pytest.mark.parametrize("source", ["default", "src"])
@pytest.mark.parametrize("clone_all", [False, True])
def test_a_clone_never_runs_the_sources_code(empty_root: Path, tmp_path: Path, source: str, clone_all: bool) -> None:
    """Upstream imports ``$HERMES_HOME/plugins/model-providers/*`` as code: the helper's home holds no profile's."""
    ran = tmp_path / "ran"
    plugin = f"open({str(ran)!r}, 'a').write('ran as uid %d\\n' % __import__('os').getuid())\n"
    home = empty_root if source == "default" else make_profile(empty_root, "src")
    (home / "config.yaml").write_text("model: m\n")
    for rel in ("plugins/model-providers/evil/__init__.py", "plugins/evil/__init__.py"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(plugin)
    result = create_profile("dst", empty_root, clone_from=source, clone_all=clone_all, python=PYTHON)
    assert not ran.exists(), ran.read_text()
    assert (result.path / "plugins" / "evil" / "__init__.py").exists() is clone_all  # copied, never run


def test_the_profile_appears_only_when_upstream_is_done(empty_root: Path, tmp_path: Path) -> None:
    """Upstream builds in place; hermesd gives it a scratch root, so profiles/ never holds half a profile."""
    seen = tmp_path / "seen"
    spy = tmp_path / "python-spy"
    spy.write_text(f"#!/bin/sh\nls -A {empty_root / 'profiles'} > {seen}\nenv | grep ^HERMES_HOME= >> {seen}\n"
                   f'exec {sys.executable} "$@"\n')
    spy.chmod(0o755)
    create_profile("coder", empty_root, python=lambda: [str(spy)])
    listing = seen.read_text().splitlines()
    assert "coder" not in listing and listing[0].startswith(".creating-coder-")
    assert listing[-1].startswith(f"HERMES_HOME={empty_root / 'profiles' / '.creating-coder-'}")
    assert (empty_root / "profiles" / "coder" / "SOUL.md").is_file() and scratch_left(empty_root) == []


@pytest.mark.parametrize("python", [["/bin/true"], ["/bin/sh", "-c", "echo not python"]])
def test_upstream_that_cannot_run_leaves_nothing(empty_root: Path, python: list[str]) -> None:
    make_profile(empty_root, "src", {"config.yaml": "model: m\n"})
    with pytest.raises(UpstreamCallError, match="not a Python that can run hermes-agent"):
        create_profile("dst", empty_root, clone_from="src", python=lambda: python)
    assert not (empty_root / "profiles" / "dst").exists() and scratch_left(empty_root) == []


def test_upstream_missing_from_the_interpreter_is_an_error(empty_root: Path) -> None:
    bare = "/usr/bin/python3"
    if not os.access(bare, os.X_OK):
        pytest.skip("no system python3")
    with pytest.raises(UpstreamCallError, match="cannot import hermes-agent"):
        create_profile("dst", empty_root, python=lambda: [bare, "-s"])
    assert list((empty_root / "profiles").iterdir()) == []


# --------------------------------------------------------------------------- delete


def test_delete_removes_folder_sticky_and_own_aliases(empty_root: Path, alias_dir: Path) -> None:
    make_profile(empty_root, "coder", {"memories/MEMORY.md": "m"})
    set_active_profile("coder", empty_root)
    create_wrapper("coder", "coder", empty_root, alias_dir, hermes="/bin/true", hermesd="/bin/true")
    create_wrapper("cdr", "coder", empty_root, alias_dir, hermes="/bin/true", hermesd="/bin/true")
    (alias_dir / "other").write_text("#!/bin/sh\necho not ours\n")
    result = delete_profile("Coder", empty_root, wrapper_dir=alias_dir)
    assert not (empty_root / "profiles" / "coder").exists()
    assert sorted(result.aliases_removed) == ["cdr", "coder"]
    assert result.active_changed and read_active_profile(empty_root) == "default"
    assert sorted(p.name for p in alias_dir.iterdir()) == ["other"]
    assert scratch_left(empty_root) == []


def test_delete_refuses_default_missing_and_symlink(empty_root: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidNameError, match="default"):
        delete_profile("default", empty_root)
    with pytest.raises(ProfileNotFoundError):
        delete_profile("ghost", empty_root)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    (empty_root / "profiles" / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafePathError):
        delete_profile("linked", empty_root)
    assert (outside / "precious").read_text() == "keep"
    assert (empty_root / "profiles" / "linked").is_symlink()


def test_a_linked_profiles_folder_is_refused_by_delete_rename_and_clone(empty_root: Path, tmp_path: Path) -> None:
    """``profiles/`` replaced by a link (the default profile can, under Landlock alone) to another root's:
    delete, rename and clone refuse it; nothing there is moved, removed or copied."""
    other = tmp_path / "other"
    make_profile(other, "coder", {".env": "TELEGRAM_BOT_TOKEN=other-root\n", "memories/MEMORY.md": "m"})
    os.rename(empty_root / "profiles", tmp_path / "profiles.real")
    (empty_root / "profiles").symlink_to(other / "profiles", target_is_directory=True)
    with pytest.raises(OSError, match="symbolic link"):
        delete_profile("coder", empty_root)
    with pytest.raises(OSError, match="symbolic link"):
        rename_profile("coder", "taken", empty_root, create_alias=False)
    with pytest.raises(OSError, match="symbolic link"):
        create_profile("copy", empty_root, python=PYTHON, clone_from="coder")
    assert sorted(p.name for p in (other / "profiles").iterdir()) == ["coder"]
    assert (other / "profiles" / "coder" / ".env").read_text() == "TELEGRAM_BOT_TOKEN=other-root\n"


def test_delete_removes_read_only_content(empty_root: Path) -> None:
    home = make_profile(empty_root, "coder", {"ro/file": "x"})
    os.chmod(home / "ro" / "file", 0o400)
    os.chmod(home / "ro", 0o500)
    delete_profile("coder", empty_root)
    assert not home.exists() and scratch_left(empty_root) == []


def test_delete_refuses_while_gateway_runs(empty_root: Path, live_gateway_for) -> None:
    home = make_profile(empty_root, "coder")
    gw: FakeLiveGateway = live_gateway_for(home)
    with pytest.raises(GatewayRunningError, match=str(gw.proc.pid)):
        delete_profile("coder", empty_root)
    assert home.is_dir()

    calls: list[tuple[str, Path]] = []

    def stop(name: str, where: Path) -> None:
        calls.append((name, where))
        gw.stop()

    delete_profile("coder", empty_root, stop_gateway=stop)
    assert calls == [("coder", home)] and not home.exists()


def test_delete_refuses_when_stop_does_not_stop(empty_root: Path, live_gateway_for) -> None:
    home = make_profile(empty_root, "coder")
    live_gateway_for(home)
    with pytest.raises(GatewayRunningError, match="still running"):
        delete_profile("coder", empty_root, stop_gateway=lambda name, where: None)
    assert home.is_dir()


def test_stale_pid_file_does_not_block(empty_root: Path) -> None:
    home = make_profile(empty_root, "coder", {"gateway.pid": '{"pid": 999999, "start_time": 1}'})
    delete_profile("coder", empty_root)
    assert not home.exists()


# --------------------------------------------------------------------------- rename


def test_rename_moves_folder_sticky_and_aliases(empty_root: Path, alias_dir: Path) -> None:
    make_profile(empty_root, "coder", {"SOUL.md": "s"})
    set_active_profile("coder", empty_root)
    create_wrapper("coder", "coder", empty_root, alias_dir, hermes="/bin/true", hermesd="/bin/true")
    create_wrapper("c", "coder", empty_root, alias_dir, hermes="/bin/true", hermesd="/bin/true")
    result = rename_profile("coder", "Builder", empty_root, wrapper_dir=alias_dir, hermes="/bin/true",
                            hermesd="/bin/true")
    assert result.path == empty_root / "profiles" / "builder"
    assert (result.path / "SOUL.md").read_text() == "s"
    assert not (empty_root / "profiles" / "coder").exists()
    assert result.active_changed and read_active_profile(empty_root) == "builder"
    wrappers = {w.alias: w.profile for w in list_wrappers(alias_dir, empty_root)}
    assert wrappers == {"builder": "builder", "c": "builder"}
    assert result.aliases_removed == ["coder"] and sorted(result.aliases_created) == ["builder", "c"]


def test_rename_warns_when_new_alias_collides(empty_root: Path, alias_dir: Path) -> None:
    make_profile(empty_root, "coder")
    create_wrapper("coder", "coder", empty_root, alias_dir, hermes="/bin/true", hermesd="/bin/true")
    (alias_dir / "builder").write_text("#!/bin/sh\n")
    result = rename_profile("coder", "builder", empty_root, wrapper_dir=alias_dir, hermes="/bin/true",
                            hermesd="/bin/true")
    assert result.path.is_dir()
    assert any("builder" in w and "not written by hermesd" in w for w in result.warnings)
    assert (alias_dir / "builder").read_text() == "#!/bin/sh\n"


def test_rename_refusals(empty_root: Path, live_gateway_for) -> None:
    make_profile(empty_root, "coder")
    make_profile(empty_root, "writer")
    with pytest.raises(InvalidNameError):
        rename_profile("default", "x", empty_root)
    with pytest.raises(InvalidNameError):
        rename_profile("coder", "default", empty_root)
    with pytest.raises(InvalidNameError):
        rename_profile("coder", "tmp", empty_root)
    with pytest.raises(ProfileExistsError):
        rename_profile("coder", "writer", empty_root)
    with pytest.raises(ProfileNotFoundError):
        rename_profile("ghost", "x", empty_root)
    live_gateway_for(empty_root / "profiles" / "coder")
    with pytest.raises(GatewayRunningError):
        rename_profile("coder", "builder", empty_root)
    assert (empty_root / "profiles" / "coder").is_dir() and not (empty_root / "profiles" / "builder").exists()

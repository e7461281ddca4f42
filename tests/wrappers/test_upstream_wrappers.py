"""Aliases made by upstream (``hermes profile create`` -> ``~/.local/bin/NAME``): recognised, removed
with their profile, re-pointed on rename, and adopted as hermesd wrappers on request.

The upstream files are written by upstream's own ``create_wrapper_script`` (hermes-agent is
installed in the test environment), with ``HOME`` in a temp folder, so their bytes are exactly
what a user's machine has: ``#!/bin/sh\\nexec hermes -p NAME "$@"\\n``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from supervisor.cli.common import Commands
from supervisor.cli.profile import declare
from supervisor.cli.profile_verbs import Context
from wrappers.follow import delete_profile, rename_profile
from wrappers.scripts import (
    KIND_HERMESD,
    KIND_UPSTREAM,
    all_wrappers,
    convert_wrapper,
    create_wrapper,
    read_upstream_wrapper,
    read_wrapper,
    upstream_style_wrappers,
)

up = pytest.importorskip("hermes_cli.profiles")


@dataclass
class World:
    """A user's machine in a temp folder: ``HOME``, ``~/.hermes`` with profiles, ``~/.local/bin``."""

    home: Path
    root: Path
    bin: Path
    fakebin: Path

    @property
    def env(self) -> dict[str, str]:
        return {"HOME": str(self.home), "PATH": str(self.fakebin), "HERMES_HOME": str(self.root)}

    def profile(self, name: str) -> Path:
        path = self.root / "profiles" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def upstream_alias(self, name: str, target: str | None = None) -> Path:
        """Upstream's own ``create_wrapper_script`` (``hermes`` not on its PATH: the plain form)."""
        mp = pytest.MonkeyPatch()
        try:
            mp.setenv("HOME", str(self.home))
            mp.setenv("PATH", "/nonexistent")
            path = up.create_wrapper_script(name, target)
        finally:
            mp.undo()
        assert path is not None
        return path

    def upstream_alias_map(self) -> dict[str, str]:
        mp = pytest.MonkeyPatch()
        try:
            mp.setenv("HOME", str(self.home))
            return up.build_alias_map()
        finally:
            mp.undo()


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    home = tmp_path / "home"
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    for exe in ("hermes", "hermesd"):
        (fakebin / exe).write_text("#!/bin/sh\nexit 0\n")
        (fakebin / exe).chmod(0o755)
    w = World(home, home / ".hermes", home / ".local" / "bin", fakebin)
    w.root.mkdir(parents=True)
    for key, value in w.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("HERMESD_WRAPPER_DIR", raising=False)
    yield w


def test_upstream_file_is_what_hermes_profile_create_writes(world: World) -> None:
    world.profile("alpha")
    path = world.upstream_alias("alpha")
    assert path == world.bin / "alpha"
    assert path.read_text() == '#!/bin/sh\nexec hermes -p alpha "$@"\n'
    info = read_upstream_wrapper(path, world.root, windows=False)
    assert info is not None and (info.alias, info.profile, info.kind) == ("alpha", "alpha", KIND_UPSTREAM)
    assert read_wrapper(path) is None


def test_recognised_as_the_profiles_alias_and_flagged_for_doctor(world: World) -> None:
    world.profile("alpha")
    world.profile("beta")
    world.upstream_alias("alpha")
    world.upstream_alias("al", "alpha")
    create_wrapper("beta", "beta", world.root, env=world.env)
    (world.bin / "pip").write_text('#!/bin/sh\nexec python -m pip "$@"\n')  # unrelated: ignored
    found = {(w.alias, w.profile, w.kind) for w in all_wrappers(world.root, env=world.env)}
    assert found == {("al", "alpha", KIND_UPSTREAM), ("alpha", "alpha", KIND_UPSTREAM), ("beta", "beta", KIND_HERMESD)}
    assert [(w.alias, w.kind) for w in upstream_style_wrappers(world.root, env=world.env)] == [
        ("al", KIND_UPSTREAM), ("alpha", KIND_UPSTREAM)
    ]
    # Upstream's own map sees all three (hermesd's wrapper contains 'hermes -p beta' too).
    assert world.upstream_alias_map() == {"alpha": "al", "beta": "beta"}


def test_other_roots_do_not_claim_upstream_aliases(world: World, tmp_path: Path) -> None:
    world.profile("alpha")
    world.upstream_alias("alpha")
    other = tmp_path / "other-root"
    (other / "profiles" / "alpha").mkdir(parents=True)
    # `exec hermes -p alpha` resolves alpha under the root the environment names, not `other`.
    assert upstream_style_wrappers(other, env=world.env) == []
    assert [w.alias for w in upstream_style_wrappers(world.root, env=world.env)] == ["alpha"]


def test_delete_removes_upstream_aliases_like_upstream(world: World) -> None:
    world.profile("alpha")
    world.profile("beta")
    world.upstream_alias("alpha")
    world.upstream_alias("al", "alpha")
    world.upstream_alias("beta")
    (world.bin / "eps").write_text("#!/bin/sh\necho foreign\n")
    result = delete_profile("alpha", world.root, env=world.env)
    assert sorted(result.aliases_removed) == ["al (upstream's)", "alpha (upstream's)"]
    assert sorted(p.name for p in world.bin.iterdir()) == ["beta", "eps"]  # upstream keeps 'al' (stale) too


def test_rename_repoints_and_creates_the_new_name(world: World) -> None:
    world.profile("alpha")
    world.upstream_alias("alpha")
    world.upstream_alias("al", "alpha")
    result = rename_profile("alpha", "gamma", world.root, env=world.env)
    assert result.aliases_removed == ["alpha (upstream's)"]
    assert sorted(result.aliases_created) == ["al", "gamma"]
    assert not (world.bin / "alpha").exists()
    for alias in ("gamma", "al"):
        info = read_wrapper(world.bin / alias)
        assert info is not None and info.profile == "gamma" and info.root == world.root
    assert world.upstream_alias_map() == {"gamma": "al"}  # upstream would still find both


def test_rename_without_alias_creates_one_as_upstream(world: World) -> None:
    world.profile("noal")
    result = rename_profile("noal", "noal2", world.root, env=world.env)
    assert result.aliases_created == ["noal2"] and read_wrapper(world.bin / "noal2") is not None
    world.profile("quiet")
    assert rename_profile("quiet", "quiet2", world.root, env=world.env, create_alias=False).aliases_created == []
    world.profile("busy")
    (world.bin / "busy2").write_text("#!/bin/sh\necho mine\n")
    result = rename_profile("busy", "busy2", world.root, env=world.env)
    assert result.aliases_created == [] and "not written by hermesd" in result.warnings[0]
    assert (world.bin / "busy2").read_text() == "#!/bin/sh\necho mine\n"


def test_upstream_rename_for_comparison(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """What upstream does on the same input: alias for the new name made, custom alias left stale."""
    world.profile("alpha")
    world.upstream_alias("alpha")
    world.upstream_alias("al", "alpha")
    monkeypatch.setenv("PATH", "/nonexistent")
    up.rename_profile("alpha", "gamma")
    assert (world.bin / "gamma").read_text() == '#!/bin/sh\nexec hermes -p gamma "$@"\n'
    assert not (world.bin / "alpha").exists()
    assert "-p alpha" in (world.bin / "al").read_text()  # hermesd re-points it instead (deliberate)


def test_collisions_with_upstream_wrappers(world: World) -> None:
    world.profile("alpha")
    world.profile("beta")
    world.upstream_alias("alpha")
    world.upstream_alias("bb", "beta")
    path = create_wrapper("alpha", "alpha", world.root, env=world.env)  # same profile: converted
    assert read_wrapper(path) is not None
    with pytest.raises(Exception, match="upstream's alias of profile 'beta'"):
        create_wrapper("bb", "alpha", world.root, env=world.env)


def test_convert_keeps_name_and_target(world: World) -> None:
    world.profile("alpha")
    world.upstream_alias("al", "alpha")
    [info] = upstream_style_wrappers(world.root, env=world.env)
    path = convert_wrapper(info, world.root, env=world.env)
    assert path == world.bin / "al"
    adopted = read_wrapper(path)
    assert adopted is not None and (adopted.alias, adopted.profile, adopted.root) == ("al", "alpha", world.root)
    assert os.access(path, os.X_OK)
    assert upstream_style_wrappers(world.root, env=world.env) == []


# --------------------------------------------------------------------------- through the CLI


@pytest.fixture
def cli(world: World, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    def run(*argv: str) -> tuple[int, str, str]:
        parser = argparse.ArgumentParser(prog="hermesd")
        declare(Commands(parser.add_subparsers(dest="cmd")), Context())
        capsys.readouterr()
        try:
            args = parser.parse_args(["profile", *argv])
            rc = args.func(args)
        except SystemExit as exc:
            rc = int(exc.code or 0)
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def test_list_and_show_say_the_alias_is_upstreams(world: World, cli) -> None:
    world.profile("alpha")
    world.upstream_alias("alpha")
    rc, out, _ = cli("list")
    assert rc == 0 and "alpha (upstream)" in out and "hermesd profile alias --convert" in out
    rc, out, _ = cli("show", "alpha")
    assert rc == 0 and "upstream's wrapper" in out and "hermesd profile alias alpha --convert --name alpha" in out
    rc, out, _ = cli("show", "alpha", "--json")
    assert '"upstream_aliases": [\n    "alpha"\n  ]' in out


def test_alias_convert_verb(world: World, cli) -> None:
    world.profile("alpha")
    world.profile("beta")
    world.upstream_alias("alpha")
    world.upstream_alias("bb", "beta")
    world.upstream_alias("ghosty", "ghost")  # runs a profile that does not exist
    rc, out, err = cli("alias", "alpha", "--convert")
    assert rc == 0 and "Converted alias 'alpha'" in out and not err
    rc, out, err = cli("alias", "--convert")
    assert rc == 1 and "Converted alias 'bb'" in out and "'ghost'" in err
    assert [w.alias for w in upstream_style_wrappers(world.root, env=world.env)] == ["ghosty"]
    rc, out, _ = cli("alias", "alpha", "--convert")
    assert rc == 0 and "nothing to convert" in out
    rc, _, err = cli("alias", "alpha", "--convert", "--remove")
    assert rc == 2 and err.startswith("hermesd: error: ") and len(err.strip().splitlines()) == 1


def test_alias_adopt_is_the_old_spelling_of_convert(world: World, cli) -> None:
    """'--adopt' was its name until 'adopt' kept one meaning (the daemon taking over running gateways):
    it still works, hidden from help, and says the new name in one line."""
    world.profile("alpha")
    world.upstream_alias("alpha")
    rc, out, err = cli("alias", "alpha", "--adopt")
    assert rc == 0 and "Converted alias 'alpha'" in out
    assert err.strip() == "hermesd: '--adopt' is now '--convert' (the old name still works, for now)"
    rc, out, _ = cli("alias", "--help")
    assert rc == 0 and "--adopt" not in out and "--convert" in out


def test_alias_help_has_a_convert_example(world: World, cli, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli("alias", "--help")
    assert rc == 0 and "hermesd profile alias coder --convert" in out and "upstream-style" in out


def test_alias_remove_takes_upstream_aliases_of_that_profile_only(world: World, cli) -> None:
    world.profile("alpha")
    world.profile("beta")
    world.upstream_alias("alpha")
    world.upstream_alias("bb", "beta")
    rc, out, _ = cli("alias", "alpha", "--remove")
    assert rc == 0 and "Removed alias 'alpha'" in out and not (world.bin / "alpha").exists()
    rc, out, _ = cli("alias", "alpha", "--remove", "--name", "bb")
    assert "No alias for 'alpha'" in out and (world.bin / "bb").exists()


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX wrappers")
def test_delete_through_cli_lists_and_removes_upstream_alias(world: World, cli) -> None:
    world.profile("alpha")
    world.upstream_alias("alpha")
    rc, out, _ = cli("delete", "alpha", "-y")
    assert rc == 0 and "Alias removed: alpha (upstream's)" in out and not (world.bin / "alpha").exists()


def test_convert_keeps_the_hermes_the_alias_ran(world: World, tmp_path: Path) -> None:
    world.profile("alpha")
    other = tmp_path / "other-install" / "bin"
    other.mkdir(parents=True)
    (other / "hermes").write_text("#!/bin/sh\nexit 0\n")
    (other / "hermes").chmod(0o755)
    world.bin.mkdir(parents=True, exist_ok=True)
    (world.bin / "alpha").write_text(f'#!/bin/sh\nexec {other / "hermes"} -p alpha "$@"\n')
    [info] = upstream_style_wrappers(world.root, env=world.env)
    text = convert_wrapper(info, world.root, env=world.env).read_text()
    assert f'exec {other / "hermes"} -p alpha "$@"' in text and "hermesd-wrapper" in text


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX wrappers")
def test_doctor_flags_aliases_whose_profile_folder_went_by_hand(world: World, cli) -> None:
    """A profile folder moved or deleted by hand (not by ``profile rename|delete``) leaves its aliases,
    hermesd's and upstream's, running a profile that is not there: doctor names each, and its fix works."""
    import shutil

    from supervisor import doctor

    for name in ("alpha", "beta", "gamma"):
        world.profile(name)
    create_wrapper("al", "alpha", world.root, world.bin, env=world.env)
    world.upstream_alias("beta")
    create_wrapper("gamma", "gamma", world.root, world.bin, env=world.env)

    def flagged() -> dict[str, str]:
        found = doctor.diagnose(world.root, env=world.env, service_dirs=[])
        return {f.message.split("'")[1]: f.fix for f in found if f.code == "alias_without_profile"}

    assert flagged() == {}
    os.rename(world.root / "profiles" / "alpha", world.root / "profiles" / "alpha2")  # moved by hand
    shutil.rmtree(world.root / "profiles" / "beta")  # deleted by hand
    fixes = flagged()
    assert sorted(fixes) == ["al", "beta"]  # gamma's folder is there: not flagged
    assert fixes["al"].startswith(f"hermesd profile alias alpha --remove --root {world.root}")
    rc, out, _ = cli("alias", "alpha", "--remove", "--root", str(world.root))  # the fix, as given
    assert rc == 0 and "Removed alias 'al'" in out and not (world.bin / "al").exists()
    rc, out, _ = cli("alias", "beta", "--remove", "--root", str(world.root))
    assert rc == 0 and "Removed alias 'beta'" in out and not (world.bin / "beta").exists()
    assert flagged() == {} and (world.bin / "gamma").exists()
    rc, _, err = cli("alias", "alpha", "--remove", "--root", str(world.root))  # nothing left of it: no such profile
    assert rc == 2 and "alpha" in err

"""``hermesd profile`` verbs where upstream's CLI differed (issue 10), names everywhere and the error convention.

Each difference from ``hermes profile`` is checked against upstream itself where that is cheap
(its functions in-process, or ``hermes`` in a subprocess with ``HOME`` in a temp folder).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from profile_helpers import make_profile

from profiles.info import read_distribution

up = pytest.importorskip("hermes_cli.profiles")
HERMES = Path(sys.executable).with_name("hermes")


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("hermesd: error: "), err
    assert "Traceback" not in err
    return lines[0]


def run_hermes(home: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
    return subprocess.run([str(HERMES), *argv], env=env, input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)


# --------------------------------------------------------------------------- the CLI differences of issue 10


def test_clone_all_wins_over_clone_as_upstream(cli, empty_root: Path, tmp_path: Path) -> None:
    make_profile(empty_root, "src", {"config.yaml": "model: x\n", "notes/kept.md": "only a full copy has this"})
    r = cli("profile", "create", "twin", "--clone", "--clone-all", "--clone-from", "src", "--no-alias",
            "--root", str(empty_root))
    assert r.rc == 0, r.err
    assert "Full copy" in r.out and (empty_root / "profiles" / "twin" / "notes" / "kept.md").is_file()
    # upstream, same flags
    home = tmp_path / "uphome"
    (home / ".hermes" / "profiles").mkdir(parents=True)
    make_profile(home / ".hermes", "src", {"config.yaml": "model: x\n", "notes/kept.md": "x"})
    done = run_hermes(home, "profile", "create", "twin", "--clone", "--clone-all", "--clone-from", "src", "--no-alias")
    assert done.returncode == 0 and (home / ".hermes" / "profiles" / "twin" / "notes" / "kept.md").is_file()


def test_use_without_a_name_is_a_usage_error_as_upstream(cli, empty_root: Path, tmp_path: Path) -> None:
    r = cli("profile", "use", "--root", str(empty_root))
    assert r.rc == 2 and "needs NAME" in one_error_line(r.err)
    home = tmp_path / "uphome"
    home.mkdir()
    assert run_hermes(home, "profile", "use").returncode == 2


@pytest.mark.parametrize("output", ["c.tgz", "c.tar.gz", "c", "c.TGZ", "c.tar.gz.tgz", "c.tgz.tar.gz", "sub/c.tgz",
                                    "c.gz"])
def test_export_output_name_is_upstreams(
    cli, empty_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str
) -> None:
    make_profile(empty_root, "coder", {"SOUL.md": "soul"})
    mine_dir, theirs_dir = tmp_path / "mine", tmp_path / "theirs"
    for d in (mine_dir, theirs_dir):
        (d / "sub").mkdir(parents=True)
    monkeypatch.chdir(mine_dir)
    r = cli("profile", "export", "coder", "-o", output, "--root", str(empty_root))
    assert r.rc == 0, r.err
    # upstream's export_profile on an identical root, writing into its own folder
    up_home = tmp_path / "uphome"
    make_profile(up_home / ".hermes", "coder", {"SOUL.md": "soul"})
    monkeypatch.chdir(theirs_dir)
    with monkeypatch.context() as m:
        m.setenv("HOME", str(up_home))
        m.delenv("HERMES_HOME", raising=False)
        written = up.export_profile("coder", output)
    theirs = sorted(str(p.relative_to(theirs_dir)) for p in theirs_dir.rglob("*") if p.is_file())
    mine = sorted(str(p.relative_to(mine_dir)) for p in mine_dir.rglob("*") if p.is_file())
    assert mine == theirs == [str(Path(written).resolve().relative_to(theirs_dir.resolve()))]


@pytest.mark.parametrize(("typed", "deleted", "rc"), [("coder\n", True, 0), ("  coder  \n", True, 0),
                                                      ("nope\n", False, 1), ("", False, 1)])
def test_delete_reads_a_piped_confirmation(
    cli, empty_root: Path, monkeypatch: pytest.MonkeyPatch, typed: str, deleted: bool, rc: int
) -> None:
    make_profile(empty_root, "coder")
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    r = cli("profile", "delete", "coder", "--root", str(empty_root))
    assert r.rc == rc, r.err
    assert "Type 'coder' to confirm: " in r.out
    assert (empty_root / "profiles" / "coder").exists() is not deleted
    if not deleted:
        assert "Cancelled." in r.out


def test_upstream_accepts_a_piped_confirmation(tmp_path: Path) -> None:
    home = tmp_path / "uphome"
    (home / ".hermes" / "profiles" / "coder").mkdir(parents=True)
    done = run_hermes(home, "profile", "delete", "coder", stdin="coder\n")
    assert done.returncode == 0 and not (home / ".hermes" / "profiles" / "coder").exists()


def test_no_skills_writes_upstreams_marker(cli, empty_root: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    r = cli("profile", "create", "orch", "--no-skills", "--no-alias", "--root", str(empty_root))
    assert r.rc == 0, r.err
    mine = (empty_root / "profiles" / "orch" / up.NO_BUNDLED_SKILLS_MARKER).read_bytes()
    with monkeypatch.context() as m:
        m.setenv("HOME", str(tmp_path / "uphome"))
        m.delenv("HERMES_HOME", raising=False)
        (tmp_path / "uphome" / ".hermes").mkdir(parents=True)
        theirs = up.create_profile("orch", no_alias=True, no_skills=True)
    assert mine == (theirs / up.NO_BUNDLED_SKILLS_MARKER).read_bytes()
    r = cli("profile", "create", "orch2", "--no-skills", "--clone", "--root", str(empty_root))
    assert r.rc == 2 and "mutually exclusive" in one_error_line(r.err)
    assert not (empty_root / "profiles" / "orch2").exists()


def test_describe_reads_and_sets(cli, empty_root: Path) -> None:
    make_profile(empty_root, "coder")
    r = cli("profile", "describe", "coder", "--root", str(empty_root))
    assert r.rc == 0 and r.out.strip() == "(no description set for 'coder')"
    r = cli("profile", "describe", "Coder", "--text", "Writes code.", "--root", str(empty_root))
    assert r.rc == 0 and r.out.strip() == "Description updated for 'coder'."
    assert cli("profile", "describe", "coder", "--root", str(empty_root)).out.strip() == "Writes code."
    assert up.read_profile_meta(empty_root / "profiles" / "coder")["description"] == "Writes code."  # upstream reads it
    r = cli("profile", "describe", "coder", "--auto", "--root", str(empty_root))
    assert r.rc == 2 and "hermes profile describe NAME --auto" in one_error_line(r.err)


def test_info_matches_upstreams_manifest_reading(cli, empty_root: Path) -> None:
    manifest = {"name": "research", "version": "1.2.0", "author": "me", "env_requires": [
        {"name": "OPENAI_API_KEY", "description": "model key"}, {"name": "OPT", "required": False, "default": "x"}]}
    home = make_profile(empty_root, "coder", {"distribution.yaml": yaml.safe_dump(manifest)})
    make_profile(empty_root, "plain")
    r = cli("profile", "info", "coder", "--root", str(empty_root))
    assert r.rc == 0 and "Distribution: research" in r.out and "OPT (optional)" in r.out
    assert cli("profile", "info", "plain", "--root", str(empty_root)).out.strip() == (
        "Profile 'plain' is not a distribution (no distribution.yaml)."
    )
    from hermes_cli.profile_distribution import read_manifest

    assert read_distribution(home) == read_manifest(home).to_dict()
    (home / "distribution.yaml").write_text("version: 1\n")
    assert "missing 'name'" in one_error_line(cli("profile", "info", "coder", "--root", str(empty_root)).err)


# --------------------------------------------------------------------------- root, names, one error line

VERBS_WITH_ROOT = [
    ["list"], ["show", "coder"], ["create", "x"], ["delete", "coder", "-y"], ["rename", "coder", "y"],
    ["use", "coder"], ["export", "coder"], ["import", "a.tar.gz"], ["alias", "coder"], ["describe", "coder"],
    ["info", "coder"],
]


@pytest.mark.parametrize("argv", VERBS_WITH_ROOT, ids=lambda a: a[0])
def test_a_root_that_does_not_exist_is_an_error(cli, tmp_path: Path, argv: list[str]) -> None:
    missing = tmp_path / "nowhere"
    r = cli("profile", *argv, "--root", str(missing))
    assert r.rc == 2
    assert f"root {missing} does not exist" in one_error_line(r.err)
    assert not missing.exists()


def test_bare_profile_with_a_missing_root_is_an_error(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "nowhere"))
    r = cli("profile")
    assert r.rc == 2 and "does not exist" in one_error_line(r.err)


@pytest.mark.parametrize("argv", [
    ["show", "alpah"], ["delete", "alpah", "-y"], ["rename", "alpah", "beta"], ["use", "alpah"],
    ["export", "alpah"], ["alias", "alpah"], ["describe", "alpah"], ["info", "alpah"],
    ["create", "beta", "--clone-from", "alpah"], ["alias", "alpah", "--convert"],
], ids=lambda a: a[0])
def test_unknown_names_exit_2_with_a_suggestion(cli, empty_root: Path, argv: list[str]) -> None:
    make_profile(empty_root, "alpha")
    r = cli("profile", *argv, "--root", str(empty_root))
    assert r.rc == 2
    assert one_error_line(r.err) == "hermesd: error: no such profile: 'alpah' (did you mean 'alpha'?)"
    assert sorted(p.name for p in (empty_root / "profiles").iterdir()) == ["alpha"]


def test_every_name_is_checked_before_acting(cli, empty_root: Path, alias_dir: Path, tmp_path: Path) -> None:
    make_profile(empty_root, "alpha")
    cli("profile", "use", "alpha", "--root", str(empty_root))
    attempts = (
        ["rename", "alpha", "Not Valid"], ["rename", "alpha", "test"], ["alias", "alpha", "--name", "gateway"],
        ["create", "new", "--clone-from", "nope"], ["import", str(tmp_path / "x.tar.gz"), "--name", "bad name"],
    )
    for argv in attempts:
        r = cli("profile", *argv, "--root", str(empty_root))
        assert r.rc == 2, (argv, r.err)
        one_error_line(r.err)
    assert sorted(p.name for p in (empty_root / "profiles").iterdir()) == ["alpha"]
    assert (empty_root / "active_profile").read_text() == "alpha\n" and list(alias_dir.iterdir()) == []


def test_import_checks_the_name_before_reading_the_archive(cli, empty_root: Path, tmp_path: Path) -> None:
    make_profile(empty_root, "alpha")
    archive = tmp_path / "a.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("x/config.yaml")
        tar.addfile(info, io.BytesIO(b""))
    r = cli("profile", "import", str(archive), "--name", "alpha", "--root", str(empty_root))
    assert r.rc == 2 and "already exists" in one_error_line(r.err)


@pytest.mark.parametrize("argv", [["use", "a", "b"], ["show"], ["create"], ["rename", "a"], ["bogus-verb-flag", "--x"]])
def test_argument_errors_are_one_line_exit_2(cli, empty_root: Path, argv: list[str]) -> None:
    if argv[0] == "bogus-verb-flag":
        argv = ["list", "--bogus"]
    with pytest.raises(SystemExit) as exc:
        cli("profile", *argv, "--root", str(empty_root))
    assert exc.value.code == 2


def test_argument_error_text(empty_root: Path, tmp_path: Path) -> None:
    env = {**os.environ, "HERMESD_WRAPPER_DIR": str(tmp_path / "bin")}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from supervisor.cli.main import build_parser; "
         "a=build_parser(sys.argv[1:]).parse_args(sys.argv[1:]); sys.exit(a.func(a))",
         "profile", "use", "a", "b", "--root", str(empty_root)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert one_error_line(done.stderr).startswith("hermesd: error: profile use: unrecognized arguments: b")

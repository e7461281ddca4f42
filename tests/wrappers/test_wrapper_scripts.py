"""Wrapper aliases: generated text, collision rules, and the real script run against fake executables."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles.errors import WrapperError
from wrappers.scripts import (
    alias_collision,
    aliases_for_profile,
    create_wrapper,
    list_wrappers,
    read_wrapper,
    remove_wrapper,
    render_bat_wrapper,
    render_posix_wrapper,
    wrapper_dir,
)

RECORDER = """#!{python}
import json, os, sys
name = {name!r}
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"prog": name, "argv": sys.argv[1:], "home": os.environ.get("HERMES_HOME")}}) + "\\n")
if name == "hermesd" and sys.argv[1:2] == ["ping"]:
    sys.exit(0 if os.path.exists({flag!r}) else 1)
if name == "hermesd" and sys.argv[1:2] == ["exec"]:  # as hermesd exec does: run what follows "--"
    rest = sys.argv[sys.argv.index("--") + 1:]
    os.execv(rest[0], rest)
sys.exit(7 if name == "hermes" else 0)
"""


class Fakes:
    """Fake ``hermes`` and ``hermesd`` executables that append their argv to a log."""

    def __init__(self, base: Path) -> None:
        self.bin = base / "fakebin"
        self.bin.mkdir()
        self.log = base / "calls.jsonl"
        self.flag = base / "daemon-up"
        for name in ("hermes", "hermesd"):
            path = self.bin / name
            path.write_text(RECORDER.format(python=sys.executable, name=name, log=str(self.log), flag=str(self.flag)))
            path.chmod(0o755)
        self.hermes = str(self.bin / "hermes")
        self.hermesd = str(self.bin / "hermesd")

    def daemon(self, up: bool) -> None:
        if up:
            self.flag.write_text("")
        else:
            self.flag.unlink(missing_ok=True)

    def calls(self) -> list[dict]:
        if not self.log.exists():
            return []
        calls = [json.loads(line) for line in self.log.read_text().splitlines()]
        self.log.unlink()
        return calls


@pytest.fixture
def fakes(tmp_path: Path) -> Fakes:
    return Fakes(tmp_path)


@pytest.fixture
def quoted_root(tmp_path: Path) -> Path:
    """A root whose path has spaces, quotes and ``$HOME`` in it: the wrappers must quote it."""
    r = tmp_path / "my root 'quoted' $HOME"
    (r / "profiles" / "coder").mkdir(parents=True)
    return r


@pytest.fixture
def wdir(tmp_path: Path) -> Path:
    d = tmp_path / "wrappers"
    d.mkdir()
    return d


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(script.parent), "HERMES_HOME": "/somewhere/else"}
    return subprocess.run([str(script), *args], env=env, capture_output=True, text=True, timeout=30, check=False)


def make(alias: str, profile: str, root: Path, wdir: Path, fakes: Fakes, **kw: object) -> Path:
    return create_wrapper(alias, profile, root, wdir, hermes=fakes.hermes, hermesd=fakes.hermesd,
                          windows=False, env={"PATH": os.defpath}, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- running the script


def test_daemon_down_everything_goes_to_hermes(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    script = make("coder", "coder", quoted_root, wdir, fakes)
    assert os.access(script, os.X_OK)
    fakes.daemon(False)
    proc = run(script, "gateway", "start")
    assert proc.returncode == 7  # hermes' exit status comes back through exec
    calls = fakes.calls()
    home = str(quoted_root / "profiles" / "coder")
    assert calls[0] == {"prog": "hermesd", "argv": ["ping", "--root", str(quoted_root)], "home": home}
    # Confined as the profile's gateway: through hermesd exec, which runs hermes -p coder.
    assert calls[1] == {"prog": "hermesd", "home": home, "argv": [
        "exec", "--root", str(quoted_root), "coder", "--", fakes.hermes, "-p", "coder", "gateway", "start"]}
    assert calls[2] == {"prog": "hermes", "argv": ["-p", "coder", "gateway", "start"], "home": home}
    assert len(calls) == 3


def test_without_hermesd_the_alias_still_runs_hermes(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    """hermesd uninstalled after the alias was written: the alias falls back to plain hermes."""
    script = make("coder", "coder", quoted_root, wdir, fakes)
    os.unlink(fakes.hermesd)
    proc = run(script, "chat")
    assert proc.returncode == 7
    home = str(quoted_root / "profiles" / "coder")
    assert fakes.calls() == [{"prog": "hermes", "argv": ["-p", "coder", "chat"], "home": home}]


@pytest.mark.parametrize("verb", ["start", "stop", "restart", "status"])
def test_daemon_up_gateway_verbs_go_to_hermesd(quoted_root: Path, wdir: Path, fakes: Fakes, verb: str) -> None:
    script = make("cdr", "coder", quoted_root, wdir, fakes)
    fakes.daemon(True)
    proc = run(script, "gateway", verb)
    assert proc.returncode == 0
    calls = fakes.calls()
    assert [c["prog"] for c in calls] == ["hermesd", "hermesd"]
    assert calls[1]["argv"] == [verb, "--root", str(quoted_root), "coder"]


def test_daemon_up_other_commands_still_go_to_hermes(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    script = make("coder", "coder", quoted_root, wdir, fakes)
    fakes.daemon(True)
    for args in (["gateway", "run"], ["gateway"], ["chat", "-q", "hi"], [], ["status", "gateway"]):
        run(script, *args)
        calls = fakes.calls()
        assert calls[-1] == {"prog": "hermes", "argv": ["-p", "coder", *args],
                             "home": str(quoted_root / "profiles" / "coder")}


def test_extra_arguments_are_passed_to_hermesd(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    script = make("coder", "coder", quoted_root, wdir, fakes)
    fakes.daemon(True)
    run(script, "gateway", "stop", "--all", "two words")
    assert fakes.calls()[-1]["argv"] == ["stop", "--root", str(quoted_root), "coder", "--all", "two words"]


tricky = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(tricky, max_size=4))
def test_arguments_survive_quoting(quoted_root: Path, wdir: Path, fakes: Fakes, args: list[str]) -> None:
    script = wdir / "coder"
    if not script.exists():
        make("coder", "coder", quoted_root, wdir, fakes)
    fakes.daemon(False)
    run(script, "chat", *args)
    assert fakes.calls()[-1]["argv"] == ["-p", "coder", "chat", *args]


def test_default_profile_wrapper(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    script = make("home-bot", "Default", quoted_root, wdir, fakes)
    run(script, "chat")
    assert fakes.calls()[-1] == {"prog": "hermes", "argv": ["-p", "default", "chat"], "home": str(quoted_root)}
    fakes.daemon(True)
    run(script, "gateway", "restart")
    assert fakes.calls()[-1]["argv"] == ["restart", "--root", str(quoted_root), "default"]


def test_script_runs_under_plain_sh(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    script = make("coder", "coder", quoted_root, wdir, fakes)
    fakes.daemon(True)
    subprocess.run(["sh", str(script), "gateway", "status"], env={"PATH": "/usr/bin:/bin"}, check=True, timeout=30)
    assert fakes.calls()[-1]["argv"] == ["status", "--root", str(quoted_root), "coder"]


# --------------------------------------------------------------------------- generated text


def test_posix_text_is_marked_and_quoted(tmp_path: Path) -> None:
    text = render_posix_wrapper("coder", tmp_path / "r o", "/opt/my hermes/hermes", "/usr/bin/hermesd")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[1] == f"# hermesd-wrapper profile=coder root={tmp_path / 'r o'}"
    assert "exec '/opt/my hermes/hermes' -p coder \"$@\"" in text
    assert f"/usr/bin/hermesd ping --root '{tmp_path / 'r o'}' >/dev/null 2>&1" in text


def test_bat_text(tmp_path: Path) -> None:
    text = render_bat_wrapper("coder", Path("C:/Users/me/100%/.hermes"), "C:/bin/hermes.exe", "C:/bin/hermesd.exe")
    assert text.endswith("\r\n") and "\n" not in text.replace("\r\n", "")
    lines = text.split("\r\n")
    assert lines[0] == "@echo off"
    assert lines[1] == "REM hermesd-wrapper profile=coder root=C:/Users/me/100%/.hermes"
    assert 'set "HERMES_HOME=C:/Users/me/100%%/.hermes/profiles/coder"' in lines
    assert 'if /I not "%~1"=="gateway" goto run_hermes' in lines
    for verb in ("start", "stop", "restart", "status"):
        assert f'if /I "%~2"=="{verb}" set "HERMESD_VERB={verb}"' in lines
    assert '"C:/bin/hermesd.exe" ping --root "C:/Users/me/100%%/.hermes" >nul 2>&1' in lines
    assert '"C:/bin/hermesd.exe" %HERMESD_VERB% --root "C:/Users/me/100%%/.hermes" coder' in lines
    assert '"C:/bin/hermes.exe" -p coder %*' in lines
    with pytest.raises(WrapperError, match="double quote"):
        render_bat_wrapper("coder", Path("C:/x"), 'C:/b"ad/hermes.exe', "hermesd")


def test_bat_wrapper_is_listed_and_removed(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    path = create_wrapper("coder", "coder", quoted_root, wdir, hermes="h.exe", hermesd="hd.exe", windows=True,
                          env={"PATH": ""})
    assert path == wdir / "coder.bat"
    info = read_wrapper(path)
    assert info is not None and (info.alias, info.profile, info.root) == ("coder", "coder", quoted_root.absolute())
    assert remove_wrapper("coder", wdir, quoted_root) == path and not path.exists()


def test_root_with_line_break_is_refused(tmp_path: Path, wdir: Path, fakes: Fakes) -> None:
    with pytest.raises(WrapperError, match="line break"):
        make("coder", "coder", tmp_path / "a\nb", wdir, fakes)


# --------------------------------------------------------------------------- collisions


@pytest.mark.parametrize("alias", ["gateway", "chat", "hermes", "sudo", "test", "../x", "Bad Name"])
def test_reserved_subcommand_and_invalid_aliases(quoted_root: Path, wdir: Path, fakes: Fakes, alias: str) -> None:
    with pytest.raises(Exception) as exc:
        make(alias, "coder", quoted_root, wdir, fakes)
    assert repr(alias.strip().lower()) in str(exc.value) or repr(alias) in str(exc.value)
    assert list(wdir.iterdir()) == []


def test_existing_command_on_path_is_refused(quoted_root: Path, wdir: Path, tmp_path: Path, fakes: Fakes) -> None:
    other = tmp_path / "usrbin"
    other.mkdir()
    (other / "coder").write_text("#!/bin/sh\n")
    (other / "coder").chmod(0o755)
    env = {"PATH": f"{wdir}{os.pathsep}{other}"}
    assert "existing command" in (alias_collision("coder", "coder", quoted_root, wdir, env=env, windows=False) or "")
    with pytest.raises(WrapperError, match=str(other / "coder")):
        create_wrapper("coder", "coder", quoted_root, wdir, env=env, hermes="h", hermesd="hd", windows=False)


def test_own_wrapper_on_path_is_not_a_collision(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    env = {"PATH": str(wdir)}
    first = create_wrapper("coder", "coder", quoted_root, wdir, env=env, hermes="h1", hermesd="hd", windows=False)
    again = create_wrapper("coder", "coder", quoted_root, wdir, env=env, hermes="h2", hermesd="hd", windows=False)
    assert first == again and "exec h2 -p coder" in again.read_text()


def test_foreign_file_at_target_is_never_overwritten(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    (wdir / "coder").write_text("#!/bin/sh\necho mine\n")
    with pytest.raises(WrapperError, match="not written by hermesd"):
        make("coder", "coder", quoted_root, wdir, fakes)
    assert (wdir / "coder").read_text() == "#!/bin/sh\necho mine\n"
    assert remove_wrapper("coder", wdir) is None and (wdir / "coder").exists()


def test_alias_of_another_profile_needs_replace_own(quoted_root: Path, wdir: Path, fakes: Fakes) -> None:
    (quoted_root / "profiles" / "writer").mkdir()
    make("wr9", "writer", quoted_root, wdir, fakes)
    with pytest.raises(WrapperError, match="'writer'"):
        make("wr9", "coder", quoted_root, wdir, fakes)
    make("wr9", "coder", quoted_root, wdir, fakes, replace_own=True)
    assert read_wrapper(wdir / "wr9").profile == "coder"  # type: ignore[union-attr]


def test_list_and_remove_touch_only_our_wrappers(quoted_root: Path, wdir: Path, tmp_path: Path, fakes: Fakes) -> None:
    other_root = tmp_path / "other-root"
    make("coder", "coder", quoted_root, wdir, fakes)
    make("c2", "coder", quoted_root, wdir, fakes)
    make("elsewhere", "coder", other_root, wdir, fakes)
    (wdir / "binary").write_bytes(b"\x7fELF\x00\x00 hermesd-wrapper profile=x root=/")
    (wdir / "script").write_text("#!/bin/sh\n# hermes -p coder\n")
    (wdir / "dir").mkdir()
    assert [(w.alias, w.profile) for w in list_wrappers(wdir, quoted_root)] == [("c2", "coder"), ("coder", "coder")]
    assert {w.alias for w in list_wrappers(wdir)} == {"c2", "coder", "elsewhere"}
    assert [w.alias for w in aliases_for_profile("coder", other_root, wdir)] == ["elsewhere"]
    assert remove_wrapper("elsewhere", wdir, quoted_root) is None
    assert remove_wrapper("c2", wdir, quoted_root) == wdir / "c2"
    assert remove_wrapper("script", wdir) is None and remove_wrapper("../etc", wdir) is None
    assert sorted(p.name for p in wdir.iterdir()) == ["binary", "coder", "dir", "elsewhere", "script"]
    assert stat.S_IMODE((wdir / "coder").stat().st_mode) == 0o755


def test_wrapper_dir_resolution(tmp_path: Path) -> None:
    assert wrapper_dir({"HERMESD_WRAPPER_DIR": str(tmp_path / "w"), "HOME": "/h"}) == tmp_path / "w"
    assert wrapper_dir({"HOME": str(tmp_path)}) == tmp_path / ".local" / "bin"

"""Shell completion (argcomplete, from the real parser), exercised in real bash, zsh and fish.

Each shell sources the script ``hermesd completion SHELL`` prints, and the script runs the real
``hermesd`` of this virtualenv on every request, as it would on a <TAB>.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.cli import completion

BIN = Path(sys.executable).parent


def full_parser() -> argparse.ArgumentParser:
    from supervisor.cli import main as cli

    return cli.build_parser()


@pytest.fixture(scope="module")
def scripts() -> dict[str, str]:
    return {shell: subprocess.run([str(BIN / "hermesd"), "completion", shell], capture_output=True, text=True,
                                  check=True, timeout=60).stdout for shell in completion.SHELLS}


@pytest.fixture
def names_root(tmp_path: Path) -> Path:
    """Profile folders with served, reserved and invalid names, a plain file and a link: only the served complete."""
    r = tmp_path / "hroot"
    for name in ("coder", "writer", "test", "Bad", "_x"):  # test: reserved; Bad, _x: invalid names
        (r / "profiles" / name).mkdir(parents=True)
    (r / "profiles" / "notes.txt").write_text("not a profile")
    (r / "elsewhere").mkdir()
    (r / "profiles" / "linked").symlink_to(r / "elsewhere")  # never served
    return r


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian package: {tool})")
    return path


def quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


# --------------------------------------------------------------------------- what a value is


def test_value_kinds_follow_the_parser() -> None:
    parser = argparse.ArgumentParser(prog="hermesd")
    sub = parser.add_subparsers()
    p = sub.add_parser("frobnicate", help="a command")
    level = p.add_argument("--level", choices=["low", "high"])
    target = p.add_argument("target")
    target.complete = "profile"  # type: ignore[attr-defined]
    many = p.add_argument("profiles", nargs="*")
    root = p.add_argument("--root")
    out = p.add_argument("-o", "--output")
    free = p.add_argument("--text")
    sub.add_parser("_secret", help="an internal helper")
    sub.add_parser("frob")  # declared without help: hidden (an old name, 'adopt')
    hidden: set[str] = set()
    completion._mark(parser, hidden)
    assert hidden == {"_secret", "frob"}
    assert level.completer is None  # type: ignore[attr-defined]  # argcomplete offers the choices
    assert target.completer is many.completer is completion.profile_names  # type: ignore[attr-defined]
    assert type(root.completer).__name__ == "DirectoriesCompleter"  # type: ignore[attr-defined]
    assert type(out.completer).__name__ == "FilesCompleter"  # type: ignore[attr-defined]
    assert type(free.completer).__name__ == "SuppressCompleter"  # type: ignore[attr-defined]


def test_no_other_command_imports_argcomplete(tmp_path: Path) -> None:
    code = ("import sys; from supervisor.cli import main; main.main(['status', '--root', sys.argv[1]]);"
            "print('argcomplete' in sys.modules, 'supervisor.cli.completion' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert done.stdout.strip().splitlines()[-1] == "False False", done.stdout + done.stderr


# --------------------------------------------------------------------------- bash


def bash_complete(script: str, words: list[str], tmp_path: Path, **env: str) -> list[str]:
    bash = need("bash")
    path = tmp_path / "hermesd.bash"
    path.write_text(script)
    line = " ".join(words)
    code = (f"source {path}\nCOMP_LINE={quote(line)}; COMP_POINT=${{#COMP_LINE}}; COMP_TYPE=9\n"
            f"COMP_WORDS=({' '.join(quote(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
            "_python_argcomplete hermesd; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([bash, "--norc", "--noprofile", "-c", code], capture_output=True, text=True,
                          env=shell_env(tmp_path, **env), timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.rstrip() for line in done.stdout.splitlines() if line.strip()]


def test_bash_syntax(scripts, tmp_path):
    bash = need("bash")
    path = tmp_path / "c.bash"
    path.write_text(scripts["bash"])
    assert subprocess.run([bash, "-n", str(path)], capture_output=True).returncode == 0


def test_bash_completes_commands_options_and_profiles(scripts, tmp_path, names_root):
    s = scripts["bash"]
    assert bash_complete(s, ["hermesd", "res"], tmp_path) == ["restart"]
    assert sorted(bash_complete(s, ["hermesd", "pro"], tmp_path)) == ["probe", "profile"]
    assert bash_complete(s, ["hermesd", "_"], tmp_path) == []  # internal commands stay hidden
    assert bash_complete(s, ["hermesd", "a"], tmp_path) == []  # and old names ('adopt' is 'standalone' now)
    assert sorted(bash_complete(s, ["hermesd", "sta"], tmp_path)) == ["standalone", "start", "status"]
    assert bash_complete(s, ["hermesd", "profile", "alias", "--c"], tmp_path) == ["--convert"]
    assert bash_complete(s, ["hermesd", "profile", "alias", "--a"], tmp_path) == ["--alias-dir"]
    assert set(bash_complete(s, ["hermesd", "profile", "re"], tmp_path)) == {"rename"}
    assert "--graceful" in bash_complete(s, ["hermesd", "restart", "--g"], tmp_path)
    assert bash_complete(s, ["hermesd", "completion", "z"], tmp_path) == ["zsh"]
    # profile names: from --root on the line ...
    assert bash_complete(s, ["hermesd", "restart", "--root", str(names_root), ""], tmp_path) \
        == ["default", "coder", "writer"]
    # ... after other profiles too (restart takes several)
    assert bash_complete(s, ["hermesd", "restart", "--root", str(names_root), "coder", "w"], tmp_path) == ["writer"]
    # ... or from HERMES_HOME, a named profile's home pointing at its root
    assert bash_complete(s, ["hermesd", "restart", ""], tmp_path,
                         HERMES_HOME=str(names_root / "profiles" / "coder")) == ["default", "coder", "writer"]
    assert bash_complete(s, ["hermesd", "probe", "c"], tmp_path, HERMES_HOME=str(names_root)) == ["coder"]
    # ... or ~/.hermes
    home_root = tmp_path / "home" / ".hermes"
    (home_root / "profiles" / "mine").mkdir(parents=True)
    assert bash_complete(s, ["hermesd", "stop", ""], tmp_path) == ["default", "mine"]
    # the profile verbs complete existing profiles too
    assert bash_complete(s, ["hermesd", "profile", "show", "--root", str(names_root), "w"], tmp_path) == ["writer"]


def test_bash_completes_directories_for_root(scripts, tmp_path, names_root):
    got = bash_complete(scripts["bash"], ["hermesd", "run", "--root", str(names_root / "prof")], tmp_path)
    assert got == [str(names_root / "profiles") + "/"]


# --------------------------------------------------------------------------- zsh

ZSH_STUBS = r"""
compdef() { :; }
_describe() { local name=$2; print -l -- ${${(P)name}%%:*}; }
"""


def zsh_complete(script: str, words: list[str], tmp_path: Path, **env: str) -> list[str]:
    zsh = need("zsh")
    path = tmp_path / "_hermesd"
    path.write_text(script)
    line = " ".join(words)
    code = (f"{ZSH_STUBS}\nsource {path}\nwords=({' '.join(quote(w) for w in words)}); CURRENT={len(words)}\n"
            f"BUFFER={quote(line)}; CURSOR=${{#BUFFER}}\n_python_argcomplete")
    done = subprocess.run([zsh, "-f", "-c", code], capture_output=True, text=True, env=shell_env(tmp_path, **env),
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_zsh_syntax(scripts, tmp_path):
    zsh = need("zsh")
    path = tmp_path / "_hermesd"
    path.write_text(scripts["zsh"])
    done = subprocess.run([zsh, "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_zsh_walks_the_command_line(scripts, tmp_path, names_root):
    """_describe is stubbed to print what it was offered."""
    s = scripts["zsh"]
    assert zsh_complete(s, ["hermesd", "res"], tmp_path) == ["restart"]
    assert zsh_complete(s, ["hermesd", "restart", "--root", str(names_root), ""], tmp_path) \
        == ["default", "coder", "writer"]
    assert zsh_complete(s, ["hermesd", "restart", ""], tmp_path,
                        HERMES_HOME=str(names_root / "profiles" / "writer")) == ["default", "coder", "writer"]
    assert "list" in zsh_complete(s, ["hermesd", "profile", ""], tmp_path)
    assert "--graceful" in zsh_complete(s, ["hermesd", "restart", "-"], tmp_path)
    assert zsh_complete(s, ["hermesd", "completion", ""], tmp_path) == ["bash", "zsh", "fish"]


# --------------------------------------------------------------------------- fish


def fish_complete(script: str, line: str, tmp_path: Path, **env: str) -> list[str]:
    fish = need("fish")
    path = tmp_path / "hermesd.fish"
    path.write_text(script)
    code = f"source {path}; complete -C {quote_fish(line)}"
    done = subprocess.run([fish, "--no-config", "-c", code], capture_output=True, text=True,
                          env=shell_env(tmp_path, **env), timeout=60)
    assert done.returncode == 0, done.stderr
    return [line.split("\t")[0] for line in done.stdout.splitlines() if line]


def quote_fish(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def test_fish_syntax(scripts, tmp_path):
    fish = need("fish")
    path = tmp_path / "hermesd.fish"
    path.write_text(scripts["fish"])
    done = subprocess.run([fish, "--no-config", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_fish_completes_commands_and_profiles(scripts, tmp_path, names_root):
    s = scripts["fish"]
    assert fish_complete(s, "hermesd res", tmp_path) == ["restart"]
    assert fish_complete(s, f"hermesd restart --root {names_root} ", tmp_path) == ["coder", "default", "writer"]
    assert fish_complete(s, "hermesd restart coder w", tmp_path, HERMES_HOME=str(names_root)) == ["writer"]
    assert "--graceful" in fish_complete(s, "hermesd restart --", tmp_path)
    assert fish_complete(s, "hermesd completion f", tmp_path) == ["fish"]
    assert fish_complete(s, f"hermesd run --root {names_root}/prof", tmp_path) == [f"{names_root}/profiles/"]


# --------------------------------------------------------------------------- the command


def test_completion_command_prints_a_script(capsys):
    parser = full_parser()
    args = parser.parse_args(["completion", "bash"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "_python_argcomplete" in out and "complete -o nospace -o default -o bashdefault -F _python_argcomplete " \
                                              "hermesd" in out
    help_text = parser._subparsers._group_actions[0].choices["completion"].format_help()
    assert "example:\n  eval" in help_text

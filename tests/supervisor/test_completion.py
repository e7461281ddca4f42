"""Shell completion generated from the real parser, exercised in real bash, zsh and fish."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from supervisor import completion


def full_parser() -> argparse.ArgumentParser:
    from supervisor.cli import main as cli

    return cli.build_parser()


@pytest.fixture(scope="module")
def scripts() -> dict[str, str]:
    parser = full_parser()
    return {shell: completion.generate(shell, parser) for shell in completion.SHELLS}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "hroot"
    for name in ("coder", "writer", "test", "Bad", "_x"):  # test: reserved; Bad, _x: invalid names
        (r / "profiles" / name).mkdir(parents=True)
    (r / "profiles" / "notes.txt").write_text("not a profile")
    (r / "elsewhere").mkdir()
    (r / "profiles" / "linked").symlink_to(r / "elsewhere")  # never served
    return r


def shell_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
    env.update(extra)
    return env


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed (Debian package: {tool})")
    return path


# --------------------------------------------------------------------------- the model


def test_model_follows_the_parser():
    model = completion.build_model(full_parser())
    for name in ("run", "start", "stop", "restart", "status", "logs", "profile", "completion", "probe", "export",
                 "install-service"):
        assert name in model.subcommands
    assert "_planned-stop" not in model.subcommands  # internal helpers stay hidden
    assert "list" in model.subcommands["profile"].subcommands
    restart = model.subcommands["restart"]
    assert restart.positionals[0].spec == "@profile" and restart.positionals[0].last is None
    assert any(o.flags == ("--root",) and o.value == "@dir" for o in restart.options)
    assert completion.build_model(full_parser()).subcommands["completion"].positionals[0].spec == "bash zsh fish"


def test_a_new_command_is_completed_without_touching_the_generator():
    parser = argparse.ArgumentParser(prog="hermesd")
    sub = parser.add_subparsers()
    p = sub.add_parser("frobnicate", help="frob")
    p.add_argument("--level", choices=["low", "high"])
    target = p.add_argument("target")
    target.complete = "profile"
    sub.add_parser("_secret")
    p = sub.add_parser("hidden", help=argparse.SUPPRESS)
    model = completion.build_model(parser)
    assert list(model.subcommands) == ["frobnicate"]
    cmd = model.subcommands["frobnicate"]
    assert [o.value for o in cmd.options if o.flags == ("--level",)] == ["low high"]
    assert cmd.positionals[0].spec == "@profile"


# --------------------------------------------------------------------------- bash


def bash_complete(script: str, words: list[str], tmp_path: Path, **env: str) -> list[str]:
    bash = need("bash")
    path = tmp_path / "hermesd.bash"
    path.write_text(script)
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    code = (f"source {path}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
            "_hermesd; printf '%s\\n' \"${COMPREPLY[@]}\"")
    done = subprocess.run([bash, "--norc", "--noprofile", "-c", code], capture_output=True, text=True,
                          env=shell_env(tmp_path, **env), timeout=10)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_bash_syntax(scripts, tmp_path):
    bash = need("bash")
    path = tmp_path / "c.bash"
    path.write_text(scripts["bash"])
    assert subprocess.run([bash, "-n", str(path)], capture_output=True).returncode == 0


def test_bash_completes_commands_options_and_profiles(scripts, tmp_path, root):
    s = scripts["bash"]
    assert bash_complete(s, ["hermesd", "res"], tmp_path) == ["restart"]
    assert sorted(bash_complete(s, ["hermesd", "pro"], tmp_path)) == ["probe", "profile"]
    assert set(bash_complete(s, ["hermesd", "profile", "re"], tmp_path)) == {"rename"}
    assert "--graceful" in bash_complete(s, ["hermesd", "restart", "--g"], tmp_path)
    assert bash_complete(s, ["hermesd", "completion", "z"], tmp_path) == ["zsh"]
    # profile names: from --root on the line ...
    names = bash_complete(s, ["hermesd", "restart", "--root", str(root), ""], tmp_path)
    assert names == ["default", "coder", "writer"]
    # ... after other profiles too (restart takes several) and with --root=...
    assert bash_complete(s, ["hermesd", "restart", "--root", "=", str(root), "coder", "w"], tmp_path) == ["writer"]
    # ... or from HERMES_HOME, a named profile's home pointing at its root
    assert bash_complete(s, ["hermesd", "restart", ""], tmp_path,
                         HERMES_HOME=str(root / "profiles" / "coder")) == ["default", "coder", "writer"]
    assert bash_complete(s, ["hermesd", "probe", "c"], tmp_path, HERMES_HOME=str(root)) == ["coder"]
    # ... or ~/.hermes
    home_root = tmp_path / "home" / ".hermes"
    (home_root / "profiles" / "mine").mkdir(parents=True)
    assert bash_complete(s, ["hermesd", "stop", ""], tmp_path) == ["default", "mine"]
    # a single-profile command offers nothing after its profile
    assert bash_complete(s, ["hermesd", "probe", "coder", "x"], tmp_path, HERMES_HOME=str(root)) == []


def test_bash_completes_directories_for_root(scripts, tmp_path, root):
    got = bash_complete(scripts["bash"], ["hermesd", "run", "--root", str(root / "prof")], tmp_path)
    assert got == [str(root / "profiles")]


# --------------------------------------------------------------------------- zsh

ZSH_STUBS = r"""
compadd() { while [[ $1 == -* && $1 != -- ]]; do shift; done; [[ $1 == -- ]] && shift; print -l -- "$@"; }
_describe() { local name=${@[-1]}; print -l -- ${${(P)name}%%:*}; }
_directories() { print -- '<dirs>'; }
_files() { print -- '<files>'; }
compset() { :; }
"""


def zsh_complete(script: str, words: list[str], tmp_path: Path, **env: str) -> list[str]:
    zsh = need("zsh")
    path = tmp_path / "_hermesd"
    path.write_text(script)
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
    code = f"{ZSH_STUBS}\nsource {path}\nwords=({quoted}); CURRENT={len(words)}\n_hermesd"
    done = subprocess.run([zsh, "-f", "-c", code], capture_output=True, text=True, env=shell_env(tmp_path, **env),
                          timeout=10)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_zsh_syntax(scripts, tmp_path):
    zsh = need("zsh")
    path = tmp_path / "_hermesd"
    path.write_text(scripts["zsh"])
    done = subprocess.run([zsh, "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_zsh_walks_the_command_line(scripts, tmp_path, root):
    """compadd/_describe are stubbed to print what they were offered (zsh filters by prefix itself)."""
    s = scripts["zsh"]
    top = zsh_complete(s, ["hermesd", "res"], tmp_path)
    assert "restart" in top and "profile" in top
    assert zsh_complete(s, ["hermesd", "restart", "--root", str(root), ""], tmp_path) == ["default", "coder", "writer"]
    assert zsh_complete(s, ["hermesd", "restart", ""], tmp_path,
                        HERMES_HOME=str(root / "profiles" / "writer")) == ["default", "coder", "writer"]
    assert "list" in zsh_complete(s, ["hermesd", "profile", ""], tmp_path)
    assert "--graceful" in zsh_complete(s, ["hermesd", "restart", "-"], tmp_path)
    assert zsh_complete(s, ["hermesd", "run", "--root", ""], tmp_path) == ["<dirs>"]
    assert zsh_complete(s, ["hermesd", "completion", ""], tmp_path) == ["bash", "zsh", "fish"]


# --------------------------------------------------------------------------- fish


def fish_complete(script: str, line: str, tmp_path: Path, **env: str) -> list[str]:
    fish = need("fish")
    path = tmp_path / "hermesd.fish"
    path.write_text(script)
    code = f"source {path}; complete -C {quote_fish(line)}"
    done = subprocess.run([fish, "--no-config", "-c", code], capture_output=True, text=True,
                          env=shell_env(tmp_path, **env), timeout=10)
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


def test_fish_completes_commands_and_profiles(scripts, tmp_path, root):
    s = scripts["fish"]
    assert fish_complete(s, "hermesd res", tmp_path) == ["restart"]
    assert fish_complete(s, f"hermesd restart --root {root} ", tmp_path) == ["coder", "default", "writer"]
    assert fish_complete(s, "hermesd restart coder w", tmp_path, HERMES_HOME=str(root)) == ["writer"]
    assert "--graceful" in fish_complete(s, "hermesd restart --", tmp_path)
    assert fish_complete(s, "hermesd completion f", tmp_path) == ["fish"]
    assert fish_complete(s, f"hermesd run --root={root}/prof", tmp_path) == [f"--root={root}/profiles/"]


# --------------------------------------------------------------------------- the command


def test_completion_command_prints_a_script(capsys):
    parser = full_parser()
    args = parser.parse_args(["completion", "bash"])
    args.parser = parser  # main() hands the root parser to the command
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("# bash completion for hermesd") and "complete -F _hermesd hermesd" in out
    help_text = parser._subparsers._group_actions[0].choices["completion"].format_help()
    assert "example:\n  eval" in help_text

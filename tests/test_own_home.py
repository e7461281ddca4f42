"""The suite runs in any account and leaves no trace in it: every test has a home of its own, and a
run that writes into the real one fails.

Checked by running pytest, with this suite's ``conftest`` as a plugin, on a small test file in a
throwaway account (``HOME`` an empty folder, as in a fresh account: no ``~/.cache``, no
``~/.hermes``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import home_changes, home_snapshot, watched_homes
from tests.harness import REPO

PROBE = '''
import os
from pathlib import Path

def test_a_home_of_its_own():
    assert os.environ["HOME"] != os.environ["ACCOUNT"] and Path.home() == Path(os.environ["HOME"])
    assert "HERMES_HOME" not in os.environ and "XDG_CACHE_HOME" not in os.environ
    (Path.home() / ".hermes").mkdir()
    (Path.home() / ".hermes" / "SOUL.md").write_text("fine: this home is the test's own")

def test_writer():
    if os.environ.get("LEAK"):
        (Path(os.environ["ACCOUNT"]) / os.environ["LEAK"]).write_text("x")
'''


def run(tmp_path: Path, leak: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    account = tmp_path / "account"
    account.mkdir(exist_ok=True)
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(account), "ACCOUNT": str(account),
           "PYTHONPATH": str(REPO), "HERMES_HOME": str(account / ".hermes"), "XDG_CACHE_HOME": str(account),
           **({"LEAK": leak} if leak else {})}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--basetemp", str(tmp_path / "basetemp"), *args, str(tmp_path / "test_probe.py")],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)


def test_a_clean_run_passes_and_leaves_the_account_empty(tmp_path):
    out = run(tmp_path, None)
    assert out.returncode == 0, out.stdout + out.stderr
    assert os.listdir(tmp_path / "account") == []


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_run_that_writes_into_the_real_home_fails(tmp_path, workers):
    """Under pytest-xdist too: the controller compares the home before and after all its workers."""
    for leak in (".hermes-leak", ".bashrc"):
        out = run(tmp_path, leak, *workers)
        assert out.returncode == 1 and "2 passed" in out.stdout, out.stdout + out.stderr
        assert "real home changed" in out.stdout and f"new: {leak}" in out.stdout, out.stdout
        (tmp_path / "account" / leak).unlink()


def test_what_counts_as_a_change(tmp_path):
    (tmp_path / ".hermes" / "logs").mkdir(parents=True)
    (tmp_path / ".hermes" / ".update_check").write_text("1")
    (tmp_path / ".cache" / "pip").mkdir(parents=True)
    (tmp_path / ".cache" / "pip" / "old").write_text("1")
    before = home_snapshot(tmp_path)
    (tmp_path / ".cache" / "pip" / "old").write_text("rewritten by some other program")
    os.utime(tmp_path / ".cache" / "pip" / "old", ns=(1, 1))
    assert home_changes(before, home_snapshot(tmp_path)) == []  # another program's cache: not ours to judge
    os.utime(tmp_path / ".hermes" / ".update_check", ns=(1, 1))
    (tmp_path / ".hermes" / "logs" / "agent.log").write_text("")
    (tmp_path / ".local" / "state" / "hermes").mkdir(parents=True)
    assert home_changes(before, home_snapshot(tmp_path)) == [
        "new: .hermes/logs/agent.log", "new: .local", "new: .local/state", "new: .local/state/hermes",
        "changed: .hermes/.update_check"]


def test_a_process_without_home_is_watched_where_it_writes(tmp_path):
    """Python (and Hermes) fall back to the password database's home when ``HOME`` is unset; in a run
    with ``HOME`` pointed elsewhere that is another folder, and its ``.hermes`` is watched too."""
    account, home = tmp_path / "account", tmp_path / "home"
    assert watched_homes(str(account), str(account)) == [(account, (".hermes", ".cache", ".local", ".config"))]
    assert watched_homes(str(home), str(account))[1] == (account, (".hermes",))
    assert watched_homes(None, str(account)) == [(account, (".hermes",))]
    (account / ".cache").mkdir(parents=True)
    before = home_snapshot(account, (".hermes",))
    (account / ".cache" / "pip").mkdir()  # another program of the account: not watched here
    assert home_changes(before, home_snapshot(account, (".hermes",))) == []
    (account / ".hermes" / "logs").mkdir(parents=True)
    assert home_changes(before, home_snapshot(account, (".hermes",))) == ["new: .hermes", "new: .hermes/logs"]


def test_the_folder_a_run_was_asked_to_write_into_is_not_a_trace(tmp_path):
    """scripts/test-releases.sh keeps each release's results in its cache under the home, and says so
    with HERMESD_TEST_OUTPUT: what appears there passes; anything else in the home still fails."""
    account = tmp_path / "account"
    asked = account / ".cache" / "hermesd" / "results" / "r"
    asked.mkdir(parents=True)
    env_leak = ".cache/hermesd/results/r/junit.xml"
    (tmp_path / "test_probe.py").write_text(PROBE)
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(account), "ACCOUNT": str(account),
            "PYTHONPATH": str(REPO), "LEAK": env_leak}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
            "--basetemp", str(tmp_path / "basetemp"), str(tmp_path / "test_probe.py")]
    ok = subprocess.run(argv, capture_output=True, text=True, env={**base, "HERMESD_TEST_OUTPUT": str(asked)},
                        cwd=str(tmp_path), timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (asked / "junit.xml").unlink()
    flagged = subprocess.run(argv, capture_output=True, text=True, env=base, cwd=str(tmp_path), timeout=120)
    assert flagged.returncode == 1 and f"new: {env_leak}" in flagged.stdout, flagged.stdout

"""The fast tier stays honest: a test in it that starts a daemon, a gateway or a container fails.

``classify`` is checked on the command lines the suite really uses; the witness end to end by running
pytest, with this suite's ``conftest`` as a plugin, on a small test file: a test that starts a daemon
directly, or leaves a gateway running behind a shell, fails and names the command; the same marked
``live`` passes and leaves the fast tier.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness import REPO
from tests.tiers import classify

PY = sys.executable


@pytest.mark.parametrize(("argv", "kind"), [
    ([PY, "-m", "supervisor", "run", "--root", "/r"], "daemon"),
    ([PY, "/v/bin/hermesd", "run", "--root", "/r", "--lock-fd", "3"], "daemon"),  # what `hermesd start` spawns
    ([PY, "-m", "supervisor", "--root", "/r", "start"], "daemon"),
    ([PY, "-m", "supervisor", "start", "--root", "/r", "--timeout", "5"], "daemon"),
    ([PY, "-m", "supervisor", "start", "coder", "--root", "/r"], None),  # asks a running daemon
    ([PY, "-m", "supervisor", "status", "--root", "/r"], None),
    ([PY, "/t/fakegw/fakegw.py", "-p", "coder", "gateway", "run", "--external-supervisor"], "gateway"),
    (["/v/bin/hermes", "-p", "coder", "gateway", "run", "--external-supervisor"], "gateway"),
    ([PY, "-m", "hermes_cli.main", "gateway", "run"], "gateway"),
    (["/v/bin/hermes", "profile", "list"], None),
    ([PY, "-E", "-s", "-S", "/s/isolation/enter.py", "m:00", "--", "/v/bin/hermes", "-p", "a", "gateway", "run"],
     "gateway"),  # through the isolation shim
    ([PY, "-c", "import sys; sys.stdin.read()", "gateway", "run"], None),  # a stand-in that only looks like one
    (["/w/wrappers/coder", "gateway", "start"], None),  # the wrapper; what it runs is seen on its own
    (["docker", "compose", "-f", "/x/compose.yaml", "up", "-d"], "container"),
    (["/usr/bin/docker", "exec", "abc", "cat", "/x"], "container"),
    (["docker", "compose", "-f", "/x/compose.yaml", "config"], None),
    (["docker", "compose", "version"], None),
    ([], None),
])
def test_classify(argv, kind):
    assert classify(argv) == kind


PROBE = '''
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakegw import FAKEGW


@pytest.fixture
def pids():
    started = []
    yield started
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def daemon(tmp_path):
    return subprocess.run([sys.executable, "-m", "supervisor", "run", "--root", str(tmp_path / "none")],
                          capture_output=True, timeout=60)


def test_quiet():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_starts_a_daemon(tmp_path):
    daemon(tmp_path)


@pytest.mark.live
def test_marked_live(tmp_path):
    daemon(tmp_path)


def test_gateway_behind_a_shell(tmp_path, pids):
    home = tmp_path / "profiles" / "coder"
    home.mkdir(parents=True)
    line = f'"{sys.executable}" "{FAKEGW}" -p coder gateway run --external-supervisor >/dev/null 2>&1 & echo $!'
    out = subprocess.run(["sh", "-c", line], env={**os.environ, "HERMES_HOME": str(home)}, capture_output=True,
                         text=True, timeout=60)
    pids.append(int(out.stdout))
    deadline = time.monotonic() + 30
    while b"fakegw.py" not in Path(f"/proc/{pids[0]}/cmdline").read_bytes():
        assert time.monotonic() < deadline, "the fake gateway never started"
        time.sleep(0.01)
'''


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ["HOME"], "PYTHONPATH": str(REPO)}
    return subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest", "-rA",
                           "--basetemp", str(tmp_path / "basetemp"), *args, str(tmp_path / "test_probe.py")],
                          capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=180)


def test_a_fast_test_that_starts_a_daemon_or_a_gateway_fails_naming_it(tmp_path):
    out = run(tmp_path)
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "2 failed, 2 passed" in text, text
    assert "PASSED test_probe.py::test_quiet" in text and "PASSED test_probe.py::test_marked_live" in text, text
    assert "FAILED test_probe.py::test_starts_a_daemon" in text, text
    assert "FAILED test_probe.py::test_gateway_behind_a_shell" in text, text
    assert "test_starts_a_daemon is in the fast tier but started processes of the full tier" in text, text
    assert "daemon: " in text and "-m supervisor run --root" in text, text
    assert "gateway: " in text and "fakegw.py -p coder gateway run" in text, text


def test_the_fast_tier_leaves_out_what_is_marked_live(tmp_path):
    out = run(tmp_path, "-m", "fast", "-k", "quiet or live")
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "1 passed, 3 deselected" in text, text
    assert "PASSED test_probe.py::test_quiet" in text, text


FAULT_PROBE = '''
import pytest

@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_scenario(faults, n):
    faults.inject(n)
    faults.survive(n - 1)
    faults.lose(1, f"one lost of {n}")
    assert n != 4
'''


def test_the_fault_table_counts_every_scenario_under_parallel_workers(tmp_path):
    """The fault suite's table is printed by the process that reports: under pytest-xdist the
    controller, from the ledgers the workers' reports carry."""
    (tmp_path / "test_probe.py").write_text(FAULT_PROBE)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ["HOME"], "PYTHONPATH": str(REPO),
           "HERMESD_FAULT_TABLE": str(tmp_path / "table.md")}
    out = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                          "-p", "tests.faults.conftest", "-n", "2", "--basetemp", str(tmp_path / "basetemp"),
                          str(tmp_path / "test_probe.py")],
                         capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=180)
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "1 failed, 3 passed" in text, text
    assert "total: 10 faults injected, 6 survived, 4 lost in 4 scenarios" in text, text
    table = (tmp_path / "table.md").read_text()
    assert "| scenario[4] | 4               | 3        | 1    | failed |" in table, table
    assert "- scenario[2]: one lost of 2" in table, table

"""Real process trees for the limits tests, and cleanup that kills every one of them by PID.

Every process a test starts carries a unique ``HERMESD_ROOT`` tag (as hermesd's children do);
``Trees.close()`` finds each live process with that tag in ``/proc``, pins it with a pidfd, checks
the tag again and SIGKILLs it, until none is left, then reaps what the test itself started.
Test trees also carry ``signal.alarm`` safety nets, so nothing outlives a crashed test run by long.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from supervisor.limits import procfs
from supervisor.processes.tags import tag_token

PY = sys.executable


def wait_for(pred, timeout=10.0, interval=0.01, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def alive(pid: int) -> bool:
    """Alive and not a zombie."""
    return procfs.state_letter(pid) not in (None, "Z", "X")


# A stand-in for hermesd: a child subreaper that starts one tagged "gateway" and reaps everything.
SUBREAPER = r"""
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
signal.alarm(120)
tag, profile, token, code = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
env = dict(os.environ, HERMESD_ROOT=tag, HERMESD_PROFILE=profile, HERMESD_TAG_TOKEN=token)
gw = subprocess.Popen([sys.executable, "-c", code, *sys.argv[5:]], env=env)
print(gw.pid, flush=True)
signal.signal(signal.SIGTERM, lambda *a: os._exit(0))
while True:
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.05)
"""

# A gateway-like tree: 4 extra threads, a plain child, a setsid child whose own child is orphaned
# (reparented to the subreaper, found only by its tag), and a child holding 200 MB.
GATEWAY_TREE = r"""
import json, os, signal, subprocess, sys, threading, time
signal.alarm(120)
out, hog_mb = sys.argv[1], int(sys.argv[2])
for _ in range(4):
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
plain = subprocess.Popen([sys.executable, "-c", "import signal,time; signal.alarm(120); time.sleep(600)"])
escaper = subprocess.Popen(
    [sys.executable, "-c",
     "import os,signal,time\npid=os.fork()\nif pid==0:\n signal.alarm(120); time.sleep(600); os._exit(0)\n"
     "print(pid, flush=True)\nos._exit(0)"],
    start_new_session=True, stdout=subprocess.PIPE)
orphan = int(escaper.stdout.readline())
escaper.wait()
hog = subprocess.Popen(
    [sys.executable, "-c",
     f"import signal,sys,time; signal.alarm(120); b = b'x' * ({hog_mb} << 20); "
     "print('ok', flush=True); time.sleep(600)"],
    stdout=subprocess.PIPE)
hog.stdout.readline()
tmp = out + ".tmp"
with open(tmp, "w") as fh:
    json.dump({"gateway": os.getpid(), "plain": plain.pid, "orphan": orphan, "hog": hog.pid}, fh)
os.rename(tmp, out)
while True:
    time.sleep(1)
"""

# A slow fork bomb with a hard budget: every process forks children (every second one calls setsid)
# one per `pause` seconds, splitting its budget, so the tree ends at exactly `budget` processes.
FORK_BOMB = r"""
import os, signal, sys, time
pidfile, budget, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
def live(budget, n=0):
    signal.alarm(60)
    with open(pidfile, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    while budget > 0:
        time.sleep(pause)
        give = (budget - 1) // 2
        budget -= give + 1
        n += 1
        if os.fork() == 0:
            if n % 2 == 0:
                os.setsid()
            live(give)
            os._exit(0)
    while True:
        time.sleep(1)
live(budget - 1)
"""


class Trees:
    """Starts tagged trees for one test; ``close()`` kills every tagged process by PID."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.tag = f"/nonexistent/hermesd-limits-test-{os.getpid()}-{uuid.uuid4().hex[:10]}"
        self.salt = os.urandom(16)  # the daemon's per-root salt: tags carry the token it gives
        self.popens: list[subprocess.Popen] = []

    def token(self, profile: str) -> str:
        return tag_token(self.salt, self.tag, profile)

    def env(self, profile: str) -> dict[str, str]:
        return dict(os.environ, HERMESD_ROOT=self.tag, HERMESD_PROFILE=profile, HERMESD_TAG_TOKEN=self.token(profile))

    def under_subreaper(self, code: str, *args: str, profile: str = "a") -> tuple[subprocess.Popen, int]:
        """(the subreaper, the gateway's PID): the gateway is the subreaper's child, as with hermesd."""
        p = subprocess.Popen([PY, "-c", SUBREAPER, self.tag, profile, self.token(profile), code, *args],
                             stdout=subprocess.PIPE)
        self.popens.append(p)
        return p, int(p.stdout.readline())

    def direct(self, code: str, *args: str, profile: str = "a") -> subprocess.Popen:
        """A gateway started by the test itself (no subreaper: orphans go to init, as after adoption)."""
        p = subprocess.Popen([PY, "-c", code, *args], env=self.env(profile))
        self.popens.append(p)
        return p

    def gateway_tree(self, hog_mb: int = 200, *, subreaper: bool = True) -> dict:
        out = self.tmp / f"tree-{uuid.uuid4().hex[:6]}.json"
        if subreaper:
            reaper, _gw = self.under_subreaper(GATEWAY_TREE, str(out), str(hog_mb))
            info_reaper = reaper.pid
        else:
            self.direct(GATEWAY_TREE, str(out), str(hog_mb))
            info_reaper = None
        wait_for(out.exists, timeout=20, what="the test tree to be ready")
        info = json.loads(out.read_text())
        info["reaper"] = info_reaper
        info["start"] = procfs.read_stat(info["gateway"]).start
        return info

    def tagged(self) -> list[int]:
        needle = f"HERMESD_ROOT={self.tag}".encode()
        return [int(n) for n in os.listdir("/proc") if n.isdigit() and procfs.environ_has(int(n), (needle,))]

    def close(self) -> list[int]:
        needle = f"HERMESD_ROOT={self.tag}".encode()
        killed: list[int] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = self.tagged()
            if not pids:
                break
            for pid in pids:
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue
                try:
                    if procfs.environ_has(pid, (needle,)) is not None:  # still ours after pinning
                        signal.pidfd_send_signal(fd, signal.SIGKILL)
                        killed.append(pid)
                except ProcessLookupError:
                    pass
                finally:
                    os.close(fd)
            time.sleep(0.02)
        for p in self.popens:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=5)
        return killed

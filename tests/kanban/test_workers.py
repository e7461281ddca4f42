"""Kanban workers run by the daemon in their assignee's domain, with real tasks and real gateways.

Nothing is injected: the daemon gives the chosen dispatcher (p1) ``HERMES_BIN`` (the messenger's
launcher, :mod:`supervisor.kanban.worker`) and its restricted hand-off socket
(:mod:`supervisor.kanban.handoff`), and shows it the other profiles' homes as empty placeholders,
under the default isolation (``auto``: here a private mount namespace plus Landlock). A task
created with ``hermes kanban create … --assignee p2`` is claimed by p1's confined dispatcher, and
the worker must then run as ``hermesd exec p2`` would: p2's environment and confinement, outside
p1's tree, alive across ``hermesd restart p1``, listed under p2 in ``status``, its output in the
log file upstream reads, ended when p2 is stopped. The worker needs no model.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from supervisor.kanban.dispatch import holder
from tests.harness import REPO, pid_alive
from tests.kanban.conftest import HERMES, Board, children_of, proc_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.real_gateway]


def cgroup_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def group_members(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` (a keeper leads its worker's group)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:
                continue
            if int(raw.rsplit(b")", 1)[1].split()[2]) == pgid:
                out.append(int(entry))
    return out


def worker_log(root: Path, task: str) -> Path | None:
    found = list((root / "kanban").rglob(f"{task}.log"))
    return found[0] if found else None


def test_worker_runs_as_assignee_and_survives_dispatcher_restart(need_hermes: None, boards: list[Board]) -> None:
    b = Board(("p1", "p2"), dispatcher="p1")
    p1, p2 = b.home("p1"), b.home("p2")
    (p1 / ".env").write_text("SOME_KEY=secret-of-p1\n")
    # what the worker can reach, written to the task's log before it lives on long enough to be restarted around
    probe = (f"cat {p1}/.env 2>/dev/null; echo other=$?; touch {p2}/mine; echo own=$?; "
             f"cat {b.root}/.env >/dev/null 2>&1; echo root=$?; sleep 60")
    b.command.write_text(f'#!/bin/sh\ncase " $* " in *" chat "*) {probe} ;; esac\nexec {HERMES} "$@"\n')
    boards.append(b)
    b.hermesd.start()
    pids = b.hermesd.wait_running("default", "p1", "p2", timeout=90)
    rows = b.rows()
    assert rows["p1"]["isolation"]["enforced"], rows["p1"]["isolation"]  # the dispatcher itself is confined
    wait_for(lambda: (h := holder(b.root)) is not None and h.pid == pids["p1"], 60, what="p1 dispatching")
    assert proc_env(pids["p1"]).get("HERMES_BIN", "").endswith("/handoff/p1/hermes")
    assert "HERMES_BIN" not in proc_env(pids["p2"])
    # p1's view (its mount namespace): p2's home is an empty placeholder, hermesd's folder holds only
    # p1's hand-off folder; p2's view has neither the placeholder's content nor any hand-off
    view1, view2 = f"/proc/{pids['p1']}/root", f"/proc/{pids['p2']}/root"
    assert os.listdir(view1 + str(p2)) == []
    assert os.listdir(f"{view1}{b.root}/.hermesd") == ["handoff"]
    assert os.listdir(f"{view1}{b.root}/.hermesd/handoff") == ["p1"]
    assert not os.path.exists(f"{view2}{b.root}/.hermesd/handoff")
    task = b.create_task("p2")

    def listed() -> dict | None:
        ws = b.rows()["p2"]["kanban"]["workers"]
        return ws[0] if ws else None

    w = wait_for(listed, 60, interval=0.05, what="p2's worker in status")
    keeper = w["pid"]
    b.pids.add(keeper)
    assert w["task"] == task and w["tree"] == "hermesd"
    text = b.hermesd.cli("status").stdout  # the text says it too, not only --json
    assert f"  kanban     p2: worker for task {task} (PID {keeper}, in hermesd's tree)" in text, text
    assert f"  kanban     p1: dispatcher (PID {pids['p1']}, hermesd's child)" in text, text
    assert "  isolation  default, p1, p2: namespace+landlock" in text or "  isolation  " in text, text
    kenv = proc_env(keeper)
    assert kenv.get("HERMESD_KANBAN_WORKER") == "p2" and "HERMESD_PROFILE" not in kenv
    # the worker itself: the keeper's child, in p2's environment contract, not in p1's tree
    # Re-listed on every poll: the keeper's first child can be a short-lived fork that is not the worker.
    worker = wait_for(lambda: next((c for c in children_of(keeper) if proc_env(c).get("HERMES_HOME")), None), 20,
                      what="the worker process, exec'd")
    b.pids.add(worker)
    wenv = proc_env(worker)
    assert wenv["HERMES_HOME"] == str(p2) and wenv["HERMES_PROFILE"] == "p2"
    assert wenv["HERMES_KANBAN_TASK"] == task and "HERMESD_ROOT" not in wenv and "HERMES_BIN" not in wenv
    assert wenv["HERMES_KANBAN_DISPATCH_IN_GATEWAY"] == "false"
    assert cgroup_of(worker) != cgroup_of(pids["p1"])
    if (b.hermesd.status()["supervisor"]["cgroups"] or {}).get("usable"):
        # a cgroup of its own beside p2's: p2's limits as its own, never charged to p2's gateway
        assert f"/worker.p2.{keeper}\n" in cgroup_of(worker), cgroup_of(worker)
        assert cgroup_of(worker) != cgroup_of(pids["p2"])
    # p2's confinement, not p1's: p1's .env and the root's are out of reach, p2's home is its own
    log = wait_for(lambda: (x := worker_log(b.root, task)) and "root=" in x.read_text() and x, 20,
                   what="the worker's probe in the task log")
    text = log.read_text()
    assert "other=1" in text and "own=0" in text and "root=1" in text, text[-2000:]
    assert "secret-of-p1" not in text and (p2 / "mine").exists()
    # the dispatcher now follows the real worker (upstream's `spawned` event carries its PID)
    wait_for(lambda: str(keeper) in b.hermes("kanban", "show", task).stdout, 20, what="worker_pid handed over")

    assert b.hermesd.request({"cmd": "restart", "profile": "p1"}, wait=30)["ok"]
    wait_for(lambda: (r := b.rows()["p1"])["state"] == "running" and r["pid"] != pids["p1"], 90,
             what="p1 running again")
    assert pid_alive(keeper), "restarting the dispatching profile ended p2's worker"
    assert b.rows()["p2"]["pid"] == pids["p2"]
    assert b.rows()["p2"]["kanban"]["workers"][0]["pid"] == keeper
    # stopping the assignee ends its worker (SIGTERM through the keeper)
    assert b.hermesd.request({"cmd": "stop", "profile": "p2"}, wait=30)["ok"]
    wait_for(lambda: group_members(keeper) == [], 30, what="p2's worker (and its sleep) ended with p2")
    wait_for(lambda: b.rows()["p2"]["kanban"]["workers"] == [], 5, what="the worker gone from status")
    # and a worker ends with hermesd itself
    assert b.hermesd.request({"cmd": "start", "profile": "p2"}, wait=30)["ok"]
    b.hermesd.wait_running("p2", timeout=90)
    second = b.create_task("p2", "say hi again")
    w = wait_for(lambda: (ws := b.rows()["p2"]["kanban"]["workers"]) and ws[0]["task"] == second and ws[0], 60,
                 interval=0.1, what="the second worker")
    b.pids.add(w["pid"])
    worker = wait_for(lambda: children_of(w["pid"]), 20, what="the second worker process")[0]
    b.pids.add(worker)
    assert b.hermesd.shutdown() is not None
    assert group_members(w["pid"]) == [], "a kanban worker outlived hermesd"


class Messenger:
    """Runs the messenger as a dispatcher would: tagged with the root, a task's variables, output on a log."""

    def __init__(self, b: Board, task: str = "t_0123abcd") -> None:
        self.b, self.task = b, task
        self.argv = ["-p", "p2", "--cli", "--accept-hooks", "chat", "-q", f"work kanban task {task}"]
        self.env = {**b.hermesd.env, "HERMESD_ROOT": str(b.root), "HERMESD_PROFILE": "p1",
                    "HERMES_KANBAN_TASK": task, "HERMES_KANBAN_DB": str(b.root / "kanban.db")}
        self.logs = b.root / "kanban" / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def run(self, args: list[str], log_name: str) -> tuple[int, str]:
        with open(self.logs / log_name, "ab") as out:
            code = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=self.env,
                                  cwd=str(REPO), timeout=120).returncode
        return code, (self.logs / log_name).read_text(errors="replace")

    def via_daemon(self, log_name: str, argv: list[str] | None = None) -> tuple[int, str]:
        return self.run([sys.executable, "-m", "supervisor.kanban.worker", *(argv or self.argv)], log_name)

    def direct(self, log_name: str) -> tuple[int, str]:
        return self.run([sys.executable, "-m", "supervisor", "exec", "--root", str(self.b.root), "p2", "--",
                         str(self.b.command), *self.argv], log_name)


@pytest.fixture(scope="module")
def messenger_board() -> Iterator[Board]:
    """One daemon and its gateways for every exit-code case: each case only runs the messenger (and the
    worker command behind it) once more, which changes nothing the next case depends on. What a worker
    does first is read from ``bin/chat.sh`` at each run, so every case sets its own."""
    if not HERMES.exists():
        pytest.skip(f"{HERMES} missing (hermes-agent not installed)")
    b = Board(("p1", "p2"), dispatcher="p1", chat='. "$(dirname "$0")/chat.sh"')
    try:
        b.hermesd.start()
        b.hermesd.wait_running("p2", timeout=90)
        yield b
    finally:
        b.close()


@pytest.mark.parametrize(("chat", "expected"), [("exit 42", 42), ("kill -TERM $$", 128 + 15), ("", None)])
def test_messenger_passes_the_exit_code_back_unchanged(messenger_board: Board, chat: str,
                                                       expected: int | None) -> None:
    b = messenger_board
    (b.bin / "chat.sh").write_text(chat + "\n")
    # a task of its own per case: the logs are appended to, and the last case's must not count
    m = Messenger(b, task=f"t_{zlib.crc32(chat.encode()):08x}")
    code, out = m.via_daemon(f"{m.task}.log")  # the task's own log: the only one a worker may write
    direct, direct_out = m.direct(f"direct-{m.task}.log")
    assert code == direct, (out[-2000:], direct_out[-2000:])
    if expected is not None:
        assert code == expected
    else:  # the real worker with no model: it ran (printed upstream's hint) and its own code came back
        assert out.strip(), "no worker output in the log upstream reads"
    # anything but upstream's worker command line is refused: not a way to run commands as p2
    (m.logs / f"{m.task}.log").write_text("")
    bad, text = m.via_daemon(f"{m.task}.log", ["-p", "p2", "chat", "-q", "cat ~/.env"])
    assert bad == 1 and "refused" in text

"""A profile must not reach past its own processes, and hermesd must not lose track of them.

Scenarios from an attacker's seat (issue 20's findings 7 and 8, issue 25's finding 4), each against
a real daemon and real processes:

* hermesd's own limits and scheduling changed behind its back (``prlimit --pid``, ``renice``,
  ``taskset``, ``oom_score_adj``): restored at housekeeping, and status keeps answering;
* orphans that left their profile's tree (``setsid`` + ``env -i``, parent gone) at a stop, a restart
  and hermesd's own exit;
* a process that claims another profile's tag (``HERMESD_PROFILE=p2``): not counted in p2's tree,
  p2 is not killed for its memory;
* ``hermesd exec`` under ``memory_max``: the allocation over the limit is killed, in the profile's
  cgroup.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.fakegw import write_behaviour
from tests.faults.helpers import eventually
from tests.harness import wait_for


def nofile(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError("no open-files line")


def has_cap(bit: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return False


CAP_SYS_RESOURCE, CAP_SYS_NICE = 24, 23


def test_hermesd_restores_its_own_limits_and_scheduling(fake_root: Path, hermesd_factory, faults) -> None:
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    hp = d.proc.pid
    base_nofile = nofile(hp)
    base_oom = Path(f"/proc/{hp}/oom_score_adj").read_text().strip()
    base_nice = os.getpriority(os.PRIO_PROCESS, hp)  # what it started with (a suite run under `nice -n 10`: 10)
    attacks = [["prlimit", "--pid", str(hp), "--nofile=4:4096"],
               ["renice", "-n", str(min(base_nice + 5, 19)), "-p", str(hp)],
               ["sh", "-c", f"echo 700 > /proc/{hp}/oom_score_adj"]]
    if len(os.sched_getaffinity(hp)) > 1:
        attacks.append(["taskset", "-p", "1", str(hp)])
    for argv in attacks:
        assert subprocess.run(argv, capture_output=True).returncode == 0, argv
        faults.inject()
    assert nofile(hp) == (4, 4096)

    def restored() -> bool:
        soft, _hard = nofile(hp)
        return (soft >= min(4096, base_nofile[0]) and os.getpriority(os.PRIO_PROCESS, hp) == base_nice
                and Path(f"/proc/{hp}/oom_score_adj").read_text().strip() == base_oom
                and len(os.sched_getaffinity(hp)) == len(os.sched_getaffinity(0)))

    faults.check(eventually(restored, 15) is not None, "hermesd did not restore its limits within 15 s")
    assert restored()
    # a lowered hard limit comes back only with CAP_SYS_RESOURCE (which root lacks on some hosts)
    full = base_nofile if has_cap(CAP_SYS_RESOURCE) or base_nofile[1] <= 4096 else (min(base_nofile[0], 4096), 4096)
    faults.check(nofile(hp) == full, f"descriptor limit {nofile(hp)}, expected {full}")
    status = d.cli("status", "--json")
    faults.check(status.returncode == 0, f"status rc {status.returncode}: {status.stderr[-200:]}")
    assert status.returncode == 0, status.stderr
    sup = d.status()["supervisor"]
    said = [*sup["self_restored"], sup["self_problem"] or ""]
    assert any("RLIMIT_NOFILE changed from" in line for line in said), said
    assert any("nice value" in line and line.endswith("restored") for line in said), said
    if full != base_nofile:  # the hard limit cannot come back: said, not hidden
        assert "RLIMIT_NOFILE" in (sup["self_problem"] or "") and "cannot restore" in sup["self_problem"], sup
        text = d.cli("status")
        assert "RLIMIT_NOFILE" in text.stdout, text.stdout
    old = d.row("coder")["pid"]
    assert d.cli("restart", "coder").returncode == 0
    wait_for(lambda: d.row("coder")["state"] == "running" and d.row("coder")["pid"] != old, 15,
             what="coder restarted after the attack")
    faults.survive()


# --------------------------------------------------------------------------- membership, not tags

# What an agent's terminal tool can run: a process that leaves the session, clears its environment
# (no hermesd tag left) and loses its parent (the shell exits at once).
ESCAPE = "setsid env -i /bin/sh -c 'echo $$ > {out}; exec sleep 600' </dev/null >/dev/null 2>&1 &"


def _escapee(home: Path, out: Path) -> int:
    pid = int(wait_for(lambda: out.exists() and out.read_text().strip(), 15, what="the escaped process"))
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"HERMESD_" not in environ, "the escapee still carries a tag: the scenario proves nothing"
    return pid


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.parametrize("how", ["stop", "restart", "hermesd-stop"])
def test_untagged_orphan_ends_with_its_profile(fake_root: Path, hermesd_factory, faults, how: str) -> None:
    home = fake_root / "profiles" / "coder"
    out = home / f"escapee-{how}"  # in its home: the one place a confined profile may write
    write_behaviour(home, shell=ESCAPE.format(out=out))
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    pid = _escapee(home, out)
    gateway = d.row("coder")["pid"]
    faults.inject()
    try:
        if how == "stop":
            assert d.cli("stop", "coder").returncode == 0
        elif how == "restart":
            out.unlink()
            write_behaviour(home)  # the new gateway starts no escapee of its own
            assert d.cli("restart", "coder").returncode == 0
            wait_for(lambda: d.row("coder")["state"] == "running" and d.row("coder")["pid"] != gateway, 15,
                     what="coder restarted")
        else:
            d.shutdown()
        gone = eventually(lambda: not _alive(pid), 10) is not None
        faults.check(gone, f"escaped PID {pid} survived `{how}` (cgroup membership not used)")
        assert gone, f"PID {pid} survived {how}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


# A "gateway" whose tree starts an orphan that claims another profile's tag (its own token kept:
# the victim's is out of its reach) and holds 150 MB.
FORGER = r"""
import json, os, signal, sys, time
signal.alarm(120)
out, victim = sys.argv[1], sys.argv[2]
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.environ["HERMESD_PROFILE"] = victim
        os.set_inheritable(w, True)
        os.execve(sys.executable, [sys.executable, "-c",
                  "import os, signal, sys, time; signal.alarm(120); b = b'x' * (150 << 20); "
                  "os.write(int(sys.argv[1]), str(os.getpid()).encode()); time.sleep(600)", str(w)],
                  dict(os.environ))
    os._exit(0)
os.close(w)
pid = int(os.read(r, 32))
with open(out + ".tmp", "w") as fh:
    json.dump({"forger": pid}, fh)
os.rename(out + ".tmp", out)
while True:
    time.sleep(1)
"""


def test_a_forged_tag_does_not_charge_another_profile(tmp_path: Path, faults) -> None:
    """The watch mechanism (no cgroup): a process of p1 that names itself ``a`` is not counted in
    a's tree, so ``a`` is not killed for its memory; a's own orphan (tag set by hermesd) still is."""
    import json

    from supervisor.limits import procfs
    from supervisor.limits.tree import check_tree
    from supervisor.limits.watcher import ProcRoot, TreeWatcher
    from supervisor.settings import Limits
    from tests.limits.helpers import Trees

    trees = Trees(tmp_path)
    try:
        victim = trees.gateway_tree(hog_mb=1)  # profile "a": a gateway, its children and its own orphan
        out = tmp_path / "forger.json"
        r1, gw1 = trees.under_subreaper(FORGER, str(out), "a", profile="p1")
        forger = json.loads(wait_for(lambda: out.exists() and out.read_text(), 20, what="the forger"))["forger"]
        assert procfs.environ_has(forger, (b"HERMESD_PROFILE=a",)) is not None
        faults.inject()
        w = TreeWatcher(trees.tag, salt=trees.salt, exclude=[r1.pid, victim["reaper"]])
        roots = {"p1": ProcRoot(gw1, procfs.read_stat(gw1).start), "a": ProcRoot(victim["gateway"], victim["start"])}
        limits = {"a": Limits(memory_max=100 << 20), "p1": Limits()}
        samples = w.scan(roots, limits)
        members = set(samples["a"].pids)
        assert victim["orphan"] in members, "positive control: an orphan tagged by hermesd is counted"
        breach = check_tree(samples["a"], limits["a"])
        faults.check(forger not in members and breach is None,
                     f"forged tag counted: PID {forger} in a's tree {sorted(members)}, breach {breach}")
        assert forger not in members and breach is None
    finally:
        trees.close()


# --------------------------------------------------------------------------- hermesd exec's limits

HOLD = "import time; b = b'x' * ({mb} << 20); print('held', flush=True); time.sleep({secs})"


def _exec(d, profile: str, *argv: str) -> subprocess.CompletedProcess[str]:
    import sys

    from tests.harness import REPO

    return subprocess.run([sys.executable, "-m", "supervisor", "exec", "--root", str(d.root), profile, "--", *argv],
                          capture_output=True, text=True, env=d.env, cwd=str(REPO), timeout=120)


def test_exec_runs_under_the_profiles_limits_in_a_cgroup_of_its_own(fake_root: Path, hermesd_factory, faults) -> None:
    """``memory_max: 300M``: 400 MiB held through ``hermesd exec`` is killed (exit 137, the limit
    named), 100 MiB runs; the session is in a cgroup beside the gateway's, so the gateway is
    neither charged nor killed."""
    import sys

    from tests.harness import write_config

    write_config(fake_root, profiles={"coder": {"limits": {"memory_max": "300M"}}})
    d = hermesd_factory(fake_root)
    gateway = d.wait_running("coder")["coder"]
    faults.inject(2)  # the allocation over the limit; the gateway made to pay for it
    hold = HOLD.format(mb=400, secs=20)
    big = _exec(d, "coder", "sh", "-c", f"cat /proc/self/cgroup; {sys.executable} -c \"{hold}\"")
    killed = big.returncode == 137 and "killed: memory_limit" in big.stderr
    faults.check(killed, f"400 MiB under memory_max 300M: rc {big.returncode}, {big.stderr[-300:]!r}")
    assert killed, (big.returncode, big.stdout, big.stderr)
    v2 = [line for line in big.stdout.splitlines() if line.startswith("0::")]
    assert v2 and "/exec.coder." in v2[0], big.stdout  # its own cgroup, beside the profile's
    assert "profile-coder" not in v2[0]
    small = _exec(d, "coder", sys.executable, "-c", HOLD.format(mb=100, secs=0.5))
    assert small.returncode == 0 and "held" in small.stdout, small.stderr
    row = d.row("coder")
    faults.check(row["pid"] == gateway and row["state"] == "running" and row["restarts"] == 0,
                 f"the gateway paid for the session: {row['state']} PID {row['pid']} restarts {row['restarts']}")
    assert row["pid"] == gateway and row["restarts"] == 0
    # nothing of the sessions is left behind (their cgroups are removed when they end)
    from supervisor.limits import cgroup as cg
    from supervisor.limits import detect_only

    base = detect_only(str(d.root)).base
    if base:
        assert not [e for e in os.listdir(base) if e.startswith(cg.EXEC_PREFIX)], os.listdir(base)


# --------------------------------------------------------------------------- the kanban hand-off

WORKER_WRAPPER = """#!/bin/sh
# hermesd's gateway command for these tests: the fake gateway, except for a kanban worker
case " $* " in *" chat "*)
    exec {python} -c "import os, time; b = b'x' * (int(os.environ.get('HERMES_KANBAN_TEST_MB', '1')) << 20); \\
print('worker ran', flush=True); time.sleep(float(os.environ.get('HERMES_KANBAN_TEST_SECS', '0')))" ;;
esac
exec {fakegw} "$@"
"""


def _kanban_root(root: Path, **config) -> None:
    import sys

    from tests.fakegw import fake_gateway_command
    from tests.harness import write_config

    wrapper = root.parent / "bin" / "hermes"
    wrapper.parent.mkdir(exist_ok=True)
    wrapper.write_text(WORKER_WRAPPER.format(python=sys.executable, fakegw=" ".join(fake_gateway_command())))
    wrapper.chmod(0o755)
    write_config(root, command=[str(wrapper)], **config)


def _ask(d, payload: dict, wait: float = 10.0) -> dict:
    """A control request; a refusal is an answer here (the client raises on it)."""
    from supervisor.control.client import ControlError

    try:
        return d.request(payload, wait=wait)
    except ControlError as exc:
        return {"ok": False, "error": str(exc)}


def _worker_request(task: str, assignee: str = "coder", **env: str) -> dict:
    return {"cmd": "kanban_worker", "assignee": assignee,
            "argv": ["-p", assignee, "--cli", "chat", "-q", f"work kanban task {task}"],
            "env": {"HERMES_KANBAN_TASK": task, **env}}


def test_worker_log_is_only_its_boards_and_opened_without_links(fake_root: Path, hermesd_factory, faults) -> None:
    """A dispatcher's request names the worker's log: another profile's .env, hermesd's event
    journal, a board slug that climbs out, or a link planted where the log should be. None of
    them may be written (finding: the dispatcher could corrupt .env files, append to another
    profile's MEMORY.md, or forge journal lines)."""
    _kanban_root(fake_root)
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    victim = fake_root / "profiles" / "writer" / ".env"
    victim.write_text("TELEGRAM_BOT_TOKEN=secret-of-writer\n")
    before = victim.read_bytes()
    journal = fake_root / ".hermesd" / "events"
    logs = fake_root / "kanban" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    journal_files = sorted(journal.glob("*.jsonl"))
    journal_before = {p: p.read_bytes() for p in journal_files}
    refused = {
        "another profile's .env": (_worker_request("t_00000001"), str(victim)),
        "the event journal": (_worker_request("t_00000002"), str(journal_files[-1]) if journal_files
                              else str(journal / "events-00000001.jsonl")),
        "a board slug that climbs out": (_worker_request("t_00000003", HERMES_KANBAN_BOARD="../../profiles/writer"),
                                         str(fake_root / "profiles" / "writer" / "logs" / "t_00000003.log")),
    }
    for what, (req, log) in refused.items():
        faults.inject()
        reply = _ask(d, {**req, "log": log})
        faults.check(not reply["ok"] and ("log" in reply["error"] or "board" in reply["error"]), f"{what}: {reply}")
        assert not reply["ok"], (what, reply)
    # the right path, but a link planted there by the dispatcher: the worker opens it itself,
    # confined as coder, without following links: it fails and writes nowhere
    (logs / "t_00000004.log").symlink_to(victim)
    faults.inject()
    reply = _ask(d, {**_worker_request("t_00000004"), "log": str(logs / "t_00000004.log")})
    assert reply["ok"], reply
    code = _ask(d, {"cmd": "kanban_wait", "pid": reply["pid"]}, wait=60)["code"]
    faults.check(code == 126 and victim.read_bytes() == before, f"planted link: code {code}")
    assert code == 126
    said = (fake_root / ".hermesd" / "logs" / "coder.log").read_text(errors="replace")
    assert "t_00000004.log" in said and "link" in said, said[-1000:]
    assert victim.read_bytes() == before
    assert {p: p.read_bytes()[: len(b)] for p, b in journal_before.items()} == journal_before
    # and the task's own log, a regular file, is written by the worker
    reply = _ask(d, {**_worker_request("t_00000005"), "log": str(logs / "t_00000005.log")})
    assert reply["ok"], reply
    assert _ask(d, {"cmd": "kanban_wait", "pid": reply["pid"]}, wait=60)["code"] == 0
    assert "worker ran" in (logs / "t_00000005.log").read_text()


def test_a_flood_of_workers_kills_workers_not_the_assignees_gateway(fake_root: Path, hermesd_factory, faults) -> None:
    """Eight workers for coder (``memory_max: 200M``), each holding 250 MiB: at most four run
    (``kanban.workers_per_profile``), each in a cgroup of its own with coder's limits as its own;
    the workers over the limit are killed, coder's gateway is neither charged nor killed."""
    _kanban_root(fake_root, profiles={"coder": {"limits": {"memory_max": "200M"}}})
    d = hermesd_factory(fake_root)
    gateway = d.wait_running("coder")["coder"]
    logs = fake_root / "kanban" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    replies = []
    for i in range(8):
        task = f"t_1000000{i}"
        faults.inject()
        replies.append(_ask(d, {**_worker_request(task, HERMES_KANBAN_TEST_MB="250", HERMES_KANBAN_TEST_SECS="30"),
                                  "log": str(logs / f"{task}.log")}))
    accepted = [r["pid"] for r in replies if r["ok"]]
    refused = [r for r in replies if not r["ok"]]
    assert len(accepted) == 4 and all("workers_per_profile" in r["error"] for r in refused), replies
    faults.survive(len(refused))
    codes = [_ask(d, {"cmd": "kanban_wait", "pid": pid}, wait=90)["code"] for pid in accepted]
    said = (fake_root / ".hermesd" / "logs" / "coder.log").read_text(errors="replace")
    for code in codes:
        faults.check(code == 137, f"a worker over coder's memory_max ended with {code}")
    assert codes == [137] * 4, (codes, said[-2000:])
    assert said.count("killed: memory_limit") >= 4, said[-2000:]
    row = d.row("coder")
    ok = row["pid"] == gateway and row["state"] == "running" and row["restarts"] == 0
    assert ok, row
    # the bound is of running workers: once they are gone, coder takes workers again
    reply = _ask(d, {**_worker_request("t_20000000"), "log": str(logs / "t_20000000.log")})
    assert reply["ok"], reply
    assert _ask(d, {"cmd": "kanban_wait", "pid": reply["pid"]}, wait=60)["code"] == 0


def test_untagged_orphan_of_a_gateway_that_died_with_hermesd_down(fake_root: Path, hermesd_factory, faults) -> None:
    """hermesd is SIGKILLed, then coder's gateway dies while nobody watches: the next hermesd finds
    what the dead gateway left in coder's cgroup and kills it (no tag to find it by)."""
    home = fake_root / "profiles" / "coder"
    out = home / "escapee-crash"  # in its home: the one place a confined profile may write
    write_behaviour(home, shell=ESCAPE.format(out=out))
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    pid = _escapee(home, out)
    gateway = d.row("coder")["pid"]
    d.kill9()
    os.kill(gateway, signal.SIGKILL)
    wait_for(lambda: not _alive(gateway), 10, what="coder's gateway gone")
    assert _alive(pid)
    faults.inject()
    try:
        write_behaviour(home)
        d2 = hermesd_factory(fake_root)
        d2.wait_running("default", "coder", "writer")
        gone = eventually(lambda: not _alive(pid), 10) is not None
        faults.check(gone, f"escaped PID {pid} of a gateway that died while hermesd was down survived")
        assert gone
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_confined_profile_cannot_tune_hermesd_or_another_gateway(fake_root: Path, hermesd_factory, faults) -> None:
    """From inside coder (``hermesd exec coder``, confined as its gateway is): ``prlimit``,
    ``renice``, ``taskset``, ``ionice``, ``chrt``, ``oom_score_adj`` and ``autogroup`` on hermesd and
    on writer's gateway. Every one fails, and nothing of either changed."""
    from supervisor.isolation.probing import probe
    from tests.isolation.test_process_control import ATTACKS, attack_script, snapshot

    facts = probe()
    if facts.landlock_abi < 1:
        pytest.skip("this kernel has no Landlock: profiles are not confined here")
    d = hermesd_factory(fake_root)
    pids = d.wait_running("coder", "writer")
    targets = {"hermesd": d.proc.pid, "writer's gateway": pids["writer"]}
    before = {name: snapshot(pid) for name, pid in targets.items()}
    for name, pid in targets.items():
        res = _exec(d, "coder", "sh", "-c", attack_script(pid))
        rc = dict(line.split("=", 1) for line in res.stdout.split() if "=" in line)
        for attack in ATTACKS:
            faults.inject()
            faults.check(rc.get(attack, "0") != "0", f"{attack} on {name} succeeded from a confined profile")
    for name, pid in targets.items():
        faults.inject()  # the target as a whole: nothing of it changed
        faults.check(snapshot(pid) == before[name], f"{name} changed: {before[name]} -> {snapshot(pid)}")
    assert {name: snapshot(pid) for name, pid in targets.items()} == before
    assert faults.lost == 0, faults.notes
    assert d.cli("status").returncode == 0

"""The daemon against fake gateways: real processes, signals, files and sockets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.processes import identity
from tests.fakegw import fake_gateway_command, parse_env_report, read_spawned, write_behaviour
from tests.harness import pid_alive, tagged_pids, wait_for, write_config


def homes(root):
    return {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}


def test_one_child_per_profile_with_contract_env(fake_root, hermesd_factory):
    h = homes(fake_root)
    for home in h.values():
        write_behaviour(home, print_env=["HERMES_HOME", "HERMES_S6_SUPERVISED_CHILD", "HERMES_GATEWAY_MAX_STARTS",
                                         "GATEWAY_MULTIPLEX_PROFILES", "TELEGRAM_BOT_TOKEN", "HOME"])
    d = hermesd_factory(fake_root, env={"TELEGRAM_BOT_TOKEN": "111:inherited-secret"})
    pids = d.wait_running("default", "coder", "writer")
    assert len(set(pids.values())) == 3
    for name, home in h.items():
        rec = gf.read_pid_record(home)
        assert rec is not None and rec.pid == pids[name], name
        argv = identity.proc_cmdline(rec.pid)  # upstream strips -p from its own sys.argv, not /proc
        assert argv[-3:] == ["gateway", "run", "--external-supervisor"]
        assert (argv[-5:-3] == ["-p", name]) == (name != "default")
        assert "--replace" not in argv
        report = parse_env_report(d.layout.child_log(name).read_text())
        assert report["HERMES_HOME"] == str(home)
        assert report["HERMES_S6_SUPERVISED_CHILD"] == "1"
        assert report["HERMES_GATEWAY_MAX_STARTS"] == "0"
        assert report["GATEWAY_MULTIPLEX_PROFILES"] == "false"
        assert report["TELEGRAM_BOT_TOKEN"] is None  # scrubbed from hermesd's environment
        assert report["HOME"] == d.env["HOME"]
        # own session: pid == sid
        assert os.getsid(pids[name]) == pids[name]
    assert "inherited-secret" not in d.log_text()


def test_kill_one_child_restarts_it_alone(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    os.kill(before["coder"], signal.SIGKILL)
    row = wait_for(lambda: (r := d.row("coder"))["pid"] not in (None, before["coder"]) and r, what="coder respawn")
    assert row["restarts"] == 1
    assert row["last_exit"]["signal"] == "SIGKILL"
    after = d.wait_running("default", "coder", "writer")
    assert after["default"] == before["default"] and after["writer"] == before["writer"]
    assert not pid_alive(before["coder"])
    # The respawn forks before hermesd writes about the exit, yet what it writes keeps its order: in
    # the child's log the exit's line, then the new run's; in the journal (stamped at the decision,
    # written in sequence) the exit, then the start.
    new = row["pid"]
    log = d.layout.child_log("coder").read_text()
    ended = re.search(rf"hermesd: PID {before['coder']} .*\(crash\)", log)
    started = re.search(rf"hermesd: started .* as PID {new} ", log)
    assert ended and started and ended.start() < started.start(), log
    journal = [json.loads(line) for f in sorted((d.layout.dir / "events").glob("events-*.jsonl"))
               for line in f.read_text().splitlines()]
    assert [e["seq"] for e in journal] == sorted(e["seq"] for e in journal)
    coder = [(e["type"], e.get("pid")) for e in journal
             if e["profile"] == "coder" and e["type"] in ("exited", "started")]
    assert coder[-2:] == [("exited", before["coder"]), ("started", new)], coder


def test_restart_and_stop_one_profile(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    out = d.cli("restart", "coder")
    assert out.returncode == 0, out.stderr
    after = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and r["pid"] != before["coder"] and r)
    assert d.row("writer")["pid"] == before["writer"] and d.row("default")["pid"] == before["default"]
    assert after["last_exit"]["kind"] == "planned"
    assert d.cli("stop", "coder").returncode == 0
    row = d.wait_state("coder", "stopped")
    assert row["reason"] == "stopped by operator"
    assert not pid_alive(after["pid"])
    # status exit code says "not everything that should run is running"? coder should not run now.
    assert d.cli("status").returncode == 0
    assert d.cli("start", "coder").returncode == 0
    d.wait_running("coder")
    unknown = d.cli("stop", "nope")
    assert unknown.returncode != 0 and "no such profile: 'nope'" in unknown.stderr, unknown


def test_exit_codes_75_and_78(fake_root, hermesd_factory):
    h = homes(fake_root)
    write_behaviour(h["writer"], exit_at_start=78)
    d = hermesd_factory(fake_root)
    row = d.wait_state("writer", "held")
    assert row["hold"]["kind"] == "startup_failed"
    assert "78" in row["reason"]
    assert d.cli("status").returncode == 1
    pid = d.wait_running("coder")["coder"]
    os.kill(pid, signal.SIGUSR1)  # drain, then exit 75: restart at once, no penalty
    row = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and r["pid"] != pid and r)
    assert row["last_exit"]["code"] == 75 and row["last_exit"]["kind"] == "restart_requested"
    # fixing the held profile's files releases it (live reconfiguration)
    write_behaviour(h["writer"])
    (h["writer"] / "config.yaml").write_text("model: {}\n")
    d.wait_running("writer", timeout=10)


def test_outside_planned_stop_is_not_restarted(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    pid = d.wait_running("coder")["coder"]
    # what `hermes gateway stop` does: marker + SIGTERM
    gf.write_planned_stop_marker(homes(fake_root)["coder"], pid, proc_start_time(pid))
    os.kill(pid, signal.SIGTERM)
    row = d.wait_state("coder", "stopped")
    assert "outside hermesd" in row["reason"]
    assert row["last_exit"]["code"] == 0


def test_crash_loop_backs_off_and_says_when(fake_root, hermesd_factory):
    write_behaviour(homes(fake_root)["coder"], exit_at_start=1, write_counter=True)
    d = hermesd_factory(fake_root)
    row = wait_for(lambda: (r := d.row("coder"))["state"] == "backoff" and r["restarts"] >= 3 and r, timeout=15)
    assert row["next_retry_at"] and row["next_retry_at"] > time.time() - 1
    assert row["reason"]
    # the text says when; polled, as the gateway leaves backoff for a moment at every retry
    wait_for(lambda: "retry at" in d.cli("status").stdout, 15, what="'retry at' in the text status")


def test_stubborn_child_and_escaped_grandchildren_are_killed(fake_root, hermesd_factory):
    write_config(fake_root, stop_timeout=1)
    coder = homes(fake_root)["coder"]
    write_behaviour(coder, ignore_sigterm=True, grandchildren=3, grandchildren_setsid=True)
    d = hermesd_factory(fake_root)
    d.wait_running("coder")
    spawned = wait_for(lambda: len(read_spawned(coder)) >= 3 and read_spawned(coder))
    assert d.cli("stop", "coder").returncode == 0
    d.wait_state("coder", "stopped", timeout=10)
    for g in spawned:
        wait_for(lambda g=g: not pid_alive(g["pid"]) or proc_start_time(g["pid"]) != g["start_time"],
                 what=f"grandchild {g['pid']} gone")
    assert d.row("coder")["last_exit"]["signal"] == "SIGKILL"


def test_full_stop_leaves_nothing_running(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    assert d.cli("stop").returncode == 0
    assert d.proc.wait(10) == 0
    assert tagged_pids(fake_root) == []
    for home in homes(fake_root).values():
        assert gf.read_gateway_state(home)["gateway_state"] == "stopped"
    assert not d.layout.socket.exists() and not d.layout.pidfile.exists()


def test_adoption_after_sigkill(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    os.kill(before["writer"], signal.SIGKILL)
    wait_for(lambda: d.row("writer")["restarts"] == 1 and d.row("writer")["state"] == "running")
    before = d.wait_running("default", "coder", "writer")
    d.kill9()
    assert all(pid_alive(p) for p in before.values())  # children survive hermesd's death
    d2 = hermesd_factory(fake_root)
    after = d2.wait_running("default", "coder", "writer")
    assert after == before
    assert all(d2.row(n)["adopted"] for n in before)
    assert d2.row("writer")["restarts"] == 1  # history carried over
    assert sorted(tagged_pids(fake_root)) == sorted(before.values())  # no duplicate
    # an adopted child's death is still noticed and classified
    os.kill(before["coder"], signal.SIGKILL)
    row = wait_for(lambda: (r := d2.row("coder"))["state"] == "running" and r["pid"] != before["coder"] and r)
    assert row["restarts"] == 1


def test_adopted_gateways_keep_the_isolation_they_were_started_under(fake_root, hermesd_factory):
    """After hermesd's crash its gateways are adopted, still confined: ``status`` (text and ``--json``)
    says so, with the confinement each was started under, recorded then. Not what hermesd.yaml asks
    for now: coder's entry is set to ``off`` while hermesd is down, and the adopted coder keeps running
    confined (an adopted gateway is not restarted for settings), which is what status must say."""
    from supervisor.isolation.probing import probe

    if probe().landlock_abi < 1:
        pytest.skip("this kernel has no Landlock: nothing is confined to show")
    d = hermesd_factory(fake_root)
    before = d.wait_running("default", "coder", "writer")
    started_under = {n: d.row(n)["isolation"] for n in before}
    assert all(iso and iso["mechanism"] in ("landlock", "namespace+landlock") for iso in started_under.values())
    lines = [ln for ln in d.cli("status").stdout.splitlines() if ln.startswith("  isolation  ")]
    assert lines
    d.kill9()
    offline = json.loads(d.cli("status", "--json").stdout)  # no daemon: the same, from the state file
    assert {r["name"]: r["isolation"] for r in offline["profiles"]} == started_under
    write_config(fake_root, profiles={"coder": {"isolation": "off"}})
    d2 = hermesd_factory(fake_root)
    assert d2.wait_running("default", "coder", "writer") == before
    assert all(d2.row(n)["adopted"] for n in before)
    assert {n: d2.row(n)["isolation"] for n in before} == started_under
    assert [ln for ln in d2.cli("status").stdout.splitlines() if ln.startswith("  isolation  ")] == lines
    assert "NoNewPrivs:\t1" in Path(f"/proc/{before['coder']}/status").read_text()  # and it is: still confined
    os.kill(before["coder"], signal.SIGKILL)  # its next gateway starts under what hermesd.yaml says now
    row = wait_for(lambda: (r := d2.row("coder"))["pid"] not in (None, before["coder"]) and r["state"] == "running"
                   and r, 20, what="coder restarted")
    assert row["isolation"]["mechanism"] == "off"


def _start_foreign(home: Path):
    """A gateway hermesd did not start (``hermes -p coder gateway run`` by hand), once it serves: it holds
    ``gateway.lock`` and its ``gateway.pid`` names it. Merely running is not serving: for seconds on a
    loaded host the process is only importing, and a hermesd started then rightly wins the lock race."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMESD_")}
    env["HERMES_HOME"] = str(home)
    foreign = subprocess.Popen([*fake_gateway_command(), "-p", "coder", "gateway", "run"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def serving_or_gone() -> bool:
        rec = gf.live_gateway(home, search=False)
        serving = identity.gateway_lock_holder(home) == foreign.pid and rec is not None and rec.pid == foreign.pid
        return serving or foreign.poll() is not None

    try:
        wait_for(serving_or_gone, 60, what="the foreign gateway serving")
        assert foreign.poll() is None, f"the foreign gateway exited {foreign.returncode}"
    except BaseException:
        _end(foreign)
        raise
    return foreign


def _end(proc) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_foreign_gateway_is_held_then_taken_over(fake_root, hermesd_factory):
    coder = homes(fake_root)["coder"]
    foreign = _start_foreign(coder)
    try:
        d = hermesd_factory(fake_root)
        row = d.wait_state("coder", "held", timeout=30)
        assert row["hold"]["kind"] == "foreign_gateway" and str(foreign.pid) in row["reason"]
        foreign.send_signal(signal.SIGINT)
        foreign.wait(10)
        d.wait_running("coder", timeout=30)
    finally:
        _end(foreign)


@pytest.mark.parametrize("pid_file", ["missing", "forged"])
def test_a_foreign_gateway_holding_the_lock_is_held_without_its_pid_file(fake_root, hermesd_factory, pid_file):
    """The gateway lock, not ``gateway.pid``, says a gateway runs: upstream takes the lock first and writes
    the file after (seconds apart on a loaded host), and the profile can delete or forge the file. With
    the lock held by a live foreign gateway and its file missing or naming another process, hermesd holds
    the profile for the lock's holder and starts no gateway of its own on it (none ever: the fake counts
    every start in the home), then takes the profile back when that gateway exits."""
    import subprocess

    coder = homes(fake_root)["coder"]
    write_behaviour(coder, write_counter=True)
    foreign = _start_foreign(coder)
    bystander = subprocess.Popen(["sleep", "600"])
    try:
        if pid_file == "missing":
            (coder / gf.PID_FILE).unlink()
        else:
            (coder / gf.PID_FILE).write_text(json.dumps({"pid": bystander.pid, "kind": "hermes-gateway",
                                                         "start_time": proc_start_time(bystander.pid)}))
        d = hermesd_factory(fake_root)
        row = d.wait_state("coder", "held", timeout=30)
        assert row["hold"]["kind"] == "foreign_gateway" and f"PID {foreign.pid}" in row["reason"], row
        d.wait_running("default", "writer", timeout=30)  # the others started: coder's spawn was decided
        assert d.row("coder")["state"] == "held" and d.row("coder")["pid"] is None
        assert (coder / "fakegw.starts").read_text().split() == [str(foreign.pid)]  # hermesd started none
        foreign.send_signal(signal.SIGINT)
        foreign.wait(10)
        ours = d.wait_running("coder", timeout=30)["coder"]
        assert ours != foreign.pid and pid_alive(bystander.pid)  # the bystander was never touched
    finally:
        _end(foreign)
        _end(bystander)


# Upstream's ``gateway run --replace`` (gateway/run.py start_gateway) as far as the running gateway sees it:
# a takeover marker naming it, SIGTERM, a wait until it is gone, then this process runs the gateway itself
# (its gateway.pid seconds later: a second gateway found beside ours before that is the other path to the
# same hold, hermesd's own rival check, and would not show what the exit alone tells).
REPLACER = r"""
import json, os, signal, sys, time
from datetime import UTC, datetime
home = os.environ["HERMES_HOME"]
with open(os.path.join(home, "gateway.pid")) as fh:
    rec = json.load(fh)
with open(os.path.join(home, ".gateway-takeover.json"), "w") as fh:
    json.dump({"target_pid": rec["pid"], "target_start_time": rec.get("start_time"), "replacer_pid": os.getpid(),
               "replacer_hermes_home": home, "written_at": datetime.now(UTC).isoformat()}, fh)
os.kill(rec["pid"], signal.SIGTERM)
deadline = time.monotonic() + 30
while os.path.exists(f"/proc/{rec['pid']}") and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(3)  # the real gateway's imports and start-up, before it writes its gateway.pid
os.execv(sys.argv[1], sys.argv[1:])
"""


def test_a_gateway_replaced_from_outside_is_held_then_taken_back(fake_root, hermesd_factory):
    """``hermes -p coder gateway run --replace`` beside hermesd: its SIGTERM (with upstream's takeover
    marker) ends hermesd's gateway cleanly; coder is then held for the replacement (``foreign_gateway``,
    as the docs say), the journal never says it "stays down until started", and when the replacement
    exits hermesd runs coder again."""
    import subprocess
    import sys

    coder = homes(fake_root)["coder"]
    d = hermesd_factory(fake_root)
    ours = d.wait_running("coder")["coder"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMESD_")}
    env["HERMES_HOME"] = str(coder)
    replacer = subprocess.Popen([sys.executable, "-c", REPLACER, *fake_gateway_command(), "-p", "coder", "gateway",
                                 "run"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        row = d.wait_state("coder", "held", timeout=30)
        assert row["hold"]["kind"] == "foreign_gateway" and f"PID {replacer.pid}" in row["reason"], row
        assert "replaced" in row["last_exit"]["reason"] and not pid_alive(ours), d.cli("events", "coder").stdout
        assert row["pid"] is None  # hermesd runs nothing beside it
        journal = d.cli("events", "coder").stdout
        assert "stays down until started" not in journal and "(external_stop): replaced by" in journal, journal
        replacer.send_signal(signal.SIGINT)
        replacer.wait(30)
        back = wait_for(lambda: (r := d.row("coder"))["state"] == "running" and r, 30, what="coder taken back")
        assert back["pid"] not in (ours, replacer.pid)
    finally:
        if replacer.poll() is None:
            replacer.kill()
            replacer.wait()


def test_status_offline_and_exit_codes(fake_root, hermesd_factory):
    d = hermesd_factory(fake_root)
    d.wait_running("default", "coder", "writer")
    out = d.cli("status", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 0
    assert doc["supervisor"]["running"] is True
    keys = {"name", "home", "state", "reason", "pid", "uptime_s", "restarts", "last_exit", "next_retry_at",
            "gateway_state", "platforms", "heartbeat_age_s", "rss_bytes", "cpu_percent"}
    for row in doc["profiles"]:
        assert keys <= set(row)
        assert row["gateway_state"] == "running" and row["rss_bytes"] > 0
    d.shutdown()
    out = d.cli("status", "--json")
    doc = json.loads(out.stdout)
    assert out.returncode == 3
    assert doc["supervisor"]["running"] is False
    assert {r["state"] for r in doc["profiles"]} == {"stopped"}
    assert "NOT RUNNING" in d.cli("status").stdout


def test_systemd_notification_protocol(fake_root, hermesd_factory, tmp_path):
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(0.2)
    got: list[str] = []

    def received(prefix: str) -> bool:
        with contextlib.suppress(TimeoutError):
            got.extend(sock.recv(4096).decode().splitlines())
        return any(m.startswith(prefix) for m in got)

    try:
        write_behaviour(homes(fake_root)["coder"], print_env=["NOTIFY_SOCKET", "WATCHDOG_USEC"])
        d = hermesd_factory(fake_root, env={"NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "400000"})
        wait_for(lambda: received("READY=1"), 10)
        wait_for(lambda: received("WATCHDOG=1") and sum(m == "WATCHDOG=1" for m in got) >= 3, 10)
        wait_for(lambda: received("STATUS=") and any("running" in m for m in got if m.startswith("STATUS=")), 10)
        # The gateway's report reaches its log through the daemon's pipe, which may lag the
        # notifications on a busy machine: wait until both names are in it, then judge the values.
        report = wait_for(lambda: (r := parse_env_report(d.layout.child_log("coder").read_text())).keys()
                          >= {"NOTIFY_SOCKET", "WATCHDOG_USEC"} and r, 10, what="the gateway's environment report")
        assert report["NOTIFY_SOCKET"] is None and report["WATCHDOG_USEC"] is None
        d.shutdown()
        wait_for(lambda: received("STOPPING=1"), 5)
    finally:
        sock.close()


def test_restart_waits_for_each_profile_and_reports_a_held_one_as_held(fake_root, hermesd_factory):
    """A held profile among those named is reported as held with its reason; the others are still
    waited for (not blamed with "not running after 600s" while they restart), and a time printed
    is the time really waited."""
    h = homes(fake_root)
    (h["writer"] / "config.yaml").write_text("platforms: [unclosed\n")
    d = hermesd_factory(fake_root)
    d.wait_state("writer", "held")
    before = d.wait_running("coder")["coder"]
    write_behaviour(h["coder"], running_delay=1.5)  # the restart takes a while to reach "running"
    out = d.cli("restart", "coder", "writer")
    assert out.returncode == 1, out
    assert "coder: running" in out.stdout
    row = d.row("coder")
    assert row["state"] == "running" and row["pid"] != before
    assert "writer: held: config_error:" in out.stderr and "config.yaml" in out.stderr
    assert "after" not in out.stderr and "coder" not in out.stderr, out.stderr
    out = d.cli("start", "writer")
    assert out.returncode == 1 and "writer: held: config_error:" in out.stderr and "after" not in out.stderr
    # a refusal names the profile once
    (h["coder"] / "config.yaml").write_text("platforms: [unclosed\n")
    out = d.cli("restart", "coder", "writer")
    assert out.returncode == 1 and "coder: refused: config_error" in out.stderr, out.stderr
    assert "coder: coder:" not in out.stderr and "writer: held: config_error" in out.stderr, out.stderr
    (h["coder"] / "config.yaml").unlink()
    write_behaviour(h["coder"], running_delay=30)
    started = time.monotonic()
    out = d.cli("restart", "coder", "--timeout", "1")
    took = time.monotonic() - started
    assert out.returncode == 1
    said = float(re.search(r"coder: not running after ([0-9.]+)s \(starting", out.stderr)[1])
    assert 1.0 <= said <= took, (said, took, out.stderr)


def test_a_platform_removed_from_the_files_leaves_status(fake_root, hermesd_factory):
    """Upstream merges gateway_state.json with what the previous gateway left: a platform no longer
    configured keeps its old entry there forever. Status shows only what this gateway wrote."""
    h = homes(fake_root)
    connected = {"state": "connected", "error_code": None, "error_message": None}
    write_behaviour(h["coder"], platforms={"telegram": connected, "discord": connected})
    d = hermesd_factory(fake_root)
    before = d.wait_running("coder")["coder"]
    wait_for(lambda: set(d.row("coder")["platforms"]) == {"telegram", "discord"}, 10, what="both platforms")
    write_behaviour(h["coder"], platforms={"discord": connected})
    (h["coder"] / ".env").write_text("SOME_SETTING=1\n")  # an edit: the gateway restarts without telegram
    wait_for(lambda: d.row("coder")["pid"] not in (None, before), 10, what="coder restarted")
    d.wait_running("coder")
    assert "telegram" in json.loads((h["coder"] / "gateway_state.json").read_text())["platforms"]  # upstream's merge
    row = wait_for(lambda: (r := d.row("coder"))["platforms"] and r, 10, what="platforms of the new gateway")
    assert set(row["platforms"]) == {"discord"}, row["platforms"]
    assert "telegram" not in d.cli("status").stdout

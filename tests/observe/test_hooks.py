"""Hooks: validation, matching, environment, and a runner that never holds up the loop."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from pathlib import Path

import pytest
import yaml

from supervisor.observe.hooks import HookRunner, hook_environment, matches
from supervisor.observe.sections import Hook, ObserveConfigError, parse_hooks
from supervisor.observe.values import line_of
from tests.harness import wait_for

# No account's home: a hook that wrote there would fail here, never touch the real one.
BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent/test-home", "LANG": "C.UTF-8"}


def event(type_="held", profile="coder", seq=1, **fields):
    defaults = {"held": {"kind": "config_error", "message": "exit 78"},
                "backoff": {"delay_s": 2.0, "failures": 1, "retry_at": 1.0},
                "recovered": {"after_failures": 3}}
    return {"ts": 1_700_000_000.0 + seq, "seq": seq, "daemon": 4242, "type": type_, "profile": profile,
            **defaults.get(type_, {}), **fields}


# --------------------------------------------------------------------------- validation


def test_valid_hooks_parse():
    hooks = parse_hooks([
        {"on": ["held", "backoff"], "command": ["notify-send", "hermesd"], "timeout": 5, "after_failures": 3,
         "profiles": ["Coder"], "name": "desk"},
        {"on": "recovered", "command": "echo $HERMESD_EVENT_SUMMARY"},
        {"on": ["*"], "command": ["/bin/true"]},
    ])
    assert hooks[0] == Hook("desk", frozenset({"held", "backoff"}), ("notify-send", "hermesd"), 5.0, 3,
                            frozenset({"coder"}))
    assert hooks[1].argv == ("/bin/sh", "-c", "echo $HERMESD_EVENT_SUMMARY") and hooks[1].name == "hooks[1]"
    assert hooks[1].timeout == 10.0 and hooks[2].on == frozenset({"*"})


@pytest.mark.parametrize(("value", "key", "words"), [
    ({"on": ["held"]}, "hooks[0]", "missing 'command'"),
    ([{"on": ["helds"], "command": "x"}], "hooks[0].on[0]", "unknown event type 'helds'"),
    ([{"on": "held", "command": "x", "when": 1}], "hooks[0].when", "unknown key"),
    ([{"on": "held", "command": []}], "hooks[0].command", "expected a command"),
    ([{"on": "held", "command": ["ok", 3]}], "hooks[0].command[1]", "expected a string"),
    ([{"on": "held", "command": "x", "timeout": 0}], "hooks[0].timeout", "expected a number from 0.001 to 3,600 s"),
    ([{"on": "held", "command": "x", "timeout": True}], "hooks[0].timeout", "expected a number"),
    ([{"on": "held", "command": "x", "after_failures": 2}], "hooks[0].after_failures", "backoff events only"),
    ([{"on": "backoff", "command": "x", "after_failures": 0}], "hooks[0].after_failures", "from 1 to 1,000,000"),
    ([{"on": "held", "command": "x", "profiles": ["Not Valid!"]}], "hooks[0].profiles[0]", "not a valid profile"),
    ([{"on": "held", "command": "x", "name": "a"}, {"on": "held", "command": "y", "name": "a"}], "hooks[1].name",
     "duplicate"),
    ([{"on": [], "command": "x"}], "hooks[0].on", "non-empty"),
    ("echo hi", "hooks", "expected a list"),
])
def test_invalid_hooks_name_the_key(value, key, words):
    with pytest.raises(ObserveConfigError) as info:
        parse_hooks(value if isinstance(value, list | str) else [value])
    assert info.value.key == key and words in str(info.value) and str(info.value).startswith(key + ": ")
    assert isinstance(info.value, ValueError)


def test_line_of_points_the_config_reader_at_the_offending_line():
    text = "command: [hermes]\nhooks:\n  - on: [held]\n    command: x\n  - on:\n      - held\n      - helds\n" \
           "    command: y\n"
    node = yaml.compose(text)
    hooks_node = next(v for k, v in node.value if k.value == "hooks")
    with pytest.raises(ObserveConfigError) as info:
        parse_hooks(yaml.safe_load(text)["hooks"])
    assert info.value.path == ("hooks", 1, "on", 1)
    assert line_of(hooks_node, info.value.path[1:]) == 7


# --------------------------------------------------------------------------- matching and environment


def test_matching_is_by_type_profile_and_failures():
    h = Hook("h", frozenset({"held", "backoff"}), ("x",), profiles=frozenset({"coder"}), after_failures=3)
    assert matches(h, event("held"))
    assert not matches(h, event("held", profile="writer"))
    assert not matches(h, event("ready"))
    assert not matches(h, event("daemon_started", profile=None))
    assert not matches(h, event("backoff", failures=2)) and matches(h, event("backoff", failures=3))
    assert matches(Hook("all", frozenset({"*"}), ("x",)), event("daemon_started", profile=None))


def test_after_failures_fires_once_per_streak():
    runner = HookRunner((Hook("h", frozenset({"backoff"}), ("x",), after_failures=3),), env={}, root=Path("/"))
    fired = [bool(runner.wanted(event("backoff", failures=n))) for n in (1, 2, 3, 4, 5)]
    assert fired == [False, False, True, False, False]
    assert runner.wanted(event("backoff", profile="writer", failures=3))  # another profile's streak
    runner.wanted(event("recovered"))
    assert [bool(runner.wanted(event("backoff", failures=n))) for n in (1, 2, 3, 4)] == [False, False, True, False]
    runner.wanted(event("backoff", failures=1))  # a new streak without a recovered event in between
    assert runner.wanted(event("backoff", failures=3))


def test_the_environment_carries_the_event_but_no_platform_variable_or_tag():
    base = {**BASE_ENV, "TELEGRAM_BOT_TOKEN": "123:secret", "DISCORD_BOT_TOKEN": "zzz", "NOTIFY_SOCKET": "/run/x",
            "WATCHDOG_USEC": "1", "HERMESD_ROOT": "/r", "HERMESD_PROFILE": "coder", "HERMESD_EVENT_TYPE": "stale",
            "OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    ev = event("held", kind="credential_conflict", message="telegram bot_token ab12cd is held by writer",
               claim={"platform": "telegram", "kind": "bot_token", "fingerprint": "ab12cd"}, holder="writer")
    env = hook_environment(base, ev, root=Path("/srv/hermes"), hook=Hook("page", frozenset({"*"}), ("x",)))
    assert "123:secret" not in json.dumps(env) and "zzz" not in json.dumps(env)
    for gone in ("TELEGRAM_BOT_TOKEN", "DISCORD_BOT_TOKEN", "NOTIFY_SOCKET", "WATCHDOG_USEC", "HERMESD_ROOT",
                 "HERMESD_PROFILE"):
        assert gone not in env
    assert env["OPENAI_BASE_URL"] == base["OPENAI_BASE_URL"] and env["PATH"] == base["PATH"]
    assert env["HERMESD_EVENT_TYPE"] == "held" and env["HERMESD_EVENT_PROFILE"] == "coder"
    assert env["HERMESD_EVENT_CLAIM_PLATFORM"] == "telegram" and env["HERMESD_EVENT_CLAIM_FINGERPRINT"] == "ab12cd"
    assert env["HERMESD_EVENT_HOLDER"] == "writer" and env["HERMESD_EVENT_SEQ"] == "1"
    assert env["HERMESD_EVENT_TIME"].endswith("+00:00") and "telegram bot_token ab12cd" in env["HERMESD_EVENT_SUMMARY"]
    assert json.loads(env["HERMESD_EVENT_JSON"]) == ev
    assert env["HERMESD_HOOK_NAME"] == "page" and env["HERMESD_HOOK_ROOT"] == "/srv/hermes"
    daemon_wide = hook_environment(base, event("daemon_started", profile=None), root=Path("/"),
                                   hook=Hook("h", frozenset({"*"}), ("x",)))
    assert daemon_wide["HERMESD_EVENT_PROFILE"] == ""


# --------------------------------------------------------------------------- the runner (real processes)


class Loop:
    """Measures how late a 5 ms ticker runs while hooks do their thing: the loop's latency."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.ticks = 0

    async def tick(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            self.worst = max(self.worst, time.perf_counter() - t0 - 0.005)
            self.ticks += 1


def runner_for(hooks, **kw):
    return HookRunner(tuple(hooks), env=BASE_ENV, root=Path("/tmp"), **kw)


async def until(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_fires_once_per_matching_event_with_the_event_on_stdin(tmp_path, caplog):
    out = tmp_path / "got.jsonl"
    cmd = f"cat >> {out}; echo logged $HERMESD_EVENT_TYPE"
    hooks = [Hook("rec", frozenset({"held", "recovered"}), ("/bin/sh", "-c", cmd)),
             Hook("other", frozenset({"backoff"}), ("/bin/sh", "-c", f"echo backoff >> {out}.b"))]

    async def main():
        runner = runner_for(hooks)
        evs = [event("held", seq=1), event("ready", seq=2), event("recovered", seq=3), event("held", seq=4,
                                                                                              profile="writer")]
        assert [runner.fire(e) for e in evs] == [1, 0, 1, 1]
        await until(lambda: runner.counts["ok"] == 3 and runner.running == 0)
        return evs

    with caplog.at_level(logging.INFO, logger="hermesd"):
        evs = asyncio.run(main())
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(g["seq"] for g in got) == [1, 3, 4]
    assert all(g == next(e for e in evs if e["seq"] == g["seq"]) for g in got)
    assert not Path(f"{out}.b").exists()
    assert sum("hook rec (held coder): logged held" in r.getMessage() for r in caplog.records) == 1


def test_a_hanging_hook_is_killed_with_its_group_at_its_timeout_and_the_loop_does_not_wait(tmp_path, caplog):
    pids = tmp_path / "pids"
    # The hook and a grandchild in its session both ignore SIGTERM; only SIGKILL of the group ends them.
    cmd = f"trap '' TERM; sleep 60 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    hook = Hook("hang", frozenset({"held"}), ("/bin/sh", "-c", cmd), timeout=0.5)

    async def main():
        loop = Loop()
        stop = asyncio.Event()
        ticker = asyncio.create_task(loop.tick(stop))
        runner = runner_for([hook])
        t0 = time.monotonic()
        runner.fire(event())
        respawn_delay = await _respawn_delay()
        await until(lambda: runner.counts["timeout"] == 1, timeout=10)
        took = time.monotonic() - t0
        stop.set()
        await ticker
        return took, loop.worst, respawn_delay

    with caplog.at_level(logging.INFO, logger="hermesd"):
        took, worst, respawn = asyncio.run(main())
    print(f"\nhanging hook: ended after {took:.2f}s (timeout 0.5s); loop latency worst {worst * 1000:.1f} ms;"
          f" a callback queued after fire() ran {respawn * 1000:.2f} ms later")
    # Bounds that tell "never waits for the hook" from "waits for it" (the hook hangs for 60 s and is
    # killed at 0.5 s), not timing targets: the figures above are printed, and the benchmark owns speed.
    assert 0.5 <= took < 5.0
    assert worst < 0.4 and respawn < 0.4
    for pid in (int(p) for p in pids.read_text().split()):
        wait_for(lambda pid=pid: not _alive(pid), timeout=5, what=f"PID {pid} gone")
    assert any("still running after 0.5s; killed its process group" in r.getMessage() for r in caplog.records)


async def _respawn_delay() -> float:
    """How long a callback the loop schedules right after fire() waits: what a respawn would wait."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    t0 = time.perf_counter()
    loop.call_soon(lambda: done.set_result(time.perf_counter() - t0))
    return await done


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_slow_hooks_do_not_delay_the_loop(tmp_path):
    """Eight hooks that sleep 1.5 s, four at a time: the loop keeps ticking on time throughout.

    Measured: what fire() costs the caller (a respawn done right after emitting waits only this), what a
    callback queued after fire() waits (the spawns run first), and one posix_spawn."""
    hook = Hook("slow", frozenset({"held"}), ("/bin/sh", "-c", "sleep 1.5; echo done"), timeout=10)

    async def main():
        loop = Loop()
        stop = asyncio.Event()
        ticker = asyncio.create_task(loop.tick(stop))
        runner = runner_for([hook])
        fire_cost, delays = [], []
        for i in range(8):
            t0 = time.perf_counter()
            runner.fire(event(seq=i))
            fire_cost.append(time.perf_counter() - t0)
            delays.append(await _respawn_delay())
        assert runner.running == 4 and runner.queued == 4
        await until(lambda: runner.counts["ok"] == 8, timeout=15)
        stop.set()
        await ticker
        return loop, fire_cost, delays, None

    from unittest import mock

    spawns = []
    start = HookRunner._start

    def timed(self, *a):
        t0 = time.perf_counter()
        start(self, *a)
        spawns.append(time.perf_counter() - t0)

    with mock.patch.object(HookRunner, "_start", timed):
        loop, fire_cost, delays, _ = asyncio.run(main())
    spawns.sort()
    print(f"\nslow hooks: fire() {max(fire_cost) * 1e6:.0f} µs worst; a callback queued after fire() waited"
          f" {max(delays) * 1000:.2f} ms worst; one spawn {spawns[len(spawns) // 2] * 1000:.2f} ms median;"
          f" loop latency worst {loop.worst * 1000:.1f} ms over {loop.ticks} ticks of 5 ms")
    # A fire() that waited for its hook would cost 1.5 s and stop the ticks for the 3 s the hooks run;
    # the bounds tell those apart with margin (two suites at once on 2 cores gave a 63 ms worst tick).
    assert loop.ticks > 50 and loop.worst < 0.75 and max(delays) < 0.5 and max(fire_cost) < 0.5


def test_output_is_bounded_and_logged_line_by_line(caplog):
    hook = Hook("chatty", frozenset({"held"}), ("/bin/sh", "-c", "yes 'a line of output' | head -c 2000000; exit 3"))

    async def main():
        runner = runner_for([hook], output_limit=1000)
        runner.fire(event())
        await until(lambda: sum(runner.counts.values()) == 1, timeout=10)
        return runner

    with caplog.at_level(logging.INFO, logger="hermesd"):
        runner = asyncio.run(main())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("hook chatty")]
    body = [m for m in lines if m.endswith("a line of output")]
    assert 40 <= len(body) <= 60  # 1000 bytes of 19-byte lines
    assert any("output cut at 1000 bytes" in m for m in lines)
    assert runner.counts["failed"] + runner.counts["ok"] == 1


def test_concurrency_cap_queue_and_drops(tmp_path):
    log_file = tmp_path / "spans"
    cmd = f"echo start $(date +%s.%N) >> {log_file}; sleep 0.3; echo end $(date +%s.%N) >> {log_file}"
    hook = Hook("cap", frozenset({"held"}), ("/bin/sh", "-c", cmd))

    async def main():
        runner = runner_for([hook], max_concurrent=2, max_queued=3)
        for i in range(7):
            runner.fire(event(seq=i))
        assert (runner.running, runner.queued, runner.counts["dropped"]) == (0, 5, 2)  # fire() only queues
        await asyncio.sleep(0)
        assert (runner.running, runner.queued, runner.counts["dropped"]) == (2, 3, 2)
        await until(lambda: runner.counts["ok"] == 5, timeout=10)

    asyncio.run(main())
    points = sorted((float(t), 1 if what == "start" else -1) for what, t in
                    (line.split() for line in log_file.read_text().splitlines()))
    running = peak = 0
    for _t, d in points:
        running += d
        peak = max(peak, running)
    assert peak == 2 and len(points) == 10


def test_exit_codes_spawn_errors_and_a_reaper_that_gets_there_first(caplog):
    """The daemon's reaper calls waitpid(-1) for every child: the runner takes the status it hands over."""
    hooks = [Hook("fails", frozenset({"held"}), ("/bin/sh", "-c", "exit 7")),
             Hook("missing", frozenset({"held"}), ("no-such-command-hermesd",)),
             Hook("ok", frozenset({"held"}), ("/bin/true",))]

    async def main():
        loop = asyncio.get_running_loop()
        runner = runner_for(hooks)
        handed = []

        def reap():  # what the daemon's handle_sigchld does
            while True:
                try:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    return
                if pid == 0:
                    return
                handed.append(runner.child_reaped(pid, status))

        loop.add_signal_handler(signal.SIGCHLD, reap)
        try:
            runner.fire(event())
            await until(lambda: sum(runner.counts.values()) == 3, timeout=10)
        finally:
            loop.remove_signal_handler(signal.SIGCHLD)
        return runner, handed

    with caplog.at_level(logging.INFO, logger="hermesd"):
        runner, handed = asyncio.run(main())
    assert runner.counts["spawn_error"] == 1 and runner.counts["unknown"] == 0
    assert runner.counts["failed"] == 1 and runner.counts["ok"] == 1
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "command 'no-such-command-hermesd' not found on PATH" in messages
    assert "hook fails (held coder): exit 7" in messages
    assert all(handed)


def test_aclose_waits_a_little_then_kills_what_still_runs(tmp_path):
    marker = tmp_path / "pid"
    hook = Hook("long", frozenset({"held"}), ("/bin/sh", "-c", f"echo $$ > {marker}; exec sleep 60"), timeout=60)

    async def main():
        runner = runner_for([hook])
        runner.fire(event())
        await until(lambda: marker.exists() and marker.read_text().strip())
        t0 = time.monotonic()
        await runner.aclose(grace=0.3)
        return time.monotonic() - t0, runner

    took, runner = asyncio.run(main())
    assert took < 3 and runner.counts["timeout"] == 1 and runner.running == 0
    assert not _alive(int(marker.read_text()))
    assert runner.fire(event()) == 0  # closed


# --------------------------------------------------------------------------- the README's recipes

DESKTOP = 'notify-send --app-name=hermesd "hermesd: ${HERMESD_EVENT_PROFILE:-hermesd}" "$HERMESD_EVENT_SUMMARY"'
EMAIL = ('printf "%s\\n\\n%s\\n" "$HERMESD_EVENT_SUMMARY" "$HERMESD_EVENT_JSON"'
         ' | mail -s "hermesd on $(hostname): $HERMESD_EVENT_TYPE ${HERMESD_EVENT_PROFILE}" ops@example.org')
BOT = ('HERMES_HOME="$HERMESD_HOOK_ROOT" hermes -p ops send --to telegram --subject "hermesd on $(hostname)"'
       ' "${HERMESD_EVENT_PROFILE:-hermesd}: $HERMESD_EVENT_SUMMARY"')


def test_desktop_and_email_recipes_pass_the_event_as_documented(tmp_path):
    """Stand-ins for notify-send and mail record what the recipes hand them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record"
    for tool in ("notify-send", "mail"):
        script = bin_dir / tool
        script.write_text(f'#!/bin/sh\n{{ echo "{tool}"; for a in "$@"; do echo "arg:$a"; done; '
                          f'if [ "{tool}" = mail ]; then sed "s/^/in:/"; fi; }} >> {record}\nexit 0\n')
        script.chmod(0o755)
    hooks = parse_hooks([{"on": ["held"], "command": DESKTOP, "name": "desktop"},
                         {"on": ["held"], "command": EMAIL, "name": "email"}])

    async def main():
        runner = HookRunner(hooks, env={**BASE_ENV, "PATH": f"{bin_dir}:{BASE_ENV['PATH']}"}, root=Path("/srv/h"))
        runner.fire(event("held", message="gateway exit 78: configuration error"))
        await until(lambda: runner.counts["ok"] == 2)

    asyncio.run(main())
    text = record.read_text()
    assert "arg:hermesd: coder" in text and "arg:held (config_error): gateway exit 78: configuration error" in text
    assert "arg:-s" in text and "held coder" in text and "arg:ops@example.org" in text
    assert "in:held (config_error)" in text and 'in:{"ts":' in text


@pytest.mark.skipif(not (Path(__file__).resolve().parents[2] / ".venv" / "bin" / "hermes").exists(),
                    reason="hermes-agent is not installed in .venv")
def test_bot_recipe_reaches_hermes_send_for_the_named_profile(tmp_path, caplog):
    """The real `hermes -p ops send` runs from the hook and reads the ops profile (no platform is configured
    here, so it stops before any network: the point is the plumbing, and that no token came from hermesd)."""
    root = tmp_path / "root"
    (root / "profiles" / "ops").mkdir(parents=True)
    venv_bin = Path(__file__).resolve().parents[2] / ".venv" / "bin"
    env = {**BASE_ENV, "PATH": f"{venv_bin}:{BASE_ENV['PATH']}", "HOME": str(tmp_path),
           "TELEGRAM_BOT_TOKEN": "999:must-not-reach-the-hook"}
    hooks = parse_hooks([{"on": ["held"], "command": BOT, "name": "bot", "timeout": 60}])

    async def main():
        runner = HookRunner(hooks, env=env, root=root)
        runner.fire(event("held"))
        await until(lambda: sum(runner.counts.values()) == 1, timeout=90)
        return runner

    with caplog.at_level(logging.INFO, logger="hermesd"):
        runner = asyncio.run(main())
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert runner.counts["failed"] == 1, messages
    assert "hermes send: Platform 'telegram' is not configured" in messages
    assert "must-not-reach" not in messages

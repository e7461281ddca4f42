"""One profile's files made hostile (issue 15): a FIFO, a link to /dev/zero, a YAML alias bomb, a
100,000-line .env, a 50 MB config.yaml. The daemon serves every profile, so none of these may stall
it: the hostile profile is held with a reason naming the file, while another profile's SIGKILLed
gateway comes back at once and ``ping``/``status`` keep answering.

Each kind runs twice: planted before the daemon starts (start-up reads it), and planted under a
running gateway while the file is re-read again and again (every 50 ms a new copy or a touch), which
is when a slow reader would hold the loop. The respawn delay is measured from the SIGKILL to the new
child's appearance in ``/proc`` (see ``helpers.respawn_after_kill``) and reported in the table notes.
"""

from __future__ import annotations

import os
import statistics
import threading
from pathlib import Path

import pytest

from tests.faults.helpers import (
    converged,
    gateway_leaders,
    lost_on_failure,
    respawn_after_kill,
    rss_bytes,
    timed,
)
from tests.harness import wait_for, write_config

# 612 bytes of YAML that expand to 9**9 (387 million) strings.
BILLION_LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)]
) + "\n"

ENV_LINES = 100_000
BIG_CONFIG_BYTES = 50 * 1024 * 1024

# kind -> (file it replaces, words the hold reason must contain besides the path)
KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fifo": ("config.yaml", ("FIFO",)),
    "dev_zero": ("config.yaml", ("symbolic link",)),  # refused as a link before /dev/zero is ever opened
    "billion_laughs": ("config.yaml", ("nodes",)),
    "env_100k_lines": (".env", (f":{ENV_LINES}:",)),
    "config_50mb": ("config.yaml", ("limit",)),
}

KILLS = 3  # SIGKILLs of the healthy profile's gateway per phase
RESPAWN_LIMIT_S = 1.0  # "promptly": the fake gateway respawns in a few ms on an idle machine
PING_LIMIT_S = 2.0
RSS_LIMIT = 200 * 1024 * 1024  # a daemon reading /dev/zero grew by ~360 MB/s


def homes(root: Path) -> dict[str, Path]:
    return {"default": root, "coder": root / "profiles" / "coder", "writer": root / "profiles" / "writer"}


def _big_config(path: Path) -> None:
    """A valid 50 MB YAML mapping (its content must be real: a sparse file fails fast on any reader)."""
    line = b"".join(b"key_%07d: some configuration value for this key\n" % i for i in range(1000))
    with path.open("wb") as fh:
        written = 0
        block = 0
        while written < BIG_CONFIG_BYTES:
            chunk = line.replace(b"key_", b"k%04d_" % block)
            fh.write(chunk)
            written += len(chunk)
            block += 1


def _env_100k(path: Path) -> None:
    """99,999 good assignments and a last line that is not one (so the profile is held naming line 100000)."""
    body = "".join(f"K{i:05d}=v\n" for i in range(ENV_LINES - 1))
    path.write_text(body + "this is not an assignment\n")
    os.chmod(path, 0o600)


def plant(kind: str, home: Path, source: Path) -> Path:
    """Put the hostile file in ``home`` (large ones are made once in ``source`` and linked in)."""
    name = KINDS[kind][0]
    target = home / name
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "dev_zero":
        target.symlink_to("/dev/zero")
    elif kind == "billion_laughs":
        target.write_text(BILLION_LAUGHS)
    else:
        if not source.exists():
            (_env_100k if kind == "env_100k_lines" else _big_config)(source)
        os.link(source, target)
    return target


def poke(path: Path) -> None:
    """Make the watcher re-read ``path`` without changing what it is (a touch of the file or link)."""
    os.utime(path, follow_symlinks=False)


class Poker:
    """Re-triggers the hostile file's reading every 50 ms while the healthy profile is killed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                poke(self.path)
                self.count += 1
            except OSError:
                pass

    def __enter__(self) -> Poker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def kill_healthy(d, name: str, faults, delays: list[float], pings: list[float]) -> None:
    """SIGKILL ``name``'s healthy gateway ``KILLS`` times; each must be respawned promptly."""
    for i in range(KILLS):
        # healthy_after is 0.3 s: wait until the gateway has run that long, so the restart is immediate
        row = wait_for(lambda: (r := d.row(name))["state"] == "running" and (r["uptime_s"] or 0) >= 0.4 and r, 15,
                       what=f"{name} running for 0.4 s")
        faults.inject()
        got = respawn_after_kill(d.proc.pid, row["pid"])
        seconds, reply = timed(d.ping)
        pings.append(seconds)
        ok = got is not None and got[1] <= RESPAWN_LIMIT_S and bool(reply.get("ready"))
        if got is not None:
            delays.append(got[1])
        faults.check(ok, f"kill #{i + 1} of {name}: respawn {'none' if got is None else f'{got[1] * 1000:.0f} ms'}, "
                         f"ping {seconds * 1000:.0f} ms")
        assert ok, (got, reply)


def assert_held_naming(d, name: str, path: Path, words: tuple[str, ...], faults, timeout: float = 10.0) -> dict:
    def held():
        r = d.row(name)
        return r if r["state"] == "held" and str(path) in (r["reason"] or "") else None

    with lost_on_failure(faults, f"{name} not held naming {path}"):
        row = wait_for(held, timeout, what=f"{name} held naming {path}")
    ok = all(w in row["reason"] for w in words) and row["pid"] is None and name not in gateway_leaders(d.root)
    faults.check(ok, f"{name} row: {row['state']}: {row['reason']}")
    assert ok, row
    return row


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_hostile_profile_file(fake_root, hermesd_factory, faults, tmp_path, kind):
    name, words = KINDS[kind]
    h = homes(fake_root)
    write_config(fake_root, restart={"initial_delay": 0.2, "max_delay": 2.0, "healthy_after": 0.3, "jitter": 0.0})
    source = tmp_path / f"hostile-{kind}"
    delays: list[float] = []
    pings: list[float] = []

    # 1. At start-up: the hostile file is there before the daemon reads anything.
    target = plant(kind, h["writer"], source)
    faults.inject()
    with lost_on_failure(faults, f"start-up with a hostile {name}"):
        ready_s, d = timed(hermesd_factory, fake_root)
        d.wait_running("default", "coder")
    assert_held_naming(d, "writer", target, words, faults)
    text = d.cli("status")
    assert f"writer: held: config_error: {target}" in text.stdout and "Traceback" not in text.stderr, text
    kill_healthy(d, "coder", faults, delays, pings)

    # 2. Fixed: the profile runs. Then the file turns hostile again under its running gateway, and
    # is re-read every 50 ms while the healthy profile is killed: a clear problem in status, the
    # running gateway untouched (last good files), and no stall of anyone else.
    target.unlink()
    writer_pid = d.wait_running("writer")["writer"]
    plant(kind, h["writer"], source)
    faults.inject()
    def reported():
        r = d.row("writer")
        return r if any(str(target) in p for p in r["file_problems"]) else None

    with lost_on_failure(faults, f"a hostile {name} under a running gateway"):
        row = wait_for(reported, 10, what="writer's hostile file in status")
    ok = row["state"] == "running" and row["pid"] == writer_pid and all(w in " ".join(row["file_problems"])
                                                                        for w in words)
    faults.check(ok, f"writer under a hostile edit: {row['state']} {row['file_problems']}")
    assert ok, row
    with Poker(target) as poker:
        kill_healthy(d, "coder", faults, delays, pings)
        status_s, _doc = timed(d.status)
    assert poker.count >= 3
    # Its gateway dies now: it is held, naming the file, never restarted on files it cannot read.
    faults.inject()
    os.kill(writer_pid, 9)
    assert_held_naming(d, "writer", target, words, faults)
    rss = rss_bytes(d.proc.pid)
    if rss >= RSS_LIMIT:
        faults.note(f"daemon RSS {rss >> 20} MiB after the hostile reads")
    faults.note(f"daemon ready in {ready_s:.2f}s; respawn of coder median {statistics.median(delays) * 1000:.1f} ms, "
                f"max {max(delays) * 1000:.1f} ms over {len(delays)} kills; ping max {max(pings) * 1000:.0f} ms; "
                f"status {status_s * 1000:.0f} ms; {poker.count} re-reads of the hostile file; RSS {rss >> 20} MiB")
    assert rss < RSS_LIMIT
    assert max(pings) < PING_LIMIT_S

    # 3. Nothing else moved, and a stop still stops everything.
    converged(d, fake_root, {"default", "coder"}, faults)
    out = d.cli("stop")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out
    assert d.proc.wait(20) == 0
    assert d.close() == []


# --------------------------------------------------------------------------- a token where a key should be

TOKENS = {  # profile -> (secret, the .env text that carries it)
    "default": ("7210345678:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw1", 'TELEGRAM_BOT_TOKEN="7210345678:AAHdqTcvCH1vGWJx'
                "fSeofSAs0K5PALDsaw1\nOTHER=1\n"),
    "coder": ("123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0", "# pasted from the chat\n"
              "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0 (from BotFather)\n"),
    "writer": ("987654321:AAGkz3bT1nq8yVhM4XcRlP0sWuEoJdFi2Qa", "export 987654321:AAGkz3bT1nq8yVhM4XcRlP0sWuEoJdFi2Qa "
               "is my token\n"),
}


def test_token_mistaken_for_a_key_never_leaks(fake_root, hermesd_factory, faults):
    """A bot token pasted where a key should be (``123456789:AAH… (from BotFather)``): each profile is
    held naming the file and line, and no part of any token reaches status, doctor, profile show,
    hermesd's log or any file under ``.hermesd``."""
    h = homes(fake_root)
    for name, (_secret, text) in TOKENS.items():
        (h[name] / ".env").write_text(text)
        os.chmod(h[name] / ".env", 0o600)
        faults.inject()
    d = hermesd_factory(fake_root)
    for name in TOKENS:
        with lost_on_failure(faults, f"{name} not held"):
            row = d.wait_state(name, "held")
        faults.check(f"{h[name] / '.env'}:" in row["reason"], f"{name}: {row['reason']}")
    outputs = {
        " ".join(args): d.cli(*args)
        for args in (("status",), ("status", "--json"), ("doctor",), ("doctor", "--json"))
    }
    for name in TOKENS:
        outputs[f"profile show {name}"] = d.cli("profile", "show", name, "--root", str(fake_root))
        outputs[f"profile show {name} --json"] = d.cli("profile", "show", name, "--json", "--root", str(fake_root))
    assert d.cli("stop").returncode == 0 and d.proc.wait(20) == 0  # everything saved and logged
    places = {f"hermesd {k}": o.stdout + o.stderr for k, o in outputs.items()}
    places["hermesd's log"] = d.log.read_text(errors="replace")
    for path in (fake_root / ".hermesd").rglob("*"):
        if path.is_file():
            places[str(path)] = path.read_text(errors="replace")
    assert any("held" in t for t in places.values()) and str(fake_root / ".hermesd" / "state.json") in places
    leaks = sorted({(where, name) for where, text in places.items() for name, (secret, _t) in TOKENS.items()
                    if secret.split(":")[1][:12] in text or secret.split(":")[0] in text})
    faults.inject()
    faults.check(not leaks, f"token found in: {leaks}")
    assert not leaks, leaks
    assert all("Traceback" not in o.stderr for o in outputs.values())

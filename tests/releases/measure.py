"""Measurements of the gateway contract, one function per fact hermesd relies on.

Each function starts real gateways in a :class:`~tests.releases.gateway.Sandbox`, observes, stops
them and returns plain data (JSON-able), so the same code feeds the contract tests (which compare
it with ``profiles.upstream.releases``) and the findings table (``HERMESD_CONTRACT_REPORT``).
Every wait is a deadline with polling; a fact that cannot be observed is returned as ``None``.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from profiles.upstream import files as gf
from profiles.upstream.process import proc_start_time
from supervisor.hermes.release import interpreter_argv
from tests.releases.gateway import Run, Sandbox, poll, read_json

# Deadlines. Offline with no platform, upstream 0.19.0 writes gateway.pid ~0.7 s after spawn and is
# running right after; the first start of a fresh environment compiles bytecode, hence the margin.
START = 60.0
EXIT = 75.0  # upstream's own stop timeout is max(60, drain + 30)


def flag_accepted(sb: Sandbox) -> dict[str, Any]:
    """Does ``gateway run`` accept ``--external-supervisor``? From ``--help`` and from a real start."""
    help_text = subprocess.run(
        [str(sb.hermes), "gateway", "run", "--help"], capture_output=True, text=True, timeout=60,
        env=sb.env(sb.root, "default"), cwd=str(sb.home_dir),
    ).stdout
    run = sb.start(flag=True)
    poll(lambda: (run.home / "gateway.pid").exists() or run.proc.poll() is not None, START)
    code = run.proc.poll()
    out = run.text()
    if code is None:
        sb.stop(run)
    return {
        "in_help": "--external-supervisor" in help_text,
        "start_exit": code,  # None: it started
        "unrecognized": "unrecognized arguments" in out,
    }


def lifecycle(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """Start (default profile, no platform, offline): pid record, running, state keys, heartbeat; then SIGUSR1."""
    run = sb.start(flag=flag)
    facts: dict[str, Any] = {}
    got_pid = run.wait_pid_file(START)
    facts["pid_file_s"] = round(time.monotonic() - run.started, 2) if got_pid else None
    raw = (run.home / "gateway.pid").read_text() if got_pid else None
    rec = _json_or_none(raw)
    facts["pid_record"] = {
        "json": isinstance(rec, dict),
        "keys": sorted(rec) if isinstance(rec, dict) else None,
        "kind": rec.get("kind") if isinstance(rec, dict) else None,
        "start_time_matches_proc": isinstance(rec, dict) and rec.get("start_time") == proc_start_time(run.pid)
        and rec.get("start_time") is not None,
        "argv_tail": rec.get("argv", [])[-3:] if isinstance(rec, dict) else None,
    } if raw is not None else None
    st = run.wait_state("running", timeout=START)
    facts["running_s"] = round(time.monotonic() - run.started, 2) if st else None
    facts["running_state"] = _state_summary(st)
    facts["state_keys"] = sorted(st) if st else None
    hb_path = run.home / "state" / "gateway.heartbeat"
    beat = poll(lambda: read_json(hb_path), 10) if st else None
    facts["heartbeat"] = {"keys": sorted(beat) if isinstance(beat, dict) else None,
                          "pid_matches": isinstance(beat, dict) and beat.get("pid") == run.pid} if beat else None
    facts["lock_file"] = (run.home / "gateway.lock").exists()
    # SIGUSR1: upstream drains and asks to be restarted
    run.send(signal.SIGUSR1)
    code = run.wait_exit(EXIT)
    facts["sigusr1"] = {"exit": code, **_final(run)}
    if code is None:
        sb.stop(run)
    return facts


def sigterm(sb: Sandbox, *, flag: bool, marker: bool) -> dict[str, Any]:
    """SIGTERM once running, with or without the planned-stop marker: exit code and the state left."""
    run = sb.start(flag=flag)
    if not run.wait_state("running", timeout=START):
        return {"exit": "never running", "output": run.text()[-2000:]}
    _wait_startup_tail(run, sb)
    if marker:
        gf.write_planned_stop_marker(run.home, run.pid, proc_start_time(run.pid))
    t0 = time.monotonic()
    run.send(signal.SIGTERM)
    code = run.wait_exit(EXIT)
    return {"exit": code, "exit_s": round(time.monotonic() - t0, 2), **_final(run)}


def _wait_startup_tail(run: Run, sb: Sandbox, timeout: float = 15.0) -> None:
    """Wait until upstream's start-up has returned, not just written "running".

    The gateway writes ``gateway_state: running`` inside ``runner.start()``; a SIGTERM before that
    call returns takes the "start-up aborted" path, which exits 0 whatever the marker says (the
    cause of this test's occasional exit 0). The first thing ``start_gateway`` does after
    ``start()`` returns is start the cron scheduler, which logs "cron scheduler started"; releases
    that do not log it are measured as before once the deadline passes.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "cron scheduler started" in run.text() + _logs(sb.root):
            return
        time.sleep(0.05)


def marker_without_signal(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """Does the gateway notice the planned-stop marker by itself (no signal) and stop?"""
    run = sb.start(flag=flag)
    if not run.wait_state("running", timeout=START):
        return {"exit": "never running"}
    gf.write_planned_stop_marker(run.home, run.pid, proc_start_time(run.pid))
    # polled every 0.5 s; the shutdown that follows takes seconds on a loaded machine (0.22.2: up to ~10 s)
    code = run.wait_exit(30)
    out = {"exit": code, **_final(run)}
    if code is None:
        out["marker_left"] = (run.home / gf.PLANNED_STOP_MARKER).exists()
        sb.stop(run)
    return out


def fatal_port_in_use(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """The API server as the only platform, on a port something else already listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        _write_env(sb.root, API_SERVER_ENABLED="true", API_SERVER_HOST="127.0.0.1",
                   API_SERVER_PORT=str(port), API_SERVER_KEY="k" * 48)
        run = sb.start(flag=flag)
        code = _exit_or_running(run, 45)
        return _outcome(sb, run, code)


def multiplex(sb: Sandbox, *, flag: bool, env_false: bool) -> dict[str, Any]:
    """Root config ``gateway.multiplex_profiles: true`` and a named profile enabling the API server.

    A multiplexing default gateway refuses this config (a secondary profile may not bind a port);
    one that serves only its own profile reaches ``running``. ``env_false``: hermesd's
    GATEWAY_MULTIPLEX_PROFILES=false in the child environment (else the variable is absent).
    """
    (sb.root / "config.yaml").write_text("multiplex_profiles: true\ngateway:\n  multiplex_profiles: true\n")
    _write_env(sb.root / "profiles" / "coder", API_SERVER_ENABLED="true", API_SERVER_HOST="127.0.0.1",
               API_SERVER_PORT=str(_free_port()), API_SERVER_KEY="k" * 48)
    run = sb.start(flag=flag, drop_env=() if env_false else ("GATEWAY_MULTIPLEX_PROFILES",))
    code = _exit_or_running(run, 45)
    out = _outcome(sb, run, code)
    out["served_profiles"] = out.pop("_served_profiles", None)
    return out


def profile_flag(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """``hermes -p coder gateway run`` with HERMES_HOME=<root>/profiles/coder (hermesd's way), and with
    HERMES_HOME=<root> (does ``-p`` alone select ``<root>/profiles/coder``?)."""
    out: dict[str, Any] = {}
    for label, home in (("home_is_profile", sb.profile_home("coder")), ("home_is_root", sb.root)):
        run = sb.start("coder", flag=flag, home=home)
        out[label] = _where_it_ran(sb, run)
    return out


def sticky_active_profile(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """``<root>/active_profile`` says ``coder``: where does the default child (HERMES_HOME=<root>) run?"""
    (sb.root / "active_profile").write_text("coder\n")
    out: dict[str, Any] = {}
    for label, kwargs in (
        ("with_s6", {}),
        ("without_s6", {"drop_env": ("HERMES_S6_SUPERVISED_CHILD",)}),
        ("p_default_without_s6", {"drop_env": ("HERMES_S6_SUPERVISED_CHILD",), "p_flag": True}),
    ):
        run = sb.start("default", flag=flag, **kwargs)
        out[label] = _where_it_ran(sb, run)
    return out


def respawn_storm(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """Six starts in the ledger already: is the start delayed without HERMES_GATEWAY_MAX_STARTS, and not with =0?"""
    out: dict[str, Any] = {}
    for label, drop in (("max_starts_0", ()), ("unset", ("HERMES_GATEWAY_MAX_STARTS",))):
        now = time.time()
        (sb.root / "gateway-starts.log").write_text("".join(f"{now - i:.3f}\n" for i in range(6)))
        run = sb.start(flag=flag, drop_env=drop)
        got = run.wait_pid_file(8)
        out[label] = {"pid_file_within_8s": got, "storm_logged": "respawn storm" in run.text() + _logs(sb.root)}
        sb.stop(run) if got else run.send(signal.SIGKILL)
        run.wait_exit(10)
        _clear_runtime(sb.root)
    return out


# Platforms whose SDK the gateway installs on first use (tools/lazy_deps.py in every release), with
# the .env line that enables them: the probe uses the first whose SDK is not installed yet.
_LAZY_PLATFORMS = (
    ("telegram", "TELEGRAM_BOT_TOKEN", "123456:" + "A" * 35),
    ("discord", "DISCORD_BOT_TOKEN", "x" * 59),
)


def lazy_installs(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """A platform token without the platform's SDK installed: does the gateway try to install it?

    Installs are caught, never performed: a fake ``uv`` first on PATH records its call and fails,
    and pip gets no index (PIP_NO_INDEX, no config file), so the release environment is unchanged.
    ``{"skipped": why}`` when every candidate SDK is already installed (nothing left to observe).
    """
    interp = interpreter_argv([str(sb.hermes)], None) or [str(sb.hermes)]
    platform = next((p for p in _LAZY_PLATFORMS if subprocess.run(
        [*interp, "-c", f"import importlib.util,sys; sys.exit(importlib.util.find_spec({p[0]!r}) is not None)"],
        capture_output=True, timeout=60).returncode == 0), None)
    if platform is None:
        return {"skipped": f"the SDKs of {[p[0] for p in _LAZY_PLATFORMS]} are all installed in {interp[0]}'s "
                           "environment: no lazy install left to observe"}
    name, variable, token = platform
    fake_bin = sb.root.parent / "fakebin"
    fake_bin.mkdir(exist_ok=True)
    calls = sb.root.parent / "uv-calls"
    uv = fake_bin / "uv"
    uv.write_text(f"#!/bin/sh\necho \"$@\" >> '{calls}'\nexit 1\n")
    uv.chmod(0o755)
    _write_env(sb.root, **{variable: token})
    out: dict[str, Any] = {"platform": name}
    for label, drop in (("disabled", ()), ("unset", ("HERMES_DISABLE_LAZY_INSTALLS",))):
        calls.unlink(missing_ok=True)
        env = {"PATH": f"{fake_bin}:{sb.env(sb.root, 'default')['PATH']}", "PIP_NO_INDEX": "1",
               "PIP_CONFIG_FILE": "/dev/null", "PIP_FIND_LINKS": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
        run = sb.start(flag=flag, drop_env=drop, extra_env=env)
        st = run.wait_state("running", timeout=START)
        # the install is attempted while adapters are created, before "running"; allow 2 s of slack
        tried = poll(lambda: calls.exists(), 2 if st else 0.1) or calls.exists()
        out[label] = {"running": bool(st), "install_attempted": bool(tried),
                      "uv_args": calls.read_text().split() if calls.exists() else None}
        sb.stop(run)
        _clear_runtime(sb.root)
    return out


def heartbeat_interval(run: Run, timeout: float) -> float | None:
    """Seconds between two heartbeat writes of a running gateway (``None``: no rewrite within ``timeout``)."""
    path = run.home / "state" / "gateway.heartbeat"
    first = poll(lambda: _mtime(path), 10)
    if first is None:
        return None
    second = poll(lambda: (m := _mtime(path)) is not None and m > first and m, timeout, interval=0.2)
    return round(second - first, 1) if second else None


# -- helpers


def _logs(home: Path) -> str:
    """Upstream's own log files in ``home/logs`` (gateway.log, errors.log, ...), concatenated."""
    texts = []
    for path in sorted((home / "logs").glob("*.log")):
        with contextlib.suppress(OSError):
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _json_or_none(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.strip()


def _state_summary(st: dict[str, Any] | None) -> dict[str, Any] | None:
    if not st:
        return None
    return {k: st.get(k) for k in ("gateway_state", "exit_reason", "restart_requested") if k in st}


def _final(run: Run) -> dict[str, Any]:
    st = run.state()
    return {"state": st.get("gateway_state"), "exit_reason": st.get("exit_reason"),
            "restart_requested": st.get("restart_requested"),
            "pid_file_left": (run.home / "gateway.pid").exists()}


def _write_env(home: Path, **values: str) -> None:
    path = home / ".env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exit_or_running(run: Run, timeout: float) -> int | None:
    """Exit code if the gateway exits within ``timeout``; ``None`` if it is (still) running then."""
    def check() -> bool:
        return run.proc.poll() is not None or (
            run.state().get("gateway_state") == "running" and run.state().get("pid") == run.pid
        )

    poll(check, timeout)
    if run.proc.poll() is None:  # running: give a delayed fatal exit a moment to show
        run.wait_exit(3)
    return run.proc.poll()


def _outcome(sb: Sandbox, run: Run, code: int | None) -> dict[str, Any]:
    st = run.state()
    out = {"exit": code, "state": st.get("gateway_state"), "exit_reason": (st.get("exit_reason") or "")[:160],
           "platforms": {k: (v or {}).get("state") for k, v in (st.get("platforms") or {}).items()},
           "_served_profiles": st.get("served_profiles")}
    if code is None:
        sb.stop(run)
    return out


def _where_it_ran(sb: Sandbox, run: Run) -> dict[str, Any]:
    """Which folder got this run's gateway.pid, and how it ended."""
    candidates = {"root": sb.root, "coder": sb.profile_home("coder"), "writer": sb.profile_home("writer")}

    def found() -> str | None:
        for name, home in candidates.items():
            rec = read_json(home / "gateway.pid")
            if isinstance(rec, dict) and rec.get("pid") == run.pid:
                return name
        return "exited" if run.proc.poll() is not None else None

    where = poll(found, START)
    out = {"pid_file_in": where, "exit": run.proc.poll()}
    if where == "exited":
        out["output"] = run.text()[-300:]
    if run.proc.poll() is None:
        run.home = sb.root if where == "root" else sb.profile_home(where or "coder")
        sb.stop(run)
    _clear_runtime(sb.root)
    for name in ("coder", "writer"):
        _clear_runtime(sb.profile_home(name))
    return out


def _clear_runtime(home: Path) -> None:
    for name in ("gateway.pid", "gateway_state.json", gf.PLANNED_STOP_MARKER):
        (home / name).unlink(missing_ok=True)


# -- the multiplex-default line (each measured on every release: earlier ones answer "no such thing")


def named_alone(sb: Sandbox, *, flag: bool, force: bool) -> dict[str, Any]:
    """``hermes -p coder gateway run`` with no ``gateway.standalone`` in coder's config.yaml: does it run,
    and what does it serve? (The multiplex-default line refuses it with 78 unless ``--force``, and with
    ``--force`` it serves the default profile as well.)"""
    (sb.profile_home("coder") / "config.yaml").write_text("model: {}\n")
    run = sb.start("coder", flag=flag, force=force)
    code = _exit_or_running(run, 45)
    out = _outcome(sb, run, code) if code is not None else {"exit": None}
    if code is None:
        st = run.state()
        out = {"exit": None, "state": st.get("gateway_state"), "served_profiles": st.get("served_profiles")}
        sb.stop(run)
    else:
        out["output"] = run.text()[-300:]
        out["refused_own_gateway"] = "does not get a gateway of its own" in run.text()
    out.pop("_served_profiles", None)
    return out


def standalone_identity(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """coder with ``gateway.standalone: true`` (and the sandbox's ``--force``): what its state file says it
    serves, and what its ``gateway.sock`` answers to ``identify`` (asked with hermesd's own client)."""
    from supervisor.processes import gatewaysock

    sb.standalone("coder")
    run = sb.start("coder", flag=flag)
    st = run.wait_state("running", timeout=START)
    if not st:
        return {"running": False, "output": run.text()[-500:]}
    sock = run.home / "gateway.sock"
    out: dict[str, Any] = {"running": True, "served_profiles": st.get("served_profiles"),
                           "socket": sock.exists() and not sock.is_symlink()}
    if out["socket"]:
        try:
            ident = gatewaysock.identify(run.home, timeout=5.0)
            out["identify"] = {"pid_matches": ident.pid == run.pid,
                               "start_time_matches": ident.start_time == proc_start_time(run.pid),
                               "home_matches": ident.hermes_home == str(run.home), "profile": ident.profile,
                               "served": list(ident.served) if ident.served is not None else None,
                               "supervisor": ident.supervisor}
        except gatewaysock.GatewaySockError as exc:
            out["identify"] = {"error": str(exc)}
    sb.stop(run)
    return out


def default_folds(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """The default profile's gateway as hermesd starts it (GATEWAY_MULTIPLEX_PROFILES=false), with two named
    profiles that do not opt out: what it serves, and whether the root's config.yaml was rewritten."""
    for name in ("coder", "writer"):
        (sb.profile_home(name) / "config.yaml").write_text("model: {}\n")
    config = sb.root / "config.yaml"
    config.write_text("model: {}\n# a comment the user wrote\n")
    before = config.read_bytes()
    run = sb.start(flag=flag)
    st = run.wait_state("running", timeout=START)
    out: dict[str, Any] = {"running": bool(st), "served_profiles": (st or {}).get("served_profiles")}
    poll(lambda: config.read_bytes() != before, 3)  # the rewrite lands right after the decision
    after = config.read_bytes()
    out["config_rewritten"] = after != before
    out["config_after"] = after.decode("utf-8", "replace")[:300]
    out["marker"] = (sb.root / ".multiplex_opt_out_rewritten").exists()
    sb.stop(run)
    return out


def attach(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """A multiplexing default gateway runs (config says so, no environment override); then coder's own
    gateway starts the way hermesd would start it without ``--force``: how does it end?"""
    (sb.root / "config.yaml").write_text("gateway:\n  multiplex_profiles: true\n")
    (sb.profile_home("coder") / "config.yaml").write_text("model: {}\n")
    host = sb.start(flag=flag, force=False, drop_env=("GATEWAY_MULTIPLEX_PROFILES",))
    st = host.wait_state("running", timeout=START)
    if not st:
        return {"host_running": False, "output": host.text()[-500:]}
    served = poll(lambda: host.state().get("served_profiles"), 5)
    run = sb.start("coder", flag=flag, force=False, drop_env=("GATEWAY_MULTIPLEX_PROFILES",))
    t0 = time.monotonic()
    code = _exit_or_running(run, 45)
    out = {"host_running": True, "host_serves": served, "exit": code, "exit_s": round(time.monotonic() - t0, 1),
           "state_names_it": run.state().get("pid") == run.pid, "output": run.text()[-400:]}
    if code is None:
        sb.stop(run)
    sb.stop(host)
    return out


def empty_folder(sb: Sandbox, *, flag: bool) -> dict[str, Any]:
    """``profiles/empty`` with no file in it: is it a profile ``hermes -p empty gateway run`` accepts?"""
    (sb.root / "profiles" / "empty").mkdir()
    run = sb.start("empty", flag=flag)
    code = _exit_or_running(run, 45)
    out = {"exit": code, "output": run.text()[-300:]}
    if code is None:
        sb.stop(run)
    return out

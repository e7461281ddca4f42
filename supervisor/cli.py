"""``hermesd``: the command line. Thin: parse, call one function, print, return an exit code.

Imports stay lazy so that ``hermesd status`` starts fast: the daemon, asyncio and yaml are
loaded only by the commands that need them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

EXAMPLES = """\
examples:
  hermesd run                      supervise every profile in the foreground
  hermesd start                    the same, as a background daemon
  hermesd status --json            per-profile health for scripts
  hermesd restart coder            restart one profile, touching no other
  hermesd logs coder -f            follow one profile's gateway output
"""


class UserError(Exception):
    """A mistake the user can fix; printed as one line, no traceback."""


def _root(args: argparse.Namespace) -> Path:
    if getattr(args, "root", None):
        return Path(args.root).expanduser().resolve()
    from profiles.paths import resolve_root

    return resolve_root().resolve()


def _layout(args: argparse.Namespace) -> Any:
    from supervisor.layout import Layout

    return Layout(_root(args))


def _request(args: argparse.Namespace, payload: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    from supervisor import control

    try:
        return control.request(_layout(args).socket_checked(), payload, timeout=timeout)
    except control.DaemonNotRunning:
        raise UserError(f"hermesd is not running for {_root(args)} (start it with 'hermesd start')") from None
    except control.ControlError as exc:
        raise UserError(str(exc)) from None


def _daemon_up(args: argparse.Namespace) -> dict[str, Any] | None:
    from supervisor import control

    try:
        sock = _layout(args).socket_checked()
    except FileNotFoundError:
        return None
    try:
        return control.request(sock, {"cmd": "ping"}, timeout=2.0)
    except (control.DaemonNotRunning, control.ControlError, OSError, ValueError):
        return None


# --------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace) -> int:
    from supervisor import watch_inotify

    if watch_inotify.available() and "ssl" not in sys.modules:
        # The daemon never speaks TLS, yet asyncio imports ssl eagerly: 0.9 MiB resident for
        # nothing. Only the watchfiles watcher (used where inotify is missing) needs it.
        sys.modules["ssl"] = None  # type: ignore[assignment]
    import asyncio
    import logging

    from supervisor.daemon import AlreadyRunning, Daemon

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s hermesd[%(process)d] %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    root = _root(args)
    if not root.is_dir():
        raise UserError(f"root {root} does not exist or is not a directory")
    daemon = Daemon(root)
    try:
        daemon.acquire()
    except AlreadyRunning as exc:
        raise UserError(str(exc)) from None
    try:
        return asyncio.run(daemon.run())
    finally:
        daemon.release()


def cmd_start(args: argparse.Namespace) -> int:
    if args.profiles:
        return _per_profile(args, "start")
    import subprocess

    root = _root(args)
    layout = _layout(args)
    up = _daemon_up(args)
    if up:
        print(f"hermesd already running for {root} (PID {up['pid']})")
        return 0
    if not root.is_dir():
        raise UserError(f"root {root} does not exist or is not a directory")
    layout.ensure()
    with open(layout.daemon_log, "ab") as logf:
        os.chmod(layout.daemon_log, 0o600)
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", "--root", str(root)],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
            cwd="/",
        )
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            from supervisor.logs import tail_lines

            tail = b"".join(tail_lines(layout.daemon_log, 5)).decode("utf-8", "replace").rstrip()
            raise UserError(f"hermesd exited with {proc.returncode} during start-up; last log lines:\n{tail}")
        up = _daemon_up(args)
        if up and up.get("ready"):
            print(f"hermesd started for {root} (PID {up['pid']}); log: {layout.daemon_log}")
            return 0
        time.sleep(0.05)
    raise UserError(f"hermesd did not become ready within {args.timeout:.0f}s; see {layout.daemon_log}")


def cmd_stop(args: argparse.Namespace) -> int:
    if args.profiles:
        return _per_profile(args, "stop")
    up = _daemon_up(args)
    if not up:
        print(f"hermesd is not running for {_root(args)}")
        return 0
    from profiles.progress import Progress

    shown = Progress("stopping gateways")
    total = len(_running_pids(args)) if shown.enabled else 0
    _request(args, {"cmd": "shutdown", "keep_children": args.keep_children})
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline:
            if _daemon_up(args) is None and not _pid_alive(up["pid"]):
                shown.done()
                print("hermesd stopped" + (" (gateways left running)" if args.keep_children else ""))
                return 0
            if shown.enabled and total and not args.keep_children:
                shown.update(total - len(_running_pids(args)), total, "stopped")
            time.sleep(0.05)
    finally:
        shown.done()
    raise UserError(f"hermesd (PID {up['pid']}) still running after {args.timeout:.0f}s")


def _running_pids(args: argparse.Namespace) -> list[int]:
    """PIDs of the gateways the daemon still has (empty when it no longer answers)."""
    from supervisor import control

    try:
        doc = control.request(_layout(args).socket_checked(), {"cmd": "status"}, timeout=2.0)["status"]
    except (control.DaemonNotRunning, control.ControlError, OSError, ValueError):
        return []
    return [r["pid"] for r in doc["profiles"] if r.get("pid")]


def _pid_alive(pid: int) -> bool:
    from profiles.gateway_files import proc_start_time

    return proc_start_time(pid) is not None  # a zombie (exited, unreaped) counts as gone


def cmd_restart(args: argparse.Namespace) -> int:
    return _per_profile(args, "restart", graceful=args.graceful)


def _per_profile(args: argparse.Namespace, cmd: str, **extra: Any) -> int:
    """Send ``cmd`` for each named profile, printing the daemon's one-word answer."""
    for name in args.profiles:
        print(f"{name}: {_request(args, {'cmd': cmd, 'profile': name, **extra})['result']}")
    return 0


def _status_document(args: argparse.Namespace) -> dict[str, Any]:
    from supervisor import status

    up = _daemon_up(args)
    doc = _request(args, {"cmd": "status"})["status"] if up else status.offline_document(_root(args))
    if args.profiles:
        from profiles.names import normalize_name

        wanted = {normalize_name(p) for p in args.profiles}
        unknown = wanted - {r["name"] for r in doc["profiles"]}
        if unknown:
            raise UserError(f"no such profile: {', '.join(sorted(unknown))}")
        doc["profiles"] = [r for r in doc["profiles"] if r["name"] in wanted]
    return doc


def cmd_status(args: argparse.Namespace) -> int:
    from supervisor import status

    if args.watch:
        return _watch_status(args)
    doc = _status_document(args)
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
    else:
        print(status.render(doc, color=_use_color(sys.stdout)))
    return status.exit_code(doc)


def _use_color(stream: Any) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _watch_status(args: argparse.Namespace) -> int:
    """Redraw the table in place until interrupted; on a pipe, print one snapshot per interval."""
    from supervisor import status

    tty = sys.stdout.isatty()
    try:
        while True:
            doc = _status_document(args)
            text = json.dumps(doc, sort_keys=True) if args.json else status.render(doc, color=_use_color(sys.stdout))
            if tty:
                sys.stdout.write("\x1b[H\x1b[2J" + text + f"\n\n(every {args.interval:g}s; Ctrl-C to quit)\n")
            else:
                sys.stdout.write(text + "\n\n")
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from supervisor import logs

    layout = _layout(args)
    if args.profile:
        from profiles.names import normalize_name

        path = layout.child_log(normalize_name(args.profile))
    else:
        path = layout.daemon_log
    if not path.exists() and not args.follow:
        raise UserError(f"no log yet at {path}")
    sys.stdout.write(b"".join(logs.tail_lines(path, args.lines)).decode("utf-8", "replace"))
    sys.stdout.flush()
    if args.follow:
        try:
            logs.follow(path)
        except KeyboardInterrupt:
            return 0
    return 0


def cmd_ping(args: argparse.Namespace) -> int:
    up = _daemon_up(args)
    if not up:
        print(f"hermesd is not running for {_root(args)}", file=sys.stderr)
        return 1
    print(f"hermesd running for {up['root']} (PID {up['pid']}{', ready' if up.get('ready') else ''})")
    return 0


def cmd_reload(args: argparse.Namespace) -> int:
    reply = _request(args, {"cmd": "reload"})
    if reply.get("config_problem"):
        print(f"warning: {reply['config_problem']}", file=sys.stderr)
    print("reloaded")
    return 0


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    from supervisor import __version__

    parser = argparse.ArgumentParser(
        prog="hermesd",
        description="Process-per-profile supervisor for Hermes Agent gateways.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"hermesd {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, func: Any, help_: str, example: str) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name, help=help_, description=help_, epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("--root", help="Hermes root (default: resolved from HERMES_HOME as upstream does)")
        p.set_defaults(func=func)
        return p

    p = add("run", cmd_run, "supervise every profile of the root in the foreground", "hermesd run --root ~/.hermes")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")

    p = add("start", cmd_start, "start the daemon in the background, or start named profiles", "hermesd start coder")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the daemon to be ready")

    p = add("stop", cmd_stop, "stop named profiles (kept stopped), or every child and the daemon", "hermesd stop coder")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    p.add_argument("--keep-children", action="store_true", help="exit the daemon but leave gateways running")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the daemon to exit")

    p = add("restart", cmd_restart, "restart named profiles; no other child is touched", "hermesd restart coder")
    p.add_argument("profiles", nargs="+", metavar="PROFILE")
    p.add_argument("--graceful", action="store_true", help="drain first (SIGUSR1; the gateway exits 75)")

    p = add("status", cmd_status, "per-profile health (exit 0 only when all that should run are running)",
            "hermesd status --json")
    p.add_argument("profiles", nargs="*", metavar="PROFILE")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--watch", action="store_true", help="redraw live until interrupted (plain when piped)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between redraws with --watch")

    p = add("logs", cmd_logs, "show a profile's gateway output (no profile: the daemon's own log)",
            "hermesd logs coder -f -n 100")
    p.add_argument("profile", nargs="?")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines, across rotations")
    p.add_argument("-n", "--lines", type=int, default=50, help="lines of history to show first")

    add("ping", cmd_ping, "exit 0 if the daemon for this root is up", "hermesd ping --root ~/.hermes")
    add("reload", cmd_reload, "re-read hermesd.yaml and rescan the profiles folder", "hermesd reload")

    from profiles.cli import register as register_profile
    from supervisor import completion, doctor, export, probe, service

    doctor.register(sub)
    probe.register(sub)
    export.register(sub)  # also the hidden `_planned-stop` helper (systemd ExecStop, Kubernetes preStop)
    service.register(sub)
    completion.register(sub)
    register_profile(sub, stop_gateway=_stop_gateway_for_profile_cli)
    return parser


def _stop_gateway_for_profile_cli(name: str, home: Path) -> None:
    """Used by ``hermesd profile delete|rename --stop``: through the daemon when it runs."""
    from supervisor import control
    from supervisor.layout import Layout
    from supervisor.stopper import stop_unsupervised

    root = home.parent.parent if home.parent.name == "profiles" else home
    try:
        control.request(Layout(root.resolve()).socket, {"cmd": "stop", "profile": name}, timeout=10.0)
    except control.DaemonNotRunning:
        stop_unsupervised(home)
        return
    from profiles.gateway_files import live_gateway

    deadline = time.monotonic() + 120
    while live_gateway(home) is not None:
        if time.monotonic() > deadline:
            raise UserError(f"the gateway of profile {name} did not stop within 120s")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from profiles.errors import ProfileError
    from supervisor.layout import UnsafeFolderError

    try:
        return int(args.func(args) or 0)
    except (UserError, ProfileError, UnsafeFolderError) as exc:
        print(f"hermesd: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130

"""``hermesd install-service``: run hermesd under the machine's service manager.

One renderer per manager produces both the unit that ``install-service`` writes for this
machine (absolute ``hermesd`` path, ``--root``, ``PATH``, a stop timeout computed from the
profiles) and the generic examples in ``contrib/`` (a test keeps those in sync), so the
reasoning in the unit's comments is written once.

The decisive setting is systemd's ``KillMode=process``. hermesd's promise is that gateways
survive a hermesd crash and are adopted by the next hermesd: each child runs in its own session
and carries ``HERMESD_ROOT``/``HERMESD_PROFILE`` in its environment. With the default
``KillMode=control-group`` (or ``mixed``) systemd would kill every gateway of the cgroup
whenever hermesd crashed or was restarted, and adoption would never get a chance. With
``process`` systemd signals hermesd alone; on ``systemctl stop`` hermesd's own SIGTERM handler
stops every gateway cleanly, which is the only stop they should ever get.

Safety: a file this command writes carries :data:`MARK`; an existing file without it was
written by someone else and is never overwritten.
"""

from __future__ import annotations

import os
import plistlib
import pwd
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from profiles.discovery import profiles_to_serve
from profiles.fileio import atomic_write_text
from profiles.snapshot import read_profile
from supervisor import config as config_mod
from supervisor import doctor
from supervisor.control.client import Client, ControlError, DaemonNotAnswering
from supervisor.exits import EXIT_USAGE, UserError
from supervisor.layout import Layout
from supervisor.processes.program import hermesd_command

MARK = "written by hermesd install-service"
UNIT_NAME = "hermesd.service"
TEMPLATE_UNIT_NAME = "hermesd@.service"
LAUNCHD_LABEL = "ai.hermesd"
PLIST_NAME = f"{LAUNCHD_LABEL}.plist"
WATCHDOG_SEC = 60
SYSTEMD_BOOTED = "/run/systemd/system"  # exists exactly when systemd is PID 1 (sd_booted(3))
STOP_MARGIN = 30  # seconds on top of the slowest gateway's own stop timeout
DEFAULT_STOP_TIMEOUT = 300  # for the generic contrib units, which cannot see the profiles


# --------------------------------------------------------------------------- what to run


def stop_budget(root: Path) -> int:
    """Seconds hermesd may need to stop: the slowest profile's stop timeout plus a margin.

    hermesd stops its children in parallel, so the budget is the maximum, not the sum. A broken
    hermesd.yaml or profile file only falls back to upstream's default for that profile.
    """
    try:
        cfg = config_mod.load(Layout(root).config)
    except config_mod.ConfigError:
        cfg = config_mod.Config()
    try:
        served = profiles_to_serve(True, root=root)
    except OSError:
        served = []
    slowest = max((cfg.stop_timeout_for(name, read_profile(name, Path(home), b"budget").drain_s)
                   for name, home in served), default=60.0)
    return int(max(90.0, slowest + STOP_MARGIN) + 0.999)


# --------------------------------------------------------------------------- systemd


def systemd_quote(arg: str) -> str:
    """One ExecStart= word: ``%`` and ``$`` are specifier/variable syntax there, spaces split words."""
    text = arg.replace("%", "%%").replace("$", "$$")
    if text and not any(c in text for c in ' \t"\'\\;'):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def env_line(name: str, value: str) -> str:
    body = f"{name}={value}".replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"')
    return f'Environment="{body}"'


def render_systemd_unit(
    command: Sequence[str],
    *,
    root: Path | None,
    system: bool,
    user: str | None = None,
    stop_timeout: int = DEFAULT_STOP_TIMEOUT,
    path_env: str | None = None,
    marker: bool = True,
) -> str:
    """hermesd's unit. ``user`` (system units only) may be a specifier such as ``%i``."""
    exec_start = " ".join(systemd_quote(a) for a in [*command, "run", *(["--root", str(root)] if root else [])])
    if marker:
        head = [f"# {MARK}: edit freely, then remove this line so it is never overwritten", "#"]
    elif system:
        head = ["# Generic system unit, one instance per account: systemctl enable --now hermesd@alice",
                "# serves /home/alice/.hermes (hermesd resolves the root from the account's HOME).",
                "# 'hermesd install-service --system' writes one for this machine with absolute paths.", "#"]
    else:
        head = ["# Generic user unit: ~/.config/systemd/user/hermesd.service, then",
                "# 'systemctl --user enable --now hermesd' and 'loginctl enable-linger' to outlive logins.",
                "# 'hermesd install-service' writes one for this machine with absolute paths.", "#"]
    lines = [
        *head,
        "# hermesd: one Hermes Agent gateway process per profile, supervised.",
        "#",
        "# What happens to the gateways:",
        "#  * hermesd crashes, or the watchdog finds it frozen: KillMode=process makes systemd kill",
        "#    hermesd's own process only. The gateways run in their own sessions and keep serving;",
        "#    Restart=on-failure starts a new hermesd, which finds them by their HERMESD_ROOT and",
        "#    HERMESD_PROFILE environment tags and adopts them: no gateway is restarted.",
        "#  * systemctl stop: SIGTERM to hermesd alone; hermesd stops every gateway cleanly (planned-stop",
        "#    marker, SIGTERM, SIGKILL after that profile's stop timeout) and exits 0.",
        "#  * systemctl restart: a stop, then a start: every gateway is stopped cleanly and started again.",
        "#    To replace hermesd without touching the gateways (an upgrade), run",
        "#    'hermesd stop --keep-children' and then 'systemctl start' this unit: the new hermesd adopts them.",
        "# KillMode=control-group (the default) or mixed would instead kill every gateway whenever",
        "# hermesd died or restarted, and nothing would be left to adopt.",
        "",
        "[Unit]",
        "Description=hermesd: Hermes Agent gateways, one process per profile",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "# hermesd sends READY=1 once its control socket is up and its first gateways are spawned,",
        "# STATUS= with a per-state summary, and WATCHDOG=1 from its event loop.",
        "Type=notify",
        "NotifyAccess=main",
        f"WatchdogSec={WATCHDOG_SEC}",
    ]
    if system and user:
        lines.append(f"User={user}")
    if path_env:
        lines += ["# The PATH install-service ran with, so 'hermes' resolves as it did then.",
                  env_line("PATH", path_env)]
    lines += [
        f"ExecStart={exec_start}",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "KillMode=process",
        "# A cgroup v2 subtree of hermesd's own: one cgroup per profile for limits (memory.max, pids.max,",
        "# cpu.weight) and cgroup.kill on stops. On systemd >= 254 also add DelegateSubgroup=supervisor",
        "# (hermesd then starts in that leaf; older systemd rejects the key, so it is not written here).",
        "Delegate=yes",
        "KillSignal=SIGTERM",
        "Restart=on-failure",
        "RestartSec=5",
        f"# Exit {EXIT_USAGE} is a usage or configuration error (or another hermesd already holds the root):",
        "# restarting cannot fix it.",
        f"RestartPreventExitStatus={EXIT_USAGE}",
        "# At least the slowest gateway's stop timeout (max(60, agent.restart_drain_timeout + 30) s, or",
        "# stop_timeout in hermesd.yaml) plus a margin: hermesd stops its gateways in parallel. If it",
        "# runs out, systemd SIGKILLs hermesd only and the gateways still stopping finish on their own.",
        f"TimeoutStopSec={stop_timeout}",
        "",
        "[Install]",
        f"WantedBy={'multi-user.target' if system else 'default.target'}",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- launchd


def render_launchd_plist(
    command: Sequence[str],
    *,
    root: Path | None,
    log_path: Path,
    stop_timeout: int = DEFAULT_STOP_TIMEOUT,
    path_env: str | None = None,
    marker: bool = True,
) -> str:
    """hermesd's LaunchAgent.

    ``AbandonProcessGroup``: launchd kills the job's process group when hermesd exits; the
    gateways have their own sessions anyway, and this says explicitly that they must survive a
    hermesd crash to be adopted. ``KeepAlive.SuccessfulExit=false`` restarts hermesd after a
    failure but not after a clean stop. launchd cannot exempt exit 2 (configuration error)
    from restarts; ``ThrottleInterval`` keeps such a loop slow.
    """
    doc: dict[str, object] = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": [*command, "run", *(["--root", str(root)] if root else [])],
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 10,
        "AbandonProcessGroup": True,
        "ExitTimeOut": stop_timeout,
        "WorkingDirectory": "/",
        "StandardOutPath": str(log_path),
        "StandardErrorPath": str(log_path),
    }
    if path_env:
        doc["EnvironmentVariables"] = {"PATH": path_env}
    text = plistlib.dumps(doc, sort_keys=False).decode("utf-8")
    notes = [
        "hermesd: one Hermes Agent gateway process per profile, supervised.",
        "If hermesd crashes, launchd restarts it and the new hermesd adopts the running gateways;",
        "'launchctl bootout' (a stop) sends SIGTERM and hermesd stops every gateway cleanly within",
        "ExitTimeOut seconds (the slowest gateway's stop timeout plus a margin).",
    ]
    if marker:
        notes.insert(0, MARK)
    comment = "<!--\n" + "\n".join(f"  {n}" for n in notes) + "\n-->\n"
    head, _, rest = text.partition("<plist")
    return head + comment + "<plist" + rest


# --------------------------------------------------------------------------- contrib/


def contrib_files() -> dict[str, str]:
    """The generic examples shipped in ``contrib/`` (relative path -> text), from the same renderers."""
    return {
        f"systemd/{UNIT_NAME}": render_systemd_unit(["hermesd"], root=None, system=False, marker=False),
        f"systemd/{TEMPLATE_UNIT_NAME}": render_systemd_unit(["hermesd"], root=None, system=True, user="%i",
                                                             marker=False),
        f"launchd/{PLIST_NAME}": render_launchd_plist(["/usr/local/bin/hermesd"], root=None,
                                                      log_path=Path("/tmp/hermesd.log"), marker=False),
    }


def write_contrib(directory: Path) -> None:
    """Regenerate ``contrib/`` (``python -c 'from supervisor.ops.service import write_contrib as w; w("contrib")'``)."""
    for rel, text in contrib_files().items():
        path = Path(directory) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


# --------------------------------------------------------------------------- command


def _default_target(manager: str, system: bool) -> Path:
    if manager == "launchd":
        return Path("/Library/LaunchDaemons") if system else Path.home() / "Library/LaunchAgents"
    return Path("/etc/systemd/system") if system else Path.home() / ".config/systemd/user"


def _owner(path: Path) -> str | None:
    try:
        return pwd.getpwuid(path.stat().st_uid).pw_name
    except (KeyError, OSError):
        return None


def _under_service(pid: int) -> bool:
    """Whether ``pid`` already runs inside hermesd's own unit (a re-install, not a second hermesd)."""
    try:
        return UNIT_NAME in Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return False


def _written_by_us(path: Path) -> bool:
    try:
        return MARK in path.read_text(encoding="utf-8", errors="replace")[:4096]
    except OSError:
        return False


def _unreachable(ctl: Sequence[str]) -> str | None:
    """What ``systemctl`` says when it cannot reach the manager it would enable the unit with (None: it answers).

    Asked before anything is written. ``systemctl --user`` talks to the account's own manager over
    the bus a login session provides (under ``$XDG_RUNTIME_DIR``); after ``sudo -i``, ``su`` or in
    cron there is none, and systemctl says no more than "Failed to connect to bus: No medium found".
    """
    try:
        done = subprocess.run([*ctl, "show", "--property=Version"], capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    return " ".join((done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").split())


def _no_manager(why: str, root: Path, *, account: str, system: bool) -> str:
    """The refusal when no manager answers: what happened, and the next step."""
    tool = "systemctl" if system else "systemctl --user"
    if system or not os.path.isdir(SYSTEMD_BOOTED):
        where = ("this machine does not run systemd (no " + SYSTEMD_BOOTED + ")" if not os.path.isdir(SYSTEMD_BOOTED)
                 else "it refuses you (a --system unit needs root)")
        return (f"systemd does not answer ({tool}: {why}): {where}; nothing was written. Write the unit with "
                "--dest DIR and install it by hand where systemd runs, or run 'hermesd run' under this machine's "
                "own service manager (contrib/ has an s6 service)")
    session = ("XDG_RUNTIME_DIR is not set here, as after 'sudo -i', 'su' or in cron" if not os.environ.get(
        "XDG_RUNTIME_DIR") else f"XDG_RUNTIME_DIR={os.environ['XDG_RUNTIME_DIR']} holds no manager of yours")
    sudo = "" if os.geteuid() == 0 else "sudo "
    run_as = "" if account == "root" else f" --run-as {shlex.quote(account)}"
    return (f"no systemd user manager answers for {account} ({tool}: {why}; {session}); nothing was written. "
            "A user unit needs the account's own systemd, which a login session starts. Either install a system "
            f"unit instead: {sudo}hermesd install-service --system{run_as} --root {shlex.quote(str(root))}; or run "
            f"'loginctl enable-linger {account}' (its manager then runs from boot and outlives logins), log in as "
            f"{account} (ssh or a console, not su) and run 'hermesd install-service' again")


def install_service(root: Path, *, manager: str | None = None, system: bool = False, run_as: str | None = None,
                    dest: str | None = None, dry_run: bool = False) -> int:
    """``hermesd install-service``: write hermesd's unit (or launchd agent) for ``root``, enable and start it.

    ``dest``: write the unit there instead and enable nothing; ``dry_run``: print it and the commands.
    """
    manager = manager or ("launchd" if sys.platform == "darwin" else "systemd")
    if run_as and not system:
        raise UserError("--run-as names the account of a --system unit; a user unit runs as you")
    target_dir = Path(dest).expanduser() if dest else _default_target(manager, system)
    command = hermesd_command()
    budget = stop_budget(root)
    path_env = os.environ.get("PATH")
    if manager == "systemd":
        user = run_as or (_owner(root) if system else None)
        text = render_systemd_unit(command, root=root, system=system, user=None if user == "root" else user,
                                   stop_timeout=budget, path_env=path_env)
        path = target_dir / UNIT_NAME
        ctl = ["systemctl"] if system else ["systemctl", "--user"]
        steps = [[*ctl, "daemon-reload"], [*ctl, "enable", "--now", UNIT_NAME]]
    else:
        if system:
            raise UserError("--system is for systemd; on macOS hermesd runs as a LaunchAgent of its user")
        log_path = Path.home() / "Library/Logs/hermesd.log"
        text = render_launchd_plist(command, root=root, log_path=log_path, stop_timeout=budget, path_env=path_env)
        path = target_dir / PLIST_NAME
        domain = f"gui/{os.getuid()}"
        steps = [["launchctl", "bootout", domain, str(path)], ["launchctl", "bootstrap", domain, str(path)]]
    if path.exists() and not _written_by_us(path):
        raise UserError(f"refusing to overwrite {path}: it was not written by hermesd install-service "
                        "(move it away, or choose another place with --dest)")

    # Upstream hermes-gateway*.service / ai.hermes.gateway*.plist units that would run a gateway of
    # this root beside hermesd, each with its fix (the doctor's own check, reused).
    warnings = [f"{f.message}; fix: {f.fix}" for f in doctor.diagnose(root) if f.code == "upstream_service_installed"]
    try:
        up = Client(Layout(root)).ping(wait=2.0)
    except (DaemonNotAnswering, ControlError, OSError, ValueError):
        up = None
    if up and not _under_service(int(up["pid"])):
        warnings.append(f"hermesd is already running for {root} (PID {up['pid']}) outside the service manager; "
                        "run 'hermesd stop --keep-children' first, so the service's hermesd adopts the gateways")
    account = os.environ.get("USER") or _owner(Path.home()) or "$USER"
    run_steps = not dry_run and not dest and shutil.which(steps[0][0]) is not None
    if run_steps and manager == "systemd":
        why = _unreachable(ctl)
        if why is not None:
            raise UserError(_no_manager(why, root, account=account, system=system))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if manager == "systemd" and not system and not Path(f"/var/lib/systemd/linger/{account}").exists():
        print(f"note: a user service stops when you log out unless lingering is on: loginctl enable-linger {account}",
              file=sys.stderr)

    if dry_run:
        print(f"# would write {path}")
        sys.stdout.write(text)
        for step in steps:
            print(f"# would run: {' '.join(step)}")
        return 0

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text, mode=0o644)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc}" + (" (a --system unit needs root)" if system else "")) from None
    print(f"wrote {path}")
    if not run_steps:
        print("to start it: " + " && ".join(" ".join(s) for s in steps[1 if manager == "launchd" else 0:]))
        return 0

    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0 and not (manager == "launchd" and step[1] == "bootout"):  # bootout: not loaded yet
            why = done.stderr.strip() or done.stdout.strip()
            raise UserError(f"{' '.join(step)} failed ({done.returncode}): {why}")
    print(f"hermesd service enabled and started ({' '.join(steps[-1])})")
    return 0

"""``hermesd doctor``: everything wrong with a root, found before it bites.

Each problem becomes one :class:`Finding` with a stable ``code`` so scripts can match on it,
a severity (``error`` means hermesd will hold a profile, run it wrongly, or not run at all;
``warning`` means something silently does not do what its file says; ``info`` is context),
the profile it concerns (``None`` for the root as a whole) and a fix a person can apply.

Why a separate, read-only pass rather than the daemon's own logs: most of these mistakes
never produce an error upstream. Two gateways polling one token both report ``running``;
a ``profile_routes`` rule with a typo in its profile name is dropped with one log line; a
``.env`` that sets ``HOME`` silently moves that gateway's credential locks. The only way to
see them is to read every file the way the gateway and hermesd would, and compare.

Rules that matter for every check here:

* Credentials never leave :mod:`profiles.credentials`: findings carry the platform, the lock
  scope and the per-root salted fingerprint, never a value.
* One broken profile never stops the others from being checked.
* Nothing is written, signalled or locked: ``gateway.lock`` is read as a file, never probed
  with ``flock`` (taking it, even briefly, can make a starting gateway fail).
* Imports are lazy: the CLI imports :func:`register` at start-up for every command.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from supervisor.doctor.scan import Finding, Scan

# The severities (supervisor.plan.verdict's, spelled here so that registering the command, which
# every hermesd invocation does, imports nothing else).
ERROR, WARNING, INFO = "error", "warning", "info"
_LAZY = {"RANK": "supervisor.doctor.scan", "Finding": "supervisor.doctor.scan", "Scan": "supervisor.doctor.scan",
         "default_service_dirs": "supervisor.doctor.runtime", "service_profile_name": "supervisor.doctor.runtime"}


def __getattr__(name: str) -> Any:
    """The public names of the check modules, imported on first use (``hermesd status`` never does)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'supervisor.doctor' has no attribute {name!r}")

__all__ = ["RANK", "Finding", "diagnose", "exit_code", "register", "render", "service_profile_name", "to_json"]


def _checks() -> list[Callable[[Scan], None]]:
    """Every check in the order it runs: settings before profiles, verdicts before the details
    that explain them, the kernel's offer last (it forks a probe)."""
    from supervisor.doctor import domains, gateway, routes, runtime, scan, settings, upgrades, verdicts

    return [
        settings.check_hermesd_config, settings.check_hermesd_folder, settings.check_command,
        gateway.check_gateway_interpreter, scan.discover, settings.check_config_profiles, gateway.check_stale_code,
        scan.load_salt, scan.read_profiles, verdicts.check_verdicts, upgrades.check_upgrades,
        routes.check_multiplex_and_routes,
        settings.check_lock_environment, settings.check_env_permissions, runtime.check_runtime_files,
        runtime.check_links,
        runtime.check_services, runtime.check_wrappers, domains.check_kanban, domains.check_isolation,
        domains.check_limits,
    ]


def diagnose(
    root: Path,
    *,
    env: Mapping[str, str] | None = None,
    service_dirs: Sequence[Path] | None = None,
) -> list[Finding]:
    """Every finding for ``root``, errors first.

    ``env`` is the environment hermesd would run with (``os.environ`` by default): it gives
    ``PATH`` for the gateway command, ``HOME`` for the service folders, and the values every
    child inherits. ``service_dirs`` replaces the folders searched for upstream service files
    (systemd user and system, launchd), so tests need not touch the real ones.
    """
    import os

    e = os.environ if env is None else env
    from supervisor.doctor.runtime import default_service_dirs
    from supervisor.doctor.scan import Scan

    dirs = default_service_dirs(e) if service_dirs is None else list(service_dirs)
    s = Scan(Path(root).expanduser().resolve(), e, dirs)
    if not s.root.is_dir():
        s.add(ERROR, "root_missing", None, f"the root {s.root} does not exist or is not a directory",
              "pass the right --root, or set HERMES_HOME")
        return s.findings
    for check in _checks():
        check(s)
    return s.sorted_findings()


# --------------------------------------------------------------------------- output


def render(findings: Sequence[Finding]) -> str:
    """Findings for people: one block per finding, errors first, then a one-line summary."""
    from profiles.printable import printable

    if not findings:
        return "no problems found"
    lines: list[str] = []
    for f in findings:  # messages quote folder names, file lines and gateway reasons: shown escaped
        where = f"[{printable(f.profile)}] " if f.profile is not None else ""
        lines.append(f"{f.severity.upper():7} {where}{f.code}: {printable(f.message)}")
        lines.append(f"        fix: {printable(f.fix)}")
    lines.append(_summary_line(findings))
    return "\n".join(lines)


def to_json(root: Path, findings: Sequence[Finding]) -> dict[str, Any]:
    """The ``--json`` document: the root, every finding, and counts per severity."""
    from dataclasses import asdict

    counts = {s: sum(1 for f in findings if f.severity == s) for s in (ERROR, WARNING, INFO)}
    return {"root": str(root), "ok": counts[ERROR] == 0, "counts": counts, "findings": [asdict(f) for f in findings]}


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when anything is an error, else 0: scripts can gate a deploy on it."""
    return 1 if any(f.severity == ERROR for f in findings) else 0


def register(subparsers: Any) -> None:
    """Add ``hermesd doctor`` to the CLI's subparsers (module import stays cheap)."""
    import argparse

    help_ = "check a root for everything that would stop or confuse its gateways (exit 1 on any error)"
    p = subparsers.add_parser(
        "doctor", help=help_, description=help_, epilog="example:\n  hermesd doctor --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--root", help="Hermes root (default: resolved from HERMES_HOME as upstream does)")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.set_defaults(func=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    import json

    from supervisor.cli.common import root_of

    root = root_of(args)
    findings = diagnose(root)
    if args.json:
        print(json.dumps(to_json(root, findings), indent=2))
    else:
        print(f"hermesd doctor: {root}")
        print(render(findings))
    return exit_code(findings)


def _summary_line(findings: Sequence[Finding]) -> str:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in (ERROR, WARNING, INFO)}
    return ", ".join(f"{n} {s}{'' if n == 1 or s == INFO else 's'}" for s, n in counts.items())

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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from profiles.printable import printable
from supervisor.doctor import (
    config_checks,
    domain_checks,
    gateway,
    route_checks,
    runtime,
    scan,
    upgrades,
    verdicts,
)
from supervisor.doctor.runtime import default_service_dirs, service_profile_name
from supervisor.doctor.scan import RANK, Finding, Scan
from supervisor.plan.verdict import ERROR, INFO, WARNING

__all__ = ["RANK", "Finding", "default_service_dirs", "diagnose", "exit_code", "render", "service_profile_name",
           "to_json"]


def _checks() -> list[Callable[[Scan], None]]:
    """Every check in the order it runs: settings before profiles, verdicts before the details
    that explain them, the kernel's offer last (it forks a probe)."""
    return [
        config_checks.check_hermesd_config, config_checks.check_hermesd_folder, config_checks.check_command,
        gateway.check_gateway_interpreter, scan.discover, config_checks.check_config_profiles,
        gateway.check_stale_code, scan.load_salt, scan.read_profiles, verdicts.check_verdicts,
        upgrades.check_upgrades, route_checks.check_multiplex_and_routes,
        config_checks.check_lock_environment, config_checks.check_unmodelled_platforms,
        config_checks.check_env_permissions, config_checks.check_drain_bounds, runtime.check_runtime_files,
        runtime.check_links, runtime.check_services, runtime.check_wrappers, domain_checks.check_kanban,
        domain_checks.check_isolation, domain_checks.check_limits,
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
    e = os.environ if env is None else env
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
    if not findings:
        return "no problems found"
    lines: list[str] = []
    for f in findings:  # messages quote folder names, file lines and gateway reasons: shown escaped
        where = f"[{printable(f.profile)}] " if f.profile is not None else ""
        lines.append(f"{f.severity.upper():7} {where}{f.code}: {printable(f.message)}")
        lines.append(f"        fix: {printable(f.fix)}")
    lines.append(", ".join(f"{n} {s}{'' if n == 1 or s == INFO else 's'}" for s, n in _counts(findings).items()))
    return "\n".join(lines)


def to_json(root: Path, findings: Sequence[Finding]) -> dict[str, Any]:
    """The ``--json`` document: the root, every finding, and counts per severity."""
    counts = _counts(findings)
    return {"root": str(root), "ok": counts[ERROR] == 0, "counts": counts, "findings": [asdict(f) for f in findings]}


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when anything is an error, else 0: scripts can gate a deploy on it."""
    return 1 if any(f.severity == ERROR for f in findings) else 0


def _counts(findings: Sequence[Finding]) -> dict[str, int]:
    return {s: sum(1 for f in findings if f.severity == s) for s in (ERROR, WARNING, INFO)}

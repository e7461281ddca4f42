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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from profiles.upstream.process import hermes_command
from supervisor.plan.verdict import ERROR, INFO, WARNING, HoldKind

if TYPE_CHECKING:
    import argparse

    from profiles.routes import ProfileRoute
    from profiles.snapshot import ProfileFacts
    from supervisor.config import Config

_RANK = {ERROR: 0, WARNING: 1, INFO: 2}

DEFAULT = "default"
# The three variables that decide where upstream keeps its per-user credential locks.

SYSTEMD_PREFIX = "hermes-gateway"
LAUNCHD_PREFIX = "ai.hermes.gateway"


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: how bad, a stable code, which profile (``None``: root-wide), what, and the fix."""

    severity: str
    code: str
    profile: str | None
    message: str
    fix: str


def service_profile_name(filename: str) -> str | None:
    """The profile an upstream service file is for, from its name alone; ``None`` if not one.

    Upstream names units after the profile: ``hermes-gateway.service`` and
    ``ai.hermes.gateway.plist`` serve the root (``default``), ``hermes-gateway-<name>.service``
    and ``ai.hermes.gateway-<name>.plist`` serve profile ``<name>``.
    """
    for prefix, suffix in ((SYSTEMD_PREFIX, ".service"), (LAUNCHD_PREFIX, ".plist")):
        if not filename.endswith(suffix):
            continue
        stem = filename[: -len(suffix)]
        if stem == prefix:
            return DEFAULT
        if stem.startswith(prefix + "-") and len(stem) > len(prefix) + 1:
            return stem[len(prefix) + 1 :]
    return None


def default_service_dirs(env: Mapping[str, str]) -> list[Path]:
    """Where upstream's ``hermes gateway install`` puts units: systemd user, system, launchd."""
    home = Path(env.get("HOME") or Path.home())
    return [home / ".config" / "systemd" / "user", Path("/etc/systemd/system"), home / "Library" / "LaunchAgents"]


# --------------------------------------------------------------------------- the checks


@dataclass
class _Profile:
    name: str
    home: Path
    facts: ProfileFacts | None = None

    @property
    def env(self) -> dict[str, str] | None:
        return self.facts.env if self.facts is not None else None

    @property
    def config(self) -> dict[str, Any] | None:
        return self.facts.config if self.facts is not None else None

    @property
    def ok(self) -> bool:
        return self.facts is not None and self.facts.ok


@dataclass
class _Doctor:
    root: Path
    env: Mapping[str, str]
    service_dirs: Sequence[Path]
    findings: list[Finding] = field(default_factory=list)
    config: Config | None = None
    config_ok: bool = True
    # hermesd.yaml's command as written, when the file is invalid but still parses as YAML: its
    # command is checked too, so one run reports both problems instead of one per fix.
    fallback_command: list[str] | bool | None = False
    profiles: list[_Profile] = field(default_factory=list)
    salt: bytes = b""
    salt_note: str = ""

    def add(self, severity: str, code: str, profile: str | None, message: str, fix: str) -> None:
        self.findings.append(Finding(severity, code, profile, message, fix))

    def by_name(self, name: str) -> _Profile | None:
        return next((p for p in self.profiles if p.name == name), None)

    # ----------------------------------------------------------------- hermesd.yaml

    def check_hermesd_config(self) -> None:
        from supervisor import config as config_mod
        from supervisor.layout import Layout

        path = Layout(self.root).config
        try:
            self.config = config_mod.load(path)
        except config_mod.ConfigError as exc:
            self.config, self.config_ok = config_mod.Config(), False
            self.fallback_command = _command_as_written(path)
            self.add(
                ERROR, "hermesd_config_invalid", None,
                f"{exc}. hermesd starts no gateway until it can read this file (a running daemon keeps "
                "its last good configuration)",
                f"fix the line named above in {path}",
            )

    def check_command(self) -> None:
        from supervisor.childspec import GatewayCommandError, resolve_gateway_command

        assert self.config is not None
        if self.config_ok:
            configured = list(self.config.command) if self.config.command else None
        elif self.fallback_command is False:
            return  # not even YAML: the command cannot be known, and the config finding says why
        else:
            configured = self.fallback_command if isinstance(self.fallback_command, list) else None
        try:
            resolve_gateway_command(configured, self.env.get("PATH"))
        except GatewayCommandError as exc:
            fix = (
                "point 'command' in hermesd.yaml at the hermes executable (or remove it to use 'hermes' on PATH)"
                if configured
                else "install hermes-agent beside hermesd, put 'hermes' on PATH, or set 'command' in hermesd.yaml"
            )
            self.add(ERROR, "gateway_command_not_found", None,
                     f"{exc}; hermesd would hold every profile ({HoldKind.NO_COMMAND.value})", fix)

    def check_config_profiles(self) -> None:
        assert self.config is not None
        served = {p.name for p in self.profiles}
        for name, settings in sorted(self.config.profiles.items()):
            if name not in served:
                self.add(
                    WARNING, "config_unknown_profile", None,
                    f"hermesd.yaml has settings for profile {name!r}, but no such profile is served under "
                    f"{self.root / 'profiles'}; they apply to nothing",
                    f"fix the name under 'profiles:' in hermesd.yaml or remove the {name!r} entry",
                )
            elif not settings.enabled:
                self.add(
                    INFO, "profile_disabled", name,
                    f"profile {name!r} is disabled in hermesd.yaml (enabled: false): hermesd will not run it "
                    "and it does not take part in credential or port conflicts",
                    "set enabled: true (or remove the line) in hermesd.yaml to run it",
                )

    # ----------------------------------------------------------------- profiles

    def discover(self) -> None:
        from profiles.discovery import REASON_NOT_DIR, profiles_to_serve, unserved_profile_dirs

        self.profiles = [_Profile(n, Path(h)) for n, h in profiles_to_serve(True, root=self.root)]
        for name, path, reason in unserved_profile_dirs(self.root):
            if reason == REASON_NOT_DIR:
                self.add(
                    INFO, "stray_file_in_profiles", None,
                    f"{path} is not a directory, so it is not a profile",
                    "move it out of the profiles folder if it is not meant to be there",
                )
                continue
            self.add(
                WARNING, "unserved_profile_dir", None,
                f"{path} will never be served: {reason}" + _unserved_detail(reason),
                _unserved_fix(name, path, reason),
            )

    def load_salt(self) -> None:
        """The root's fingerprint salt, so fingerprints match what the daemon logs and reports.

        The doctor never creates it: run by another user (root checking someone's root, say) it
        would leave a ``.hermesd`` folder the daemon cannot open. Without a salt file (the
        daemon never ran) or without read access, a throw-away salt still finds every
        duplicate; only the fingerprints are valid for this report alone.
        """
        from supervisor.layout import Layout

        layout = Layout(self.root)
        try:
            if layout.salt_file.is_file():
                self.salt = layout.salt()
                return
        except OSError:
            pass
        import secrets

        self.salt = secrets.token_bytes(16)
        self.salt_note = " (fingerprint valid for this report only: hermesd has not salted this root yet)"

    def read_profiles(self) -> None:
        from profiles.snapshot import read_profile

        for prof in self.profiles:
            prof.facts = read_profile(prof.name, prof.home, self.salt)

    # ----------------------------------------------------------------- the verdict

    def check_verdicts(self) -> None:
        """Report exactly what the daemon would hold, and why, from :func:`supervisor.plan.verdict.judge`."""
        from profiles.upstream.files import live_gateway
        from supervisor.plan.conflicts import all_conflicts
        from supervisor.plan.verdict import Candidate, HoldKind, judge

        assert self.config is not None
        running = {p.name for p in self.profiles if live_gateway(p.home) is not None}
        candidates = [
            Candidate(p.facts, p.name, active=p.name in running, wants=self.config.for_profile(p.name).enabled)
            for p in self.profiles
        ]
        facts = {p.name: p.facts for p in self.profiles}
        shared = {claim: names for claim, names in all_conflicts(
            list(facts), {n: f.claims for n, f in facts.items() if f is not None})}
        for name, hold in judge(candidates).items():
            if hold is None:
                continue
            effect = (f"its running gateway keeps its last good configuration; hermesd holds {name!r} "
                      f"({hold.kind.value}) at its next start" if name in running
                      else f"hermesd holds {name!r} ({hold.kind.value})")
            f = facts.get(name)
            if hold.kind is HoldKind.CONFIG_ERROR and f is not None and f.problems:
                messages = list(f.problems)  # one finding per broken file, each with its file and line
            elif hold.kind in (HoldKind.CREDENTIAL_CONFLICT, HoldKind.PORT_CONFLICT):
                sharing = next((names for claim, names in shared.items()
                                if name in names and claim.describe() in hold.message), [])
                listed = f" (configured in profiles {', '.join(repr(n) for n in sharing)})" if sharing else ""
                note = self.salt_note if hold.kind is HoldKind.CREDENTIAL_CONFLICT else ""
                messages = [f"{hold.message}{listed}{note}"]
            else:
                messages = [hold.message]
            for what in messages:
                self.add(hold.kind.severity, hold.kind.doctor_code, name, f"{what}; {effect}", hold.kind.fix)
        # Two profiles that both run with one credential: nobody is held, and upstream's lock makes
        # them take turns with it. Worth saying, but it is not a hold.
        claims = {p.name: p.facts.claims for p in self.profiles if p.name in running and p.facts is not None}
        for claim, names in all_conflicts(list(claims), claims):
            self.add(
                WARNING, "shared_while_running", names[1],
                f"{claim.describe()} is used by the running gateways of {', '.join(repr(n) for n in names)}: upstream "
                "makes them take turns with it (or one cannot bind the port)",
                f"give profile {names[1]!r} its own {claim.platform} settings, then 'hermesd restart {names[1]}'",
            )

    # ----------------------------------------------------------------- multiplexing and routes

    def check_multiplex_and_routes(self) -> None:
        default = self.by_name(DEFAULT)
        if default is None or default.config is None or default.env is None:
            return
        cfg = default.config
        from profiles.upstream.bools import multiplex_override
        from profiles.upstream.process import config_multiplex

        from_config = config_multiplex(cfg)
        from_env = multiplex_override(default.env.get("GATEWAY_MULTIPLEX_PROFILES"))
        multiplex = from_env if from_env is not None else from_config
        self._check_routes(cfg, multiplex, forced_on=from_env is True)
        if from_config and from_env is None:
            self.add(
                WARNING, "multiplex_profiles_on", DEFAULT,
                f"{self.root / 'config.yaml'} turns on gateway.multiplex_profiles. hermesd turns it off for its "
                "children (GATEWAY_MULTIPLEX_PROFILES=false) and runs one gateway per profile instead, so "
                "profile_routes and the /p/<profile>/ URL prefixes do not apply under hermesd",
                "set gateway.multiplex_profiles: false (or remove it) so the file says what happens",
            )
        if multiplex:
            self._check_secondary_ports()

    def _check_routes(self, cfg: dict[str, Any], multiplex: bool, *, forced_on: bool) -> None:
        from profiles.routes import FORM_TOP, parse_profile_routes

        parsed = parse_profile_routes(cfg)
        if parsed.source_form is None:
            return
        path = self.root / "config.yaml"
        top = cfg.get("profile_routes")
        gateway = cfg.get("gateway")
        nested = gateway.get("profile_routes") if isinstance(gateway, dict) else None
        raw = top if parsed.source_form == FORM_TOP else nested
        key = "profile_routes" if parsed.source_form == FORM_TOP else "gateway.profile_routes"
        entries = raw if isinstance(raw, list) else []
        if parsed.both_forms:
            count = len(nested) if isinstance(nested, list) else 0
            self.add(
                WARNING, "routes_both_forms", DEFAULT,
                f"{path} has both profile_routes and gateway.profile_routes; Hermes reads only the top-level "
                f"list, so the {count} nested rule(s) are ignored",
                "merge the rules into one list (hermes config set writes the nested gateway.profile_routes)",
            )
        if entries:
            # Under hermesd multiplexing is always off for the children, so routes never apply;
            # when the file also has it off, Hermes alone would ignore them as well.
            if not multiplex:
                why = ("gateway.multiplex_profiles is off, so Hermes ignores every one of them (and hermesd, which "
                       "runs one gateway per profile, never applies routes either)")
            elif forced_on:
                why = ("hermesd runs one gateway per profile with multiplexing off, so once GATEWAY_MULTIPLEX_PROFILES "
                       "is out of the root's .env (see multiplex_env_override) they are ignored")
            else:
                why = ("hermesd turns multiplexing off for its children and runs one gateway per profile, so "
                       "they are ignored")
            self.add(
                WARNING, "routes_without_multiplex", DEFAULT,
                f"{path} has {len(entries)} {key} rule(s), but {why}",
                "under hermesd give each profile its own bot token instead of routes; routes only work in "
                "upstream's single multiplexing gateway",
            )
        self._route_entry_findings(parsed.warnings, entries, key, path)
        self._route_targets(parsed.routes, key, path)
        self._route_overlaps(parsed.routes, key)

    def _route_entry_findings(self, warnings: Iterable[str], entries: list[Any], key: str, path: Path) -> None:
        import re

        from profiles.errors import InvalidNameError
        from profiles.names import parse_profile_name

        for text in warnings:
            if text.startswith("both profile_routes"):
                continue  # routes_both_forms says it with the count
            m = re.match(r"profile route #(\d+)", text)
            entry = entries[int(m.group(1))] if m and int(m.group(1)) < len(entries) else None
            if isinstance(entry, Mapping) and entry.get("profile") is not None:
                try:
                    parse_profile_name(entry["profile"])
                except InvalidNameError:
                    self.add(
                        WARNING, "route_invalid_name", DEFAULT,
                        f"{path}: {key}: {text}. Hermes drops this rule silently",
                        "use an existing profile's name: lower-case letters, digits, '-' and '_', and none of "
                        "the reserved names hermes, test, tmp, root, sudo",
                    )
                    continue
                if _is_disabled(entry.get("enabled")):
                    self.add(INFO, "route_disabled", DEFAULT, f"{path}: {key}: {text}",
                             "nothing to do if you switched it off on purpose")
                    continue
            self.add(WARNING, "route_entry_problem", DEFAULT, f"{path}: {key}: {text}",
                     "fix the rule; Hermes skips or never matches it")

    def _route_targets(self, routes: Sequence[ProfileRoute], key: str, path: Path) -> None:
        missing: dict[str, list[str]] = {}
        for route in routes:
            if route.profile != DEFAULT and not (self.root / "profiles" / route.profile).is_dir():
                missing.setdefault(route.profile, []).append(_route_name(route))
        for target, names in sorted(missing.items()):
            self.add(
                WARNING, "route_profile_missing", DEFAULT,
                f"{path}: {key} rule(s) {', '.join(names)} send messages to profile {target!r}, which has no folder "
                f"under {self.root / 'profiles'}; Hermes falls back to the global home for them (shared memory)",
                f"create the profile ('hermesd profile create {target}') or fix the rule's profile name",
            )

    def _route_overlaps(self, routes: Sequence[ProfileRoute], key: str) -> None:
        for i, first in enumerate(routes):
            for second in routes[i + 1 :]:
                if first.profile == second.profile or not _overlap(first, second):
                    continue
                sample = _sample_source(first, second)
                if first.specificity != second.specificity:
                    self.add(
                        INFO, "route_overlap", DEFAULT,
                        f"{key}: {_route_desc(first)} and {_route_desc(second)} both match a message from {sample}; "
                        f"{_route_name(first)} wins (specificity {first.specificity} > {second.specificity}), "
                        f"so it goes to profile {first.profile!r}",
                        "nothing to do if this override is what you meant; otherwise narrow one rule",
                    )
                else:
                    self.add(
                        WARNING, "route_overlap_tie", DEFAULT,
                        f"{key}: {_route_desc(first)} and {_route_desc(second)} both match a message from {sample} "
                        f"with the same specificity ({first.specificity}); the one written first wins: "
                        f"{_route_name(first)} -> profile {first.profile!r}. Reordering the file changes routing",
                        "make one rule more specific (add chat_id or thread_id) or remove the duplicate",
                    )

    def _check_secondary_ports(self) -> None:
        from profiles.credentials import profile_ports
        from profiles.errors import ProfileError

        for prof in self.profiles:
            if prof.name == DEFAULT or not prof.ok:
                continue
            try:
                platforms = sorted({b.platform for b in profile_ports(prof.home)})
            except (ProfileError, ValueError, OSError):
                continue
            if not platforms:
                continue
            self.add(
                WARNING, "secondary_port_binding", prof.name,
                f"profile {prof.name!r} enables port-binding platform(s) {', '.join(platforms)} while the root "
                "turns on multiplexing: a multiplexing Hermes gateway skips this whole profile (the default "
                f"profile owns the one HTTP listener and serves it at /p/{prof.name}/). hermesd runs it in its own "
                "process, so it works here, but not if you go back to upstream multiplexing",
                f"configure {', '.join(platforms)} only on the default profile, or turn multiplexing off in the "
                "root's config.yaml",
            )

    # ----------------------------------------------------------------- environment and locks

    def check_lock_environment(self) -> None:
        """Every child must agree on HOME, XDG_STATE_HOME and HERMES_GATEWAY_LOCK_DIR.

        hermesd passes its own values unchanged to every child; a per-profile ``environment:``
        in hermesd.yaml, or the profile's ``.env`` (loaded with override by Hermes), can still
        change them for one profile, and then that gateway's credential locks live in another
        directory where no other profile's gateway looks.
        """
        from profiles.upstream.process import LOCK_VARIABLES, lock_dir
        from supervisor.childspec import child_env

        assert self.config is not None
        shared = child_env(self.env, root=self.root, profile=DEFAULT, home=self.root,
                           extra=self.config.environment)
        shared_dir = lock_dir(shared)
        for prof in self.profiles:
            extra = self.config.child_environment(prof.name)
            effective = child_env(self.env, root=self.root, profile=prof.name, home=prof.home, extra=extra)
            sources = {v: f"hermesd.yaml profiles.{prof.name}.environment" for v in LOCK_VARIABLES
                       if v in self.config.for_profile(prof.name).environment}
            for var in LOCK_VARIABLES:
                if prof.env is not None and var in prof.env:
                    effective[var] = prof.env[var]
                    sources[var] = str(prof.home / ".env")
            # Only a profile-level source can make one child differ, so each differing one has a source.
            differing = [v for v in LOCK_VARIABLES if effective.get(v) != shared.get(v) and v in sources]
            if not differing:
                continue
            details = "; ".join(
                f"{v}={effective.get(v)!r} from {sources.get(v, 'its environment')} (others: {shared.get(v)!r})"
                for v in differing
            )
            self.add(
                WARNING, "lock_dir_mismatch", prof.name,
                f"the gateway of profile {prof.name!r} would run with {details}. Its credential locks go to "
                f"{lock_dir(effective)} instead of {shared_dir}, so upstream's cross-profile token protection "
                "silently stops working between it and the other profiles",
                f"remove {', '.join(differing)} from {' and '.join(sorted({sources[v] for v in differing}))}; "
                "set them, if at all, once for every child in hermesd.yaml's top-level environment:",
            )

    def check_env_permissions(self) -> None:
        import stat

        for prof in self.profiles:
            path = prof.home / ".env"
            try:
                mode = path.stat().st_mode
            except OSError:
                continue
            if mode & 0o077:
                self.add(
                    WARNING, "env_file_permissions", prof.name,
                    f"{path} is readable or writable by group or others (mode {stat.S_IMODE(mode):04o}); "
                    "it holds this profile's tokens",
                    f"chmod 600 {path}",
                )

    # ----------------------------------------------------------------- processes and files on disk

    def check_runtime_files(self) -> None:
        from profiles.upstream import files as gf

        for prof in self.profiles:
            pid_path = prof.home / gf.PID_FILE
            if pid_path.exists():
                live = gf.live_gateway(prof.home)
                if live is None:
                    why = _stale_reason(gf.read_pid_record(prof.home))
                    self.add(
                        WARNING, "stale_pid_file", prof.name,
                        f"{pid_path} {why}: left by a gateway that died without cleaning up. With a dead PID "
                        "file, 'hermes gateway stop' falls back to signalling any gateway whose command line "
                        "matches the profile",
                        f"make sure no gateway runs for {prof.name!r}, then remove {pid_path}",
                    )
                elif not self._ours(live.pid):
                    self.add(
                        WARNING, "foreign_gateway", prof.name,
                        f"a gateway hermesd did not start (PID {live.pid}) is running for profile {prof.name!r}; "
                        "hermesd will hold the profile (foreign_gateway) until it exits",
                        f"stop it ('{hermes_command(prof.name)} gateway stop', or disable the service that runs it) "
                        "and let hermesd run the profile",
                    )
            lock = gf.read_json(prof.home / gf.LOCK_FILE)
            if lock is not None and isinstance(lock.get("pid"), int) and not isinstance(lock.get("pid"), bool):
                start = lock.get("start_time")
                live_start = gf.proc_start_time(lock["pid"])
                if live_start is None or (isinstance(start, int) and start != live_start):
                    state = "is no longer running" if live_start is None else "was recycled by another process"
                    self.add(
                        INFO, "stale_lock_file", prof.name,
                        f"{prof.home / gf.LOCK_FILE} names PID {lock['pid']}, which {state}. The kernel lock "
                        "itself is gone (harmless); only the file's text is stale",
                        "nothing is required; the next gateway rewrites it",
                    )

    def _ours(self, pid: int) -> bool:
        """Whether ``pid`` was started by hermesd for this root (its children carry HERMESD_ROOT).

        Unknown (unreadable environment) counts as ours: a false "foreign" claim is worse
        than a missed one.
        """
        from supervisor.childspec import TAG_ROOT

        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return True
        tag = f"{TAG_ROOT}=".encode()
        for item in raw.split(b"\0"):
            if item.startswith(tag):
                try:
                    return Path(item[len(tag) :].decode()).resolve() == self.root
                except (UnicodeDecodeError, OSError):
                    return True
        return False

    def check_services(self) -> None:
        served = {p.name for p in self.profiles}
        for folder in self.service_dirs:
            folder = Path(folder)
            try:
                entries = sorted(folder.iterdir())
            except OSError:
                continue
            for unit in entries:
                by_name = service_profile_name(unit.name)
                if by_name is None:
                    continue
                target = self._service_target(unit)
                if target == _ELSEWHERE:
                    continue  # a unit for another root's profile
                name = target or by_name
                if name not in served:
                    continue
                enabled = any(folder.glob(f"*.wants/{unit.name}")) if unit.suffix == ".service" else True
                state = "enabled" if enabled else "installed"
                basis = " (assumed from its name)" if target is None else ""
                manager = "launchd" if unit.suffix == ".plist" else "systemd"
                self.add(
                    ERROR, "upstream_service_installed", name,
                    f"{unit} ({manager}, {state}) runs the gateway of profile {name!r}{basis} and restarts it "
                    "on its own; it races hermesd for the same profile, and 'hermes gateway start|restart' "
                    "acts on it",
                    _service_fix(unit, manager, name),
                )

    def _service_target(self, unit: Path) -> str | None:
        """The profile a unit's ``HERMES_HOME`` names; ``None`` when it names none, ``_ELSEWHERE`` for another root.

        Upstream writes ``HERMES_HOME`` into every unit it installs, which is more reliable than
        the name: a unit named ``hermes-gateway.service`` may serve ``~/.hermes`` while this
        doctor checks a custom root.
        """
        import re

        try:
            text = unit.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        m = re.search(r'HERMES_HOME=([^"\s]+)', text) or re.search(
            r"<key>HERMES_HOME</key>\s*<string>([^<]*)</string>", text
        )
        if m is None:
            return None
        home = Path(m.group(1).strip()).expanduser()
        try:
            home = home.resolve()
        except OSError:
            return _ELSEWHERE
        if home == self.root:
            return DEFAULT
        if home.parent == self.root / "profiles":
            return home.name
        return _ELSEWHERE

    # ----------------------------------------------------------------- all of it

    def run(self) -> list[Finding]:
        if not self.root.is_dir():
            self.add(ERROR, "root_missing", None, f"the root {self.root} does not exist or is not a directory",
                     "pass the right --root, or set HERMES_HOME")
            return self.findings
        self.check_hermesd_config()
        self.check_command()
        self.discover()
        self.check_config_profiles()
        self.load_salt()
        self.read_profiles()
        self.check_verdicts()
        self.check_multiplex_and_routes()
        self.check_lock_environment()
        self.check_env_permissions()
        self.check_runtime_files()
        self.check_services()
        # Errors first; within a severity root-wide findings, then profiles in serving order, then
        # the order the checks ran (cause before consequence: the config before the command).
        rank = {p.name: i for i, p in enumerate(self.profiles)}

        def key(f: Finding) -> tuple[int, int]:
            where = -1 if f.profile is None else rank.get(f.profile, len(rank))
            return _RANK.get(f.severity, len(_RANK)), where

        return sorted(self.findings, key=key)


_ELSEWHERE = ""  # never a profile name


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
    dirs = default_service_dirs(e) if service_dirs is None else list(service_dirs)
    return _Doctor(Path(root).expanduser().resolve(), e, dirs).run()


# --------------------------------------------------------------------------- output


def render(findings: Sequence[Finding]) -> str:
    """Findings for people: one block per finding, errors first, then a one-line summary."""
    if not findings:
        return "no problems found"
    lines: list[str] = []
    for f in findings:
        where = f"[{f.profile}] " if f.profile is not None else ""
        lines.append(f"{f.severity.upper():7} {where}{f.code}: {f.message}")
        lines.append(f"        fix: {f.fix}")
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


# --------------------------------------------------------------------------- helpers


def _command_as_written(path: Path) -> list[str] | bool | None:
    """``command`` from a hermesd.yaml that failed validation; ``False`` when it is not even YAML."""
    import shlex

    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # ValueError: UnicodeDecodeError, impossible dates
        return False
    command = data.get("command") if isinstance(data, dict) else None
    if isinstance(command, str):
        try:
            return shlex.split(command) or None
        except ValueError:
            return None
    if isinstance(command, list) and command and all(isinstance(p, str) and p for p in command):
        return list(command)
    return None


def _summary_line(findings: Sequence[Finding]) -> str:
    counts = {s: sum(1 for f in findings if f.severity == s) for s in (ERROR, WARNING, INFO)}
    return ", ".join(f"{n} {s}{'' if n == 1 or s == INFO else 's'}" for s, n in counts.items())


def _is_disabled(value: object) -> bool:
    if isinstance(value, bool):
        return not value
    from profiles.upstream.bools import FALSY

    return isinstance(value, str) and value.strip().lower() in FALSY


def _overlap(a: ProfileRoute, b: ProfileRoute) -> bool:
    """Whether one message can satisfy both rules: same platform, no discriminator in contradiction.

    Two different ``chat_id`` values are treated as disjoint, although a thread of one
    channel could carry the other as its parent; that would need knowledge of the platform.
    """
    if a.platform != b.platform:
        return False
    for key in ("guild_id", "chat_id", "thread_id"):
        va, vb = getattr(a, key), getattr(b, key)
        if va and vb and va != vb:
            return False
    return True


def _sample_source(a: ProfileRoute, b: ProfileRoute) -> str:
    parts = [a.platform]
    for key, label in (("guild_id", "guild"), ("chat_id", "chat"), ("thread_id", "thread")):
        value = getattr(a, key) or getattr(b, key)
        if value:
            parts.append(f"{label} {value}")
    return " ".join(parts)


def _route_name(route: ProfileRoute) -> str:
    return repr(route.name) if route.name else "(unnamed rule)"


def _route_desc(route: ProfileRoute) -> str:
    keys = [f"{label} {getattr(route, key)}" for key, label in
            (("guild_id", "guild"), ("chat_id", "chat"), ("thread_id", "thread")) if getattr(route, key)]
    scope = " ".join([route.platform, *keys])
    return f"{_route_name(route)} ({scope} -> {route.profile})"


def _stale_reason(rec: Any) -> str:
    from profiles.upstream.files import proc_start_time

    if rec is None:
        return "is not a gateway PID record (empty or unreadable)"
    live = proc_start_time(rec.pid)
    if live is None:
        return f"names PID {rec.pid}, which is not running"
    return f"names PID {rec.pid}, which now belongs to another process (PID recycled)"


def _unserved_detail(reason: str) -> str:
    from profiles.discovery import REASON_INVALID, REASON_RESERVED, REASON_SYMLINK

    return {
        REASON_INVALID: " (profile names are lower-case letters, digits, '-' and '_', 1-64 characters)",
        REASON_RESERVED: " (Hermes refuses 'hermes -p' with this name)",
        REASON_SYMLINK: " (hermesd never follows a link out of the profiles folder)",
    }.get(reason, "")


def _unserved_fix(name: str, path: Path, reason: str) -> str:
    from profiles.discovery import REASON_SYMLINK
    from profiles.names import RESERVED_NAMES, is_valid_name

    if reason == REASON_SYMLINK:
        return f"move the profile's folder itself to {path} instead of linking to it"
    guess = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in name.lower()).strip("-_")[:60]
    if not guess or not is_valid_name(guess) or guess in RESERVED_NAMES:
        guess = f"{guess or 'profile'}-1".lstrip("-_")
    return f"if it is a profile, rename the folder to a valid, unreserved name (for example {guess!r})"


def _service_fix(unit: Path, manager: str, profile: str) -> str:
    if manager == "launchd":
        return f"launchctl bootout gui/$(id -u) {unit} && rm {unit}"
    # Units under the system folders are system units; anything else (the user folder, or a
    # folder a caller passed in) is managed with ``systemctl --user``.
    if str(unit).startswith(("/etc/", "/usr/", "/lib/", "/run/")):
        return f"sudo systemctl disable --now {unit.name} && sudo rm {unit} (hermesd runs profile {profile!r} itself)"
    return f"systemctl --user disable --now {unit.name} && rm {unit} (hermesd runs profile {profile!r} itself)"

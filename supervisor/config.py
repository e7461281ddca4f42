"""``<root>/hermesd.yaml``: hermesd's own settings, validated with file, line and key in errors.

The file is optional. It is parsed into YAML nodes (not plain data) so that every complaint can
point at the line a user has to fix. A running daemon that fails to load a new version keeps
its last good one. The keys, their parsers and defaults are declared in :mod:`supervisor.settings`;
this module walks the nodes, and reads itself only what has a shape rather than a value (the command,
an environment, the profiles, the kanban dispatcher).

The sections of observability (events, hooks, metrics) are imported where they are used (each such
line says "lazy: see above"): ``hermesd status`` and ``hermesd exec`` read this file for the command
and the environment, and need neither the journal nor the hooks.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from profiles.errors import ProfileConfigError, ProfileError
from profiles.fileio import MAX_PROFILE_FILE, compose_yaml
from profiles.names import normalize_name, validate_profile_name
from profiles.printable import printable
from profiles.safeio import UnsafeFileError, read_operator_file
from supervisor.kanban.dispatch import dispatcher_env
from supervisor.observe.values import line_of
from supervisor.plan.policy import RestartPolicy, stop_timeout_for
from supervisor.processes.childspec import forbidden_extra_env
from supervisor.settings import (
    BY_KEY,
    HungSettings,
    IsolationPartial,
    IsolationSettings,
    Limits,
    LimitsSpec,
    SettingError,
    default,
    merge_isolation,
    merge_limits,
    parse_isolation,
    parse_limits,
    profile_keys,
    top_keys,
    under,
)

if TYPE_CHECKING:
    from supervisor.observe.sections import ObserveSettings


class ConfigError(ValueError):
    """hermesd.yaml is malformed; the message names file, line and key."""


@dataclass(frozen=True, slots=True)
class ProfileSettings:
    enabled: bool = default("enabled")
    environment: Mapping[str, str] = field(default_factory=dict)
    stop_timeout: float | None = None
    isolation: IsolationPartial | None = None
    limits: LimitsSpec | None = None
    hung: Mapping[str, float | None] = field(default_factory=dict)  # hung_after / startup_grace as given


# Config's fields named by their hermesd.yaml keys where the two differ.
_FIELDS = {"logs.max_bytes": "log_max_bytes", "logs.backups": "log_backups",
           "kanban.workers_per_profile": "kanban_workers_per_profile",
           "kanban.requests_per_minute": "kanban_requests_per_minute"}


@dataclass(frozen=True, slots=True)
class Config:
    command: tuple[str, ...] | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    stop_timeout: float | None = default("stop_timeout")  # None: upstream's max(60, drain + 30) per profile
    log_max_bytes: int = default("logs.max_bytes")
    log_backups: int = default("logs.backups")
    environment: Mapping[str, str] = field(default_factory=dict)
    profiles: Mapping[str, ProfileSettings] = field(default_factory=dict)
    max_starting: int | None = default("max_starting")  # None: the CPU cores (see supervisor.daemon.effective)
    present: bool = False  # the file exists (doctor and status say where settings came from)
    isolation: IsolationPartial | None = None  # the top level's
    limits: LimitsSpec | None = None  # the top level's
    hung: Mapping[str, float | None] = field(default_factory=dict)  # top-level hung_after / startup_grace
    observe: ObserveSettings | None = None  # None: the defaults
    kanban_dispatcher: str = default("kanban.dispatcher")
    # Bounds of the kanban hand-off (supervisor.kanban.bounds): a dispatcher must not be able to
    # move its load into another profile's limits, nor flood the daemon with requests.
    kanban_workers_per_profile: int = default("kanban.workers_per_profile")
    kanban_worker_limits: LimitsSpec | None = None  # kanban.worker_limits: each worker's own, over the assignee's
    kanban_requests_per_minute: int = default("kanban.requests_per_minute")

    def worker_limits_for(self, name: str) -> Limits:
        """The limits of each kanban worker run for ``name``: its own cgroup (never its assignee's
        gateway's), with the assignee's limits, key by key overridden by ``kanban.worker_limits``."""
        return merge_limits(self.limits, self.for_profile(name).limits, self.kanban_worker_limits)

    def isolation_for(self, name: str) -> IsolationSettings:
        """The isolation settings in force for ``name`` (defaults, the top level, the profile's own)."""
        return merge_isolation(self.isolation, self.for_profile(name).isolation)

    def limits_for(self, name: str) -> Limits:
        """The resource limits in force for ``name`` (a profile's keys override the top level's)."""
        return merge_limits(self.limits, self.for_profile(name).limits)

    def hung_for(self, name: str) -> HungSettings:
        """Hung detection for ``name`` (``hung_after`` None: off): the profile's keys over the top level's."""
        return HungSettings(**{**self.hung, **self.for_profile(name).hung})

    def observe_settings(self) -> ObserveSettings:
        from supervisor.observe.sections import ObserveSettings  # lazy: see above

        return self.observe or ObserveSettings()

    def for_profile(self, name: str) -> ProfileSettings:
        return self.profiles.get(name, ProfileSettings())

    def child_environment(self, name: str) -> dict[str, str]:
        """The variables hermesd.yaml adds to ``name``'s gateway (daemon, ``exec`` and ``export`` alike).

        Last, and over the operator's own ``environment``: the kanban dispatcher choice
        (``HERMES_KANBAN_DISPATCH_IN_GATEWAY``, :func:`supervisor.kanban.dispatch.dispatcher_env`),
        so changing ``kanban.dispatcher`` restarts exactly the old and the new dispatcher. Not here:
        the dispatcher's ``HERMES_BIN`` and hand-off socket, which only a running daemon can serve
        (the daemon adds them at spawn, :mod:`supervisor.kanban.handoff`); an exported unit or
        container therefore runs upstream's own workers, in the dispatcher's tree.
        """
        return {**self.environment, **self.for_profile(name).environment,
                **dispatcher_env(self.kanban_dispatcher, name)}

    def stop_timeout_for(self, name: str, drain_s: float) -> float:
        return stop_timeout_for(self.for_profile(name).stop_timeout, self.stop_timeout, drain_s)


def load(path: Path) -> Config:
    """Parse ``path``; a missing file means all defaults. Read bounded: a FIFO or a huge file is an error."""
    try:
        raw = read_operator_file(path, MAX_PROFILE_FILE)
    except FileNotFoundError:
        return Config()
    except UnsafeFileError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not valid UTF-8") from None
    return replace(parse(text, path), present=True)


def parse(text: str, path: Path) -> Config:
    try:
        ldr, node = compose_yaml(text, path, loader=yaml.SafeLoader)
    except ProfileConfigError as exc:
        raise ConfigError(str(exc)) from None
    ldr.dispose()
    if node is None:
        return Config()
    try:
        return _Reader(path).config(node)
    except ConfigError:
        raise
    except (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError) as exc:
        # A tag PyYAML refuses, an impossible date: still the user's file, so still a ConfigError.
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{where}: invalid value: {getattr(exc, 'problem', None) or exc}") from None


class _Reader:
    """Walks YAML nodes; each method validates one section and knows its line numbers."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, node: yaml.Node, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}:{node.start_mark.line + 1}: {key}: {message}")

    def mapping(self, node: yaml.Node, key: str, allowed: set[str] | None) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "expected a mapping")
        out: dict[str, yaml.Node] = {}
        for knode, vnode in node.value:
            name = knode.value if isinstance(knode, yaml.ScalarNode) else None
            full = f"{key}.{name}" if key else str(name)
            if not isinstance(name, str) or (allowed is not None and name not in allowed):
                hint = f" (known keys: {', '.join(sorted(allowed))})" if allowed else ""
                raise self.fail(knode, full, f"unknown key{hint}")
            if name in out:
                raise self.fail(knode, full, "duplicate key")
            out[name] = vnode
        return out

    def scalar(self, node: yaml.Node, key: str) -> object:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, key, "expected a single value")
        return _construct(node)

    def value(self, node: yaml.Node, key: str, setting: str, *, top: bool = True) -> Any:
        """A single value, read by ``setting``'s declared parser (``key``: where it stands). At the top
        level, ``null`` for a key whose default is null is that default; in a profile's section None
        means "not given", so there it is refused."""
        value = self.scalar(node, key)
        if value is None and top and BY_KEY[setting].default is None:
            return None
        try:
            return BY_KEY[setting].read(value, key)
        except SettingError as exc:
            raise self.fail(node, key, exc.problem) from None

    def values(self, node: yaml.Node, section: str,
               own: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, yaml.Node]]:
        """The keys of ``section`` that are single values, read; and every key's node (``own``: keys
        this module reads itself besides the declared ones)."""
        rows = under(section)
        body = self.mapping(node, section, {*rows, *own})
        return {k: self.value(v, f"{section}.{k}", f"{section}.{k}") for k, v in body.items()
                if k in rows and rows[k].parse is not None}, body

    def environment(self, node: yaml.Node, key: str) -> dict[str, str]:
        env: dict[str, str] = {}
        for name, vnode in self.mapping(node, key, None).items():
            why = forbidden_extra_env(name)
            if why:
                raise self.fail(vnode, f"{key}.{name}", f"not allowed: {why}")
            value = self.scalar(vnode, f"{key}.{name}")
            if value is None or isinstance(value, list | dict):
                raise self.fail(vnode, f"{key}.{name}", "expected a string value")
            env[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return env

    def command(self, node: yaml.Node, key: str) -> tuple[str, ...] | None:
        if isinstance(node, yaml.SequenceNode):
            parts = [self.scalar(n, key) for n in node.value]
        else:
            value = self.scalar(node, key)
            if value is None:  # null: the default, like every key whose default is null
                return None
            parts = list(shlex.split(value)) if isinstance(value, str) else [value]
        words = tuple(p for p in parts if isinstance(p, str) and p)
        if not words or len(words) != len(parts):
            raise self.fail(node, key, "expected a command: a string or a list of strings")
        return words

    def config(self, node: yaml.Node) -> Config:
        top = self.mapping(node, "", top_keys())
        kwargs: dict[str, Any] = {}
        if "command" in top:
            kwargs["command"] = self.command(top["command"], "command")
        if "restart" in top:
            kwargs["restart"] = RestartPolicy(**self.values(top["restart"], "restart")[0])
        if "stop_timeout" in top:
            kwargs["stop_timeout"] = self.value(top["stop_timeout"], "stop_timeout", "stop_timeout")
        if "logs" in top:
            kwargs.update({_FIELDS[f"logs.{k}"]: v for k, v in self.values(top["logs"], "logs")[0].items()})
        if "environment" in top:
            kwargs["environment"] = self.environment(top["environment"], "environment")
        if "profiles" in top:
            kwargs["profiles"] = self.profiles(top["profiles"])
        if "max_starting" in top:
            kwargs["max_starting"] = self.value(top["max_starting"], "max_starting", "max_starting")
        kwargs.update(self.domains(top, ""))
        if "kanban" in top:
            kwargs.update(self.kanban(top["kanban"]))
        observed: dict[str, yaml.Node] = {k: top[k] for k in ("events", "hooks", "metrics") if k in top}
        if observed:
            from supervisor.observe.sections import ObserveConfigError, parse_sections  # lazy: see above

            try:
                kwargs["observe"] = parse_sections({k: _construct(v) for k, v in observed.items()})
            except ObserveConfigError as exc:
                raise self.fail_at(observed.get(str(exc.path[0])), exc.path[1:], exc.key, exc.problem) from None
        return Config(**kwargs)

    def domains(self, body: dict[str, yaml.Node], prefix: str) -> dict[str, Any]:
        """``isolation``, ``limits``, ``hung_after`` and ``startup_grace``, at the top or for one profile."""
        out: dict[str, Any] = {key: self.section(parse, body[key], prefix + key)
                               for key, parse in (("isolation", parse_isolation), ("limits", parse_limits))
                               if key in body}
        hung = {key: self.section(BY_KEY[key].read, body[key], prefix + key)
                for key in ("hung_after", "startup_grace") if key in body}
        if hung:
            out["hung"] = hung
        return out

    def section(self, parse: Callable[[object, str], Any], node: yaml.Node, key: str) -> Any:
        """``parse`` (a declared parser, or a section's) on ``node``; its error at the line of the key it names."""
        try:
            return parse(_construct(node), key)
        except SettingError as exc:
            sub = exc.key[len(key) + 1 :]
            raise self.fail_at(node, tuple(p for p in sub.split(".") if p), str(exc), "") from None

    def kanban(self, node: yaml.Node) -> dict[str, Any]:
        """``kanban: {dispatcher: PROFILE | off, workers_per_profile: N, worker_limits: {...},
        requests_per_minute: N}``: which gateway runs upstream's kanban dispatcher, and the bounds
        of the hand-off through which it starts other profiles' workers.

        The profile need not exist yet (profiles come and go while the daemon runs); ``doctor``
        says when it does not. YAML's bare ``off`` arrives as ``False`` and is accepted.
        """
        values, body = self.values(node, "kanban", ("worker_limits",))
        out: dict[str, Any] = {_FIELDS[f"kanban.{k}"]: v for k, v in values.items()}
        if "worker_limits" in body:
            out["kanban_worker_limits"] = self.section(parse_limits, body["worker_limits"], "kanban.worker_limits")
        if "dispatcher" not in body:
            return out
        value = self.scalar(body["dispatcher"], "kanban.dispatcher")
        if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
            return {**out, "kanban_dispatcher": "off"}
        if not isinstance(value, str):
            raise self.fail(body["dispatcher"], "kanban.dispatcher",
                            f"expected a profile name or off, got {printable(repr(value), 40)}")
        try:
            return {**out, "kanban_dispatcher": validate_profile_name(normalize_name(value))}
        except ProfileError as exc:
            raise self.fail(body["dispatcher"], "kanban.dispatcher", f"not a valid profile name: {exc}") from None

    def fail_at(self, node: yaml.Node | None, path: tuple[str | int, ...], key: str, problem: str) -> ConfigError:
        """A ConfigError at the line of the node ``path`` leads to below ``node`` (as deep as it exists)."""
        line = line_of(node, path) if node is not None else None
        where = f":{line}" if line is not None else ""
        return ConfigError(f"{self.path}{where}: {key}{': ' + problem if problem else ''}")

    def profiles(self, node: yaml.Node) -> dict[str, ProfileSettings]:
        out: dict[str, ProfileSettings] = {}

        for raw_name, vnode in self.mapping(node, "profiles", None).items():
            key = f"profiles.{raw_name}"
            try:
                name = validate_profile_name(normalize_name(raw_name))
            except ProfileError as exc:
                raise self.fail(vnode, key, f"not a valid profile name: {exc}") from None
            body = self.mapping(vnode, key, profile_keys())
            kwargs: dict[str, Any] = {k: self.value(body[k], f"{key}.{k}", k, top=False)
                                      for k in ("enabled", "stop_timeout") if k in body}
            if "environment" in body:
                kwargs["environment"] = self.environment(body["environment"], f"{key}.environment")
            out[name] = ProfileSettings(**self.domains(body, f"{key}."), **kwargs)
        return out


def _construct(node: yaml.Node) -> object:
    return yaml.SafeLoader("").construct_object(node, deep=True)

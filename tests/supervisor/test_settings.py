"""The declaration of hermesd.yaml's keys is what the reader, the defaults and the restart decision use:
every declared key is read where its row says it may stand (and refused elsewhere), a file that sets
each key to its declared default reads as no file at all, and exactly the keys declared to restart a
gateway change its spec."""

from __future__ import annotations

import pytest

from supervisor.config import Config, ConfigError, parse
from supervisor.daemon.effective import Effective, build
from supervisor.observe.journal import JournalSettings
from supervisor.plan.policy import RestartPolicy
from supervisor.settings import (
    BOTH,
    LIMIT,
    OWN,
    RESTARTING,
    SETTINGS,
    HungSettings,
    IsolationSettings,
    Limits,
    default,
)

# A value each key accepts that differs from its default (hooks: one hook; environment: one variable).
OTHER = {
    "command": "[/bin/true]", "restart.initial_delay": "2", "restart.max_delay": "30", "restart.factor": "3",
    "restart.jitter": "0.2", "restart.healthy_after": "5", "stop_timeout": "7", "logs.max_bytes": "8192",
    "logs.backups": "2", "environment": "{FOO: bar}", "max_starting": "2", "isolation.mode": "off",
    "isolation.kanban": "false", "isolation.shared_auth": "false", "isolation.root_auth": "true",
    "isolation.user": "1201", "isolation.read_only": "[/srv]", "isolation.hide": "[/srv/x]",
    "isolation.writable": "[~/src]", "limits.memory_max": "1G", "limits.tasks_max": "100",
    "limits.cpu_weight": "50", "hung_after": "60", "startup_grace": "30", "events.max_bytes": "8192",
    "events.backups": "1", "hooks": "[{on: held, command: 'true'}]", "metrics.listen": "'127.0.0.1:9464'",
    "metrics.allow_public": "true", "kanban.dispatcher": "coder", "kanban.workers_per_profile": "2",
    "kanban.requests_per_minute": "10", "enabled": "false",
}


def _nested(key: str, value: str, indent: str = "") -> str:
    head, _, rest = key.partition(".")
    if not rest:
        return f"{indent}{head}: {value}\n"
    return f"{indent}{head}:\n" + _nested(rest, value, indent + "  ")


def test_every_declared_key_has_a_test_value():
    assert set(OTHER) == {s.key for s in SETTINGS}


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.scope != OWN], ids=lambda s: s.key)
def test_every_top_level_key_is_read_and_changes_the_config(setting, tmp_path):
    cfg = parse(_nested(setting.key, OTHER[setting.key]), tmp_path / "hermesd.yaml")
    assert cfg != Config(), f"{setting.key} was accepted but changed nothing"


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.key)
def test_a_profile_may_set_exactly_the_keys_declared_for_it(setting, tmp_path):
    text = "profiles:\n  coder:\n" + _nested(setting.key, OTHER[setting.key], "    ")
    if setting.scope in (BOTH, LIMIT, OWN):
        assert parse(text, tmp_path / "hermesd.yaml").for_profile("coder") != Config().for_profile("coder")
    else:
        with pytest.raises(ConfigError, match=rf":3: profiles\.coder\.{setting.key.partition('.')[0]}: unknown key"):
            parse(text, tmp_path / "hermesd.yaml")


def test_own_keys_are_refused_at_the_top(tmp_path):
    for s in SETTINGS:
        if s.scope == OWN:
            with pytest.raises(ConfigError, match=f"{s.key}: unknown key"):
                parse(_nested(s.key, OTHER[s.key]), tmp_path / "hermesd.yaml")


def test_worker_limits_take_the_limits_keys(tmp_path):
    for s in SETTINGS:
        if s.scope == LIMIT:
            name = s.key.partition(".")[2]
            cfg = parse(f"kanban:\n  worker_limits: {{{name}: {OTHER[s.key]}}}\n", tmp_path / "hermesd.yaml")
            assert cfg.worker_limits_for("coder") != Limits(), s.key


def _yaml(value: object) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else str(value).lower()
    return "[]" if value == () else str(value)


def test_a_file_of_the_declared_defaults_reads_as_no_file(tmp_path):
    """Each key written at its declared default: the same Config, the same settings in force."""
    text = "".join(_nested(s.key, _yaml(s.default)) for s in SETTINGS if s.scope != OWN)
    # Sections repeat their head once per key in _nested; YAML refuses duplicate keys, so merge them.
    merged: dict[str, list[str]] = {}
    for block in text.split("\n"):
        if block and not block.startswith(" "):
            head = block
            merged.setdefault(head, [])
        elif block:
            merged[head].append(block)
    text = "".join(f"{h}\n" + "".join(f"{line}\n" for line in lines) for h, lines in merged.items())
    text += "profiles:\n  coder:\n" + "".join(_nested(s.key, _yaml(s.default), "    ") for s in SETTINGS
                                                if s.scope == OWN)
    cfg = parse(text, tmp_path / "hermesd.yaml")
    plain = Config()
    for name in ("coder", "other"):
        assert cfg.isolation_for(name) == plain.isolation_for(name) == IsolationSettings()
        assert cfg.limits_for(name) == plain.limits_for(name) == Limits()
        assert cfg.hung_for(name) == plain.hung_for(name) == HungSettings()
        assert cfg.child_environment(name) == plain.child_environment(name)
        assert cfg.for_profile(name).enabled is True
    assert cfg.restart == RestartPolicy() and cfg.observe_settings().journal == JournalSettings()
    for field in ("command", "stop_timeout", "log_max_bytes", "log_backups", "max_starting", "kanban_dispatcher",
                  "kanban_workers_per_profile", "kanban_requests_per_minute"):
        assert getattr(cfg, field) == getattr(plain, field), field


def test_the_types_defaults_are_the_declared_ones():
    assert HungSettings() == HungSettings(default("hung_after"), default("startup_grace")) == HungSettings(120, 300)
    assert RestartPolicy().max_delay == default("restart.max_delay") == 300
    assert JournalSettings().backups == default("events.backups") == 9
    assert IsolationSettings().mode == "auto" and Config().log_max_bytes == 10 << 20


def test_restarting_parts_are_parts_of_the_settings_in_force():
    assert set(RESTARTING) <= set(Effective._fields)
    assert {s.restarts for s in SETTINGS} - {""} == set(RESTARTING)


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.scope != OWN], ids=lambda s: s.key)
def test_exactly_the_restarting_keys_change_a_gateways_spec(setting, tmp_path):
    """A change restarts a gateway when its spec changes: the keys declared with ``restarts`` do,
    every other key does not (``command`` is rolled out by ``hermesd upgrade``, not by an edit)."""
    before = build(Config())
    after = build(parse(_nested(setting.key, OTHER[setting.key]), tmp_path / "hermesd.yaml"))
    changed = any(after.of(n).spec != before.of(n).spec for n in ("default", "coder", "other"))
    assert changed == bool(setting.restarts), setting.key


def test_null_is_the_default_at_the_top_and_refused_in_a_profile(tmp_path):
    """Keys whose default is null accept null at the top level (the guide's example writes
    ``max_starting: null``); in a profile's section null would be read as "not given", so it is refused."""
    path = tmp_path / "hermesd.yaml"
    assert parse("max_starting: null\nstop_timeout: null\ncommand: null\n", path) == Config()
    with pytest.raises(ConfigError, match=r":3: profiles\.coder\.stop_timeout: expected a number"):
        parse("profiles:\n  coder:\n    stop_timeout: null\n", path)


def test_a_settings_bound_is_the_one_the_bounds_table_shows_for_it():
    """The range is declared once, in profiles/numbers.py; the row that uses it names the same key."""
    for s in SETTINGS:
        if s.bound is not None:
            assert f"`{s.key}`" in s.bound.key and "hermesd.yaml" in s.bound.file, s.key

"""hermesd.yaml: defaults, every section, and errors that name file, line and key."""

import pytest

from supervisor.config import Config, ConfigError, load, parse


def test_missing_file_is_defaults(tmp_path):
    assert load(tmp_path / "hermesd.yaml") == Config()


def test_full_file(tmp_path):
    cfg = parse(
        """
command: [/usr/bin/env, hermes]
restart: {initial_delay: 0.5, max_delay: 30, factor: 3, jitter: 0.2, healthy_after: 10}
stop_timeout: 5
logs: {max_bytes: 65536, backups: 2}
environment: {FOO: bar, DEBUG: true}
profiles:
  Coder: {enabled: false, environment: {X: 1}, stop_timeout: 2}
""",
        tmp_path / "hermesd.yaml",
    )
    assert cfg.command == ("/usr/bin/env", "hermes")
    assert cfg.restart.max_delay == 30 and cfg.restart.factor == 3
    assert cfg.stop_timeout == 5 and cfg.log_max_bytes == 65536 and cfg.log_backups == 2
    assert cfg.for_profile("coder").enabled is False
    assert cfg.child_environment("coder") == {"FOO": "bar", "DEBUG": "true", "X": "1",
                                              "HERMES_KANBAN_DISPATCH_IN_GATEWAY": "false"}  # not the dispatcher
    assert cfg.for_profile("other").enabled is True


@pytest.mark.parametrize(
    ("text", "line", "key"),
    [
        ("restart:\n  initial_delay: 1\n  bogus: 2\n", 3, "restart.bogus"),
        ("logs:\n  max_bytes: -1\n", 2, "logs.max_bytes"),
        ("unknown: 1\n", 1, "unknown"),
        ("profiles:\n  coder:\n    enabled: maybe\n", 3, "profiles.coder.enabled"),
        ("environment:\n  TELEGRAM_BOT_TOKEN: x\n", 2, "environment.TELEGRAM_BOT_TOKEN"),
        ("environment:\n  HERMES_HOME: /x\n", 2, "environment.HERMES_HOME"),
        ("restart:\n  jitter: 1.5\n", 2, "restart.jitter"),
        ("command: []\n", 1, "command"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path, text, line, key):
    path = tmp_path / "hermesd.yaml"
    with pytest.raises(ConfigError) as err:
        parse(text, path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: {key}:"), msg


@pytest.mark.parametrize(("text", "line", "key"), [
    ("restart:\n  initial_delay: .nan\n", 2, "restart.initial_delay"),
    ("restart:\n  max_delay: .inf\n", 2, "restart.max_delay"),
    ("restart:\n  factor: .inf\n", 2, "restart.factor"),
    ("restart:\n  healthy_after: -.inf\n", 2, "restart.healthy_after"),
    ("restart:\n  jitter: .nan\n", 2, "restart.jitter"),
    ("stop_timeout: .nan\n", 1, "stop_timeout"),
    ("profiles:\n  coder:\n    stop_timeout: .nan\n", 3, "profiles.coder.stop_timeout"),
    ("logs:\n  max_bytes: .inf\n", 2, "logs.max_bytes"),
])
def test_non_finite_numbers_are_refused(tmp_path, text, line, key):
    """NaN passes every ``<`` and ``>`` check and infinity overflows a backoff: both are refused,
    by the same error a daemon shows in status and ``doctor`` prints (file, line, key)."""
    path = tmp_path / "hermesd.yaml"
    with pytest.raises(ConfigError) as err:
        parse(text, path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:{line}: {key}: expected a "), msg


@pytest.mark.parametrize(("text", "line", "says"), [
    ("restart:\n  initial_delay: [1,\n", 2, "the file ends too early"),
    ("command: [unclosed\n", 1, "while parsing a flow sequence that the file never closes"),
    ("restart: {factor: 2\n\n\n", 1, "while parsing a flow mapping that the file never closes"),
    ('command: "open\n', 1, "while scanning a quoted scalar that the file never closes"),
    ("restart:\n  factor: 2\n stop_timeout: 3\n", 3, ""),  # not at the end: the problem's own line
])
def test_invalid_yaml_names_the_line_to_fix(tmp_path, text, line, says):
    """An unclosed bracket is reported where it opened, not where the file ends (a line past the last)."""
    path = tmp_path / "hermesd.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value).startswith(f"{path}:{line}: invalid YAML: {says}"), str(err.value)


def test_credential_value_not_echoed(tmp_path):
    with pytest.raises(ConfigError) as err:
        parse("environment:\n  DISCORD_BOT_TOKEN: supersecretvalue\n", tmp_path / "h.yaml")
    assert "supersecretvalue" not in str(err.value)


@pytest.mark.parametrize(
    "text",
    [
        'profiles:\n  "": {enabled: false}\n',
        "profiles:\n  Bad Name: {enabled: false}\n",
        "stop_timeout: !!python/name:os.system\n",
        "stop_timeout: 2001-13-45\n",
    ],
)
def test_hostile_values_are_config_errors(tmp_path, text):
    path = tmp_path / "hermesd.yaml"
    with pytest.raises(ConfigError, match=str(path)):
        parse(text, path)


def test_hung_settings_merge_top_and_profile(tmp_path):
    """``startup_grace`` and ``hung_after`` reach hung detection, the profile's keys over the top's."""
    path = tmp_path / "hermesd.yaml"
    path.write_text("hung_after: 90\nstartup_grace: 200\nprofiles:\n  coder:\n    startup_grace: 50\n"
                    "  writer:\n    hung_after: null\n")
    cfg = load(path)
    assert (cfg.hung_for("default").hung_after, cfg.hung_for("default").startup_grace) == (90, 200)
    assert (cfg.hung_for("coder").hung_after, cfg.hung_for("coder").startup_grace) == (90, 50)
    assert cfg.hung_for("writer").hung_after is None

"""Metrics: the text parses with the official parser, lints with promtool, and counters equal the journal."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from supervisor.observe.events import EXIT_KINDS
from supervisor.observe.metrics import Counters, render
from supervisor.observe.observer import Observer
from supervisor.observe.reader import iter_events, last_run
from supervisor.observe.sections import ObserveConfigError, parse_metrics
from tests.observe import scenarios
from tests.observe.conftest import json_lines, run_cli

NOW = 1_800_000_000.0


def row(name, state="running", **extra):
    base = {"name": name, "home": f"/r/profiles/{name}", "state": state, "reason": None, "pid": 100,
            "uptime_s": 42.5, "restarts": 3, "last_exit": {"at": NOW - 60, "kind": "crash"}, "next_retry_at": None,
            "should_run": True, "hold": None, "platforms": {"telegram": {"state": "connected"},
                                                             "discord": {"state": "retrying"}},
            "heartbeat_age_s": 12.0, "rss_bytes": 80_000_000, "cpu_percent": 1.0,
            "serving": {"ready": False, "word": "partly", "why": "discord (retrying)"}}
    return {**base, **extra}


DOC = {
    "root": "/r",
    "supervisor": {"pid": 4242, "running": True, "ready": True, "config_problem": None},
    "profiles": [
        row("default"),
        row("coder", "backoff", pid=None, uptime_s=None, next_retry_at=NOW + 30, memory_bytes=300_000_000, tasks=42,
            limits={"memory_max": 536_870_912, "tasks_max": 512, "mechanism": "watch"}, isolation="landlock"),
        row("writer", "held", pid=None, uptime_s=None, hold={"kind": "credential_conflict", "message": "m"},
            platforms={'we"ird\\name\n': {"state": "connected"}}, isolation={"mechanism": "mount", "strict": True},
            serving={"ready": True}),
    ],
}


def families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams, name, **labels):
    fam_name = name[: -len("_total")] if name.endswith("_total") else name
    for s in fams[fam_name].samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    raise KeyError((name, labels))


def test_the_text_parses_with_the_official_parser_and_says_what_status_says():
    c = Counters()
    c.control_request("status", "ok")
    c.control_request("bogus-verb", "weird")
    c.hook_outcome("timeout")
    text = render(DOC, c, version="0.1.0", now=NOW, process=True)
    fams = families(text)
    assert value(fams, "hermesd_build_info", version="0.1.0") == 1
    assert value(fams, "hermesd_profile_up", profile="default") == 1
    assert value(fams, "hermesd_profile_up", profile="coder") == 0
    assert value(fams, "hermesd_profile_state", profile="coder", state="backoff") == 1
    assert value(fams, "hermesd_profile_state", profile="coder", state="running") == 0
    assert value(fams, "hermesd_profiles", state="held") == 1 and value(fams, "hermesd_profiles", state="running") == 1
    assert value(fams, "hermesd_profile_hold_info", profile="writer", kind="credential_conflict") == 1
    assert value(fams, "hermesd_profile_restarts_total", profile="coder") == 3
    assert value(fams, "hermesd_profile_uptime_seconds", profile="default") == 42.5
    assert value(fams, "hermesd_profile_last_exit_timestamp_seconds", profile="coder") == NOW - 60
    assert value(fams, "hermesd_profile_next_retry_timestamp_seconds", profile="coder") == NOW + 30
    assert value(fams, "hermesd_profile_heartbeat_age_seconds", profile="default") == 12.0
    assert value(fams, "hermesd_profile_serving", profile="default") == 0  # discord is retrying
    assert value(fams, "hermesd_profile_serving", profile="writer") == 1
    assert value(fams, "hermesd_profile_platform_connected", profile="default", platform="telegram") == 1
    assert value(fams, "hermesd_profile_platform_connected", profile="default", platform="discord") == 0
    assert value(fams, "hermesd_profile_platform_connected", profile="writer", platform='we"ird\\name\n') == 1
    assert value(fams, "hermesd_profile_memory_bytes", profile="coder") == 300_000_000
    assert value(fams, "hermesd_profile_tasks", profile="coder") == 42
    assert value(fams, "hermesd_profile_limit", profile="coder", limit="memory_max") == 536_870_912
    assert value(fams, "hermesd_profile_limits_info", profile="coder", mechanism="watch") == 1
    assert value(fams, "hermesd_profile_isolation_info", profile="coder", mechanism="landlock") == 1
    assert value(fams, "hermesd_profile_isolation_info", profile="writer", mechanism="mount", strict="true") == 1
    assert value(fams, "hermesd_profile_resident_memory_bytes", profile="default") == 80_000_000
    assert value(fams, "hermesd_control_requests_total", verb="status", outcome="ok") == 1
    assert value(fams, "hermesd_control_requests_total", verb="other", outcome="error") == 1
    assert value(fams, "hermesd_hook_runs_total", outcome="timeout") == 1
    for kind in EXIT_KINDS:  # every classification exists from the start, so rate() sees the first one
        assert value(fams, "hermesd_profile_exits_total", profile="coder", kind=kind) == 0
    assert value(fams, "process_resident_memory_bytes") > 1_000_000
    assert "hermesd_profile_uptime_seconds" in fams and not [
        s for s in fams["hermesd_profile_uptime_seconds"].samples if s.labels["profile"] == "coder"]


def test_junk_in_the_status_document_never_breaks_the_text():
    junk = {"supervisor": "nope", "profiles": [
        None, 3, {"name": 5}, {"name": "x", "state": ["a"], "uptime_s": "long", "pid": 1, "last_exit": "yesterday",
                               "platforms": {"tg": "connected", 7: {"state": "connected"}}, "limits": [1],
                               "isolation": 3.5, "restarts": True, "heartbeat_age_s": float("nan")}]}
    junk["supervisor"] = {}
    fams = families(render(junk, None, now=NOW))
    assert value(fams, "hermesd_profile_up", profile="x") == 0


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package: prometheus)")
def test_promtool_lints_the_text_clean():
    text = render(DOC, Counters(), version="0.1.0", now=NOW, process=True)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "" and done.stderr.strip() == "", done.stdout + done.stderr


def test_counters_match_the_events_read_back_from_the_journal(events_root):
    """The live counters, a replay of the journal, and the /metrics numbers agree with `events --json`."""
    for name in ("coder", "writer"):
        (events_root / "profiles" / name).mkdir()
    obs = Observer(events_root, daemon_pid=777)
    obs.open()
    old = Observer(events_root, daemon_pid=666)  # an earlier daemon run in the same journal: not counted
    old.open()
    for type_, profile, fields in scenarios.crash_loop("coder", 1, 2):
        old.emit(type_, profile, **fields)
    for type_, profile, fields in scenarios.daemon_run(["coder", "writer"]):
        obs.emit(type_, profile, **fields)
    obs.journal.close()
    old.journal.close()
    folder = events_root / ".hermesd" / "events"
    replayed = Counters.replay(last_run(folder))
    assert replayed.event_counts() == obs.counters.event_counts()
    assert Counters.replay(last_run(folder, daemon=666)).event_counts() != obs.counters.event_counts()
    events = [e for e in json_lines(run_cli("events", "--json", "--root", str(events_root)).stdout)
              if e["daemon"] == 777]
    doc = {"supervisor": {"running": True}, "profiles": [row("coder"), row("writer")]}
    fams = families(obs.metrics_text(doc))
    for p in ("coder", "writer"):
        for kind in EXIT_KINDS:
            n = sum(1 for e in events if e["type"] == "exited" and e["profile"] == p and e["kind"] == kind)
            assert value(fams, "hermesd_profile_exits_total", profile=p, kind=kind) == n, (p, kind)
        starts = sum(1 for e in events if e["type"] == "started" and e["profile"] == p)
        assert value(fams, "hermesd_profile_starts_total", profile=p) == starts
        hung = sum(1 for e in events if e["type"] == "hung_kill" and e["profile"] == p)
        assert value(fams, "hermesd_profile_hung_kills_total", profile=p) == hung
    assert value(fams, "hermesd_profile_limit_kills_total", profile="writer", limit="memory_max") == 1
    assert value(fams, "hermesd_profile_holds_total", profile="coder", kind="config_error") == 1
    for t in {e["type"] for e in events}:
        assert value(fams, "hermesd_events_total", type=t) == sum(1 for e in events if e["type"] == t)
    assert value(fams, "hermesd_config_reloads_total", outcome="rejected") == 1
    assert len(list(iter_events(folder))) == len(events) + 2 * 3 + 2  # the old run is still in the journal


def test_metrics_command_without_a_daemon_reads_the_files(events_root):
    (events_root / "profiles" / "coder").mkdir()
    done = run_cli("metrics", "--root", str(events_root))
    assert done.returncode == 0, done.stderr
    fams = families(done.stdout)
    assert value(fams, "hermesd_supervisor_running") == 0
    assert value(fams, "hermesd_profile_up", profile="coder") == 0
    assert "process_resident_memory_bytes" not in fams  # the CLI's own process is not hermesd


@pytest.mark.parametrize(("value_", "expected"), [
    ({"listen": "127.0.0.1:9464"}, ("127.0.0.1", 9464, None)),
    ({"listen": "localhost:9100"}, ("127.0.0.1", 9100, None)),
    ({"listen": "[::1]:9464"}, ("::1", 9464, None)),
    ({"listen": 9464}, ("127.0.0.1", 9464, None)),
    ({"listen": "unix:/run/hermesd/metrics.sock"}, (None, None, "/run/hermesd/metrics.sock")),
    ({"listen": "/tmp/m.sock"}, (None, None, "/tmp/m.sock")),
    ({"listen": "0.0.0.0:9464", "allow_public": True}, ("0.0.0.0", 9464, None)),
    ({"listen": "192.0.2.7:9464", "allow_public": True}, ("192.0.2.7", 9464, None)),
])
def test_listen_settings(value_, expected):
    s = parse_metrics(value_)
    assert (s.host, s.port, s.unix_path) == expected


@pytest.mark.parametrize(("value_", "key", "words"), [
    ({"listen": "0.0.0.0:9464"}, "metrics.listen", "allow_public: true"),
    ({"listen": ":9464"}, "metrics.listen", "not a loopback address"),
    ({"listen": "192.0.2.7:9464"}, "metrics.listen", "readable from the network"),
    ({"listen": "example.com:9464"}, "metrics.listen", "not an IP address"),
    ({"listen": "127.0.0.1"}, "metrics.listen", "HOST:PORT"),
    ({"listen": "127.0.0.1:99999"}, "metrics.listen", "1-65535"),
    ({"listen": "unix:relative.sock"}, "metrics.listen", "absolute path"),
    ({"listen": "127.0.0.1:9464", "allow_public": "yes"}, "metrics.allow_public", "true or false"),
    ({"port": 9464}, "metrics.port", "unknown key"),
    ("127.0.0.1:9464", "metrics", "expected a mapping"),
])
def test_listen_settings_refused(value_, key, words):
    with pytest.raises(ObserveConfigError) as info:
        parse_metrics(value_)
    assert info.value.key == key and words in str(info.value)


def test_no_listen_means_no_listener():
    assert parse_metrics({}) is None and parse_metrics({"allow_public": False}) is None

"""contrib/: the Prometheus rules and the Grafana dashboard, checked by the tools those projects publish.

- ``promtool`` (Debian package ``prometheus``): ``check rules`` on the rules, ``test rules`` to see
  each alert fire (and stay quiet) on synthetic series, and every dashboard query parsed as PromQL
  and evaluated against series made from hermesd's real /metrics output.
- ``tsc`` with ``@grafana/schema`` (npm, Grafana's published dashboard types): the dashboard JSON
  type-checks as a ``Dashboard``, with excess-property checks (a misspelt key fails).
Tests that need a tool skip and say how to get it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from supervisor.observe.observer import Observer
from tests.observe import scenarios
from tests.observe.conftest import REPO

RULES = REPO / "contrib" / "prometheus" / "hermesd-rules.yml"
DASHBOARD = REPO / "contrib" / "grafana" / "hermesd.json"
NPM = REPO / ".venv" / "npm" / "node_modules"

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool is not installed (Debian package: prometheus)")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def exported_names(root: Path) -> set[str]:
    """Every sample name hermesd's /metrics can carry (a doc with every optional key, every counter set)."""
    return {s.name for f in text_string_to_metric_families(sample_metrics(root)) for s in f.samples}


def sample_metrics(root: Path) -> str:
    obs = Observer(root, daemon_pid=1)
    obs.open()
    for type_, profile, fields in scenarios.daemon_run(["coder", "writer"]):
        obs.emit(type_, profile, **fields)
    obs.counters.control_request("status", "ok")
    obs.counters.hook_outcome("ok")
    rows = [{"name": "coder", "state": "running", "pid": 5, "uptime_s": 10.0, "restarts": 2, "should_run": True,
             "last_exit": {"at": 1.0}, "heartbeat_age_s": 3.0, "rss_bytes": 1000, "memory_bytes": 5000, "tasks": 9,
             "limits": {"memory_max": 10_000, "tasks_max": 100, "mechanism": "watch"}, "isolation": "landlock",
             "platforms": {"telegram": {"state": "connected"}}, "serving": {"ready": True}},
            {"name": "writer", "state": "held", "pid": None, "restarts": 0, "should_run": True,
             "hold": {"kind": "config_error", "message": "m"}, "next_retry_at": None,
             "platforms": {"discord": {"state": "retrying"}}}]
    doc = {"supervisor": {"running": True, "ready": True}, "profiles": rows}
    return obs.metrics_text(doc)


# --------------------------------------------------------------------------- alert rules


@needs_promtool
def test_rules_pass_promtool_check():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr


def test_rules_only_use_metrics_hermesd_exports(events_root):
    names = exported_names(events_root) | {"up"}
    for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]:
        used = set(re.findall(r"\b((?:hermesd|process)_[a-z_]+|up)\b(?=\s*[{\[\s=<>!)]|$)", rule["expr"]))
        assert used and used <= names, (rule["alert"], used - names)


def stripped_rules(tmp: Path) -> Path:
    """The rules without annotations, so unit tests compare alert labels (annotations are tested once, below)."""
    doc = yaml.safe_load(RULES.read_text())
    for rule in doc["groups"][0]["rules"]:
        rule.pop("annotations", None)
    out = tmp / "rules.yml"
    out.write_text(yaml.safe_dump(doc))
    return out


H = 'job="hermesd",instance="h:9464"'

ALERT_TESTS = [
    # (alert, input series, eval time, expected label sets (empty: must not fire))
    ("HermesdDown", [(f"up{{{H}}}", "0x10")], "5m", [{}]),
    ("HermesdDown", [(f"up{{{H}}}", "0 0 1x10")], "5m", []),
    ("HermesdNotRunning", [(f"hermesd_supervisor_running{{{H}}}", "0x10")], "5m", [{}]),
    ("HermesdProfileDown", [(f'hermesd_profile_should_run{{{H},profile="coder"}}', "1x10"),
                            (f'hermesd_profile_up{{{H},profile="coder"}}', "0x10")], "7m", [{"profile": "coder"}]),
    ("HermesdProfileDown", [(f'hermesd_profile_should_run{{{H},profile="coder"}}', "0x10"),  # stopped by the operator
                            (f'hermesd_profile_up{{{H},profile="coder"}}', "0x10")], "7m", []),
    ("HermesdProfileDown", [(f'hermesd_profile_should_run{{{H},profile="coder"}}', "1x10"),  # restarted in time
                            (f'hermesd_profile_up{{{H},profile="coder"}}', "0 0 0 1x10")], "7m", []),
    ("HermesdProfileCrashLooping", [(f'hermesd_profile_exits_total{{{H},profile="coder",kind="crash"}}', "0+1x20")],
     "10m", [{"profile": "coder"}]),
    ("HermesdProfileCrashLooping", [(f'hermesd_profile_exits_total{{{H},profile="coder",kind="planned"}}', "0+1x20"),
                                    (f'hermesd_profile_exits_total{{{H},profile="coder",kind="crash"}}', "0x20")],
     "10m", []),
    ("HermesdProfileHeld", [(f'hermesd_profile_hold_info{{{H},profile="coder",kind="credential_conflict"}}', "1x10")],
     "5m", [{"profile": "coder", "kind": "credential_conflict"}]),
    ("HermesdHungKills", [(f'hermesd_profile_hung_kills_total{{{H},profile="coder"}}', "0 0 0 1 1 1 1 1")], "5m",
     [{"profile": "coder"}]),
    ("HermesdHungKills", [(f'hermesd_profile_hung_kills_total{{{H},profile="coder"}}', "0x60")], "50m", []),
    ("HermesdLimitKills", [(f'hermesd_profile_limit_kills_total{{{H},profile="coder",limit="memory_max"}}',
                            "0 0 1 1 1")], "4m", [{"profile": "coder", "limit": "memory_max"}]),
    ("HermesdConfigRejected", [(f"hermesd_config_problem{{{H}}}", "1x10")], "6m", [{}]),
    ("HermesdProfileNotServing", [(f'hermesd_profile_serving{{{H},profile="coder"}}', "0x15"),
                                  (f'hermesd_profile_up{{{H},profile="coder"}}', "1x15")], "12m",
     [{"profile": "coder"}]),
    ("HermesdProfileNotServing", [(f'hermesd_profile_serving{{{H},profile="coder"}}', "0x15"),  # not running at all
                                  (f'hermesd_profile_up{{{H},profile="coder"}}', "0x15")], "12m", []),
    ("HermesdProfileNotServing", [(f'hermesd_profile_serving{{{H},profile="coder"}}', "0 0 0 1x15"),  # served in time
                                  (f'hermesd_profile_up{{{H},profile="coder"}}', "1x15")], "12m", []),
]


@needs_promtool
def test_each_alert_fires_when_it_should_and_only_then(tmp_path):
    rules = stripped_rules(tmp_path)
    severities = {r["alert"]: r["labels"]["severity"] for r in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]}
    tests = []
    for alert, series, at, expected in ALERT_TESTS:
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": [
                {"exp_labels": {"severity": severities[alert], "job": "hermesd", "instance": "h:9464", **labels}}
                for labels in expected]}],
        })
    spec = tmp_path / "alerts_test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": tests}))
    done = promtool("test", "rules", str(spec))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout + done.stderr
    fired = {a for a, _s, _t, e in ALERT_TESTS if e}
    assert fired == {"HermesdDown", "HermesdNotRunning", "HermesdProfileDown", "HermesdProfileCrashLooping",
                     "HermesdProfileHeld", "HermesdHungKills", "HermesdLimitKills", "HermesdConfigRejected",
                     "HermesdProfileNotServing"}


@needs_promtool
def test_annotations_render_with_the_labels(tmp_path):
    spec = tmp_path / "t.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": f'hermesd_profile_hold_info{{{H},profile="coder",kind="config_error"}}',
                          "values": "1x10"}],
        "alert_rule_test": [{"eval_time": "5m", "alertname": "HermesdProfileHeld", "exp_alerts": [{
            "exp_labels": {"severity": "warning", "job": "hermesd", "instance": "h:9464", "profile": "coder",
                           "kind": "config_error"},
            "exp_annotations": {
                "summary": "Hermes profile coder is held (config_error)",
                "description": "hermesd will not start profile coder until the cause (config_error) is fixed or "
                               "`hermesd start coder` is run. `hermesd status` says why."}}]}]}]}))
    done = promtool("test", "rules", str(spec))
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- the dashboard


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    return out


def concrete(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced, as Grafana sends it to Prometheus."""
    return (expr.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$job", "hermesd")
            .replace("$instance", ".*").replace("$profile", ".*"))


def test_dashboard_structure():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "hermesd" and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} and p["targets"], p["title"]
            assert all(t["datasource"] == p["datasource"] for t in p["targets"])
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    cells = {}  # no two panels overlap
    for p in dash["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, (p["title"], cells.get((x, y)))
                cells[(x, y)] = p["title"]
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "job", "instance", "profile"]
    used_vars = set(re.findall(r"\$(\w+)", json.dumps(dash)))
    assert used_vars <= {"datasource", "job", "instance", "profile", "__rate_interval", "__all"}


def test_dashboard_queries_only_use_metrics_hermesd_exports(events_root):
    names = exported_names(events_root) | {"up"}
    dash = json.loads(DASHBOARD.read_text())
    queries = [q for _t, q in dashboard_queries()]
    queries += [v["query"]["query"] for v in dash["templating"]["list"] if isinstance(v.get("query"), dict)]
    for q in queries:
        used = set(re.findall(r"\b((?:hermesd|process)_[a-z_]+|up)\b(?=\s*[{\[\s,)=<>!]|$)", q))
        assert used and used <= names, (q, used - names)


@needs_promtool
def test_dashboard_queries_parse_and_return_data_from_hermesd_metrics(events_root, tmp_path):
    """Every panel query is valid PromQL (promtool parses it as a recording rule) and returns series when
    evaluated over hermesd's real /metrics output (promtool's rule unit tests, no server needed)."""
    queries = dashboard_queries()
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": concrete(q)} for i, (_t, q) in enumerate(queries)]}]}
    rule_file = tmp_path / "dashboard-rules.yml"
    rule_file.write_text(yaml.safe_dump(rules))
    done = promtool("check", "rules", str(rule_file))
    assert done.returncode == 0, done.stdout + done.stderr
    series = [{"series": f'up{{{H}}}', "values": "1x30"}]
    for fam in text_string_to_metric_families(sample_metrics(events_root)):
        for s in fam.samples:
            labels = ",".join([H] + [f'{k}="{v}"' for k, v in sorted(s.labels.items())])
            series.append({"series": f"{s.name}{{{labels}}}", "values": f"{s.value!r}+0x30"})
    tests = [{"interval": "1m", "input_series": series, "promql_expr_test": [
        {"expr": f"count({concrete(q)}) > bool 0", "eval_time": "20m", "exp_samples": [{"labels": "{}", "value": 1}]}
        for _t, q in queries]}]
    spec = tmp_path / "dashboard_test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [], "evaluation_interval": "1m", "tests": tests}))
    done = promtool("test", "rules", str(spec))
    assert done.returncode == 0 and "SUCCESS" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]


_ENUMS = {"ThresholdsMode": {"absolute": "Absolute", "percentage": "Percentage"},
          "MappingType": {"value": "ValueToText", "range": "RangeToText", "regex": "RegexToText",
                          "special": "SpecialValue"}}


def _ts(value: object, path: tuple = ()) -> str:
    """The dashboard as a TypeScript literal; string values of Grafana's enum fields become enum members
    (TypeScript will not take a plain string for an enum), and an unknown one a member that does not exist."""
    def member(enum: str, v: object) -> str:
        name = _ENUMS[enum].get(str(v)) or "NOT_A_MEMBER_" + re.sub(r"\W", "", str(v))
        return f"{enum}.{name}"

    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            if k == "mode" and path and path[-1] == "thresholds":
                code = member("ThresholdsMode", v)
            elif k == "type" and len(path) >= 2 and path[-2] == "mappings":
                code = member("MappingType", v)
            else:
                code = _ts(v, (*path, k))
            items.append(f"{json.dumps(k)}: {code}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_ts(v, (*path, i)) for i, v in enumerate(value)) + "]"
    return json.dumps(value)


def typecheck(dash: dict, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    work = tmp_path / "ts"
    work.mkdir(parents=True)
    (work / "node_modules").symlink_to(NPM)
    (work / "check.ts").write_text('import { type Dashboard, ThresholdsMode, MappingType } from "@grafana/schema";\n'
                                   f"export const dashboard: Dashboard = {_ts(dash)};\n")
    return subprocess.run([str(NPM / ".bin" / "tsc"), "--noEmit", "--strict", "--module", "esnext",
                           "--moduleResolution", "bundler", "--target", "es2022", "check.ts"],
                          capture_output=True, text=True, timeout=300, cwd=work)


@pytest.mark.skipif(not (NPM / ".bin" / "tsc").exists() or not (NPM / "@grafana" / "schema").exists()
                    or shutil.which("node") is None,
                    reason="needs node and: npm install --prefix .venv/npm typescript@5 @grafana/schema@13")
def test_dashboard_type_checks_against_grafanas_published_schema(tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    done = typecheck(dash, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    dash["panels"][1]["gridPos"]["wdith"] = 3  # the check catches a misspelt key ...
    dash["panels"][1]["fieldConfig"]["defaults"]["thresholds"]["mode"] = "absolut"  # ... and a wrong enum value
    bad = typecheck(dash, tmp_path / "bad")
    assert bad.returncode != 0 and "wdith" in bad.stdout and "NOT_A_MEMBER_absolut" in bad.stdout, bad.stdout

"""``hermesd status``: its exit code and text from the document alone (pure functions), and the row a
gateway's files make."""

from __future__ import annotations

import json
import os
from pathlib import Path

from supervisor.daemon.status_rows import make_row
from supervisor.ops.status import exit_code


def doc(*rows: dict, running: bool = True, answering: bool | None = None) -> dict:
    sup: dict = {"pid": 1, "running": running}
    if answering is not None:
        sup["answering"] = answering
    return {"root": "/r", "supervisor": sup, "profiles": list(rows)}


def row(name: str, state: str = "running", **extra) -> dict:
    return make_row(name, Path("/nonexistent") / name, state=state, should_run=True, **extra)


def serving_row(home: Path, name: str, platforms: dict | None = None, **extra) -> dict:
    """A row whose gateway (this test process, as far as the files say) reports ``running``."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "gateway_state.json").write_text(json.dumps(
        {"pid": os.getpid(), "gateway_state": "running", "platforms": platforms or {}}))
    return make_row(name, home, state="running", should_run=True, pid=os.getpid(), **extra)


def test_everything_running_and_serving_is_0(tmp_path):
    assert exit_code(doc(serving_row(tmp_path / "a", "a"), serving_row(tmp_path / "b", "b"))) == 0


def test_a_profile_that_should_run_and_does_not_is_1(tmp_path):
    assert exit_code(doc(serving_row(tmp_path / "a", "a"), row("b", "held"))) == 1


def test_running_but_not_serving_is_1_and_the_table_says_why(tmp_path):
    """Ready means serving: a gateway that has not reported, a platform that is not connected, an API
    server that does not answer from its own socket all make a running profile not serve."""
    from supervisor.ops.status import render

    silent = row("a")  # running, but its gateway has reported nothing
    assert silent["serving"]["ready"] is False and silent["serving"]["why"] == "its gateway has not reported yet"
    assert exit_code(doc(silent)) == 1
    fatal = serving_row(tmp_path / "b", "b", {"discord": {"state": "fatal", "error_message": "bad token"},
                                              "slack": {"state": "connected"}})
    assert fatal["serving"]["word"] == "partly" and exit_code(doc(fatal)) == 1
    api = {"pid": os.getpid(), "port": 8642, "outcome": "timeout", "answered": False,
           "detail": "127.0.0.1:8642 did not answer /v1/health within 2s"}
    hung = serving_row(tmp_path / "c", "c", {"api_server": {"state": "connected"}}, api=api)
    assert hung["serving"]["word"] == "no" and exit_code(doc(hung)) == 1
    lines = render(doc(fatal, hung), now=0).splitlines()
    at = lines[1].index("SERVING")
    assert lines[1].split()[lines[1].split().index("PLATFORMS") + 1] == "SERVING"
    assert [ln[at:].split()[0] for ln in lines[2:4]] == ["partly", "no"]
    assert "  c: api_server: 127.0.0.1:8642 did not answer /v1/health within 2s" in lines
    assert "  b: discord: fatal: bad token" in lines  # the platform's own note, not repeated as a serving note
    assert not any("not serving" in ln for ln in lines)
    answered = serving_row(tmp_path / "d", "d", {"api_server": {"state": "connected"}},
                           api={**api, "outcome": "answered", "answered": True, "detail": "answers on 127.0.0.1:8642"})
    assert answered["serving"]["ready"] is True and exit_code(doc(answered)) == 0


def test_a_row_from_a_daemon_too_old_to_judge_serving_counts_running_as_before():
    old = {k: v for k, v in row("a").items() if k != "serving"}
    assert exit_code(doc(old)) == 0


def test_a_running_gateway_missing_a_platform_library_is_1():
    """Issue #9: upstream never starts a platform whose library is missing; that is not healthy."""
    missing = [{"platform": "discord", "missing": ["discord"], "install": "python -m pip install discord.py"}]
    assert exit_code(doc(row("a"), row("b", requirements_missing=missing))) == 1


def test_daemon_down_is_3_and_not_answering_is_4():
    assert exit_code(doc(row("a"), running=False)) == 3
    assert exit_code(doc(row("a"), answering=False)) == 4


def test_the_text_status_shows_confinement_limits_and_kanban():
    """What ``--json`` details per profile has a compact line in the text too: one per distinct
    confinement (naming its profiles), one per profile with limits, the dispatcher and each worker."""
    from supervisor.ops.status import render

    iso = {"summary": "namespace+landlock; signals scoped; shares kanban; 3 gap(s), see status --json"}
    rows = [
        row("default", isolation=iso),
        row("coder", isolation=iso, memory_bytes=85 * 1048576, tasks=3, mechanism="cgroup",
            limits={"memory_max": 300 * 1048576, "tasks_max": 64, "cpu_weight": 50}),
        row("writer", isolation={"summary": "off: isolation: off in hermesd.yaml"}),
    ]
    rows[0]["kanban"] = {"dispatcher": True, "dispatcher_pid": 41, "dispatcher_supervised": True, "workers": []}
    rows[2]["kanban"] = {"dispatcher": False,
                         "workers": [{"pid": 77, "task": "t_1\x1b[2J", "board": None, "tree": "hermesd"}]}
    text = render(doc(*rows), now=0)
    lines = text.splitlines()
    assert f"  isolation  default, coder: {iso['summary']}" in lines
    assert "  isolation  writer: off: isolation: off in hermesd.yaml" in lines
    assert "  limits     coder: memory 85M of 300M, tasks 3 of 64, cpu weight 50 (cgroup)" in lines
    assert "  kanban     default: dispatcher (PID 41, hermesd's child)" in lines
    assert "  kanban     writer: worker for task t_1\\x1b[2J (PID 77, in hermesd's tree)" in lines
    assert "\x1b" not in text  # a task id is the board's: never a terminal escape


def test_the_text_status_escapes_an_isolation_summary_and_reads_nothing_else_of_the_plan():
    """render escapes only what it shows (the plan's detail, two thirds of a daemon's answer, is not
    walked): the summary is escaped like every other field, and the rest of the plan changes nothing."""
    from profiles.printable import printable
    from supervisor.ops.status import render

    hostile = "namespace\x1b[2K\nbravo running\u202e"
    plan = {"summary": hostile, "gaps": ["\x1b]52;c;ZXZpbA==\x07"], "\x1b[31mkey": {"deep": ["\r"]}}
    text = render(doc(row("a", isolation=plan), row("b", isolation={"no": "summary"})), now=0)
    assert f"  isolation  a: {printable(hostile)}" in text.splitlines()
    assert "\x1b" not in text and "\u202e" not in text and "\r" not in text
    assert text == render(doc(row("a", isolation={"summary": hostile}), row("b", isolation={})), now=0)


def test_a_platform_blocked_by_another_gateway_s_lock_is_a_lock_conflict(tmp_path):
    """What the gateway writes in ``gateway_state.json`` when a token's lock is taken elsewhere
    (upstream's ``*_lock`` error codes) becomes the row's lock conflict and a note in the text; the
    file only counts when it is this gateway's (its PID)."""
    from supervisor.ops.status import render

    plats = {"telegram": {"state": "retrying", "error_code": "telegram-bot-token_lock",
                          "error_message": "token already in use by PID 4242"},
             "discord": {"state": "connected"}}
    (tmp_path / "gateway_state.json").write_text(json.dumps(
        {"pid": os.getpid(), "gateway_state": "running", "platforms": plats}))
    mine = make_row("coder", tmp_path, state="running", should_run=True, pid=os.getpid())
    assert mine["lock_conflicts"] == [{"platform": "telegram", "error_code": "telegram-bot-token_lock",
                                       "message": "token already in use by PID 4242"}]
    assert "  coder: telegram blocked by another gateway: token already in use by PID 4242" \
        in render(doc(mine), now=0).splitlines()
    stale = make_row("coder", tmp_path, state="running", should_run=True, pid=os.getpid() + 1)
    assert stale["lock_conflicts"] == [] and stale["gateway_state"] is None


def test_with_the_daemon_down_the_text_says_what_is_true(tmp_path):
    """No daemon: a profile it held says it was held (not merely "stopped"), and a dispatcher it
    started is no longer anybody's child."""
    from supervisor.daemon import state as state_mod
    from supervisor.daemon.status_rows import offline_document
    from supervisor.layout import Layout
    from supervisor.ops.status import render
    from supervisor.processes import identity
    from tests.harness import make_root

    root = make_root(tmp_path)
    layout = Layout(root)
    layout.ensure()
    hold = {"kind": "credential_conflict", "message": "telegram bot token (fingerprint ab12) is also configured "
                                                      "in profile 'coder' (running), which keeps it"}
    state_mod.save(layout.beneath(layout.state), identity.boot_id(), 1,
                   {"writer": {"home": str(root / "profiles" / "writer"), "hold": hold},
                    "coder": {"home": str(root / "profiles" / "coder"), "hold": "junk"}}, 0.0)
    rows = {r["name"]: r for r in offline_document(root)["profiles"]}
    assert rows["writer"]["state"] == "stopped"
    assert rows["writer"]["reason"] == f"hermesd is not running; when it last ran it held this profile: " \
                                       f"credential_conflict: {hold['message']}"
    assert rows["coder"]["reason"] == "hermesd is not running"  # a junk record adds nothing
    rows["default"]["kanban"] = {"dispatcher": True, "dispatcher_pid": 41, "dispatcher_supervised": True,
                                 "workers": []}
    down = render(doc(*rows.values(), running=False), now=0).splitlines()
    assert "  kanban     default: dispatcher (PID 41, started by hermesd, unsupervised while hermesd is not " \
           "running)" in down
    assert "  kanban     default: dispatcher (PID 41, hermesd's child)" in render(doc(*rows.values()), now=0)

"""The per-release contract table and the version probe: pure parts, then detection on real interpreters.

Nothing is installed: detection runs against the test venv's own hermes (hermes-agent from
``.[test]``) and against small scripts written here. Processes a probe leaves behind on purpose
(a detached ``sleep``) are found by their unique command line and killed by PID.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from profiles.upstream import releases as r
from supervisor.hermes.release import HermesVersionError, gateway_python, interpreter_argv
from supervisor.hermes.requirements import Facts, interpreter_facts
from tests.releases.gateway import poll

TEST_HERMES = Path(sys.executable).parent / "hermes"


# -- the table


def test_known_rows_are_ordered_unique_and_supported_from_the_oldest_supported_on():
    versions = [r.parse_version(c.release) for c in r.KNOWN]
    assert versions == sorted(versions) and len(set(versions)) == len(versions)
    assert r.KNOWN[-1].release == r.NEWEST_KNOWN
    oldest = r.parse_version(r.OLDEST_SUPPORTED)
    assert r.OLDEST_SUPPORTED in {c.release for c in r.KNOWN}
    for c, v in zip(r.KNOWN, versions, strict=True):
        assert c.supported is (v >= oldest), c.release
        assert c.exact


def test_every_supported_row_keeps_hermesd_s_isolation_guarantees():
    """What makes a release supportable: argv and environment alone pin a child to one profile, or (the
    multiplex-default line) they do together with the profile's own opt-out, which hermesd asks for."""
    for c in r.KNOWN:
        isolates = c.s6_pins_default and c.multiplexing is not r.Multiplexing.CONFIG_ONLY and c.lazy_installs_env
        if c.multiplexing is r.Multiplexing.DEFAULT_ON:
            isolates = isolates and c.standalone_key and c.force_flag and c.line is r.Line.MULTIPLEX_DEFAULT
        assert isolates is c.supported, c.release
        if c.supported:
            assert c.exit_restart == 75 and c.exit_fatal_config == 78


@pytest.mark.parametrize("row", r.KNOWN, ids=lambda c: c.release)
def test_contract_for_a_known_release(row):
    got = r.contract_for(row.release)
    if row.supported:
        assert got == row
    else:
        assert isinstance(got, r.Unsupported) and got.version == row.release
        msg = got.message
        assert "\n" not in msg and row.release in msg and r.OLDEST_SUPPORTED in msg and "pip install -U" in msg


def test_unsupported_messages_name_the_reason_of_their_line():
    assert "GATEWAY_MULTIPLEX_PROFILES" in r.contract_for("0.18.0").message
    assert "HERMES_S6_SUPERVISED_CHILD" in r.contract_for("0.16.0").message
    assert "HERMES_S6_SUPERVISED_CHILD" in r.contract_for("0.1").message


def test_gateway_args_follow_the_flag():
    assert r.contract_for("0.19.0").gateway_args == ("gateway", "run", "--external-supervisor")
    assert r.contract_for("0.18.2").gateway_args == ("gateway", "run")
    assert r.contract_for("0.18.1").heartbeat is False and r.contract_for("0.19.0").heartbeat_interval_s == 30.0


@pytest.mark.parametrize(("version", "row", "exact"), [
    ("0.18.1", "0.18.1", True),
    ("0.18.3", "0.18.2", True),  # an unmeasured patch between measured ones: the older row
    ("0.19.0rc1", "0.18.2", True),  # a pre-release of 0.19.0 is older than 0.19.0
    ("0.19.0.post1", "0.19.0", True),
    ("0.19.0+local.7", "0.19.0", True),
    ("v0.19", "0.19.0", True),
    ("0.19.1", "0.19.0", True),  # an unmeasured patch between measured rows: the older row
    ("0.20.0rc1", "0.19.0", True),
    ("0.22.2.post1", "0.22.2", True),
    ("1.0", "0.22.2", False),  # newer than known, no markers asked: the newest row, flagged
])
def test_contract_for_unmeasured_versions(version, row, exact):
    got = r.contract_for(version)
    assert isinstance(got, r.Contract) and got.release == row and got.exact is exact


def test_newer_than_known_note():
    note = r.newer_than_known_note("0.30.0")
    assert "0.30.0" in note and r.NEWEST_KNOWN in note and "test-releases.sh" in note and "\n" not in note


MUX = {"hermes_cli.gateway_multiplex_mode": True, "gateway.host_attach": True}
PER = {"hermes_cli.gateway_multiplex_mode": False, "gateway.host_attach": False}


@pytest.mark.parametrize(("version", "markers", "row", "exact"), [
    ("0.22.2.post1", MUX, "0.22.2", True),
    ("0.0.0", MUX, "0.22.2", False),  # upstream main without an install stamp reports 0.0.0
    ("0.21.3", {"gateway.host_attach": True}, "0.22.2", False),  # one marker is enough
    ("0.23.0", MUX, "0.22.2", False),
    ("0.23.0", PER, "0.20.1", False),  # newer, but its code has no multiplex default: the per-profile line
    ("0.21.3", PER, "0.20.1", False),
    ("0.20.1", PER, "0.20.1", True),
    ("0.19.0", PER, "0.19.0", True),
])
def test_the_line_is_chosen_by_behaviour_not_by_number(version, markers, row, exact):
    got = r.contract_for(version, markers)
    assert isinstance(got, r.Contract) and (got.release, got.exact) == (row, exact)
    assert (got.line is r.Line.MULTIPLEX_DEFAULT) is any(markers.values())
    if not exact:
        note = r.newer_than_known_note(version, got)
        assert version in note and row in note and got.line.value in note
        if got.detected_by:
            assert "gateway/host_attach.py" in note or "gateway_multiplex_mode.py" in note


def test_line_of():
    assert r.line_of(None) is None and r.line_of({}) is r.Line.PER_PROFILE
    assert r.line_of(MUX) is r.Line.MULTIPLEX_DEFAULT
    assert r.line_of({"gateway.profile_serving": True}) is r.Line.MULTIPLEX_DEFAULT
    assert set(r.marker_modules()) == set(MUX) | set(r.MAIN_MARKERS)


@pytest.mark.parametrize("version", ["0.21.3", "0.0.0", "0.22.2", "0.30.0", "junk"])
@pytest.mark.parametrize("marker", r.MAIN_MARKERS)
def test_upstream_mains_code_gets_the_contract_read_from_it_whatever_its_number(version, marker):
    """gateway/multiplex_mode.py, profile_serving.py or served_profiles.py (upstream main after 0.22.2; the
    old names may stay beside them): the read contract, flagged as such, never a measured row."""
    got = r.contract_for(version, {**MUX, marker: True})
    assert isinstance(got, r.Contract) and got is not r.UPSTREAM_MAIN and got.release == "main"
    assert (got.ran, got.exact, got.detected_by) == (False, False, (marker,))
    assert got.line is r.Line.MULTIPLEX_DEFAULT and got.standalone_key and got.attach_transient
    assert got.identity_markers == r.KNOWN[-1].identity_markers  # the name and identity-file rule
    note = r.newer_than_known_note(version, got)
    assert marker.replace(".", "/") + ".py" in note and "read, not run" in note and "\n" not in note


def test_force_only_where_the_attach_check_cannot_reach_the_other_gateways():
    """0.22.2 (measured): --force on every child. Upstream main: a standalone profile starts without it,
    so only a child whose confinement hides the other homes gets it. The per-profile line: never."""
    base = ("gateway", "run", "--external-supervisor")
    main, mux = r.UPSTREAM_MAIN, r.contract_for("0.22.2", MUX)
    assert isinstance(mux, r.Contract)
    assert main.gateway_args_for(hidden=False) == main.gateway_args == base
    assert main.gateway_args_for(hidden=True) == (*base, "--force")
    assert mux.gateway_args_for(hidden=False) == mux.gateway_args_for(hidden=True) == (*base, "--force")
    per = r.contract_for("0.19.0", PER)
    assert isinstance(per, r.Contract) and per.gateway_args_for(hidden=True) == base


@pytest.mark.parametrize("text", ["", "junk", "0.x", "0.0.1", "-1.0"])
def test_unreadable_or_ancient_versions_are_unsupported_not_errors(text):
    got = r.contract_for(text)
    assert isinstance(got, r.Unsupported) and "\n" not in got.message


def test_parse_version_orders_like_releases():
    p = r.parse_version
    assert p("0.9") < p("0.10") < p("0.18.0") < p("0.18.1") < p("0.19.0.dev1") < p("0.19.0a1") \
        < p("0.19.0b2") < p("0.19.0rc1") < p("0.19.0") < p("0.19.0.post1") < p("0.19.1")
    assert p("0.19") == p("0.19.0") == p("V0.19.0")
    assert p("0.19.0 junk") is None and p("latest") is None


@given(st.text(max_size=40))
def test_contract_for_never_raises(text):
    assert isinstance(r.contract_for(text), r.Contract | r.Unsupported)
    assert isinstance(r.contract_for(text, MUX), r.Contract)  # the line's contract whatever the number says
    assert isinstance(r.contract_for(text, PER), r.Contract | r.Unsupported)


# -- reading an interpreter from a script's first bytes


@pytest.mark.parametrize(("head", "want"), [
    (b"#!/venv/bin/python3.11\nimport sys\n", ["/venv/bin/python3.11"]),
    (b"#! /venv/bin/python3.11 -s\n", ["/venv/bin/python3.11", "-s"]),
    (b"#!/usr/bin/env python3\n", ["/usr/bin/env", "python3"]),
    (b"#!/usr/bin/env -S python3 -s\n", ["/usr/bin/env", "-S python3 -s"]),  # one argument, as the kernel
    (b"#!/bin/sh\n'''exec' \"/a b/venv/bin/python\" \"$0\" \"$@\"\n' '''\n", ["/a b/venv/bin/python"]),
    (b"#!/bin/sh\nexec hermes\n", ["/bin/sh"]),
    (b"\x7fELF\x02\x01\x01", None),
    (b"", None),
    (b"#!\n", None),
])
def test_interpreter_from_script(head, want):
    assert r.interpreter_from_script(head) == want


# -- detection on real interpreters


def _asked(command: list[str], env: dict[str, str] | None = None, timeout: float = 15.0) -> Facts:
    """The interpreter's answer as the daemon, doctor and status get it, never from the cache."""
    return interpreter_facts(command, env=env, timeout=timeout, fresh=True)


def test_detects_the_test_venv_release_three_ways():
    want = importlib.metadata.version("hermes-agent")
    assert _asked([str(TEST_HERMES)]).version == want
    assert _asked([sys.executable, "-m", "hermes_cli.main"]).version == want
    assert _asked(["hermes"], env={"PATH": str(TEST_HERMES.parent)}).version == want


def test_detection_loads_no_code_of_the_gateway():
    """The daemon waits for this answer before its first spawn, so the probe only finds modules: of
    Hermes it imports the ``hermes_cli`` package (its ``__version__``) and nothing the gateway or the
    agent runs, nor their libraries. (Whether that is fast is the benchmark's business, not a timed
    assert's.)"""
    from supervisor.hermes import requirements as rq

    modules, programs, specs = rq._question()
    question = json.dumps({"modules": sorted(modules), "programs": sorted(programs), "specs": sorted(specs),
                           "managed_programs": []}, sort_keys=True)
    code = rq.PROBE + "\nimport sys as _s\nprint('LOADED', ' '.join(sorted(_s.modules)))\n"
    out = subprocess.run([sys.executable, "-c", code, question], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    loaded = next(line for line in out.splitlines() if line.startswith("LOADED ")).split()[1:]
    heavy = {"gateway", "agent", "run_agent", "tools", "openai", "httpx", "yaml", "pydantic", "requests"}
    assert "hermes_cli" in loaded
    assert [m for m in loaded if m.startswith("hermes_cli.") or m.split(".")[0] in heavy] == []


def test_interpreter_of_the_test_venv_hermes():
    assert interpreter_argv([str(TEST_HERMES)], None) == [r.interpreter_from_script(TEST_HERMES.read_bytes())[0]]
    assert interpreter_argv([sys.executable, "-X", "utf8", "-m", "hermes_cli.main"], None) == [sys.executable, "-X",
                                                                                                "utf8"]


def test_gateway_python_is_where_upstreams_profile_code_runs(tmp_path):
    """The interpreter of the root's gateway command, as hermesd.yaml and PATH make it."""
    path = {"PATH": f"{TEST_HERMES.parent}:/usr/bin:/bin"}
    assert gateway_python(tmp_path, path) == interpreter_argv([str(TEST_HERMES)], path["PATH"])
    (tmp_path / "hermesd.yaml").write_text(f"command: [{sys.executable}, /some/script.py]\n")
    assert gateway_python(tmp_path, path) == [sys.executable]
    (tmp_path / "hermesd.yaml").write_text("command: /bin/echo\n")
    with pytest.raises(HermesVersionError, match="not a Python script"):
        gateway_python(tmp_path, path)


def test_binary_launcher_falls_back_to_version_flag():
    # /bin/echo is an ELF binary: no #! line, so the probe runs COMMAND --version and reads its output
    assert _asked(["/bin/echo", "Hermes Agent v0.19.0 (2026.7.20)"]).version == "0.19.0"


def test_shell_wrapper_falls_back_to_version_flag(tmp_path):
    """``hermes --version`` checks for updates and opens its logs in its home: asked in a scratch
    one, it leaves nothing in the profile's home or the account's."""
    wrapper = _script(tmp_path / "hermes", f'#!/bin/sh\nexport X=1\nexec "{TEST_HERMES}" "$@"\n')
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "HERMES_HOME": str(home / ".hermes")}
    assert _asked([str(wrapper)], env=env).version == importlib.metadata.version("hermes-agent")
    assert os.listdir(home) == []


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


@pytest.fixture
def leftovers() -> Iterator[list[str]]:
    """Command-line markers of processes a test leaves on purpose; each is killed by PID afterwards."""
    marks: list[str] = []
    yield marks
    for pid in _pids_with(marks):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _pids_with(marks: list[str]) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmd = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(m in cmd for m in marks):
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize(("make", "expect"), [
    (lambda d: d / "nothing-here", "cannot read the gateway command"),
    (lambda d: _script(d / "hermes", "#!/nonexistent/python3\n"), "cannot run /nonexistent/python3"),
    (lambda d: _script(d / "hermes", f"#!{sys.executable} -S\n"), "cannot load hermes-agent: ModuleNotFoundError"),
    (lambda d: _script(d / "hermes", "#!/bin/sh\necho hello\n"), "version (exit 0): hello"),
    (lambda d: (os.mkfifo(d / "hermes"), d / "hermes")[1], "is not a regular file"),
    (lambda d: _script(d / "hermes", "#!/bin/false\n"), "printed no Hermes Agent version (exit 1): no output"),
    (lambda d: _script(d / "hermes", "#!/bin/sh\nexit 3\n"), "printed no Hermes Agent version (exit 3)"),
])
def test_detection_errors_are_one_clear_line(tmp_path, make, expect):
    facts = _asked([str(make(tmp_path))], env={"PATH": "/usr/bin:/bin"}, timeout=10)
    assert facts.version is None and facts.version_error is not None
    assert expect in facts.version_error and "\n" not in facts.version_error


def test_missing_command_on_path(tmp_path):
    assert "'hermes' not found on PATH" in (_asked(["hermes"], env={"PATH": str(tmp_path)}).version_error or "")
    assert "empty" in (_asked([]).version_error or "")


def test_hanging_interpreter_is_killed_at_the_deadline(tmp_path, leftovers):
    leftovers += ["sleep 987", "sleep 986"]
    hang = _script(tmp_path / "hang", "#!/bin/sh\nsleep 987\n")
    hermes = _script(tmp_path / "hermes", f"#!{hang}\n")
    t0 = time.monotonic()
    facts = _asked([str(hermes)], env={"PATH": "/usr/bin:/bin"}, timeout=1)
    assert "did not answer within 1 s" in (facts.version_error or "")
    assert time.monotonic() - t0 < 5
    # its whole process group was SIGKILLed (the kernel may take a moment to finish each exit)
    assert poll(lambda: not _pids_with(["sleep 987"]), 5), "the interpreter's child survived the deadline"
    # A detached grandchild keeping the output open cannot make the probe wait either.
    hang.write_text("#!/bin/sh\nsetsid sleep 986 &\nsleep 987\n")
    t0 = time.monotonic()
    assert "did not answer" in (_asked([str(hermes)], env={"PATH": "/usr/bin:/bin"}, timeout=1).version_error or "")
    assert time.monotonic() - t0 < 5

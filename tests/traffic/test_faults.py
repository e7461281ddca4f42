"""The faults do what they say, without a gateway: the tool-run ones hand the victim's agent a
command that upstream's own guard lets run under the profile's settings (and would block without
them), each command stays within its bounds, and the file faults are undone whole.

Upstream's guard is asked directly (``tools.approval.check_all_command_guards`` of the installed
hermes-agent, reading the profile's config.yaml through ``HERMES_HOME``), as the agent's terminal
tool asks it before it runs a command.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.harness import wait_for
from tests.traffic import faults as f
from tests.traffic.llm import LLMStub, model_for
from tests.traffic.served import profile_config


class Side:
    """Just enough of a side for the faults that act on files and on the stub."""

    name = "unit"

    def __init__(self, home: Path) -> None:
        self._home = home

    def home(self, profile: str) -> Path:
        return self._home


@pytest.fixture
def ctx(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump(profile_config("http://127.0.0.1:9/v1", "victim")))
    with LLMStub(("victim",)) as stub:
        c = f.Context(Side(home), "victim", stub, tmp_path / "scripts")  # type: ignore[arg-type]
        yield c
        f.clean_up(c)


def armed_command(ctx: f.Context) -> str:
    """The command the stub hands the victim's agent on its next turn."""
    import openai

    client = openai.OpenAI(base_url=ctx.stub.url, api_key="unused", max_retries=0, timeout=10)
    r = client.chat.completions.create(model=model_for("victim"), messages=[{"role": "user", "content": "hi"}])
    call = r.choices[0].message.tool_calls[0]
    assert call.function.name == "terminal"
    return json.loads(call.function.arguments)["command"]


def guard(home: Path, command: str, monkeypatch) -> dict:
    """Upstream's verdict on ``command`` in a gateway's session (as the API server's agent asks it)."""
    from tools import approval

    monkeypatch.setenv("HERMES_HOME", str(home))
    monkeypatch.setenv("HERMES_GATEWAY_SESSION", "1")
    return approval.check_all_command_guards(command, "local")


@pytest.mark.parametrize("name", [n for n, x in f.FAULTS.items() if x.via_tool])
def test_tool_faults_run_under_the_profile_s_own_settings(ctx, name, monkeypatch):
    f.FAULTS[name].inject(ctx)
    command = armed_command(ctx)
    assert command.startswith(sys.executable) and str(ctx.scripts) in command
    assert guard(ctx.config.parent, command, monkeypatch) == {"approved": True, "message": None}


def test_the_profile_s_settings_let_what_upstream_calls_dangerous_run(ctx, monkeypatch):
    """``approvals.mode: off`` is what lets an injected agent's command run without a human: with
    upstream's ``manual`` the same command waits for an approval nobody gives."""
    dangerous = f"{sys.executable} -c 'print(1)'"
    assert guard(ctx.config.parent, dangerous, monkeypatch) == {"approved": True, "message": None}
    ctx.config.write_text(yaml.safe_dump({"approvals": {"mode": "manual"}, "security": {"tirith_enabled": False}}))
    verdict = guard(ctx.config.parent, dangerous, monkeypatch)
    assert verdict["approved"] is False and verdict.get("approval_pending") is True, verdict


def test_the_memory_runaway_grows_to_its_cap_and_ends_by_itself(ctx):
    script = ctx.scripts / "memory.py"
    ctx.scripts.mkdir()
    script.write_text(f.MEMORY)
    t = time.monotonic()
    p = subprocess.Popen([sys.executable, str(script), "64", "16", "2"])
    try:
        peak = [0]

        def grown():
            try:
                with open(f"/proc/{p.pid}/status") as fh:
                    rss = next(int(x.split()[1]) for x in fh if x.startswith("VmRSS:")) * 1024
            except (OSError, StopIteration):
                return False
            peak[0] = max(peak[0], rss)
            return rss >= 64 << 20

        wait_for(grown, 10, 0.02, what="64 MiB taken")
        assert p.wait(10) in (0, -14) and time.monotonic() - t < 8  # its lifetime (2 s), or its alarm
    finally:
        p.kill()
        p.wait()


def test_the_cpu_burner_ends_by_itself(ctx):
    ctx.scripts.mkdir()
    (ctx.scripts / "cpu.py").write_text(f.CPU)
    p = subprocess.run([sys.executable, str(ctx.scripts / "cpu.py"), "2", "1"], timeout=20)
    assert p.returncode == 0


def test_a_broken_config_and_a_fifo_are_undone_whole(ctx):
    before = ctx.config.read_bytes()
    f.FAULTS["config"].inject(ctx)
    with pytest.raises(yaml.YAMLError):
        yaml.safe_load(ctx.config.read_text())
    f.FAULTS["config"].repair(ctx)
    assert ctx.config.read_bytes() == before

    f.FAULTS["fifo"].inject(ctx)
    assert stat.S_ISFIFO(os.lstat(ctx.config).st_mode)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(Path(ctx.config).read_bytes()), daemon=True)
    reader.start()  # blocks in open(), as a gateway reading its config does
    reader.join(0.3)
    assert reader.is_alive()
    f.FAULTS["fifo"].repair(ctx)
    reader.join(5)
    assert got == [b""]  # released with end-of-file, not left waiting forever
    assert stat.S_ISREG(os.lstat(ctx.config).st_mode) and ctx.config.read_bytes() == before

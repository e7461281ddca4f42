"""Conflict rules judged by upstream's own running code.

A few hundred generated profile folders (every platform the main one of several) go through
hermes-agent's real start-up in its own interpreter (``gateway_oracle.py``: ``hermes_cli.main``,
``gateway.run``, ``GatewayRunner``, each adapter's ``connect()``, with locks, binds and program
starts recorded and kept on the machine). hermesd's reading of the same folders
(:func:`profiles.snapshot.read_profile`, what the daemon, doctor, export and status all use) must
claim exactly the credential locks (scope and upstream's identity hash) and TCP ports upstream
takes, and enable the same platforms. Every field that differs must be one of the deliberate
differences below, each of which has its row in docs/upstream.md; any other is a failure.

Knobs: ``HERMESD_ORACLE_PROFILES`` (how many, default 216), ``HERMESD_ORACLE_SEED``,
``HERMESD_ORACLE_JOBS`` (parallel starts, default the CPU count), ``HERMESD_ORACLE_PYTHON``
(the gateway's interpreter; else the one beside ``HERMESD_TEST_HERMES``, else this one),
``HERMESD_ORACLE_REPORT`` (a file to write the counts to, as JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from oracle_profiles import (
    CPU_SECONDS,
    SPECS,
    Difference,
    Prediction,
    Profile,
    ask_upstream,
    compare,
    generate,
    observed,
    oracle_python,
    predict,
)

from profiles.credentials import view_of
from profiles.upstream.lines import RuleLine
from profiles.upstream.platforms import requirement_of
from profiles.upstream.releases import Contract, Unsupported, contract_for
from supervisor.hermes.requirements import check_requirements, interpreter_facts, release_line

COUNT = int(os.environ.get("HERMESD_ORACLE_PROFILES", "216"))
SEED = int(os.environ.get("HERMESD_ORACLE_SEED", "20261201"))
JOBS = int(os.environ.get("HERMESD_ORACLE_JOBS", str(os.cpu_count() or 2)))
COLD = int(os.environ.get("HERMESD_ORACLE_COLD", "3"))  # profiles the warm-versus-fresh check runs twice
DOCS = Path(__file__).resolve().parents[2] / "docs" / "upstream.md"


def _has_gateway(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('gateway.run') is None)"
    return subprocess.run([python, "-c", probe], capture_output=True, timeout=120, check=False).returncode == 0


def _release(python: str) -> str:
    """The hermes-agent release the oracle interpreter has (its ``hermes_cli.__version__``)."""
    proc = subprocess.run([python, "-c", "import hermes_cli; print(hermes_cli.__version__)"], capture_output=True,
                          text=True, timeout=120, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else "unknown"


RELEASE = _release(oracle_python()) if _has_gateway(oracle_python()) else None
CONTRACT = contract_for(RELEASE) if RELEASE is not None else None
# HERMESD_ORACLE_REAL=1: upstream's start-up with the platform libraries really installed in the
# oracle's interpreter (scripts/test-releases.sh builds such an environment per release) instead of
# stand-ins; the programs requirement checks look for stay stand-ins (none is ever run).
REAL = os.environ.get("HERMESD_ORACLE_REAL") == "1"
COMMAND = [oracle_python(), "-m", "hermes_cli.main"]
pytestmark = [
    pytest.mark.live,  # runs upstream's gateway start-up for 216 profiles: the full tier
    pytest.mark.xdist_group("oracle"),  # one worker runs the module's fixture once, not one per worker
    pytest.mark.skipif(RELEASE is None, reason="no hermes-agent in the oracle interpreter"),
    # hermesd runs no gateway of an unsupported release (every profile is held), so no claim matters.
    pytest.mark.skipif(RELEASE is not None and isinstance(contract_for(RELEASE), Unsupported),
                       reason=f"hermes-agent {RELEASE} is not supported: hermesd starts no gateway of it"),
]


@dataclass(frozen=True)
class Case:
    """One generated profile with both verdicts."""

    profile: Profile
    record: dict[str, Any]
    mine: Prediction
    theirs: Prediction


TIMES: dict[str, float] = {}


@pytest.fixture(scope="module")
def line() -> RuleLine:
    """How hermesd reads the profiles for that release: the rules its probe of the interpreter chooses,
    as the daemon chooses them (its contract's line, narrowed to the platforms its code ships)."""
    return release_line(interpreter_facts(COMMAND))


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory, line: RuleLine) -> list[Case]:
    base = tmp_path_factory.mktemp("oracle")
    assert isinstance(CONTRACT, Contract)
    profiles = generate(base, COUNT, SEED, standalone=CONTRACT.standalone_key)
    started = time.monotonic()
    records = ask_upstream(profiles, base, jobs=JOBS, stand_ins=not REAL, programs=True,
                           gateway_args=CONTRACT.gateway_args)
    TIMES.update(upstream_wall_s=round(time.monotonic() - started, 1), upstream_cpu_s=round(CPU_SECONDS[-1], 1))
    started = time.monotonic()
    out = [Case(p, r, predict(p, line), observed(r)) for p, r in zip(profiles, records, strict=True)]
    TIMES["hermesd_s"] = round(time.monotonic() - started, 2)
    return out


# --------------------------------------------------------------------------- deliberate differences


@dataclass(frozen=True)
class Deliberate:
    """A difference hermesd makes on purpose: the docs phrase that states it, and when it applies."""

    doc: str  # text that must appear in docs/upstream.md's "Deliberate differences" table
    applies: Callable[[Difference, Case], bool]


def _fatal(case: Case, platform: str) -> str:
    return str((case.record.get("platforms", {}).get(platform) or {}).get("fatal") or "")


def _only_hermesd(d: Difference) -> bool:
    return d.hermesd != "-" and d.upstream == "-"


DELIBERATE: dict[str, Deliberate] = {
    # hermesd claims a WhatsApp session and its bridge port as soon as WhatsApp is enabled; upstream
    # takes them only once the session is paired and its bridge script exists (none in the wheel).
    "whatsapp": Deliberate(
        "WhatsApp session lock and bridge port",
        lambda d, c: d.platform == "whatsapp" and d.field in ("lock", "port") and _only_hermesd(d)
        and _fatal(c, "whatsapp") in ("whatsapp_bridge_missing", "whatsapp_not_paired")),
    # Photon needs its Node sidecar's modules, which no PyPI install has: upstream silently leaves the
    # platform out; hermesd counts it enabled, claims the sidecar port and reports what is missing.
    "photon": Deliberate(
        "Photon sidecar",
        lambda d, c: d.platform == "photon"
        and (not c.record.get("checks", {}).get("photon", True) or _fatal(c, "photon").startswith("SIDECAR"))
        and ((d.field == "enabled" and d.hermesd == "True") or (d.field == "port" and _only_hermesd(d)))),
    # A value an adapter cannot parse (a webhook port that is not a number, say) stops upstream's
    # whole gateway at start-up, so it holds nothing; hermesd keeps the profile's claims. Only the
    # platform whose adapter crashed is excused: the oracle goes on with the others.
    "crash": Deliberate(
        "stops the gateway at start-up",
        lambda d, c: d.platform in (c.record.get("crashed") or ()) and d.field in ("lock", "port")
        and _only_hermesd(d)),
    # A configured platform whose requirement check fails (a library, program or Node runtime upstream
    # cannot find): upstream leaves it out or builds no adapter; hermesd counts it enabled, keeps its
    # claims and reports what it lacks (test_hermesd_reports_what_upstream_lacks checks that it does).
    "requirement": Deliberate(
        "requirement check fails",
        lambda d, c: (c.record.get("checks") or {}).get(d.platform) is False
        and ((d.field == "enabled" and d.hermesd == "True") or (d.field in ("lock", "port") and _only_hermesd(d)))),
    # A .env line python-dotenv cannot parse: upstream skips it, hermesd holds the profile.
    "unparsable": Deliberate(
        ".env` line it cannot parse",
        lambda d, c: d.field == "profile" and any(".env" in p or ".op.env" in p for p in c.mine.problems)),
}

# Differences of one release from 0.19.0, which hermesd's rules follow; each is stated in the release
# table of docs/upstream.md.
RELEASE_ROWS: dict[str, Deliberate] = {
    # 0.18.x calls connect(is_reconnect=...) on adapters whose connect() takes no argument: QQ and
    # WeCom callback fail at every start, so they never lock or listen.
    "0.18-connect": Deliberate(
        "QQ and WeCom callback never connect",
        lambda d, c: str(RELEASE).startswith("0.18.") and d.field in ("lock", "port") and _only_hermesd(d)
        and "is_reconnect" in str((c.record.get("platforms", {}).get(d.platform) or {}).get("connect_error"))),
    "0.18-google-chat": Deliberate(
        "ignores `GOOGLE_CHAT_HTTP_EVENTS_URL`",
        lambda d, c: str(RELEASE).startswith("0.18.") and d.platform == "google_chat" and d.field == "enabled"
        and d.hermesd == "True"),
}

# Not a hermesd difference: BlueBubbles listens only after its server answered, which an offline
# run cannot show for a server on the network. Kept separate from the deliberate differences.
OFFLINE = {
    "bluebubbles": lambda d, c: d.platform == "bluebubbles" and d.field == "port" and _only_hermesd(d)
    and (c.record.get("platforms", {}).get("bluebubbles") or {}).get("connected") is False,
    # With the real python-telegram-bot, webhook mode listens only after Telegram's API answered
    # (the bot's initialize()); offline that call fails first.
    "telegram": lambda d, c: d.platform == "telegram" and d.field == "port" and _only_hermesd(d)
    and _fatal(c, "telegram") == "telegram_connect_error",
}


def classify(d: Difference, case: Case) -> str | None:
    for key, rule in {**DELIBERATE, **RELEASE_ROWS}.items():
        if rule.applies(d, case):
            return key
    for key, applies in OFFLINE.items():
        if applies(d, case):
            return f"offline:{key}"
    return None


def _differences(case: Case) -> tuple[int, list[Difference]]:
    if case.mine.problems:  # hermesd holds the profile: it claims nothing, whatever upstream does
        claims = sorted({f"{x[0]}:{x[1]}" for x in case.theirs.locks | case.theirs.ports})
        return 1, [Difference(case.profile.name, "profile", "-", "held: " + "; ".join(case.mine.problems)[:200],
                              ",".join(claims) or "nothing")]
    return compare(case.profile, case.mine, case.theirs)


# --------------------------------------------------------------------------- tests


def test_generated_profiles_reach_every_platform(cases: list[Case], line: RuleLine) -> None:
    """The run is not vacuous: upstream enabled every platform somewhere, and took real locks and ports."""
    enabled = Counter(p for c in cases for p in c.theirs.enabled)
    locks = Counter(x[1] for c in cases for x in c.theirs.locks)
    ports = Counter(x[0] for c in cases for x in c.theirs.ports)
    assert len(cases) == COUNT
    never = sorted(set(SPECS) & line.platforms - set(enabled) - {"photon"})  # photon: no sidecar in a PyPI install
    assert not never, f"never enabled upstream: {never}"
    expected_locks = {"telegram-bot-token", "discord-bot-token", "slack-app-token", "signal-phone", "weixin-bot-token",
                      "qqbot-appid", "yuanbao-app-key", "feishu-app-id", "whatsapp-session", "irc", "line"}
    if "buzz" in line.platforms:
        expected_locks.add("buzz")
    if str(RELEASE).startswith("0.18."):  # QQ and WeCom callback never connect there (docs/upstream.md)
        expected_locks.discard("qqbot-appid")
    expected_ports = {"api_server", "webhook", "msgraph_webhook", "sms", "bluebubbles", "whatsapp_cloud",
                      "wecom_callback", "line", "feishu", "teams", "whatsapp", "raft"} | ({"a2a"} & line.platforms)
    managed_node = interpreter_facts(COMMAND, managed=["node"]).managed_programs.get("node")
    if line.node_from_package_manager and managed_node is None:
        expected_locks.discard("whatsapp-session")  # no Node from Hermes' package manager: no bridge, no lock
        expected_ports.discard("whatsapp")
    assert expected_locks <= set(locks), f"no lock seen for {sorted(expected_locks - set(locks))}"
    if not REAL:  # the real python-telegram-bot listens only after Telegram answered (OFFLINE)
        expected_ports.add("telegram")
    if str(RELEASE).startswith("0.18."):
        expected_ports.discard("wecom_callback")
    assert expected_ports <= set(ports), f"no listener seen for {sorted(expected_ports - set(ports))}"
    broken = [(c.profile.name, c.record["errors"][:1]) for c in cases if c.record.get("errors")]
    assert not broken, f"upstream's start-up failed in the oracle itself: {broken[:5]}"


def test_hermesd_claims_what_upstream_takes(cases: list[Case]) -> None:
    """0 undocumented disagreements between hermesd's claims and upstream's locks, binds and enabled set."""
    fields = 0
    counts: Counter[str] = Counter()
    undocumented: list[str] = []
    for case in cases:
        n, diffs = _differences(case)
        fields += n
        for d in diffs:
            why = classify(d, case)
            counts[why or "undocumented"] += 1
            if why is None:
                undocumented.append(f"{d.field} {d.platform}: hermesd={d.hermesd} upstream={d.upstream}\n"
                                    f"    {case.profile.describe()}\n    upstream: "
                                    f"{json.dumps(case.record.get('platforms', {}).get(d.platform))}")
    report = {"profiles": len(cases), "fields": fields, "agree": fields - sum(counts.values()),
              "differences": dict(sorted(counts.items())), "seed": SEED, "release": RELEASE, "python": oracle_python(),
              **TIMES}
    print(f"\noracle: {json.dumps(report)}")
    if os.environ.get("HERMESD_ORACLE_REPORT"):
        Path(os.environ["HERMESD_ORACLE_REPORT"]).write_text(json.dumps(report, indent=2) + "\n")
    assert not undocumented, f"{len(undocumented)} undocumented disagreement(s):\n" + "\n".join(undocumented[:20])


def test_hermesd_reports_what_upstream_lacks(cases: list[Case], line: RuleLine) -> None:
    """Every platform excused because upstream's requirement check fails is one hermesd's own check
    (what status, doctor and install-deps say) reports missing in that interpreter."""
    excused = {(c.profile.name, d.platform): c for c in cases for d in _differences(c)[1]
               if classify(d, c) in ("requirement", "photon")}
    assert excused, "the generated profiles never reach a platform whose requirement check fails"
    for (name, platform), case in sorted(excused.items()):
        view = view_of(case.profile.home, line=line)
        report = check_requirements(COMMAND, [requirement_of(view, platform)], env=case.profile.child_env)
        assert report.platforms[platform].state == "missing", f"{name}: {platform} is reported {report.platforms}"


def test_every_deliberate_difference_is_in_the_docs() -> None:
    releases, table = DOCS.read_text().split("## Deliberate differences from upstream", 1)
    for key, rule in DELIBERATE.items():
        assert rule.doc in table, f"deliberate difference {key!r} has no row saying {rule.doc!r}"
    releases = releases.split("## How hermesd agrees with Hermes", 1)[0]
    for key, rule in RELEASE_ROWS.items():
        assert rule.doc in releases, f"release difference {key!r} is not in the release table: {rule.doc!r}"


def test_warm_runs_match_fresh_interpreters(tmp_path: Path) -> None:
    """The fast path (children forked from a warm parent) records what a brand-new interpreter records."""
    assert isinstance(CONTRACT, Contract)
    profiles = [p for p in generate(tmp_path, 40, SEED + 1, standalone=CONTRACT.standalone_key)
                if p.env_text or p.config][:COLD]
    kwargs: dict[str, Any] = {"stand_ins": not REAL, "programs": True, "gateway_args": CONTRACT.gateway_args}
    warm = ask_upstream(profiles, tmp_path, jobs=JOBS, **kwargs)
    cold = ask_upstream(profiles, tmp_path, jobs=1, cold=True, **kwargs)
    for prof, a, b in zip(profiles, warm, cold, strict=True):
        assert (observed(a).enabled, observed(a).locks, observed(a).ports) == \
            (observed(b).enabled, observed(b).locks, observed(b).ports), prof.describe()


def test_nothing_leaves_the_machine(tmp_path: Path) -> None:
    """Listeners land on loopback ephemeral ports, programs are substituted, connections are refused."""
    assert isinstance(CONTRACT, Contract)
    prof = generate(tmp_path, 1, 0)[0]
    (prof.home / ".env").write_text(
        "API_SERVER_KEY=k-0123456789abcdef-long\nAPI_SERVER_HOST=0.0.0.0\nAPI_SERVER_PORT=8642\n"
        "TELEGRAM_BOT_TOKEN=123456:abcdef\nIRC_SERVER=irc.libera.chat\nIRC_CHANNEL=#c\n")
    (prof.home / "config.yaml").write_text("platforms:\n  whatsapp:\n    enabled: true\n    extra:\n"
                                           f"      bridge_script: {prof.home}/bridge.js\n"
                                           f"gateway:\n  standalone: {str(CONTRACT.standalone_key).lower()}\n")
    (prof.home / "bridge.js").write_text("// never run\n")
    session = prof.home / "platforms" / "whatsapp" / "session"
    session.mkdir(parents=True)
    (session / "creds.json").write_text("{}")
    record = ask_upstream([prof], tmp_path, jobs=1, stand_ins=not REAL, programs=True,
                          gateway_args=CONTRACT.gateway_args)[0]
    assert {(b["host"], b["port"]) for b in record["binds"]} >= {("0.0.0.0", 8642)}
    assert record["platforms"]["api_server"]["connected"] is True  # the redirected bind worked
    if record["platforms"]["whatsapp"].get("adapter"):  # 0.22 builds none without its package manager's Node
        assert any("bridge.js" in " ".join(s["argv"]) for s in record["spawns"])  # recorded, never run
    assert "irc.libera.chat" in record["lookups"]  # a name lookup, refused at once
    assert not record["errors"]


def test_nothing_is_left_running(cases: list[Case]) -> None:
    """Every start-up the oracle forked was reaped: nothing it started outlives it."""
    left = [p.cmdline() for p in psutil.Process().children(recursive=True) if p.is_running()]
    assert not any("gateway_oracle" in " ".join(c) or "hermes" in " ".join(c) for c in left), left

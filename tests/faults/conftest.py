"""Fault-injection fixtures: a ledger each scenario fills from what it observed, and its table.

Every test takes ``faults`` and records, as it goes, how many faults it injected, how many of them
hermesd survived (the invariant held afterwards: the right child runs, the request was answered,
the process is gone) and how much was lost (a child missing, duplicated or leaked, a request
unanswered, a restart count dropped). The numbers come from observations, never from constants:
a scenario that finds a bug shows it as ``lost > 0`` in the table, whatever the assertion did.

At the end of the run the table is printed (``pytest_terminal_summary``) and, when the
``HERMESD_FAULT_TABLE`` environment variable names a file, written there as markdown.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest

from tests.faults.helpers import Sleeper
from tests.harness import make_root, write_config

_LEDGER = pytest.StashKey[list["FaultLedger"]]()
_LEDGER_PROPERTY = "hermesd_fault_ledger"
_TABLE: list[list[FaultLedger]] = []  # the run's ledgers, filled from the test reports
_OUTCOME = pytest.StashKey[str]()


@dataclass
class FaultLedger:
    """One scenario's numbers, filled by the test from what it saw."""

    scenario: str
    injected: int = 0
    survived: int = 0
    lost: int = 0
    notes: list[str] = field(default_factory=list)
    outcome: str = "not run"

    def inject(self, n: int = 1) -> None:
        self.injected += n

    def survive(self, n: int = 1) -> None:
        self.survived += n

    def lose(self, n: int = 1, what: str = "") -> None:
        self.lost += n
        if n and what:
            self.notes.append(what)

    def check(self, ok: bool, what: str) -> bool:
        """Count one fault as survived when ``ok``, else as one thing lost (described by ``what``)."""
        if ok:
            self.survive()
        else:
            self.lose(1, what)
        return ok

    def note(self, text: str) -> None:
        self.notes.append(text)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_LEDGER] = []
    _TABLE[:] = [config.stash[_LEDGER]]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    ledger = getattr(item, "_fault_ledger", None)
    if ledger is not None and (report.when == "call" or (report.when == "setup" and report.outcome != "passed")):
        ledger.outcome = "xfailed" if hasattr(report, "wasxfail") and report.outcome == "skipped" else report.outcome
        if report.outcome == "passed" and hasattr(report, "wasxfail"):
            ledger.outcome = "XPASS"
    if ledger is not None and report.when == "teardown":
        # The finished ledger travels with the report: under pytest-xdist the table is printed by
        # the controller, which sees the workers' reports and nothing else of theirs.
        report.user_properties.append((_LEDGER_PROPERTY, asdict(ledger)))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == _LEDGER_PROPERTY and _TABLE:
            _TABLE[0].append(FaultLedger(**value))


@pytest.fixture
def faults(request: pytest.FixtureRequest) -> FaultLedger:
    """The scenario's ledger; its name defaults to the test's name (parameters included)."""
    ledger = FaultLedger(request.node.name.removeprefix("test_"))
    request.node._fault_ledger = ledger
    return ledger


@pytest.fixture
def sleeper() -> Iterator[Sleeper]:
    """An unrelated long-lived process (no hermesd tag), killed by PID afterwards."""
    s = Sleeper.start()
    try:
        yield s
    finally:
        s.kill()


def render_table(ledgers: list[FaultLedger]) -> list[str]:
    head = ("scenario", "faults injected", "survived", "lost", "test")
    rows = [head] + [(x.scenario, str(x.injected), str(x.survived), str(x.lost), x.outcome) for x in ledgers]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    total = [sum(getattr(x, k) for x in ledgers) for k in ("injected", "survived", "lost")]
    out.append(f"total: {total[0]} faults injected, {total[1]} survived, {total[2]} lost "
               f"in {len(ledgers)} scenarios")
    return out


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    ledgers = config.stash.get(_LEDGER, [])
    if not ledgers:
        return
    lines = render_table(ledgers)
    terminalreporter.section("hermesd fault injection")
    for line in lines:
        terminalreporter.write_line(line)
    noted = [x for x in ledgers if x.notes]
    if noted:
        terminalreporter.write_line("")
        for x in noted:
            for n in x.notes[:6]:
                terminalreporter.write_line(f"  {x.scenario}: {n}")
    target = os.environ.get("HERMESD_FAULT_TABLE")
    if target:
        text = "# hermesd fault injection\n\n" + "\n".join(lines[:-1]) + f"\n\n{lines[-1]}\n"
        if noted:
            text += "\n" + "\n".join(f"- {x.scenario}: {n}" for x in noted for n in x.notes[:6]) + "\n"
        Path(target).write_text(text, encoding="utf-8")


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A root whose every ancestor other users may traverse, so that only hermesd's own checks (the
    socket's permissions, SO_PEERCRED, ownership tests) stand between another user and the daemon."""
    import shutil
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="hermesd-faults-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        root = make_root(base)
        write_config(root)
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)

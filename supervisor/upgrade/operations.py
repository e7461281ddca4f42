"""The three fleet operations, step by step: ``upgrade``, ``rollback`` and ``rolling_restart``.

An upgrade, in order, stopping at the first step that fails (nothing after it is touched):

1. read the daemon's status and the gateway interpreter (its release and installed code);
2. with ``--to``: ask pip what it would install (``--dry-run``); the target release is known now
   (the distribution the requirement names: the installed one, or another that replaces it);
3. pre-flight: refuse a release hermesd does not support, and one that needs settings this root
   lacks unless the user consented (``--yes``) (:mod:`supervisor.upgrade.needs`);
4. save every served profile's migrated files and (with ``--to``) the distributions pip replaces
   or, for a switch to another distribution, the one it removes;
5. write the consented settings (they restart no gateway: :data:`profiles.upstream.multiplex.CONSENT_KEYS`),
   and only then read each gateway's baseline (PID, restarts, platforms);
6. install (``--to``), then ``reload`` the daemon so it reads the new release (its contract: the
   child's arguments) before anything restarts; it must report exactly the installed code;
7. restart the gateways that run older code, canary first, each through the health gate;
8. pre-flight again: the new release must not have undone a needed setting.

A rollback undoes the newest upgrade (or the one named): it puts the saved distributions back
(offline; or reinstalls the recorded release with pip when the upgrade took no copy), reloads the
daemon, then for each profile whose gateway runs other code than the restored one or whose files
differ from the saved copies: stops it, restores its files, starts it, and gates it. It goes on
past a failure (a rollback is the way back; each failure is reported) and checks every saved file
byte for byte at the end; the consent it wrote goes with the saved config.yaml (its adoption record
is marked undone), and whatever else the new release created or changed at the top of a profile's
folder is named, not hidden (:func:`supervisor.upgrade.backup.left_changed`).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.upstream.releases import Unsupported, contract_for, parse_version
from supervisor.hermes import codeid
from supervisor.hermes.codeid import CodeId, Installed
from supervisor.hermes.requirements import interpreter_facts
from supervisor.layout import Layout
from supervisor.upgrade import backup, decisions, environment, needs
from supervisor.upgrade import record as records
from supervisor.upgrade.decisions import Baseline, GateRules, Order
from supervisor.upgrade.environment import Dist, EnvironmentProblem, Interpreter, canonical
from supervisor.upgrade.run import Fleet, OperationFailed, Reporter, Rollout, gate, roll, shown, step, wait_rows


@dataclass(frozen=True, slots=True)
class Options:
    """What the command line asked for."""

    to: str | None = None
    canary: str | None = None
    only: tuple[str, ...] | None = None
    timeout_s: float = 120.0
    settle_s: float = 5.0
    canary_settle_s: float = 15.0
    graceful: bool = False
    assume_yes: bool = False
    dry_run: bool = False


# ----------------------------------------------------------------------------- what every operation needs


def _interpreter(doc: Mapping[str, Any]) -> tuple[Interpreter, Installed]:
    """The gateway command's interpreter (the daemon's command) and the code installed in it."""
    command = doc["supervisor"].get("command")
    if not command:
        raise OperationFailed(f"hermesd has no gateway command: {doc['supervisor'].get('command_error') or '?'}")
    facts = interpreter_facts(list(command), env=dict(os.environ), fresh=True)
    installed = codeid.installed_now(facts.dist_info)
    python = facts.executable or (facts.interpreter[-1] if facts.interpreter else None)
    if not facts.ok or installed is None or not python or not facts.prefix or not facts.dist_name:
        why = facts.error or "its hermes-agent distribution (*.dist-info) was not found"
        raise OperationFailed(f"cannot read the gateway's interpreter ({' '.join(command)}): {why}")
    return Interpreter(python, facts.prefix, facts.dist_name), installed


def _served(doc: Mapping[str, Any]) -> list[tuple[str, Path]]:
    return [(str(r["name"]), Path(r["home"])) for r in doc["profiles"]]


def _preflight(target: str, doc: Mapping[str, Any], layout: Layout, opts: Options, when: str,
               reporter: Reporter, *, settle: bool = True) -> list[needs.Need]:
    """Refuse a release hermesd will not run, or one that needs settings this root lacks; with the
    user's consent (``--yes``) those are returned instead (``settle=False``: the caller writes them
    once the files are saved) or written here."""
    contract = contract_for(target)
    if isinstance(contract, Unsupported):
        raise OperationFailed(f"refused {when}: {contract.message}")
    served = _served(doc)
    missing = needs.missing_for(target, served)
    if missing and opts.assume_yes:
        if not settle:
            return missing
        needs.settle(missing, layout.root, reporter.line)
        missing = needs.missing_for(target, served)
    if missing:
        lines = "\n".join(f"  {shown(n.describe(), 600)}" for n in missing)
        raise OperationFailed(f"refused {when}: hermes-agent {target} needs settings this root lacks, or the "
                              f"fleet folds into one gateway:\n{lines}\nset them with 'hermesd standalone' (a diff "
                              "of each change, a backup, --undo) or consent with 'hermesd upgrade --yes', "
                              "and run the upgrade again")
    return []


def _rules(opts: Options, release: str | None, code: CodeId | None) -> tuple[GateRules, GateRules]:
    contract = contract_for(release) if release else None
    beat = bool(getattr(contract, "heartbeat", False))
    rules = GateRules(timeout_s=opts.timeout_s, settle_s=opts.settle_s, heartbeat=beat, code=code)
    canary = GateRules(timeout_s=opts.timeout_s + opts.canary_settle_s,
                       settle_s=max(opts.settle_s, opts.canary_settle_s), heartbeat=beat, code=code)
    return rules, canary


def _requirement(to: str, dist_name: str) -> str:
    """``--to``: a release number becomes ``dist==version``; a wheel, a path or a full requirement stays."""
    if parse_version(to) is not None and not Path(to).exists():
        return f"{dist_name}=={to.strip().lstrip('v')}"
    return to


def _finish(fleet: Fleet | None, rec: records.Record, result: str, reason: str, operation: str | None = None) -> None:
    rec.data.update(result=result, reason=reason, finished_at=time.time())
    rec.save()
    if fleet is not None:
        fleet.note("upgrade_finished", id=rec.id, operation=operation or rec.data["operation"], result=result,
                   reason=reason)


def _summary(rec: records.Record) -> dict[str, Any]:
    return {"id": rec.id, "record": str(rec.folder), **rec.data}


# ----------------------------------------------------------------------------- upgrade


def upgrade(layout: Layout, opts: Options, reporter: Reporter) -> dict[str, Any]:
    """``hermesd upgrade`` (see the module docstring); the record's document. Raises OperationFailed."""
    fleet = Fleet(layout)
    doc = fleet.status()
    interp, before = _interpreter(doc)
    rows = doc["profiles"]
    plan_dists: list[Dist] = []
    requirement = None
    target = before.code.version
    if opts.to:
        requirement = _requirement(opts.to, interp.dist_name)
        try:
            plan_dists = interp.plan(requirement)
        except EnvironmentProblem as exc:
            raise OperationFailed(str(exc)) from None
        mine = _target(requirement, plan_dists, interp.dist_name)
        target = mine.version if mine is not None else target
    consent = _preflight(target, doc, layout, opts, "before anything was changed", reporter, settle=False)
    skip = decisions.any_running if plan_dists else decisions.stale_or_unknown
    try:
        order = decisions.choose(rows, skip=skip, canary=opts.canary, only=opts.only)
    except decisions.PlanError as exc:
        raise OperationFailed(str(exc)) from None
    installs = ", ".join(f"{d.name} {d.version}" for d in plan_dists) or "nothing (already installed)"
    reporter.line(f"hermes-agent {before.code} is installed in {interp.prefix}"
                  + (f"; {requirement} installs: {installs}" if requirement else ""))
    if not plan_dists:
        requirement = None  # nothing to install: roll the gateways onto what is installed
    for name, why in order.skipped.items():
        reporter.line(f"  {name}: left alone: {shown(why)}")
    if not order.names and not plan_dists:
        reporter.line("nothing to do: every running gateway runs the installed code")
        return {"result": "nothing_to_do", "order": [], "skipped": order.skipped}
    reporter.line(f"order: {', '.join(order.names) or '-'} (canary: {order.canary or '-'})")
    if opts.dry_run:
        return {"result": "dry_run", "target": target, "installs": [{"name": d.name, "version": d.version}
                                                                    for d in plan_dists],
                "order": list(order.names), "canary": order.canary, "skipped": order.skipped}
    with records.lock(layout):
        rec = records.create(layout, "upgrade", time.time())
        return _upgrade(fleet, rec, layout, opts, reporter, doc, interp, before, requirement, plan_dists, order,
                        consent, target)


def _target(requirement: str, plan: Sequence[Dist], installed: str) -> Dist | None:
    """The distribution ``--to`` installs the gateways' code from: the installed one in a new release,
    or the one the requirement names (another distribution of hermes-agent: a switch). None: pip
    installs nothing new of it (that release is installed already)."""
    mine = next((d for d in plan if canonical(d.name) == canonical(installed)), None)
    if mine is not None:
        return mine
    named = [d for d in plan if d.requested]
    if not named:
        return None
    if len(named) > 1 or "hermes" not in canonical(named[0].name):
        raise OperationFailed(f"{requirement!r} installs {', '.join(d.name for d in named)}, not a distribution of "
                              f"hermes-agent to replace {installed} (the distribution the gateways run)")
    return named[0]


def _upgrade(fleet: Fleet, rec: records.Record, layout: Layout, opts: Options, reporter: Reporter,
             doc: dict[str, Any], interp: Interpreter, before: Installed, requirement: str | None,
             plan_dists: Sequence[Dist], order: Order, consent: Sequence[needs.Need], target: str) -> dict[str, Any]:
    rows = doc["profiles"]
    # What a rollback returns to: the code installed before (--to), or else the code most of the
    # gateways to restart run (the interpreter was upgraded outside hermesd).
    running = [c for r in rows if r["name"] in order.names and (c := CodeId.from_json((r.get("code") or {})
                                                                                       .get("running")))]
    common = Counter(running).most_common(1)
    origin = before.code if requirement else (common[0][0] if common else None)
    rec.data.update(
        interpreter={"python": interp.python, "prefix": interp.prefix, "dist_name": interp.dist_name},
        requirement=requirement, order=list(order.names), canary=order.canary, skipped=order.skipped,
        homes={str(r["name"]): str(r["home"]) for r in rows},
    )
    rec.data["from"] = origin.to_json() if origin is not None else None
    rec.save()
    fleet.note("upgrade_started", id=rec.id, operation="upgrade", target=requirement or before.code.version)
    reporter.line(f"upgrade {rec.id}: record in {rec.folder}")
    try:
        saved_files = _save_files(layout, rec, _served(doc))
        reporter.line(f"  saved {saved_files} profile file(s) of {len(rows)} profile(s)")
        if consent:
            written = needs.settle(consent, layout.root, reporter.line)
            rec.data["consent"] = str(written) if written is not None else None
            rec.save()
            left = needs.missing_for(target, _served(doc))
            if left:
                lines = "\n".join(f"  {shown(n.describe(), 600)}" for n in left)
                raise OperationFailed(f"refused: settings hermes-agent {target} needs could not be written:\n{lines}\n"
                                      "nothing was installed or restarted")
        # The baseline is what the gate holds each new gateway to: read after the consent was written.
        rows = fleet.rows()
        rec.data["baselines"] = {r["name"]: Baseline.of(r).to_json() for r in rows}
        rec.save()
        after = before
        if requirement is not None:
            after = _install(rec, interp, before, requirement, plan_dists, reporter)
        fleet.call("reload")
        doc = fleet.status()
        reported = doc["supervisor"].get("installed_code")
        if not codeid.same_code(reported, after.code):
            raise OperationFailed(f"after the reload hermesd sees {reported}, not the installed {after.code}")
        if doc["supervisor"].get("release_problem"):
            raise OperationFailed(f"hermesd cannot run the installed release: {doc['supervisor']['release_problem']}")
        rec.data["to"] = after.code.to_json()
        rec.save()
        fleet.note("upgrade_installed", id=rec.id, operation="upgrade", release=after.code.version,
                   code=after.code.digest)
        reporter.line(f"  hermesd follows hermes-agent {doc['supervisor'].get('hermes_release')} now; restarting "
                      f"{len(order.names)} gateway(s) one at a time")
        rules, canary_rules = _rules(opts, doc["supervisor"].get("hermes_release"), after.code)
        rollout = Rollout(fleet, rec, reporter, "upgrade", rules, canary_rules, graceful=opts.graceful)
        baselines = {r["name"]: Baseline.of(r) for r in rows}
        ok = roll(rollout, order, baselines, decisions.held(rows))
        if not ok:
            raise OperationFailed(f"upgrade {rec.id} stopped at its first failure; undo it with: "
                                  f"hermesd upgrade --rollback {rec.id} --root {layout.root}")
        _preflight(after.code.version, fleet.status(), layout, opts, "after the restarts", reporter)
    except OperationFailed as exc:
        _finish(fleet, rec, "failed", str(exc))
        raise
    except (OSError, EnvironmentProblem) as exc:
        _finish(fleet, rec, "failed", str(exc))
        raise OperationFailed(f"upgrade {rec.id} failed: {exc}; undo it with: hermesd upgrade --rollback {rec.id} "
                              f"--root {layout.root}") from None
    _finish(fleet, rec, "done", f"{len(order.names)} gateway(s) on hermes-agent {after.code}")
    dropped = records.prune_python_copies(layout)
    reporter.line(f"done: {len(order.names)} gateway(s) run hermes-agent {after.code}; undo with: "
                  f"hermesd upgrade --rollback {rec.id}" + (f" (removed old copies: {', '.join(dropped)})" if dropped
                                                            else ""))
    return _summary(rec)


def _save_files(layout: Layout, rec: records.Record, served: Sequence[tuple[str, Path]]) -> int:
    count = 0
    files: dict[str, list[dict[str, Any]]] = {}
    for name, home in served:
        saved = backup.save(layout.root, home, rec.files_dir(name))
        files[name] = [s.to_json() for s in saved]
        count += sum(1 for s in saved if s.kind in ("file", "link"))
    rec.data["files"] = files
    rec.data["inventory"] = {name: backup.inventory(layout.root, home) for name, home in served}
    rec.save()
    return count


def _install(rec: records.Record, interp: Interpreter, before: Installed, requirement: str,
             plan_dists: Sequence[Dist], reporter: Reporter) -> Installed:
    current = interp.dists()
    replaced = [current[canonical(d.name)] for d in plan_dists
                if canonical(d.name) in current and current[canonical(d.name)].version != d.version]
    target = _target(requirement, plan_dists, interp.dist_name)
    switch = target is not None and canonical(target.name) != canonical(interp.dist_name)
    if switch and canonical(interp.dist_name) in current:
        replaced.append(current[canonical(interp.dist_name)])
    started = time.monotonic()
    saved = environment.save(interp.prefix, replaced, rec.python_dir)
    rec.data["python"] = {"saved": [s.to_json() for s in saved], "installed": [d.name for d in plan_dists],
                          "before": {d.name: d.version for d in current.values()},
                          "switch": {"from": interp.dist_name, "to": target.name} if switch and target else None}
    rec.save()
    size = sum(s.size for s in saved)
    reporter.line(f"  saved {len(saved)} distribution(s) pip replaces ({sum(len(s.files) for s in saved)} files, "
                  f"{size / 1e6:.0f} MB) in {time.monotonic() - started:.1f}s")
    started = time.monotonic()
    if switch and target is not None:
        reporter.line(f"  {target.name} replaces {interp.dist_name} (both install hermes_cli): uninstalling "
                      f"{interp.dist_name} {before.code.version} first")
        interp.pip(["uninstall", "-y", interp.dist_name], log=rec.log)
    interp.pip(["install", requirement], log=rec.log)
    after = codeid.installed_now(before.dist_info)
    if after is None or (target is not None and after.code.source is not None
                         and canonical(after.code.source.dist) != canonical(target.name)):
        raise OperationFailed(f"after pip install {requirement!r} hermes_cli is not installed by "
                              f"{target.name if target else interp.dist_name} (see {rec.log})")
    reporter.line(f"  installed hermes-agent {after.code} ({after.code.source}) in {time.monotonic() - started:.1f}s")
    return after


# ----------------------------------------------------------------------------- rollback


def rollback(layout: Layout, rid: str | None, opts: Options, reporter: Reporter) -> dict[str, Any]:
    """``hermesd upgrade --rollback [ID]`` (see the module docstring)."""
    with records.lock(layout):
        rec = records.load(layout, rid) if rid else records.latest_upgrade(layout)
        if rec is None or rec.data.get("operation") != "upgrade":
            raise OperationFailed(f"no upgrade record {rid!r} under {layout.upgrades}" if rid
                                  else f"no upgrade to roll back under {layout.upgrades}")
        live = Fleet(layout)
        fleet: Fleet | None = live
        try:
            doc = live.status()
        except OperationFailed as exc:
            if exc.code != 3:
                raise
            fleet, doc = None, None  # restore the files and the interpreter; nothing to restart
        try:
            result = _rollback(fleet, doc, rec, layout, opts, reporter)
        except OperationFailed as exc:
            rec.data["rollback"] = {"result": "failed", "reason": str(exc), "at": time.time()}
            _finish(fleet, rec, "rollback_failed", str(exc), "rollback")
            raise
        return result


def _restore_interpreter(rec: records.Record, reporter: Reporter) -> Installed:
    info = rec.data.get("interpreter") or {}
    target = CodeId.from_json(rec.data.get("from"))
    # The distribution to put back: the one installed before (--to), else the one the gateways ran.
    name = target.source.dist if target is not None and target.source is not None else info["dist_name"]
    interp = Interpreter(info["python"], info["prefix"], name)
    py = rec.data.get("python") or {}
    saved = [environment.SavedDist.from_json(s) for s in py.get("saved") or []]
    current = interp.dists()
    mine = current.get(canonical(interp.dist_name))
    now = codeid.installed_now(mine.dist_info if mine is not None else None)
    in_place = now is not None and now.code == target and all(
        (d := current.get(canonical(s.name))) is not None and d.version == s.version for s in saved)
    try:
        if in_place:
            reporter.line(f"  interpreter: {now.code if now else '?'} and the saved distributions are in place already")
        elif saved and not rec.data.get("python_pruned"):
            bad = environment.restore(interp, saved, rec.python_dir, [str(n) for n in py.get("installed") or []],
                                      log=rec.log)
            if bad:
                raise OperationFailed(f"restored files differ from their RECORD: {', '.join(bad[:10])}")
        elif target is not None and (now is None or now.code != target):
            source = target.source or codeid.Source(interp.dist_name, target.version)
            reporter.line(f"  no copy of the old code was taken (the interpreter was changed outside hermesd): "
                          f"reinstalling {source} with pip")
            environment.reinstall(Interpreter(interp.python, interp.prefix, info["dist_name"]), source, log=rec.log)
    except EnvironmentProblem as exc:
        raise OperationFailed(str(exc)) from None
    now = codeid.installed_now(_dist_info(interp))
    if now is None:
        raise OperationFailed(f"no {interp.dist_name} is installed after the restore (see {rec.log})")
    if target is not None and now.code != target:
        raise OperationFailed(f"the interpreter holds {now.code} after the restore, not {target}")
    return now


def _dist_info(interp: Interpreter) -> str | None:
    """Where the interpreter's hermes-agent is installed now (asked: its folder changes with its release)."""
    mine = interp.dists().get(canonical(interp.dist_name))
    return mine.dist_info if mine is not None else None


def _rollback(fleet: Fleet | None, doc: dict[str, Any] | None, rec: records.Record, layout: Layout, opts: Options,
              reporter: Reporter) -> dict[str, Any]:
    reporter.line(f"rollback of upgrade {rec.id} ({rec.folder})")
    if fleet is not None:
        target = (rec.data.get("from") or {}).get("version")
        fleet.note("upgrade_started", id=rec.id, operation="rollback", target=target)
    restored = _restore_interpreter(rec, reporter)
    reporter.line(f"  interpreter: hermes-agent {restored.code} is installed again")
    saved = {p: [backup.Saved.from_json(s) for s in entries] for p, entries in (rec.data.get("files") or {}).items()}
    homes = {p: Path(h) for p, h in (rec.data.get("homes") or {}).items()}
    if fleet is None or doc is None:
        for name, entries in saved.items():
            backup.restore(layout.root, homes[name], rec.files_dir(name), entries, rec.replaced_dir(name))
        return _rolled_back(None, rec, layout, saved, homes, reporter, failures=[],
                            note="hermesd is not running: start it to run every profile on the restored code")
    fleet.call("reload")
    doc = fleet.status()
    if not codeid.same_code(doc["supervisor"].get("installed_code"), restored.code):
        raise OperationFailed(f"after the reload hermesd sees {doc['supervisor'].get('installed_code')}, not the "
                              f"restored {restored.code}")
    fleet.note("upgrade_installed", id=rec.id, operation="rollback", release=restored.code.version,
               code=restored.code.digest)
    rules, _canary = _rules(opts, doc["supervisor"].get("hermes_release"), restored.code)
    rollout = Rollout(fleet, rec, reporter, "rollback", rules, rules, graceful=opts.graceful)
    baselines = {n: Baseline.from_json(b) for n, b in (rec.data.get("baselines") or {}).items()}
    first = list(rec.data.get("order") or [])
    rows = doc["profiles"]
    names = first + [str(r["name"]) for r in rows if r["name"] not in first]
    failures: list[str] = []
    touched = {str(s["profile"]) for s in rec.data.get("steps") or [] if s.get("operation", "upgrade") == "upgrade"}
    for i, name in enumerate(names, 1):
        row = next((r for r in rows if r["name"] == name), None)
        entries = saved.get(name, [])
        differs = backup.differences(layout.root, homes.get(name, Path(row["home"]) if row else layout.root), entries)
        if not differs and not _needs_restart(row, name in touched):
            continue
        label = f"[{i}/{len(names)}] {name}"
        try:
            _rollback_profile(rollout, layout, rec, name, row, entries, homes, baselines, label, decisions.held(rows),
                              start_it=_needs_restart(row, name in touched) or _active(row))
        except (OperationFailed, OSError) as exc:
            failures.append(name)
            reporter.line(f"  {label}: FAILED: {shown(exc)}")
    return _rolled_back(fleet, rec, layout, saved, homes, reporter, failures=failures)


_ACTIVE = ("running", "starting", "stopping", "backoff")


def _active(row: Mapping[str, Any] | None) -> bool:
    """A gateway runs, or hermesd keeps trying to run one."""
    return row is not None and row.get("state") in _ACTIVE


def _needs_restart(row: Mapping[str, Any] | None, touched: bool) -> bool:
    """After the interpreter is restored: a gateway on other code, or one the upgrade restarted and that
    does not run now (a canary in backoff on the broken release, say)."""
    if row is None:
        return False
    if row.get("state") == "running":
        return (row.get("code") or {}).get("stale") is not False
    return touched


def _rollback_profile(r: Rollout, layout: Layout, rec: records.Record, name: str, row: Mapping[str, Any] | None,
                      entries: Sequence[backup.Saved], homes: Mapping[str, Path], baselines: Mapping[str, Baseline],
                      label: str, held_before: frozenset[str], *, start_it: bool) -> None:
    """Stop the profile (if anything runs or is about to), restore its files, start it and gate it;
    a profile that was not running and was not touched only gets its files back."""
    home = homes.get(name) or Path(row["home"] if row else layout.root)
    started = r.clock()
    if start_it:
        r.fleet.note("upgrade_restarting", name, id=rec.id, operation="rollback", canary=False)
        r.fleet.call("stop", profile=name)
        wait_rows(r, label, lambda rows: None if any(x["name"] == name and x["state"] == "stopped" for x in rows)
                  else "stopping", r.rules.timeout_s)
    changed = backup.restore(layout.root, home, rec.files_dir(name), entries, rec.replaced_dir(name))
    r.fleet.note("upgrade_restored", name, id=rec.id, operation="rollback", files=changed)
    if not start_it:
        r.reporter.line(f"  {label}: files restored ({', '.join(changed) or 'unchanged'}); not running, not started")
        return
    row = next((x for x in r.fleet.rows() if x["name"] == name), row)  # as stopped: the gate's "before"
    start, start_wall = r.clock(), r.wall()
    r.fleet.call("start", profile=name)
    base = baselines.get(name) or Baseline.of(row or {"name": name})
    base = Baseline(name, row.get("pid") if row else None, int((row or {}).get("restarts") or 0), base.serving,
                    base.lock_conflicts)
    verdict, took = gate(r, label, base, held_before, r.rules, start, start_wall)
    took = r.clock() - started
    passed = verdict.state == "passed"
    r.fleet.note("upgrade_gate", name, id=rec.id, operation="rollback", passed=passed, reason=verdict.why,
                 took_s=round(took, 1))
    step(r, name, "passed" if passed else "failed", verdict.why, took, operation="rollback", restored=changed)
    if not passed:
        raise OperationFailed(f"not healthy on the restored code: {verdict.why}")
    r.reporter.line(f"  {label}: files restored ({', '.join(changed) or 'unchanged'}), healthy after {took:.1f}s")


def _rolled_back(fleet: Fleet | None, rec: records.Record, layout: Layout,
                 saved: Mapping[str, Sequence[backup.Saved]], homes: Mapping[str, Path], reporter: Reporter, *,
                 failures: Sequence[str], note: str = "") -> dict[str, Any]:
    left = {name: d for name, entries in saved.items() if (d := backup.differences(layout.root, homes[name], entries))}
    before = rec.data.get("inventory") or {}
    kept = {name: d for name in saved if name in before
            and (d := backup.left_changed(before[name], backup.inventory(layout.root, homes[name])))}
    consent = rec.data.get("consent")
    if consent and not left:
        from profiles import standalone  # the rare path: only an upgrade that wrote consent

        standalone.mark_undone(Path(consent), f"hermesd upgrade --rollback {rec.id} restored the files it changed")
    rec.data["rollback"] = {"at": time.time(), "failed": list(failures), "files_differ": left, "left": kept}
    if kept:
        reporter.line("  left as the new release wrote them (not saved before the upgrade, so not put back): "
                      + "; ".join(f"{n}: {', '.join(shown(x) for x in d)}" for n, d in kept.items()))
    if failures or left:
        why = "; ".join([*(f"{n} did not come back healthy" for n in failures),
                         *(f"{n}: {', '.join(d)} not as saved" for n, d in left.items())])
        _finish(fleet, rec, "rollback_failed", why, "rollback")
        raise OperationFailed(f"rollback of {rec.id} incomplete: {why}")
    _finish(fleet, rec, "rolled_back", note or "interpreter and files restored byte for byte; every touched "
                                                "profile runs the restored code", "rollback")
    reporter.line(f"rolled back: hermes-agent {CodeId.from_json(rec.data.get('from'))} and every saved file are as "
                  "before the upgrade" + (f"; {note}" if note else ""))
    return _summary(rec)


# ----------------------------------------------------------------------------- rolling restart


def rolling_restart(layout: Layout, names: Sequence[str] | None, opts: Options, reporter: Reporter) -> dict[str, Any]:
    """``hermesd restart --rolling``: every running gateway (or ``names``), one at a time, gated."""
    fleet = Fleet(layout)
    doc = fleet.status()
    rows = doc["profiles"]
    try:
        order = decisions.choose(rows, skip=decisions.any_running, canary=opts.canary, only=names)
    except decisions.PlanError as exc:
        raise OperationFailed(str(exc)) from None
    for name, why in order.skipped.items():
        reporter.line(f"  {name}: left alone: {shown(why)}")
    if not order.names:
        reporter.line("nothing to restart: no gateway is running")
        return {"result": "nothing_to_do", "skipped": order.skipped}
    with records.lock(layout):
        rec = records.create(layout, "rolling_restart", time.time())
        rec.data.update(order=list(order.names), canary=order.canary, skipped=order.skipped,
                        baselines={r["name"]: Baseline.of(r).to_json() for r in rows})
        rec.save()
        fleet.note("upgrade_started", id=rec.id, operation="rolling_restart", target=None)
        reporter.line(f"rolling restart {rec.id}: {', '.join(order.names)} (canary: {order.canary})")
        rules, canary_rules = _rules(opts, doc["supervisor"].get("hermes_release"), None)
        rollout = Rollout(fleet, rec, reporter, "rolling_restart", rules, canary_rules, graceful=opts.graceful)
        try:
            ok = roll(rollout, order, {r["name"]: Baseline.of(r) for r in rows}, decisions.held(rows))
        except OperationFailed as exc:
            _finish(fleet, rec, "failed", str(exc))
            raise
        if not ok:
            _finish(fleet, rec, "failed", "stopped at the first failure")
            raise OperationFailed(f"rolling restart {rec.id} stopped at its first failure")
        _finish(fleet, rec, "done", f"{len(order.names)} gateway(s) restarted")
        reporter.line(f"done: {len(order.names)} gateway(s) restarted one at a time")
        return _summary(rec)

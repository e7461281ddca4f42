"""What confinement costs: ``python -m tests.isolation.bench [--gateway N] [--spawns N]``.

Measures, interleaving the variants so background load hits them alike:
- the shim's cost per spawn: ``/bin/true`` spawned directly vs through ``wrap_argv`` for each
  mechanism (spawn to reaped exit);
- ``hermesd exec``'s added cost: a process that plans and calls ``exec_in_place`` vs one that
  only execs (both pay for their own interpreter; the difference is what isolation adds);
- ``probe()`` and ``make_plan`` themselves;
- the real gateway's time from spawn to ``gateway_state: running`` per mechanism.
Prints a Markdown table (medians, p90).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from supervisor.isolation import probe, wrap_argv
from tests.isolation.conftest import HERMES, make_tree


def _spawn_wait(argv: list[str], env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, env or dict(os.environ))
    os.waitpid(pid, 0)
    return (time.perf_counter() - t0) * 1000


def _q(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
    return f"{statistics.median(values):.1f} ms (p90 {p90:.1f})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spawns", type=int, default=40)
    ap.add_argument("--gateway", type=int, default=5)
    args = ap.parse_args()
    real = probe()
    mechs = [m for m in ("namespace+landlock", "landlock") if real.landlock_abi and
             (m == "landlock" or real.namespace_usable)]
    tree = make_tree()
    rows: list[tuple[str, str]] = []
    try:
        t = [0.0] * 20
        for i in range(20):
            t0 = time.perf_counter()
            probe()
            t[i] = (time.perf_counter() - t0) * 1000
        rows.append(("probe() (two forks)", _q(t)))
        plans = {m: tree.plan(real, "a", m) for m in mechs}
        t0 = time.perf_counter()
        for _ in range(200):
            tree.plan(real, "a", mechs[0])
        rows.append(("make_plan + install discovery", f"{(time.perf_counter() - t0) / 200 * 1000:.2f} ms"))
        spawn: dict[str, list[float]] = {"direct": [], **{m: [] for m in mechs}}
        for _ in range(args.spawns):
            spawn["direct"].append(_spawn_wait(["/bin/true"]))
            for m in mechs:
                spawn[m].append(_spawn_wait(wrap_argv(plans[m], ["/bin/true"])))
        base = statistics.median(spawn["direct"])
        rows.append(("spawn /bin/true directly", _q(spawn["direct"])))
        for m in mechs:
            rows.append((f"spawn /bin/true through the shim ({m})",
                         f"{_q(spawn[m])}, +{statistics.median(spawn[m]) - base:.1f} ms"))
        # hermesd exec: plan + exec_in_place vs a bare exec, each in a fresh interpreter
        bare = [sys.executable, "-c", "import os; os.execv('/bin/true', ['/bin/true'])"]
        execs: dict[str, list[float]] = {"bare": [], **{m: [] for m in mechs}}
        for _ in range(max(10, args.spawns // 2)):
            execs["bare"].append(_spawn_wait(bare))
            for m in mechs:
                code = ("import json, os, sys; from supervisor.isolation import exec_in_place; "
                        f"exec_in_place(json.loads({json.dumps(json.dumps(plans[m].to_json()))}), ['/bin/true'], "
                        "dict(os.environ))")
                execs[m].append(_spawn_wait([sys.executable, "-c", code]))
        base = statistics.median(execs["bare"])
        for m in mechs:
            rows.append((f"hermesd exec: exec_in_place ({m}) vs bare exec",
                         f"{_q(execs[m])}, +{statistics.median(execs[m]) - base:.1f} ms"))
        # the real gateway
        if args.gateway and HERMES.exists():
            gw: dict[str, list[float]] = {"off": [], **{m: [] for m in mechs}}
            home = tree.home("a")
            (home / ".env").write_text("")  # no platform: its connect timeout would swamp the measurement
            argv = [str(HERMES), "-p", "a", "gateway", "run", "--external-supervisor"]
            env = {**os.environ, "HERMES_HOME": str(home), "HERMES_S6_SUPERVISED_CHILD": "1",
                   "HERMES_GATEWAY_MAX_STARTS": "0", "GATEWAY_MULTIPLEX_PROFILES": "false",
                   "HERMES_DISABLE_LAZY_INSTALLS": "1"}
            for _ in range(args.gateway):
                for m in gw:
                    cmd = argv if m == "off" else wrap_argv(plans[m], argv)
                    (home / "gateway_state.json").unlink(missing_ok=True)
                    t0 = time.monotonic()
                    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                            start_new_session=True)
                    try:
                        while time.monotonic() - t0 < 60:
                            try:
                                if json.loads((home / "gateway_state.json").read_text())["gateway_state"] == "running":
                                    break
                            except (OSError, ValueError, KeyError):
                                pass
                            time.sleep(0.005)
                        gw[m].append((time.monotonic() - t0) * 1000)
                    finally:
                        proc.send_signal(2)
                        try:
                            proc.wait(60)
                        except subprocess.TimeoutExpired:
                            proc.kill()
                            proc.wait()
            base = statistics.median(gw["off"])
            for m, vals in gw.items():
                extra = "" if m == "off" else f", +{statistics.median(vals) - base:.0f} ms"
                rows.append((f"real gateway: spawn to running ({m})", f"{_q(vals)}{extra}"))
    finally:
        tree.close()
    print(f"kernel {real.kernel}, Landlock ABI {real.landlock_abi}, euid {real.euid}, "
          f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs, {Path(sys.executable)}")
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()

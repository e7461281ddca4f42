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

from supervisor.isolation.probing import probe
from supervisor.isolation.shim_argv import wrap_argv
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
    ap.add_argument("--scoping", action="store_true",
                    help="only compare process-control scoping designs: filter + read-only /proc vs a PID namespace")
    args = ap.parse_args()
    if args.scoping:
        scoping(args.spawns, args.gateway)
        return
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
                code = ("import json, os, sys; from supervisor.isolation.enter import exec_in_place; "
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


PIDNS_SHIM = Path(__file__).with_name("pidns_shim.py")


def _gateway_run(cmd: list[str], env: dict[str, str], home: Path) -> tuple[float, dict, dict, int]:
    """Spawn to ``gateway_state: running``; also what upstream wrote in gateway.pid and its state file."""
    (home / "gateway_state.json").unlink(missing_ok=True)
    (home / "gateway.pid").unlink(missing_ok=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    state: dict = {}
    try:
        while time.monotonic() - t0 < 60:
            try:
                state = json.loads((home / "gateway_state.json").read_text())
                if state["gateway_state"] == "running":
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.005)
        took = (time.monotonic() - t0) * 1000
        try:
            pidfile = json.loads((home / "gateway.pid").read_text())
        except (OSError, ValueError):
            pidfile = {}
    finally:
        proc.send_signal(2)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return took, pidfile, state, proc.pid


def scoping(spawns: int, gateways: int) -> None:
    """Process-control scoping: what the chosen design (seccomp filter + read-only /proc) and the
    alternative (a PID namespace per profile, prototyped in ``pidns_shim``) cost, and what
    upstream's own files say about the gateway's PID under each."""
    import dataclasses

    from supervisor.isolation.shim_argv import encode_plan

    real = probe()
    tree = make_tree()
    rows: list[tuple[str, str]] = []
    try:
        chosen = tree.plan(real, "a", "namespace+landlock")
        bare = dataclasses.replace(chosen, syscall_filter=False, proc_read_only=False)
        py = [sys.executable, "-E", "-s", "-S"]

        def pidns(argv: list[str]) -> list[str]:
            return [*py, str(PIDNS_SHIM), encode_plan(bare.to_json()), "--", *argv]

        variants = {
            "no process scoping": lambda argv: wrap_argv(bare, argv),
            "filter + read-only /proc (chosen)": lambda argv: wrap_argv(chosen, argv),
            "PID namespace (prototype)": pidns,
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(spawns):
            for name, wrap in variants.items():
                times[name].append(_spawn_wait(wrap(["/bin/true"])))
        base = statistics.median(times["no process scoping"])
        for name, vals in times.items():
            rows.append((f"spawn /bin/true through the shim: {name}",
                         f"{_q(vals)}, {statistics.median(vals) - base:+.1f} ms"))
        loop = [sys.executable, "-S", "-c",
                "import os, time; t = time.perf_counter(); [os.getppid() for _ in range(300000)]; "
                "print((time.perf_counter() - t) / 300000 * 1e9)"]
        per_call: dict[str, list[float]] = {"no process scoping": [], "filter + read-only /proc (chosen)": []}
        for _ in range(5):
            for name in per_call:
                out = subprocess.run(variants[name](loop), capture_output=True, text=True, timeout=60).stdout
                per_call[name].append(float(out.strip()))
        for name, vals in per_call.items():
            rows.append((f"getppid() from Python, per call: {name}", f"{statistics.median(vals):.0f} ns"))
        if gateways and HERMES.exists():
            home = tree.home("a")
            (home / ".env").write_text("")
            argv = [str(HERMES), "-p", "a", "gateway", "run", "--external-supervisor"]
            env = {**os.environ, "HERMES_HOME": str(home), "HERMES_S6_SUPERVISED_CHILD": "1",
                   "HERMES_GATEWAY_MAX_STARTS": "0", "GATEWAY_MULTIPLEX_PROFILES": "false",
                   "HERMES_DISABLE_LAZY_INSTALLS": "1"}
            gw: dict[str, list[float]] = {k: [] for k in variants}
            seen: dict[str, str] = {}
            for _ in range(gateways):
                for name, wrap in variants.items():
                    took, pidfile, state, outer = _gateway_run(wrap(argv), env, home)
                    gw[name].append(took)
                    seen[name] = (f"gateway.pid says {pidfile.get('pid')}, gateway_state.json says "
                                  f"{state.get('pid')}, hermesd spawned {outer}")
            base = statistics.median(gw["no process scoping"])
            for name, vals in gw.items():
                rows.append((f"real gateway: spawn to running: {name}",
                             f"{_q(vals)}, {statistics.median(vals) - base:+.0f} ms"))
            for name, text in seen.items():
                rows.append((f"PIDs upstream records: {name}", text))
    finally:
        tree.close()
    print(f"kernel {real.kernel}, euid {real.euid}, load {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()

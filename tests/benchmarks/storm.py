"""Cold-start storm with real gateways: time to first, mean and last ``running`` for N profiles.

    .venv/bin/python tests/benchmarks/storm.py [--n 20] [--modes cores,all]

Each mode starts ``hermesd run`` on a fresh root of N named profiles (the default profile
disabled) whose command is the real ``hermes`` of this environment, and records, per profile, when
its ``gateway_state.json`` first says ``running`` (polled every 20 ms). ``cores`` is hermesd's
default (``max_starting`` = CPU cores); ``all`` sets ``max_starting: N``, which is what hermesd did
before start-ups were bounded: every gateway at once.

The floor is the CPU the start-ups need divided by the cores: one gateway is started alone first
and its CPU seconds up to ``running`` (utime + stime of its whole tree) times N, over the cores.
Issue #15's goal: last <= 1.2x the floor and mean <= 0.6x the floor. Everything started is stopped
and checked by PID before the script exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERMES = Path(sys.executable).parent / "hermes"
TICKS = os.sysconf("SC_CLK_TCK")


def state_of(home: Path) -> str | None:
    try:
        return json.loads((home / "gateway_state.json").read_text()).get("gateway_state")
    except (OSError, ValueError, AttributeError):
        return None


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its live descendants (utime + stime)."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            raw = Path(f"/proc/{p}/stat").read_bytes()
            fields = raw[raw.rindex(b")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / TICKS
            for task in Path(f"/proc/{p}/task").iterdir():
                kids = (task / "children").read_text().split()
                todo.extend(int(k) for k in kids)
        except (OSError, ValueError, IndexError):
            continue
    return total


def tagged(root: Path) -> list[int]:
    tag = f"HERMESD_ROOT={root}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tag in (entry / "environ").read_bytes().split(b"\0"):
                    out.append(int(entry.name))
            except OSError:
                continue
    return out


def run_mode(n: int, max_starting: int | None, work: Path, timeout: float = 300.0) -> dict[str, float | list[float]]:
    import yaml

    root = work / f"root-{max_starting}"
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    names = [f"s{i:02d}" for i in range(n)]
    for name in names:
        (root / "profiles" / name).mkdir(parents=True)
    cfg: dict = {"command": [str(HERMES)], "profiles": {"default": {"enabled": False}}}
    if max_starting:
        cfg["max_starting"] = max_starting  # 0: hermesd's default
    (root / "hermesd.yaml").write_text(yaml.safe_dump(cfg))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONPATH": str(REPO)}
    t0 = time.monotonic()
    daemon = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--root", str(root)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=str(REPO))
    seen: dict[str, float] = {}
    cpu = 0.0
    try:
        deadline = t0 + timeout
        while len(seen) < n and time.monotonic() < deadline:
            now = time.monotonic()
            for name in names:
                if name not in seen and state_of(root / "profiles" / name) == "running":
                    seen[name] = now - t0
            time.sleep(0.02)
        if len(seen) < n:
            raise SystemExit(f"only {len(seen)} of {n} gateways reached running within {timeout:.0f}s")
        cpu = sum(tree_cpu(p) for p in tagged(root))
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(10)
        for pid in tagged(root):
            os.kill(pid, signal.SIGKILL)
    times = sorted(seen.values())
    return {"first": times[0], "mean": statistics.fmean(times), "last": times[-1], "cpu": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--modes", default="default,cores,all",
                    help="comma-separated: default (hermesd's own), cores, all, or a number of slots")
    args = ap.parse_args()
    if not HERMES.exists():
        print(f"{HERMES} is missing: install hermesd with its test extra", file=sys.stderr)
        return 2
    cores = os.cpu_count() or 1
    work = Path(tempfile.mkdtemp(prefix="hermesd-storm-"))
    try:
        single = run_mode(1, 1, work / "single")
        floor = args.n * float(single["cpu"]) / cores
        print(f"one gateway alone: running after {single['last']:.2f}s, {single['cpu']:.2f} CPU-s; "
              f"floor for N={args.n} on {cores} cores: {floor:.2f}s")
        print(f"{'mode':<26}{'first':>8}{'mean':>8}{'last':>8}{'mean/floor':>12}{'last/floor':>12}")
        for mode in args.modes.split(","):
            named = {"default": None, "cores": cores, "all": args.n}
            m = named[mode] if mode in named else int(mode)
            r = run_mode(args.n, m, work / mode)
            label = ("default (the cores)" if m is None
                     else f"max_starting={m}" + (f" ({mode})" if mode in named else ""))
            print(f"{label:<26}{r['first']:>7.2f}s{r['mean']:>7.2f}s{r['last']:>7.2f}s"
                  f"{float(r['mean']) / floor:>12.2f}{float(r['last']) / floor:>12.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

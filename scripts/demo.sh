#!/usr/bin/env bash
# hermesd's main job on a sandbox: installs hermesd with the real hermes-agent into ./.venv,
# creates a fresh root under ./sandbox with the default profile and two named ones, supervises
# real `hermes gateway run` children there, shows a crash being repaired and one profile being
# restarted alone, then stops everything. Nothing outside ./.venv and ./sandbox is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
echo "installing hermesd and hermes-agent into ./.venv (a minute or two the first time)..."
python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q '.[hermes]'
hermesd=(.venv/bin/hermesd)

rm -rf sandbox
mkdir -p sandbox/home sandbox/root
export HOME="$repo/sandbox/home" HERMESD_WRAPPER_DIR="$repo/sandbox/bin"
export PATH="$repo/.venv/bin:$repo/sandbox/bin:$PATH"  # the aliases profile create writes
root="$repo/sandbox/root"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() { "${hermesd[@]}" stop --root "$root" >/dev/null 2>&1 || true; }
trap cleanup EXIT

step "profiles in a fresh root: $root"
"${hermesd[@]}" profile create coder --root "$root" --description "writes code"
"${hermesd[@]}" profile create writer --root "$root" --description "writes prose"
"${hermesd[@]}" profile list --root "$root"

step "hermesd start: one real 'hermes gateway run' per profile"
"${hermesd[@]}" start --root "$root"
wait_running() {  # until every profile runs (status exits 0), at most 90 s
  for _ in $(seq 1 450); do "${hermesd[@]}" status --root "$root" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
wait_running
"${hermesd[@]}" status --root "$root"

step "SIGKILL the coder gateway: hermesd restarts it alone"
pid=$("${hermesd[@]}" status coder --root "$root" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["profiles"][0]["pid"])')
kill -9 "$pid"
sleep 0.5
wait_running
"${hermesd[@]}" status --root "$root"

step "hermesd restart writer: no other child is touched"
"${hermesd[@]}" restart writer --root "$root"
sleep 0.5
wait_running
"${hermesd[@]}" status --root "$root"

step "the last lines hermesd logged for coder"
"${hermesd[@]}" logs coder -n 4 --root "$root"

step "hermesd stop: every gateway stopped cleanly"
"${hermesd[@]}" stop --root "$root"
"${hermesd[@]}" status --root "$root" || true

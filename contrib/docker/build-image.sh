#!/usr/bin/env bash
# Build the hermes-agent + hermesd image without any registry: a Debian base made by rootfs.sh
# (debootstrap from this machine's apt mirror), wheels made by this machine's pip from its own
# configured index, hermesd built from this working tree. Prints the image tag on stdout.
#
#   contrib/docker/build-image.sh                  # -> hermesd:<key>, also tagged hermesd:latest
#   HERMES_SPEC='hermes-agent[messaging]==0.19.0' contrib/docker/build-image.sh
#   HERMESD_REBUILD=1 contrib/docker/build-image.sh    # ignore both caches
#
# The tag's key is a hash of every input (the base image's id, the hermes-agent requirement,
# hermesd's dependencies and source files, this script and the Dockerfile): an existing tag is not
# built again. The wheels are cached in $HERMESD_IMAGE_CACHE (see common.sh), keyed by the
# requirements, and Docker's layer cache keeps them installed while only hermesd changes.
# Dependencies are resolved when the wheels are first made: to pick up newer ones, rebuild.
# Older images of this recipe (both repositories) are removed unless a container uses them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
spec=${HERMES_SPEC:-hermes-agent==0.19.0}
name=${HERMESD_IMAGE_REPO:-hermesd}
python=${PYTHON:-python3}
# shellcheck source=contrib/docker/common.sh
. "$here/common.sh"
cache=$HERMESD_IMAGE_CACHE

say() { echo "build-image.sh: $*" >&2; }

base=$("$here/rootfs.sh")
deps=$(cd "$repo" && "$python" -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
sources=(pyproject.toml README.md supervisor profiles wrappers)
tree=$(cd "$repo" && find "${sources[@]}" -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
       | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
base_id=$(docker image inspect --format '{{.Id}}' "$base")
key=$( { printf '%s\n' "$base_id" "$spec" "$deps" "$tree"; cat "$0" "$here/Dockerfile"; } | sha256sum | cut -c1-12)
tag="$name:$key"
if [ "${HERMESD_REBUILD:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  say "cached: $tag"
  echo "$tag"
  exit 0
fi

# Wheels made here must fit the base image's interpreter.
image_py=$(docker run --rm --network none "$base" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
host_py=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$image_py" != "$host_py" ]; then
  say "the base image has Python $image_py but $python is $host_py: set PYTHON to a python$image_py"
  exit 1
fi

mkdir -p "$cache"
wheels="$cache/wheels-py$host_py-$(printf '%s\n' "$spec" "$deps" | sha256sum | cut -c1-12)"
if [ "${HERMESD_REBUILD:-0}" = 1 ] || [ ! -d "$wheels" ]; then
  say "pip wheel $spec $deps"
  # A folder of this build's own: two builds at once (two checkouts, two test runs) must not
  # write into one another's wheels. The first to finish puts its folder in place; a later one
  # keeps that and drops its own (same requirements, same wheels).
  fresh=$(mktemp -d "$wheels.tmp.XXXXXX")
  # shellcheck disable=SC2086  # $deps is a list of requirements
  if ! "$python" -m pip wheel -q --disable-pip-version-check --wheel-dir "$fresh" "$spec" $deps >&2; then
    rm -rf "$fresh"
    exit 1
  fi
  [ "${HERMESD_REBUILD:-0}" = 1 ] && rm -rf "$wheels"
  mv -T "$fresh" "$wheels" 2>/dev/null || rm -rf "$fresh"
fi

ctx=$(mktemp -d "$cache/context.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp -al "$wheels" "$ctx/wheels" 2>/dev/null || cp -r "$wheels" "$ctx/wheels"
mkdir "$ctx/src"
(cd "$repo" && cp -r --parents "${sources[@]}" "$ctx/src/")
find "$ctx/src" -name __pycache__ -prune -exec rm -rf {} +
say "building the hermesd wheel from $repo"
"$python" -m pip wheel -q --disable-pip-version-check --no-deps --wheel-dir "$ctx/hermesd" "$ctx/src" >&2
rm -rf "$ctx/src"
cp "$here/Dockerfile" "$ctx/Dockerfile"

say "docker build $tag from $base"
docker build -q --build-arg "BASE=$base" --build-arg "HERMES_SPEC=$spec" --build-arg "HERMESD_DEPS=$deps" \
  --label "org.hermesd.recipe=contrib/docker" --label "org.hermesd.key=$key" \
  -t "$tag" -t "$name:latest" "$ctx" >&2
# Earlier builds of this recipe, then earlier bases no image is built on any more; 'docker rmi'
# refuses what a container (or a child image) still uses, and that stays.
for label in org.hermesd.recipe=contrib/docker org.hermesd.recipe=contrib/docker/rootfs.sh; do
  docker image ls --filter "label=$label" --format '{{.Repository}}:{{.Tag}}' \
    | grep -v -x -e "$tag" -e "$name:latest" -e "$base" | xargs -r docker rmi >/dev/null 2>&1 || true
done
echo "$tag"

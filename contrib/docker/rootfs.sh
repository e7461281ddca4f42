#!/usr/bin/env bash
# A minimal Debian root file system made with debootstrap from this machine's own apt mirror,
# imported into Docker as the base image of contrib/docker/Dockerfile: no registry is involved.
#
#   contrib/docker/rootfs.sh            prints the base image's tag (builds it when missing)
#
# Cached twice: the tarball in $HERMESD_IMAGE_CACHE (see common.sh) and the imported image, tagged
# by a hash of what goes into it (RECIPE below, the suite, the package list, the architecture), so
# a second run costs one 'docker image inspect'. The packages are Debian's of the day of the first
# build: HERMESD_REBUILD=1 makes a new base with today's security updates. Needs root
# (debootstrap), debootstrap and a running dockerd; exits 3 when one of those is missing (the
# engine tests skip on that, and fail on anything else).
set -euo pipefail

# Bump when the debootstrap or import steps below change what the image holds.
RECIPE=1
suite=${HERMESD_DEBIAN_SUITE:-bookworm}
packages=${HERMESD_DEBIAN_PACKAGES:-python3,python3-venv}
repo=${HERMESD_BASE_REPO:-hermesd-base}
LABEL=org.hermesd.recipe=contrib/docker/rootfs.sh
# shellcheck source=contrib/docker/common.sh
. "$(dirname "$0")/common.sh"
cache=$HERMESD_IMAGE_CACHE

say() { echo "rootfs.sh: $*" >&2; }

# The first enabled 'deb' source for the suite, in either apt format; Debian's own mirror otherwise.
apt_mirror() {
  local found=""
  shopt -s nullglob
  local lists=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list) deb822=(/etc/apt/sources.list.d/*.sources)
  shopt -u nullglob
  for f in "${lists[@]}"; do
    [ -f "$f" ] || continue
    found=$(awk -v suite="$suite" '$1 == "deb" {
        i = 2; if ($2 ~ /^\[/) { while (i < NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit } }' "$f")
    [ -n "$found" ] && { echo "$found"; return; }
  done
  for f in "${deb822[@]}"; do
    found=$(awk -v suite="$suite" 'BEGIN { RS = ""; FS = "\n" } {
        types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          line = $i; if (line ~ /^[ \t]*#/) continue
          key = line; sub(/:.*/, "", key); val = line; sub(/^[^:]*:[ \t]*/, "", val)
          if (key == "Types") types = val; else if (key == "URIs") uris = val
          else if (key == "Suites") suites = val; else if (key == "Enabled") enabled = val
        }
        if ((" " types " ") ~ / deb / && (" " suites " ") ~ (" " suite " ") && enabled != "no") {
          split(uris, u, " "); print u[1]; exit } }' "$f")
    [ -n "$found" ] && { echo "$found"; return; }
  done
  echo "http://deb.debian.org/debian"
}

command -v docker >/dev/null || { say "docker is not installed (apt-get install docker.io)"; exit 3; }
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
key=$(printf '%s\n' "$RECIPE" "$suite" "$packages" "$arch" | sha256sum | cut -c1-12)
tag="$repo:$suite-$key"
if [ "${HERMESD_REBUILD:-0}" != 1 ] && docker image inspect "$tag" >/dev/null 2>&1; then
  say "cached: $tag"
  echo "$tag"
  exit 0
fi

mkdir -p "$cache"
tarball="$cache/rootfs-$suite-$key.tar"
if [ "${HERMESD_REBUILD:-0}" = 1 ] || [ ! -s "$tarball" ]; then
  [ "$(id -u)" = 0 ] || { say "debootstrap needs root"; exit 3; }
  command -v debootstrap >/dev/null || { say "debootstrap is not installed (apt-get install debootstrap)"; exit 3; }
  mirror=${HERMESD_DEBIAN_MIRROR:-$(apt_mirror)}
  work=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  say "debootstrap $suite from $mirror (packages: $packages)"
  debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; say "debootstrap failed"; exit 1; }
  # Downloaded packages and index files are half the size and nothing in the image needs them.
  rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
  tar --numeric-owner -C "$work/root" -cf "$work/rootfs.tar" .
  mv "$work/rootfs.tar" "$tarball"
fi
say "docker import $tarball as $tag"
docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change "LABEL $LABEL" --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
echo "$tag"

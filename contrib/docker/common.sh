# Sourced by rootfs.sh and build-image.sh: where both keep what they download.
#
# HERMESD_IMAGE_CACHE, else /var/cache/hermesd-image for root (a CI job with a fresh HOME still
# finds it), else ${XDG_CACHE_HOME:-~/.cache}/hermesd-image. Only a cache: the images themselves
# live in Docker's store, and a tag that exists there is never built again.
if [ -z "${HERMESD_IMAGE_CACHE:-}" ]; then
  if [ "$(id -u)" = 0 ]; then
    HERMESD_IMAGE_CACHE=/var/cache/hermesd-image
  else
    HERMESD_IMAGE_CACHE=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/hermesd-image
  fi
fi
export HERMESD_IMAGE_CACHE

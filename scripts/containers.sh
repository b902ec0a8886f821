#!/usr/bin/env bash
# The container engine the image and the compose deployment run on: podman (Debian's, as
# root, with runc) or a Docker engine. `scripts/containers.sh check` exits 0 when one can
# run a container, else prints one line naming what to install or configure and exits 2.
set -euo pipefail

engine() {
  if command -v podman >/dev/null 2>&1; then echo podman; return; fi
  if command -v docker >/dev/null 2>&1; then echo docker; return; fi
  return 1
}

check() {
  local e
  if ! e=$(engine); then
    echo "containers: no container engine: install podman (apt-get install -y podman buildah runc fuse-overlayfs uidmap slirp4netns) or Docker" >&2
    exit 2
  fi
  if ! out=$("$e" info 2>&1); then
    echo "containers: $e cannot run here: $(printf '%s' "$out" | grep -m1 -i 'error' || printf '%s' "$out" | head -1) (podman: set runtime = \"runc\" and default_ulimits in /etc/containers/containers.conf)" >&2
    exit 2
  fi
  echo "$e"
}

case "${1:-check}" in
  check) check ;;
  *) echo "usage: scripts/containers.sh check" >&2; exit 2 ;;
esac

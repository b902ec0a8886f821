#!/usr/bin/env bash
# The container engine for `make test-containers` and `make drills-containers`: nothing to do
# when podman or a Docker engine already runs containers; else, as root on Debian, installs
# Debian's podman (with runc, and debootstrap for the local base images) and gives it the
# two defaults a sandboxed host needs: `runtime = "runc"` (crun fails where cgroups are in
# hybrid mode) and container ulimits below the host's hard limits (podman's default raises
# nofile to 1048576, which such a host refuses). An existing containers.conf is kept: the
# settings are added only when it sets neither. Anything else gets the one line of
# `scripts/containers.sh check` naming what to do, and exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."
CONF=/etc/containers/containers.conf

if scripts/containers.sh check >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  exec scripts/containers.sh check >/dev/null
fi

if ! command -v podman >/dev/null 2>&1; then
  echo "installing Debian's podman..." >&2
  packages=(podman buildah runc fuse-overlayfs uidmap slirp4netns debootstrap)
  apt-get install -y -q "${packages[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q "${packages[@]}" >/dev/null
  }
fi

if ! grep -qs '^[[:space:]]*runtime[[:space:]]*=' "$CONF" \
   && ! grep -qs '^[[:space:]]*default_ulimits[[:space:]]*=' "$CONF"; then
  mkdir -p "$(dirname "$CONF")"
  if grep -qs '^\[\(containers\|engine\)\]' "$CONF"; then
    # Sections already there: adding ours would repeat a TOML table. Say what to set.
    echo "containers: add runtime = \"runc\" under [engine] and default_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"] under [containers] in $CONF" >&2
    exit 2
  fi
  cat >>"$CONF" <<'EOF'

# Added by dag-checkpoints' scripts/install_podman.sh: a sandboxed host lets podman neither
# use crun's cgroup handling nor raise a container's limits above its own hard limits.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
EOF
fi
exec scripts/containers.sh check >/dev/null

#!/usr/bin/env bash
# Builds the project image, and on a host that reaches no container registry, local
# equivalents of the base images it and the compose deployment use, from Debian's packages.
#
#   scripts/container_images.sh bases   # localhost/ckpt-{debian,python,postgres,redis,minio}
#   scripts/container_images.sh build   # dag-checkpoints:local on the local Python base
#   scripts/container_images.sh sizes   # the images' sizes
#
# Users with a registry need neither: `docker compose -f docker/docker-compose.yml build`
# uses python:3.11-slim-bookworm, postgres:16, redis:7.4 and minio/minio. Here the compose
# file is given docker/local.env, which names the local bases instead.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=$(scripts/containers.sh check)
work=${CKPT_IMAGE_WORK:-/var/tmp/ckpt-images}
suite=bookworm

debian() {
  # debootstrap's minimal Debian, with this host's extra CA certificates trusted (as any
  # TLS-inspecting proxy needs), imported as an image.
  if "$engine" image exists localhost/ckpt-debian:$suite; then return; fi
  command -v debootstrap >/dev/null || { echo "container_images: install debootstrap" >&2; exit 2; }
  if [ ! -x "$work/rootfs/usr/bin/apt-get" ]; then
    rm -rf "$work/rootfs"; mkdir -p "$work"
    debootstrap --variant=minbase "$suite" "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log"
  fi
  mkdir -p "$work/rootfs/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$work/rootfs/usr/local/share/ca-certificates/" 2>/dev/null || true
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | "$engine" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' - "localhost/ckpt-debian:$suite" >/dev/null
}

bases() {
  debian
  cp .tools/bin/minio docker/local/minio 2>/dev/null || { scripts/install_minio.sh >/dev/null && cp .tools/bin/minio docker/local/minio; }
  for name in python postgres redis minio; do
    "$engine" build -q -f "docker/local/$name.Containerfile" -t "localhost/ckpt-$name:$suite" docker/local >/dev/null
    echo "built localhost/ckpt-$name:$suite"
  done
  rm -f docker/local/minio
}

build() {
  "$engine" build -f docker/Dockerfile --build-arg PYTHON_IMAGE="localhost/ckpt-python:$suite" \
    -t dag-checkpoints:local .
}

sizes() {
  "$engine" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E 'ckpt-|dag-checkpoints' | sort
}

case "${1:-}" in
  bases) bases ;;
  build) build ;;
  sizes) sizes ;;
  *) echo "usage: scripts/container_images.sh bases|build|sizes" >&2; exit 2 ;;
esac

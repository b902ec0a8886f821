#!/usr/bin/env bash
# Builds Shopify's toxiproxy server (the fault-injecting TCP proxy of the storage-fault
# tests) into .tools/bin from the Go module proxy, at a pinned version; about 15 s, then
# cached. Without Go the storage-fault run is reported as skipped, never as passed.
set -euo pipefail
cd "$(dirname "$0")/.."
TOXIPROXY_VERSION=v2.12.0
if [ -x .tools/bin/toxiproxy-server ]; then exit 0; fi
if ! command -v go >/dev/null 2>&1; then
  echo "note: Go not found; the toxiproxy storage faults will be skipped" >&2
  exit 0
fi
mkdir -p .tools/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "building toxiproxy $TOXIPROXY_VERSION..." >&2
GOBIN="$tmp" GOFLAGS=-mod=mod go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION"
mv "$tmp/server" .tools/bin/toxiproxy-server

#!/usr/bin/env bash
# Builds the MinIO server used by the S3 tests into .tools/bin, from the Go module proxy,
# at a pinned version. About 11 minutes on 2 cores the first time; then cached. Without Go
# the tests fall back to moto's S3 server (CKPT_TEST_S3=moto forces that).
set -euo pipefail
cd "$(dirname "$0")/.."
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
if [ -x .tools/bin/minio ]; then exit 0; fi
if ! command -v go >/dev/null 2>&1; then
  echo "note: Go not found; S3 tests will use moto's server instead of MinIO" >&2
  exit 0
fi
mkdir -p .tools/bin
echo "building MinIO $MINIO_VERSION (first run only, several minutes)..." >&2
GOBIN="$PWD/.tools/bin" GOFLAGS=-mod=mod go install "github.com/minio/minio@$MINIO_VERSION"

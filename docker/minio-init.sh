#!/bin/sh
# Creates the buckets the deployment uses (idempotent).
set -eu
mc alias set local http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD"
mc mb --ignore-existing local/checkpoints
mc mb --ignore-existing local/flights

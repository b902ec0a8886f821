#!/usr/bin/env bash
# The compose deployment as processes on this machine; see scripts/cluster.py.
#   scripts/cluster.sh up|down|status|kill SERVICE|start SERVICE [--free-ports] [--home DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
# The venv with requirements.txt (Airflow's celery extra among them); cheap when current.
scripts/bootstrap.sh
exec .venv/bin/python scripts/cluster.py "$@"

#!/bin/bash
# One-off: migrate the metadata database, write the SimpleAuthManager passwords, and land
# the first days of flights into the raw zone on MinIO.
set -euo pipefail
airflow db migrate
printf '{"admin": "%s", "viewer": "viewer"}\n' "$AIRFLOW_ADMIN_PASSWORD" \
  > "$AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"
python -m spark_jobs.flights.landing --data "$CKPT_DATA" --start 2013-01-01 --end 2013-01-07

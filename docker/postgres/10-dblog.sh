#!/usr/bin/env bash
# Run once by the postgres image, on an empty data volume (this folder is its
# /docker-entrypoint-initdb.d; the image ignores the .psql file, which this script runs).
# The passwords come from the container's environment (docker-compose.yml, from .env), as psql
# variables: init.psql quotes them with :'name', so no password is written in a file.
# (No `set -u`: the image may source this script into its own entrypoint.)
set -eo pipefail

: "${DBLOG_PG_PASSWORD:?is not set: the password of the dblog role (see .env.example)}"
: "${WAREHOUSE_PASSWORD:?is not set: the password of the merger role (see .env.example)}"
: "${AIRFLOW_DB_PASSWORD:?is not set: the password of the airflow role (see .env.example)}"
: "${LAKE_CATALOG_PASSWORD:?is not set: the password of the lake role (see .env.example)}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --dbname postgres \
  -v dblog_password="$DBLOG_PG_PASSWORD" \
  -v warehouse_password="$WAREHOUSE_PASSWORD" \
  -v airflow_password="$AIRFLOW_DB_PASSWORD" \
  -v lake_password="$LAKE_CATALOG_PASSWORD" \
  -f "$(dirname "${BASH_SOURCE[0]}")/init.psql"

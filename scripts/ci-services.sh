#!/usr/bin/env bash
# Installs and starts what the test suite needs beyond Python: Debian's Chromium and ChromeDriver (the admin
# browser test), PostgreSQL (the journal and token tests on PostgreSQL) and systemd-analyze (the unit check).
# Idempotent; run as root on a fresh Debian machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PG_USER="${PALAZZO_TEST_PG_USER:-palazzo}"
PG_PASSWORD="${PALAZZO_TEST_PG_PASSWORD:-palazzo}"
PG_DB="${PALAZZO_TEST_PG_DB:-palazzo_test}"

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v pg_ctlcluster >/dev/null 2>&1 && ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "ci-services: missing ${need[*]}; run this script as root (or install them) first" >&2
    exit 1
  fi
  echo "ci-services: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# PostgreSQL: start the packaged cluster (creating one if the package left none) and a role + database for tests.
if [ "$(id -u)" -eq 0 ]; then
  if [ -z "$(pg_lsclusters -h 2>/dev/null)" ]; then
    version="$(ls /usr/lib/postgresql | sort -V | tail -1)"
    pg_createcluster "$version" main >/dev/null
  fi
  read -r version cluster port status _rest <<<"$(pg_lsclusters -h | head -1)"
  if [ "$status" != "online" ]; then
    pg_ctlcluster "$version" "$cluster" start
  fi
  for _ in $(seq 1 50); do
    pg_isready -q -p "$port" && break
    sleep 0.2
  done
  su postgres -c "psql -q -p $port -tAc \"SELECT 1 FROM pg_roles WHERE rolname='$PG_USER'\"" | grep -q 1 \
    || su postgres -c "psql -q -p $port -c \"CREATE ROLE $PG_USER LOGIN CREATEDB PASSWORD '$PG_PASSWORD'\""
  su postgres -c "psql -q -p $port -tAc \"SELECT 1 FROM pg_database WHERE datname='$PG_DB'\"" | grep -q 1 \
    || su postgres -c "createdb -p $port -O $PG_USER $PG_DB"
  mkdir -p "$ROOT/.tools"
  echo "postgres://$PG_USER:$PG_PASSWORD@127.0.0.1:$port/$PG_DB" >"$ROOT/.tools/pg-url"
fi

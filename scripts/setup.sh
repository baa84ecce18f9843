#!/usr/bin/env bash
# Installs what lakegate's tests and demo need, once; later runs reuse .cache/.
#   - system packages: PostgreSQL (server for the SQL-catalog tests, psql, pgbench), a JDK, Maven
#   - a Python venv with PyIceberg (independent writer/reader) and the client drivers
#   - the pgJDBC driver jar from Maven Central
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="$PWD/.cache"
mkdir -p "$CACHE"

need_apt=()
command -v psql >/dev/null || need_apt+=(postgresql-client)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

VENV="$CACHE/venv"
REQ="tests/requirements.txt"
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQ" "$VENV/.requirements"; then
  echo "setup: python venv ($REQ)"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi

JARS="$CACHE/jars"
PGJDBC_VERSION=42.7.4
if [ ! -f "$JARS/postgresql-$PGJDBC_VERSION.jar" ]; then
  echo "setup: pgJDBC $PGJDBC_VERSION from Maven Central"
  mkdir -p "$JARS"
  mvn -q dependency:copy -Dartifact="org.postgresql:postgresql:$PGJDBC_VERSION" -DoutputDirectory="$JARS" >/dev/null
fi
FLIGHT_JDBC_VERSION=18.3.0
if [ ! -f "$JARS/flight-sql-jdbc-driver-$FLIGHT_JDBC_VERSION.jar" ]; then
  echo "setup: Arrow Flight SQL JDBC driver $FLIGHT_JDBC_VERSION from Maven Central"
  mkdir -p "$JARS"
  mvn -q dependency:copy -Dartifact="org.apache.arrow:flight-sql-jdbc-driver:$FLIGHT_JDBC_VERSION" -DoutputDirectory="$JARS" >/dev/null
fi
echo "setup: ok"

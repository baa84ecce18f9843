#!/usr/bin/env bash
# Installs what lakegate's tests and demo need, once; later runs reuse .cache/.
#   - system packages (apt, when missing): PostgreSQL (server for the SQL-catalog tests, psql,
#     pgbench), pgbouncer (the connection-pool test), JDK 17, Maven, unzip, curl, openssl (the TLS test's CA), procps (pgrep),
#     Chromium (the console test) and Node.js/npm
#   - a Python venv with PyIceberg (independent writer/reader) and the client drivers (newest
#     releases), and a small one beside it with the drivers' older line
#   - a venv with Flink's Python driver and Iceberg's Flink runtime jars (a real upsert writer)
#   - the pgJDBC and HikariCP (newest and older line each) and Arrow Flight SQL JDBC jars from
#     Maven Central
#   - DuckDB itself (libduckdb.so, the official build, from npm's @duckdb/node-bindings-linux-x64:
#     lakegate links it instead of compiling DuckDB's C++ — half an hour on 2 cores), DuckDB's
#     iceberg, avro and httpfs extensions (PyPI wheels) and playwright-core (npm)
# Trino 476 and Spark 4.1 download on their first start (scripts/trino-server.sh,
# scripts/spark-connect.sh); scripts/fuzz.sh installs the nightly toolchain and cargo-fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="$PWD/.cache"
mkdir -p "$CACHE"

need_apt=()
command -v psql >/dev/null || need_apt+=(postgresql-client)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_apt+=(postgresql)
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
command -v unzip >/dev/null || need_apt+=(unzip)
command -v curl >/dev/null || need_apt+=(curl)
command -v openssl >/dev/null || need_apt+=(openssl)     # the TLS test makes its own CA
command -v pgrep >/dev/null || need_apt+=(procps)        # the catalog-freeze test
command -v pgbouncer >/dev/null || need_apt+=(pgbouncer) # the connection-pool test
command -v chromium >/dev/null || need_apt+=(chromium)   # the console's browser test
command -v node >/dev/null || need_apt+=(nodejs)
command -v npm >/dev/null || need_apt+=(npm)          # libduckdb.so and playwright-core come from npm
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: apt-get install ${need_apt[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

VENV="$CACHE/venv"
REQ="tests/requirements.txt"
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$REQ" "$VENV/.requirements"; then
  echo "setup: python venv ($REQ)"
  # A fresh venv each time the pins change: an upgrade in place keeps packages the old pins
  # pulled in (pytz came with pandas 2), and tests then pass here and fail on a clean clone.
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$REQ"
  cp "$REQ" "$VENV/.requirements"
fi

# The older line of the Python drivers (tests/requirements-older.txt): its own site-packages
# first, everything else from the main venv through a .pth file.
OLDER="$CACHE/venv-older"
REQ_OLDER="tests/requirements-older.txt"
if [ ! -x "$OLDER/bin/python" ] || ! cmp -s "$REQ_OLDER" "$OLDER/.requirements"; then
  echo "setup: python venv of the older driver line ($REQ_OLDER)"
  rm -rf "$OLDER"
  python3 -m venv "$OLDER"
  "$OLDER/bin/pip" install -q -r "$REQ_OLDER"
  purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
  "$VENV/bin/python" -c "$purelib" > "$("$OLDER/bin/python" -c "$purelib")/lakegate-main-venv.pth"
  cp "$REQ_OLDER" "$OLDER/.requirements"
fi

# Flink (a real upsert writer: equality deletes, tests/fixtures/flink_upsert.py): its Python
# driver without the Python-UDF stack, and Iceberg's Flink runtime with the Hadoop client jars.
FLINK_VENV="$CACHE/venv-flink"
REQ_FLINK="tests/requirements-flink.txt"
if [ ! -x "$FLINK_VENV/bin/python" ] || ! cmp -s "$REQ_FLINK" "$FLINK_VENV/.requirements"; then
  echo "setup: python venv for Flink ($REQ_FLINK)"
  rm -rf "$FLINK_VENV"
  python3 -m venv "$FLINK_VENV"
  "$FLINK_VENV/bin/pip" install -q --no-deps -r "$REQ_FLINK"
  cp "$REQ_FLINK" "$FLINK_VENV/.requirements"
fi
JARS="$CACHE/jars"
# maven_jar GROUP:NAME:VERSION DIR: the jar from Maven Central into DIR, once.
maven_jar() {
  local name version
  IFS=: read -r _ name version <<<"$1"
  if [ ! -f "$2/$name-$version.jar" ]; then
    echo "setup: $name $version from Maven Central"
    mkdir -p "$2"
    mvn -q dependency:copy -Dartifact="$1" -DoutputDirectory="$2" >/dev/null
  fi
}
for ARTIFACT in org.apache.iceberg:iceberg-flink-runtime-2.1:1.11.0 \
    org.apache.hadoop:hadoop-client-api:3.4.2 org.apache.hadoop:hadoop-client-runtime:3.4.2; do
  maven_jar "$ARTIFACT" "$JARS/flink"
done
# pgJDBC: the newest release and the older line the tests also run.
# HikariCP (the pool Metabase, DBeaver and most JVM apps use): newest and older line, with the
# slf4j API it logs through. The Arrow Flight SQL JDBC driver.
for ARTIFACT in org.postgresql:postgresql:42.7.14 org.postgresql:postgresql:42.7.4 \
    com.zaxxer:HikariCP:7.1.0 com.zaxxer:HikariCP:6.3.3 org.slf4j:slf4j-api:2.0.17 \
    org.apache.arrow:flight-sql-jdbc-driver:18.3.0; do
  maven_jar "$ARTIFACT" "$JARS"
done
# DuckDB's Iceberg extension for the bundled DuckDB (the `duckdb` crate 1.10505 = DuckDB 1.5.5):
# PyPI's duckdb-extension-* wheels carry the binaries; lakegate loads them offline.
DUCKDB_VERSION=1.5.5
DUCK_DIR="$CACHE/duckdb/v$DUCKDB_VERSION"
if [ ! -f "$DUCK_DIR/iceberg.duckdb_extension" ] || [ ! -f "$DUCK_DIR/avro.duckdb_extension" ] \
   || [ ! -f "$DUCK_DIR/httpfs.duckdb_extension" ]; then
  echo "setup: DuckDB $DUCKDB_VERSION iceberg + avro + httpfs extensions from PyPI"
  mkdir -p "$DUCK_DIR" "$CACHE/duckdb/wheels"
  "$VENV/bin/pip" download -q --no-deps -d "$CACHE/duckdb/wheels" \
    "duckdb-extension-iceberg==$DUCKDB_VERSION" "duckdb-extension-avro==$DUCKDB_VERSION" \
    "duckdb-extension-httpfs==$DUCKDB_VERSION"
  "$VENV/bin/python" - "$CACHE/duckdb/wheels" "$DUCK_DIR" <<'PY'
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in wheels.glob("duckdb_extension_*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.endswith(".duckdb_extension"):
                (out / pathlib.Path(name).name).write_bytes(z.read(name))
PY
fi
# libduckdb.so for the `duckdb` crate (linked through DUCKDB_LIB_DIR, .cargo/config.toml; binaries
# find it by their rpath). `cargo build --features bundled-duckdb` compiles DuckDB in instead.
DUCKDB_NPM=1.5.5-r.5
DUCK_LIB="$CACHE/duckdb/lib"
if [ ! -f "$DUCK_LIB/libduckdb.so" ] || [ "$(cat "$DUCK_LIB/.version" 2>/dev/null)" != "$DUCKDB_NPM" ]; then
  echo "setup: libduckdb.so $DUCKDB_VERSION (@duckdb/node-bindings-linux-x64@$DUCKDB_NPM from npm)"
  rm -rf "$DUCK_LIB" && mkdir -p "$DUCK_LIB/pack"
  (cd "$DUCK_LIB/pack" && npm pack -q "@duckdb/node-bindings-linux-x64@$DUCKDB_NPM" >/dev/null \
    && tar xzf ./*.tgz package/libduckdb.so)
  mv "$DUCK_LIB/pack/package/libduckdb.so" "$DUCK_LIB/" && rm -rf "$DUCK_LIB/pack"
  echo "$DUCKDB_NPM" > "$DUCK_LIB/.version"
fi
# playwright-core drives Chromium for the web console test (no browser download: Debian's).
PLAYWRIGHT_VERSION=1.65.1
NODE_DIR="$CACHE/node"
if [ ! -f "$NODE_DIR/node_modules/playwright-core/package.json" ] || \
   ! grep -q "\"version\": \"$PLAYWRIGHT_VERSION\"" "$NODE_DIR/node_modules/playwright-core/package.json"; then
  echo "setup: playwright-core $PLAYWRIGHT_VERSION from npm"
  mkdir -p "$NODE_DIR"
  (cd "$NODE_DIR" && npm install -q --no-audit --no-fund --no-save "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null)
fi
# The MCP TypeScript SDK (tests/e2e/test_mcp.py drives the agent endpoint with it too).
MCP_TS_VERSION=1.32.2
MCP_TS_DIR="$CACHE/node-mcp-$MCP_TS_VERSION"
if [ ! -f "$MCP_TS_DIR/node_modules/@modelcontextprotocol/sdk/package.json" ]; then
  echo "setup: @modelcontextprotocol/sdk $MCP_TS_VERSION from npm"
  mkdir -p "$MCP_TS_DIR"
  (cd "$MCP_TS_DIR" && npm install -q --no-audit --no-fund --no-save "@modelcontextprotocol/sdk@$MCP_TS_VERSION" >/dev/null)
fi
# node-postgres, newest and an older line (tests/e2e/test_drivers.py), each in its own directory.
for NODE_PG in 8.23.1 8.16.3; do
  PG_DIR="$CACHE/node-pg-$NODE_PG"
  if [ ! -f "$PG_DIR/node_modules/pg/package.json" ]; then
    echo "setup: node-postgres $NODE_PG from npm"
    mkdir -p "$PG_DIR"
    (cd "$PG_DIR" && npm install -q --no-audit --no-fund --no-save "pg@$NODE_PG" >/dev/null)
  fi
done
# Trino 476 needs Java 24+ (scripts/trino-server.sh; override with TRINO_JAVA). Debian has none
# in apt; the machines here carry a Temurin 25 JDK.
TRINO_JAVA=${TRINO_JAVA:-/usr/lib/jvm/temurin-25-jdk-amd64/bin/java}
[ -x "$TRINO_JAVA" ] || echo "setup: warning: no Java 24+ at $TRINO_JAVA: the Trino tests will fail (set TRINO_JAVA)" >&2
echo "setup: ok"

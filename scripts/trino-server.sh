#!/usr/bin/env bash
# A throwaway Trino 476 server (coordinator + worker in one JVM) on loopback, for tests and
# benchmarks, reading Iceberg tables through the shared JDBC catalog on PostgreSQL.
#   scripts/trino-server.sh start DIR PORT PG_JDBC_URL CATALOG_NAME WAREHOUSE_URI
#       e.g. start /tmp/t 58080 jdbc:postgresql://127.0.0.1:55432/postgres lake file:///tmp/wh
#       waits until GET /v1/info says "starting":false (TRINO_START_TIMEOUT, default 180 s)
#   scripts/trino-server.sh stop DIR      stop it (by DIR/pid)
#
# The Trino SQL catalog is always `lake` (lake.<schema>.<table>); CATALOG_NAME is the
# catalog_name column in iceberg_tables (the one PyIceberg / iceberg-rust / Spark use).
# Trino 476 is the last release on Maven Central and needs Java 24+: it runs on Temurin 25.
# The server (io.trino:trino-server-core:476:tar.gz) and the Iceberg plugin
# (io.trino:trino-iceberg:476:zip) are expected in .cache/engines (fetched once with
# `mvn dependency:copy`, see below); they are unpacked once into .cache/engines/trino-server-476.
#
# Layout of DIR: etc/ (config), data/ (node.data-dir), var/ (request logs), server.log, pid.
#
# Environment:
#   TRINO_JAVA        java binary (default: /usr/lib/jvm/temurin-25-jdk-amd64/bin/java)
#   TRINO_HEAP        max heap (default 1500m: a 2-core, shared test box)
#   TRINO_QUERY_MEMORY a query's memory limit on the node (default 512MB; bench/tpch at SF 1
#                     raises it with the heap)
#   S3_CATALOG, S3_WAREHOUSE  a second Trino catalog S3_CATALOG (also its catalog_name in the
#                     JDBC catalog) whose tables live on S3 under S3_WAREHOUSE, read through
#                     Trino's native S3 file system with AWS_ENDPOINT_URL, AWS_REGION,
#                     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (path-style addressing)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/server.sh
source "$ROOT/scripts/lib/server.sh"
CACHE=$ROOT/.cache/engines
VERSION=476
HOME_DIR=$CACHE/trino-server-$VERSION
JAVA=${TRINO_JAVA:-/usr/lib/jvm/temurin-25-jdk-amd64/bin/java}
START_TIMEOUT=${TRINO_START_TIMEOUT:-180}

die() { echo "trino-server: $*" >&2; exit 1; }

# Fetch one artifact from Maven Central into .cache/engines, unless already there.
fetch() { # ARTIFACT FILE
  [ -f "$CACHE/$2" ] && return 0
  command -v mvn >/dev/null || die "$CACHE/$2 missing and mvn not found (apt-get install maven)"
  mvn -B -q dependency:copy -Dartifact="$1" -DoutputDirectory="$CACHE" >&2 || die "mvn could not fetch $1"
}

# Unpack server-core and the Iceberg plugin (its zip has one top folder, trino-iceberg-476/),
# once, under a lock; the folder only appears once complete.
install() {
  [ -f "$HOME_DIR/.complete" ] && return 0
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.trino.lock"
  flock 9
  if [ ! -f "$HOME_DIR/.complete" ]; then
    fetch io.trino:trino-server-core:$VERSION:tar.gz trino-server-core-$VERSION.tar.gz
    fetch io.trino:trino-iceberg:$VERSION:zip trino-iceberg-$VERSION.zip
    echo "trino-server: unpacking Trino $VERSION into $HOME_DIR (one time)..." >&2
    rm -rf "$HOME_DIR.tmp" "$HOME_DIR" && mkdir -p "$HOME_DIR.tmp"
    tar xzf "$CACHE/trino-server-core-$VERSION.tar.gz" -C "$HOME_DIR.tmp" --strip-components=1
    unzip -q "$CACHE/trino-iceberg-$VERSION.zip" -d "$HOME_DIR.tmp/plugin"
    mv "$HOME_DIR.tmp/plugin/trino-iceberg-$VERSION" "$HOME_DIR.tmp/plugin/iceberg"
    touch "$HOME_DIR.tmp/.complete"
    mv "$HOME_DIR.tmp" "$HOME_DIR"
  fi
  flock -u 9
}

is_our_server() { # PID
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q io.trino.server.TrinoServer
}

# The Iceberg connector's properties for the JDBC catalog NAME on PG_URL.
jdbc_catalog() { # NAME PG_URL WAREHOUSE
  printf '%s\n' connector.name=iceberg iceberg.catalog.type=jdbc \
    "iceberg.jdbc-catalog.catalog-name=$1" iceberg.jdbc-catalog.driver-class=org.postgresql.Driver \
    "iceberg.jdbc-catalog.connection-url=$2" iceberg.jdbc-catalog.connection-user=postgres \
    "iceberg.jdbc-catalog.default-warehouse-dir=$3"
}

cmd_start() {
  local dir=$1 port=$2 pg_url=$3 catalog=$4 warehouse=$5
  [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
  [ -x "$JAVA" ] || die "no Java 24+ at $JAVA (set TRINO_JAVA)"
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
  if [ -f "$dir/pid" ] && is_our_server "$(cat "$dir/pid")"; then die "already running in $dir (pid $(cat "$dir/pid"))"; fi
  curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/" && die "something already answers on 127.0.0.1:$port"
  install

  mkdir -p "$dir/etc/catalog" "$dir/data" "$dir/var"
  cat >"$dir/etc/node.properties" <<EOF
node.environment=test
node.id=lakegate-test-$port
node.data-dir=$dir/data
node.bind-ip=127.0.0.1
node.internal-address=127.0.0.1
EOF
  cat >"$dir/etc/jvm.config" <<EOF
-Xmx${TRINO_HEAP:-1500m}
-XX:+UseG1GC
-XX:+ExplicitGCInvokesConcurrent
-XX:+ExitOnOutOfMemoryError
-XX:-OmitStackTraceInFastThrow
-XX:ReservedCodeCacheSize=256M
-XX:+EnableDynamicAgentLoading
--enable-native-access=ALL-UNNAMED
--sun-misc-unsafe-memory-access=allow
-Djdk.attach.allowAttachSelf=true
-Dfile.encoding=UTF-8
-Djava.io.tmpdir=$dir/data/tmp
EOF
  cat >"$dir/etc/config.properties" <<EOF
coordinator=true
node-scheduler.include-coordinator=true
http-server.http.port=$port
discovery.uri=http://127.0.0.1:$port
catalog.config-dir=$dir/etc/catalog
plugin.dir=$HOME_DIR/plugin
query.max-memory=${TRINO_QUERY_MEMORY:-1GB}
query.max-memory-per-node=${TRINO_QUERY_MEMORY:-512MB}
EOF
  # The Iceberg connector on the JDBC catalog; the native local filesystem serves file:// (and
  # local://) locations, resolved under local.location.
  { jdbc_catalog "$catalog" "$pg_url" "$warehouse"
    printf '%s\n' fs.native-local.enabled=true local.location=/
  } >"$dir/etc/catalog/lake.properties"
  if [ -n "${S3_CATALOG:-}" ]; then
    [[ $S3_CATALOG =~ ^[a-z_][a-z0-9_]*$ ]] || die "bad S3_CATALOG: $S3_CATALOG"
    { jdbc_catalog "$S3_CATALOG" "$pg_url" "${S3_WAREHOUSE:?S3_WAREHOUSE}"
      printf '%s\n' fs.native-s3.enabled=true "s3.endpoint=${AWS_ENDPOINT_URL:?AWS_ENDPOINT_URL}" \
        "s3.region=${AWS_REGION:-us-east-1}" s3.path-style-access=true \
        "s3.aws-access-key=${AWS_ACCESS_KEY_ID:?AWS_ACCESS_KEY_ID}" \
        "s3.aws-secret-key=${AWS_SECRET_ACCESS_KEY:?AWS_SECRET_ACCESS_KEY}"
    } >"$dir/etc/catalog/$S3_CATALOG.properties"
  fi
  mkdir -p "$dir/data/tmp"
  rm -f "$dir/pid"

  # What bin/launcher does, minus the Go binary: jvm.config + node.properties as -D flags.
  local t0=$SECONDS pid
  # shellcheck disable=SC2046
  (cd "$dir" && exec nohup "$JAVA" $(grep -v '^#' etc/jvm.config) $(sed 's/^/-D/' etc/node.properties) \
      -Dconfig="$dir/etc/config.properties" -cp "$HOME_DIR/lib/*" io.trino.server.TrinoServer \
      </dev/null >"$dir/server.log" 2>&1) &
  pid=$!
  echo "$pid" >"$dir/pid"

  until curl -sf --max-time 2 "http://127.0.0.1:$port/v1/info" 2>/dev/null | grep -q '"starting":false'; do
    if ! kill -0 "$pid" 2>/dev/null || [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then
      kill "$pid" 2>/dev/null || true
      rm -f "$dir/pid"
      tail -n 40 "$dir/server.log" >&2
      die "server did not start on 127.0.0.1:$port within ${START_TIMEOUT}s (log: $dir/server.log)"
    fi
    sleep 1
  done
  echo "trino-server: up on http://127.0.0.1:$port in $((SECONDS - t0))s (pid $pid, catalog lake -> $catalog)" >&2
}

cmd_stop() { stop_server trino-server "$1"; }

case "${1:-}" in
  start) [ $# -eq 6 ] || die "usage: $0 start DIR PORT PG_JDBC_URL CATALOG_NAME WAREHOUSE_URI"; cmd_start "$2" "$3" "$4" "$5" "$6" ;;
  stop)  [ $# -eq 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
  *) echo "usage: $0 start DIR PORT PG_JDBC_URL CATALOG_NAME WAREHOUSE_URI | stop DIR" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A throwaway Spark Connect server (Spark 4.1.4, local[2]) on loopback, for tests and
# benchmarks, with an Iceberg catalog on the shared JDBC catalog in PostgreSQL.
#   scripts/spark-connect.sh start DIR PORT PG_JDBC_URL CATALOG_NAME WAREHOUSE_URI
#       e.g. start /tmp/s 15002 jdbc:postgresql://127.0.0.1:55432/postgres lake file:///tmp/wh
#       waits until the port is open and `SHOW NAMESPACES IN CATALOG_NAME` answers over
#       Spark Connect (SPARK_START_TIMEOUT, default 180 s)
#   scripts/spark-connect.sh sql PORT 'SQL' ...   run statements over Spark Connect, print rows
#                                                  (tab-separated; for checks and debugging)
#   scripts/spark-connect.sh stop DIR             stop it (by DIR/pid)
#
# The Spark SQL catalog is named CATALOG_NAME, which Iceberg's JdbcCatalog also uses as the
# catalog_name column of iceberg_tables: tables are CATALOG_NAME.<namespace>.<table>.
# jdbc.schema-version=V1 makes it create (or, once, add) the iceberg_type column that
# PyIceberg's SqlCatalog (v1), Trino and lakegate's iceberg-rust lookups expect (without it, on
# an empty database, Iceberg creates the v0 tables, which lack that column).
# cache-enabled=false: otherwise Spark keeps serving a table's old snapshot for 30 s after
# another engine commits to it.
#
# SPARK_HOME: the pyspark 4.1.4 sdist (.cache/engines/wheels/pyspark-4.1.4.tar.gz) carries a
# Spark distribution under pyspark-4.1.4/deps/{bin,sbin,jars}; it is unpacked once into
# .cache/engines/spark-4.1.4. Iceberg: .cache/engines/iceberg-spark-runtime-4.1_2.13-1.11.0.jar
# and .cache/jars/postgresql-42.7.4.jar (both fetched from Maven Central with mvn if absent).
# S3_CATALOG, S3_WAREHOUSE (environment): a second catalog S3_CATALOG on the same JDBC catalog
# whose tables live on S3 under S3_WAREHOUSE, read through Iceberg's S3FileIO
# (iceberg-aws-bundle-1.11.0.jar, fetched when asked for) with AWS_ENDPOINT_URL, AWS_REGION,
# AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, path-style.
# The readiness check and `sql` use Spark's own JDBC driver for Spark Connect
# (jars/connect-repl/spark-connect-client-jdbc, jdbc:sc://host:port): no Python needed.
#
# Layout of DIR: server.log, pid, tmp/ (spark.local.dir, java.io.tmpdir).
#
# Environment:
#   SPARK_JAVA_HOME   JDK for Spark (default /usr/lib/jvm/java-17-openjdk-amd64; Spark 4.1 needs 17+)
#   SPARK_DRIVER_MEMORY  (default 1g)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/server.sh
source "$ROOT/scripts/lib/server.sh"
CACHE=$ROOT/.cache/engines
VERSION=4.1.4
SDIST=$CACHE/wheels/pyspark-$VERSION.tar.gz
SPARK_HOME=$CACHE/spark-$VERSION
ICEBERG_JAR=$CACHE/iceberg-spark-runtime-4.1_2.13-1.11.0.jar
AWS_JAR=$CACHE/iceberg-aws-bundle-1.11.0.jar   # S3FileIO, for S3_CATALOG only
PG_JAR=$ROOT/.cache/jars/postgresql-42.7.4.jar
JAVA_HOME=${SPARK_JAVA_HOME:-/usr/lib/jvm/java-17-openjdk-amd64}
MAIN_CLASS=org.apache.spark.sql.connect.service.SparkConnectServer
CHECK=$SPARK_HOME/sc-sql   # compiled SparkConnectSql (the readiness check / `sql` client)
START_TIMEOUT=${SPARK_START_TIMEOUT:-180}
export SPARK_HOME JAVA_HOME

die() { echo "spark-connect: $*" >&2; exit 1; }

# Fetch one file with mvn (Maven Central) into a folder, unless already there.
fetch() { # ARTIFACT FOLDER FILE
  [ -f "$2/$3" ] && return 0
  command -v mvn >/dev/null || die "$2/$3 missing and mvn not found (apt-get install maven)"
  mvn -B -q dependency:copy -Dartifact="$1" -DoutputDirectory="$2" >&2 || die "mvn could not fetch $1"
}

# Unpack the Spark distribution from the sdist and compile the SQL client, once, under a lock.
install() {
  [ -f "$SPARK_HOME/.complete" ] && [ -f "$ICEBERG_JAR" ] && [ -f "$PG_JAR" ] && return 0
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.spark.lock"
  flock 9
  fetch org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.11.0 "$CACHE" "$(basename "$ICEBERG_JAR")"
  fetch org.postgresql:postgresql:42.7.4 "$(dirname "$PG_JAR")" "$(basename "$PG_JAR")"
  if [ ! -f "$SPARK_HOME/.complete" ]; then
    if [ ! -f "$SDIST" ]; then
      python3 -m pip download -q --no-binary :all: --no-deps -d "$CACHE/wheels" "pyspark==$VERSION" >&2 \
        || die "$SDIST missing and pip could not download it"
    fi
    echo "spark-connect: unpacking Spark $VERSION into $SPARK_HOME (one time)..." >&2
    rm -rf "$SPARK_HOME.tmp" "$SPARK_HOME" && mkdir -p "$SPARK_HOME.tmp"
    tar xzf "$SDIST" -C "$SPARK_HOME.tmp" --strip-components=2 \
      "pyspark-$VERSION/deps/bin" "pyspark-$VERSION/deps/sbin" "pyspark-$VERSION/deps/jars"
    compile_client "$SPARK_HOME.tmp"
    touch "$SPARK_HOME.tmp/.complete"
    mv "$SPARK_HOME.tmp" "$SPARK_HOME"
  fi
  flock -u 9
}

# The JDBC driver (jdbc:sc://) + the JVM client (shaded gRPC) first, then Spark's jars for the
# rest of its dependencies (spark-common-utils, log4j, ...).
client_cp() { # SPARK_HOME
  echo "$1/sc-sql:$1/jars/connect-repl/spark-connect-client-jdbc_2.13-$VERSION.jar:$1/jars/connect-repl/spark-connect-client-jvm_2.13-$VERSION.jar:$1/jars/*"
}

# A tiny JDBC client: java SparkConnectSql jdbc:sc://host:port SQL... prints rows tab-separated.
compile_client() { # SPARK_HOME
  mkdir -p "$1/sc-sql"
  cat >"$1/sc-sql/SparkConnectSql.java" <<'JAVA'
import java.sql.*;

public class SparkConnectSql {
  public static void main(String[] args) throws Exception {
    try (Connection c = DriverManager.getConnection(args[0]); Statement s = c.createStatement()) {
      for (int i = 1; i < args.length; i++) {
        if (!s.execute(args[i])) continue;
        try (ResultSet rs = s.getResultSet()) {
          int n = rs.getMetaData().getColumnCount();
          while (rs.next()) {
            StringBuilder b = new StringBuilder();
            for (int j = 1; j <= n; j++) b.append(j > 1 ? "\t" : "").append(rs.getString(j));
            System.out.println(b);
          }
        }
      }
    }
    System.exit(0); // don't wait on the gRPC channel's threads
  }
}
JAVA
  "$JAVA_HOME/bin/javac" -nowarn -d "$1/sc-sql" "$1/sc-sql/SparkConnectSql.java" || die "failed to compile the SQL client"
}

cmd_sql() { # PORT SQL...
  local port=$1; shift
  install
  # The client retries an unreachable server for minutes: bound it.
  SPARK_LOCAL_IP=127.0.0.1 timeout "${SPARK_SQL_TIMEOUT:-120}" "$JAVA_HOME/bin/java" -Xmx256m -XX:TieredStopAtLevel=1 \
    --add-opens=java.base/java.nio=ALL-UNNAMED -Dlog4j2.level=error \
    -cp "$(client_cp "$SPARK_HOME")" SparkConnectSql "jdbc:sc://127.0.0.1:$port" "$@"
}

is_our_server() { # PID
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q "$MAIN_CLASS"
}

cmd_start() {
  local dir=$1 port=$2 pg_url=$3 catalog=$4 warehouse=$5
  [[ $port =~ ^[0-9]+$ ]] || die "bad port: $port"
  [[ $catalog =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad catalog name: $catalog"
  [ -x "$JAVA_HOME/bin/java" ] || die "no JDK at $JAVA_HOME (set SPARK_JAVA_HOME)"
  mkdir -p "$dir" && dir=$(cd "$dir" && pwd)
  if [ -f "$dir/pid" ] && is_our_server "$(cat "$dir/pid")"; then die "already running in $dir (pid $(cat "$dir/pid"))"; fi
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && die "something already listens on 127.0.0.1:$port"
  install
  mkdir -p "$dir/tmp"
  rm -f "$dir/pid"

  local t0=$SECONDS pid c=spark.sql.catalog.$catalog jars="$ICEBERG_JAR,$PG_JAR" s3=()
  if [ -n "${S3_CATALOG:-}" ]; then
    [[ $S3_CATALOG =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad S3_CATALOG: $S3_CATALOG"
    fetch org.apache.iceberg:iceberg-aws-bundle:1.11.0 "$CACHE" "$(basename "$AWS_JAR")"
    jars="$jars,$AWS_JAR"
    local s=spark.sql.catalog.$S3_CATALOG
    s3=(--conf "$s=org.apache.iceberg.spark.SparkCatalog" --conf "$s.type=jdbc"
        --conf "$s.uri=$pg_url" --conf "$s.jdbc.user=postgres" --conf "$s.jdbc.schema-version=V1"
        --conf "$s.cache-enabled=false" --conf "$s.warehouse=${S3_WAREHOUSE:?S3_WAREHOUSE}"
        --conf "$s.io-impl=org.apache.iceberg.aws.s3.S3FileIO"
        --conf "$s.s3.endpoint=${AWS_ENDPOINT_URL:?AWS_ENDPOINT_URL}"
        --conf "$s.s3.path-style-access=true"
        --conf "$s.s3.access-key-id=${AWS_ACCESS_KEY_ID:?AWS_ACCESS_KEY_ID}"
        --conf "$s.s3.secret-access-key=${AWS_SECRET_ACCESS_KEY:?AWS_SECRET_ACCESS_KEY}"
        --conf "$s.client.region=${AWS_REGION:-us-east-1}")
  fi
  (cd "$dir" && SPARK_LOCAL_IP=127.0.0.1 SPARK_LOG_DIR="$dir" exec nohup "$SPARK_HOME/bin/spark-submit" \
      --class "$MAIN_CLASS" --name "lakegate-test-spark-connect" \
      --master 'local[2]' --driver-memory "${SPARK_DRIVER_MEMORY:-1g}" \
      --driver-java-options "-Djava.io.tmpdir=$dir/tmp -Dderby.system.home=$dir/tmp" \
      --jars "$jars" "${s3[@]}" \
      --conf spark.connect.grpc.binding.address=127.0.0.1 \
      --conf spark.connect.grpc.binding.port="$port" \
      --conf spark.driver.host=127.0.0.1 --conf spark.driver.bindAddress=127.0.0.1 \
      --conf spark.ui.enabled=false \
      --conf spark.local.dir="$dir/tmp" \
      --conf spark.sql.warehouse.dir="$dir/tmp/spark-warehouse" \
      --conf spark.sql.catalogImplementation=in-memory \
      --conf spark.sql.session.timeZone=UTC \
      --conf spark.sql.ansi.doubleQuotedIdentifiers=true \
      --conf spark.sql.shuffle.partitions=2 \
      --conf spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions \
      --conf "$c=org.apache.iceberg.spark.SparkCatalog" \
      --conf "$c.type=jdbc" \
      --conf "$c.uri=$pg_url" \
      --conf "$c.jdbc.user=postgres" \
      --conf "$c.jdbc.schema-version=V1" \
      --conf "$c.cache-enabled=false" \
      --conf "$c.warehouse=$warehouse" \
      </dev/null >"$dir/server.log" 2>&1) &
  pid=$!   # spark-submit execs java (via spark-class), so this is the JVM's PID
  echo "$pid" >"$dir/pid"

  local ready=port
  while :; do
    if [ $ready = port ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then ready=query; fi
    if [ $ready = query ] && cmd_sql "$port" "SHOW NAMESPACES IN $catalog" >"$dir/ready.out" 2>&1; then break; fi
    if ! kill -0 "$pid" 2>/dev/null || [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then
      kill "$pid" 2>/dev/null || true
      rm -f "$dir/pid"
      tail -n 40 "$dir/server.log" >&2
      [ -f "$dir/ready.out" ] && tail -n 5 "$dir/ready.out" >&2
      die "server did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s (log: $dir/server.log)"
    fi
    sleep 1
  done
  echo "spark-connect: up on sc://127.0.0.1:$port in $((SECONDS - t0))s (pid $pid, catalog $catalog)" >&2
}

cmd_stop() { stop_server spark-connect "$1"; }

case "${1:-}" in
  start) [ $# -eq 6 ] || die "usage: $0 start DIR PORT PG_JDBC_URL CATALOG_NAME WAREHOUSE_URI"; cmd_start "$2" "$3" "$4" "$5" "$6" ;;
  sql)   [ $# -ge 3 ] || die "usage: $0 sql PORT SQL..."; shift; cmd_sql "$@" ;;
  stop)  [ $# -eq 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
  *) echo "usage: $0 start DIR PORT PG_JDBC_URL CATALOG_NAME WAREHOUSE_URI | sql PORT SQL... | stop DIR" >&2; exit 2 ;;
esac

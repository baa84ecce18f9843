#!/usr/bin/env bash
# A throwaway Apache Iceberg REST catalog on loopback, for tests and benchmarks.
#   scripts/rest-catalog.sh start DIR PORT   start it, wait until GET /v1/config answers
#   scripts/rest-catalog.sh stop DIR         stop it (by DIR/rest.pid)
#
# The server is Iceberg's own test server (org.apache.iceberg.rest.RESTCatalogServer from
# org.apache.iceberg:iceberg-open-api:1.10.0:test-fixtures) in front of a JdbcCatalog on
# SQLite. Its jars come from Maven Central through tests/rest-catalog/pom.xml, once, into
# .cache/rest-catalog/jars. A small launcher (compiled once into .cache/rest-catalog) does
# what RESTCatalogServer.main does, but binds 127.0.0.1 instead of every interface.
#
# Layout of DIR: warehouse/ (table data + metadata, file://DIR/warehouse), catalog.db
# (the SQLite JdbcCatalog), rest.pid, rest.log, tmp/ (JVM temp dir).
# Clients need only uri=http://127.0.0.1:PORT: no credentials, no warehouse, no prefix.
#
# Environment:
#   REST_CATALOG_JAVA        java binary (default: $JAVA_HOME/bin/java, else java on PATH; needs 11+)
#   REST_CATALOG_JAVA_OPTS   JVM options (default: small heap, fast startup)
#   CATALOG_*                passed through by the server as catalog properties
#                            (CATALOG_FOO__BAR_BAZ -> foo-bar.baz); see RCKUtils in Iceberg.
#   REST_WAREHOUSE           the warehouse (default file://DIR/warehouse); an s3:// one is
#                            written through Iceberg's S3FileIO (iceberg-aws and its AWS SDK
#                            bundle, fetched once into .cache/rest-catalog/s3-jars) with
#                            AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID,
#                            AWS_SECRET_ACCESS_KEY, path-style.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
POM=$ROOT/tests/rest-catalog/pom.xml
CACHE=$ROOT/.cache/rest-catalog
JARS=$CACHE/jars
LAUNCHER_VERSION=2
LAUNCHER=$CACHE/launcher-v$LAUNCHER_VERSION
LAUNCHER_CLASS=LoopbackRESTCatalogServer
START_TIMEOUT=90

die() { echo "rest-catalog: $*" >&2; exit 1; }

java_bin() {
  if [ -n "${REST_CATALOG_JAVA:-}" ]; then echo "$REST_CATALOG_JAVA"
  elif [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then echo "$JAVA_HOME/bin/java"
  elif command -v java >/dev/null; then command -v java
  else die "no java found (install a JDK 11+ or set REST_CATALOG_JAVA)"; fi
}

# Fetch the server's jars from Maven Central, once. Guarded by a lock so parallel test
# runs don't race; the folder only appears once complete.
resolve_jars() {
  [ -f "$JARS/.complete" ] && return 0
  command -v mvn >/dev/null || die "mvn not found (apt-get install maven); needed once to fetch the server's jars"
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9
  if [ ! -f "$JARS/.complete" ]; then
    echo "rest-catalog: resolving Iceberg REST server jars into $JARS (one time)..." >&2
    rm -rf "$JARS.tmp" "$JARS"
    if ! mvn -B -q -f "$POM" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$JARS.tmp" >"$CACHE/mvn.log" 2>&1; then
      tail -n 30 "$CACHE/mvn.log" >&2
      die "mvn failed to resolve the jars (full log: $CACHE/mvn.log)"
    fi
    ls "$JARS.tmp"/iceberg-open-api-*-test-fixtures.jar >/dev/null 2>&1 \
      || die "resolved jars lack iceberg-open-api test-fixtures (see $CACHE/mvn.log)"
    touch "$JARS.tmp/.complete"
    mv "$JARS.tmp" "$JARS"
  fi
  flock -u 9
}

# RESTCatalogServer.main binds 0.0.0.0 (new Server(port)) with SO_REUSEPORT. This launcher
# reuses its package-private catalog setup (env CATALOG_* -> properties, JdbcCatalog default)
# and serves the same servlet on host:port without SO_REUSEPORT, so a busy port is an error.
compile_launcher() {
  [ -f "$LAUNCHER/classes/$LAUNCHER_CLASS.class" ] && return 0
  local javac
  javac="$(dirname "$(readlink -f "$(java_bin)")")/javac"
  [ -x "$javac" ] || javac=$(command -v javac) || die "javac not found (a JDK, not a JRE, is needed)"
  exec 9>"$CACHE/.lock"
  flock 9
  if [ ! -f "$LAUNCHER/classes/$LAUNCHER_CLASS.class" ]; then
    rm -rf "$LAUNCHER.tmp" && mkdir -p "$LAUNCHER.tmp/src" "$LAUNCHER.tmp/classes"
    cat >"$LAUNCHER.tmp/src/$LAUNCHER_CLASS.java" <<'JAVA'
import java.lang.reflect.Constructor;
import java.lang.reflect.Method;
import java.util.Map;
import org.apache.iceberg.rest.RESTCatalogAdapter;
import org.apache.iceberg.rest.RESTCatalogServlet;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.server.handler.gzip.GzipHandler;
import org.eclipse.jetty.servlet.ServletContextHandler;
import org.eclipse.jetty.servlet.ServletHolder;

/** RESTCatalogServer.main, bound to -Drest.host (default 127.0.0.1). */
public class LoopbackRESTCatalogServer {
  public static void main(String[] args) {
    try {
      run();
    } catch (Throwable t) {
      t.printStackTrace();
      System.exit(1); // don't linger on Jetty's non-daemon threads
    }
  }

  private static void run() throws Exception {
    String host = System.getProperty("rest.host", "127.0.0.1");

    Class<?> serverClass = Class.forName("org.apache.iceberg.rest.RESTCatalogServer");
    Constructor<?> ctor = serverClass.getDeclaredConstructor();
    ctor.setAccessible(true);
    Method init = serverClass.getDeclaredMethod("initializeBackendCatalog");
    init.setAccessible(true);
    Object context = init.invoke(ctor.newInstance());

    Method configuration = context.getClass().getDeclaredMethod("configuration");
    configuration.setAccessible(true);
    @SuppressWarnings("unchecked")
    Map<String, String> config = (Map<String, String>) configuration.invoke(context);
    int port = Integer.parseInt(config.getOrDefault("rest.port", "8181"));

    Class<?> adapterClass = Class.forName("org.apache.iceberg.rest.RESTServerCatalogAdapter");
    Constructor<?> adapterCtor = adapterClass.getDeclaredConstructor(context.getClass());
    adapterCtor.setAccessible(true);
    RESTCatalogAdapter adapter = (RESTCatalogAdapter) adapterCtor.newInstance(context);

    ServletContextHandler handler = new ServletContextHandler(ServletContextHandler.NO_SESSIONS);
    handler.addServlet(new ServletHolder(new RESTCatalogServlet(adapter)), "/*");
    handler.insertHandler(new GzipHandler());

    Server server = new Server();
    ServerConnector connector = new ServerConnector(server);
    connector.setHost(host);
    connector.setPort(port);
    server.addConnector(connector);
    server.setHandler(handler);
    server.setStopAtShutdown(true);
    server.start();
    System.err.println("rest-catalog: listening on http://" + host + ":" + connector.getLocalPort());
    server.join();
  }
}
JAVA
    "$javac" --release 11 -nowarn -cp "$JARS/*" -d "$LAUNCHER.tmp/classes" "$LAUNCHER.tmp/src/$LAUNCHER_CLASS.java" \
      || die "failed to compile the launcher"
    rm -rf "$LAUNCHER" && mv "$LAUNCHER.tmp" "$LAUNCHER"
  fi
  flock -u 9
}

is_our_server() { # PID
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q "$LAUNCHER_CLASS"
}

cmd_start() {
  local dir=$1 port=$2
  [[ $port =~ ^[0-9]+$ ]] && [ "$port" -gt 0 ] && [ "$port" -lt 65536 ] || die "bad port: $port"
  command -v curl >/dev/null || die "curl not found"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [ -f "$dir/rest.pid" ] && is_our_server "$(cat "$dir/rest.pid")"; then
    die "already running in $dir (pid $(cat "$dir/rest.pid")); stop it first"
  fi
  if curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$port/"; then
    die "something already answers on 127.0.0.1:$port"
  fi
  local java; java=$(java_bin)
  resolve_jars
  compile_launcher
  mkdir -p "$dir/warehouse" "$dir/tmp"
  rm -f "$dir/rest.pid"

  local t0=$SECONDS warehouse=${REST_WAREHOUSE:-file://$dir/warehouse} extra=""
  if [[ $warehouse == s3://* ]]; then
    extra=":$(s3_jars)/*"
    export CATALOG_IO__IMPL=org.apache.iceberg.aws.s3.S3FileIO
    export CATALOG_S3_ENDPOINT="${AWS_ENDPOINT_URL:?AWS_ENDPOINT_URL}"
    export CATALOG_S3_PATH__STYLE__ACCESS=true
    export CATALOG_S3_ACCESS__KEY__ID="${AWS_ACCESS_KEY_ID:?AWS_ACCESS_KEY_ID}"
    export CATALOG_S3_SECRET__ACCESS__KEY="${AWS_SECRET_ACCESS_KEY:?AWS_SECRET_ACCESS_KEY}"
    export CATALOG_CLIENT_REGION="${AWS_REGION:-us-east-1}"
  fi
  # shellcheck disable=SC2086
  CATALOG_WAREHOUSE="$warehouse" \
  CATALOG_URI="jdbc:sqlite:$dir/catalog.db" \
  CATALOG_REST_PORT="$port" \
    nohup "$java" ${REST_CATALOG_JAVA_OPTS:--Xms32m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1} \
      -Djava.io.tmpdir="$dir/tmp" -Drest.host=127.0.0.1 \
      -cp "$LAUNCHER/classes:$JARS/*$extra" "$LAUNCHER_CLASS" \
      </dev/null >"$dir/rest.log" 2>&1 &
  local pid=$!
  echo "$pid" >"$dir/rest.pid"

  while ! curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$port/v1/config"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$dir/rest.pid"
      tail -n 30 "$dir/rest.log" >&2
      die "server exited during startup (log: $dir/rest.log)"
    fi
    if [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then
      kill "$pid" 2>/dev/null || true
      rm -f "$dir/rest.pid"
      tail -n 30 "$dir/rest.log" >&2
      die "server did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s (log: $dir/rest.log)"
    fi
    sleep 0.2
  done
  echo "rest-catalog: up on http://127.0.0.1:$port (pid $pid, warehouse $warehouse)" >&2
}

# iceberg-aws (S3FileIO), its AWS SDK bundle and failsafe, of the server's Iceberg version;
# prints the folder.
s3_jars() {
  local out=$CACHE/s3-jars version
  version=$(ls "$JARS"/iceberg-core-*.jar | grep -v tests | sed 's/.*iceberg-core-\(.*\)\.jar/\1/' | head -1)
  if [ ! -f "$out/.complete-$version" ]; then
    command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
    mkdir -p "$out"
    # iceberg-aws's one runtime dependency outside the bundle: failsafe (its retries).
    for a in "org.apache.iceberg:iceberg-aws:$version" "org.apache.iceberg:iceberg-aws-bundle:$version" \
             dev.failsafe:failsafe:3.3.2; do
      mvn -B -q dependency:copy -Dartifact="$a" -DoutputDirectory="$out" >&2 \
        || die "mvn could not fetch $a"
    done
    touch "$out/.complete-$version"
  fi
  echo "$out"
}

cmd_stop() {
  local dir=$1 pid
  [ -f "$dir/rest.pid" ] || { echo "rest-catalog: not running (no $dir/rest.pid)" >&2; return 0; }
  pid=$(cat "$dir/rest.pid")
  if ! is_our_server "$pid"; then
    echo "rest-catalog: pid $pid is not running (stale $dir/rest.pid removed)" >&2
    rm -f "$dir/rest.pid"
    return 0
  fi
  kill "$pid"
  for _ in $(seq 1 50); do
    is_our_server "$pid" || { rm -f "$dir/rest.pid"; return 0; }
    sleep 0.2
  done
  kill -9 "$pid" 2>/dev/null || true
  sleep 0.5
  is_our_server "$pid" && die "could not stop pid $pid"
  rm -f "$dir/rest.pid"
}

case "${1:-}" in
  start) [ $# -eq 3 ] || die "usage: $0 start DIR PORT"; cmd_start "$2" "$3" ;;
  stop)  [ $# -eq 2 ] || die "usage: $0 stop DIR"; cmd_stop "$2" ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac

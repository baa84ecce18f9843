#!/usr/bin/env bash
# Point lookups with pgbench against lakegate and against PostgreSQL holding the same table,
# in the same run; then rows/s of a 10-million-row result over the wire from both.
#
#   bench/pgbench/run.sh [--rows N] [--seconds S] [--clients C]
#
# lakegate is the dev-profile binary the tests build (dependencies at opt-level 1); say so when
# quoting numbers. PostgreSQL comes from Debian's package, in a throwaway cluster under .cache/.
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
ROWS=100000 SECONDS_=15 CLIENTS=4
while [ $# -gt 0 ]; do
  case "$1" in
    --rows) ROWS=$2; shift 2 ;;
    --seconds) SECONDS_=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
scripts/setup.sh >/dev/null
PY=.cache/venv/bin/python
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/initdb" ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
cargo build --bin lakegate -q
WORK=$(mktemp -d /tmp/lakegate-bench.XXXX)
chown -R postgres "$WORK" 2>/dev/null || true
cleanup() {
  [ -n "${LG_PID:-}" ] && kill "$LG_PID" 2>/dev/null || true
  [ -f "$WORK/pg/postmaster.pid" ] && su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -m fast stop" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

echo "== data: $ROWS accounts rows"
FLAGS=$($PY bench/pgbench/make_accounts.py "$WORK/lake" "$ROWS")
chmod -R a+rX "$WORK"

PGPORT=55432
su postgres -c "$PGBIN/initdb -D $WORK/pg -A trust -U postgres" >/dev/null
su postgres -c "$PGBIN/pg_ctl -D $WORK/pg -w -l $WORK/pg.log -o '-p $PGPORT -k $WORK -c listen_addresses=127.0.0.1 -c shared_buffers=256MB' start" >/dev/null
psql -X -q -h 127.0.0.1 -p $PGPORT -U postgres -c "CREATE TABLE accounts (aid bigint PRIMARY KEY, bid int, abalance int, filler text)" \
  -c "\\copy accounts FROM '$WORK/lake/accounts.csv' CSV" -c "VACUUM ANALYZE accounts"

target/debug/lakegate serve $FLAGS --pg-listen 127.0.0.1:0 --flight-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 > "$WORK/lg.out" 2> "$WORK/lg.err" &
LG_PID=$!
for _ in $(seq 100); do grep -q "listening" "$WORK/lg.out" 2>/dev/null && break; sleep 0.1; done
LGPORT=$(sed -n 's/.*pg=[0-9.]*:\([0-9]*\).*/\1/p' "$WORK/lg.out")

cat > "$WORK/point.sql" <<SQL
\\set aid random(1, $ROWS)
SELECT abalance FROM accounts WHERE aid = :aid;
SQL
tps() { # port user
  pgbench -n -M extended -c "$CLIENTS" -j 2 -T "$SECONDS_" -f "$WORK/point.sql" -h 127.0.0.1 -p "$1" -U "$2" "$3" 2>/dev/null |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
echo "== point lookup, pgbench -M extended, $CLIENTS clients, ${SECONDS_}s each"
PG_TPS=$(tps $PGPORT postgres postgres)
LG_TPS=$(tps "$LGPORT" bench lakegate)
printf "%-12s %12s\n" peer tps postgresql "$PG_TPS" lakegate "$LG_TPS"
awk -v a="$LG_TPS" -v b="$PG_TPS" 'BEGIN { printf "lakegate/postgresql = %.3f\n", a / b }'

cat > "$WORK/dashboard.sql" <<SQL
SELECT bid, count(*), sum(abalance) FROM accounts GROUP BY bid ORDER BY bid;
SQL
tps_file() { # port user db file
  pgbench -n -M extended -c "$CLIENTS" -j 2 -T "$SECONDS_" -f "$5" -h 127.0.0.1 -p "$1" -U "$2" "$3" 2>/dev/null |
    sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
echo "== dashboard query repeated (lakegate: result-cache hits; PostgreSQL: its buffer cache)"
PG_D=$(tps_file $PGPORT postgres postgres x "$WORK/dashboard.sql")
LG_D=$(tps_file "$LGPORT" bench lakegate x "$WORK/dashboard.sql")
printf "%-12s %12s %14s\n" peer tps "latency(ms)"
awk -v t="$PG_D" -v c="$CLIENTS" 'BEGIN { printf "%-12s %12.1f %14.3f\n", "postgresql", t, 1000 * c / t }'
awk -v t="$LG_D" -v c="$CLIENTS" 'BEGIN { printf "%-12s %12.1f %14.3f\n", "lakegate", t, 1000 * c / t }'
awk -v a="$LG_D" -v b="$PG_D" 'BEGIN { printf "lakegate/postgresql = %.3f\n", a / b }'
psql -X -At -h 127.0.0.1 -p "$LGPORT" -U bench -d lakegate -c "SELECT name || '=' || value FROM lakegate.cache_stats" | tr '\n' ' '
echo

echo "== 10,000,000 rows over the wire (psql, text rows, discarded)"
rows_per_s() { # port user db
  local t0 t1
  t0=$(date +%s.%N)
  psql -X -At -h 127.0.0.1 -p "$1" -U "$2" -d "$3" -c "SELECT * FROM generate_series(1, 10000000)" > /dev/null
  t1=$(date +%s.%N)
  awk -v s="$t0" -v e="$t1" 'BEGIN { printf "%.0f", 10000000 / (e - s) }'
}
PG_RPS=$(rows_per_s $PGPORT postgres postgres)
LG_RPS=$(rows_per_s "$LGPORT" bench lakegate)
printf "%-12s %12s\n" peer rows/s postgresql "$PG_RPS" lakegate "$LG_RPS"
awk -v a="$LG_RPS" -v b="$PG_RPS" 'BEGIN { printf "lakegate/postgresql = %.3f\n", a / b }'

#!/usr/bin/env bash
# A 10-million-row scan of an Iceberg table three ways, in one run: in-process through the
# query service (no wire: the limit), over Arrow Flight SQL (ADBC), over pgwire (psycopg,
# binary). Prints rows/s, MB/s (Arrow bytes of the result) and the ratios to in-process.
#
#   bench/wire/run.sh [--rows N]
#
# lakegate is the dev-profile binary the tests build (dependencies at opt-level 1).
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
ROWS=10000000
[ "${1:-}" = "--rows" ] && ROWS=$2
scripts/setup.sh >/dev/null
PY=.cache/venv/bin/python
cargo build --bin lakegate -q
WORK=$(mktemp -d /tmp/lakegate-wire.XXXX)
cleanup() { [ -n "${LG_PID:-}" ] && kill "$LG_PID" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
echo "== data: public.big, $ROWS rows (PyIceberg)"
FLAGS=$($PY bench/wire/make_big.py "$WORK/lake" "$ROWS")
SQL="SELECT id, v, s FROM big"

echo "== in-process (query service, no wire)"
LOCAL=$(target/debug/lakegate exec $FLAGS --sql "$SQL")
echo "$LOCAL"

target/debug/lakegate serve $FLAGS --pg-listen 127.0.0.1:0 --flight-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 > "$WORK/lg.out" 2> "$WORK/lg.err" &
LG_PID=$!
for _ in $(seq 100); do grep -q listening "$WORK/lg.out" 2>/dev/null && break; sleep 0.1; done
PG=$(sed -n 's/.*pg=[0-9.]*:\([0-9]*\).*/\1/p' "$WORK/lg.out")
FL=$(sed -n 's/.*flight=[0-9.]*:\([0-9]*\).*/\1/p' "$WORK/lg.out")
echo "== over the wire"
WIRE=$($PY bench/wire/flight_vs_pg.py "$FL" "$PG" "$SQL")
echo "$WIRE"

printf '%s\n%s\n' "local $LOCAL" "$WIRE" | awk '
  { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[$1, kv[1]] = kv[2] } names[++n] = $1 }
  END {
    base = v["local", "rows"] / v["local", "seconds"]
    printf "%-8s %14s %10s %10s\n", "path", "rows/s", "MB/s", "vs local"
    for (i = 1; i <= n; i++) {
      p = names[i]; r = v[p, "rows"] / v[p, "seconds"]; mb = v[p, "bytes"] / v[p, "seconds"] / 1e6
      printf "%-8s %14.0f %10.1f %10.3f\n", p, r, mb, r / base
    }
  }'

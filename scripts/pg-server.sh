#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for tests and benchmarks.
#   scripts/pg-server.sh start DIR PORT   initdb (trust auth) + start, waits until ready
#   scripts/pg-server.sh stop DIR         fast shutdown (by the postmaster's PID file)
set -euo pipefail
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$PGBIN" ]; then echo "PostgreSQL server not installed (scripts/setup.sh installs it)" >&2; exit 1; fi
as_pg() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi; }
case "${1:-}" in
  start)
    dir=$2 port=$3
    mkdir -p "$dir" && [ "$(id -u)" = 0 ] && chown postgres "$dir"
    [ -f "$dir/PG_VERSION" ] || as_pg "$PGBIN/initdb -D $dir -A trust -U postgres >/dev/null"
    as_pg "$PGBIN/pg_ctl -D $dir -w -t 60 -l $dir/server.log -o '-p $port -k $dir -c listen_addresses=127.0.0.1' start >/dev/null"
    ;;
  stop)
    dir=$2
    [ -f "$dir/postmaster.pid" ] && as_pg "$PGBIN/pg_ctl -D $dir -m fast -w stop >/dev/null" || true
    ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac

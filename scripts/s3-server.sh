#!/usr/bin/env bash
# An S3 API server on loopback for tests: moto in server mode (PyPI `moto[server]`, in the venv
# scripts/setup.sh makes). Objects live in memory: right for correctness, not for benchmarks.
#   scripts/s3-server.sh start DIR PORT   starts it (log DIR/server.log, pid DIR/pid), waits until
#                                         it answers
#   scripts/s3-server.sh stop DIR         stops it by DIR/pid
# Any access key and secret are accepted; region us-east-1.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=lib/server.sh
source "$ROOT/scripts/lib/server.sh"

die() { echo "s3-server: $*" >&2; exit 1; }
# /proc, not ps: a minimal machine (CI's) has no procps.
is_our_server() { # PID
  [ -n "$1" ] && [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -q moto_server
}

case "${1:-}" in
  start)
    dir=${2:?DIR}; port=${3:?PORT}
    mkdir -p "$dir"
    bin="$ROOT/.cache/venv/bin/moto_server"
    [ -x "$bin" ] || die "$bin missing: run scripts/setup.sh"
    "$bin" -H 127.0.0.1 -p "$port" >"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 100); do
      # Any HTTP answer (with authentication on, moto answers an unsigned GET with an error).
      if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
        echo "s3-server: up on http://127.0.0.1:$port (pid $(cat "$dir/pid"))"
        exit 0
      fi
      is_our_server "$(cat "$dir/pid")" || die "exited: $(tail -5 "$dir/server.log")"
      sleep 0.2
    done
    die "did not answer on $port within 20s (log: $dir/server.log)"
    ;;
  stop)
    stop_server s3-server "${2:?DIR}"
    ;;
  *) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac

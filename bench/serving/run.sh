#!/usr/bin/env bash
# Serving speed side by side with PostgreSQL (same rows, indexes on order_id and customer_id):
# pgbench -M extended and -M simple on SELECT 1, point lookups (hot ids, all ids), one
# customer's last 20 orders and the dashboard aggregate (result cache on and off), on the table
# as streamed and after maintenance; gateway CPU per statement and RSS; ADBC over Flight SQL;
# 1,000 idle connections. See serving.py.
#
#   bench/serving/run.sh [--release]     (default: the dev build; quote only --release numbers)
#
# Environment: BENCH_CLIENTS (8), BENCH_SECONDS (10 per run), BENCH_ROWS (50000),
# BENCH_COMMITS (150).
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
PROFILE=debug
case "${1:-}" in
  --release) PROFILE=release ;;
  "") ;;
  *) echo "usage: $0 [--release]" >&2; exit 2 ;;
esac
scripts/setup.sh >/dev/null
if [ "$PROFILE" = release ]; then
  cargo build --release --bin lakegate -q
else
  cargo build --bin lakegate -q
fi
command -v pgbench >/dev/null || { echo "pgbench missing (scripts/setup.sh installs PostgreSQL)" >&2; exit 1; }
export LAKEGATE_BIN="$PWD/target/$PROFILE/lakegate"
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"
echo "lakegate: target/$PROFILE"
exec .cache/venv/bin/python bench/serving/serving.py

#!/usr/bin/env bash
# The same lake on local disk, on S3 (moto) and on S3 behind 10 ms of latency per request
# (tests/fixtures/s3_proxy.py, which counts the requests), with and without lakegate's object
# cache: the kit-style dashboard, a point lookup and TPC-H on DataFusion and DuckDB, cold and
# warm; what the first statement after a commit fetches; compaction MB/s on S3 vs local.
#
#   bench/s3/run.sh [--sf N] [--release]     (default SF 1, the dev build)
#
# --release uses target/release/lakegate (cargo build --release; quote only those numbers).
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
SF=1
PROFILE=debug
while [ $# -gt 0 ]; do
  case "$1" in
    --sf) SF=$2; shift 2 ;;
    --release) PROFILE=release; shift ;;
    *) echo "usage: $0 [--sf N] [--release]" >&2; exit 2 ;;
  esac
done
scripts/setup.sh >/dev/null
if [ "$PROFILE" = release ]; then
  cargo build --release --bin lakegate --bin lakegate-slt -q
else
  cargo build --bin lakegate --bin lakegate-slt -q
fi
export LAKEGATE_BIN="$PWD/target/$PROFILE/lakegate"
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"
export LAKEGATE_TPCH_SCALE="$SF"
exec .cache/venv/bin/python bench/s3/bench.py

#!/usr/bin/env bash
# The headline benchmark: a writer makes many small commits to an orders table (partitioned by
# day, event time moving forward) while a dashboard query runs through lakegate; p50 latency,
# data files and manifests are printed over the table's age, with the maintenance loop off and
# on (same run, same estate). Then compaction throughput: lakegate's `maintenance run --once`
# next to Spark's `rewrite_data_files` on two copies of one table. Writes an SVG plot.
#
#   bench/maintenance/run.sh [--commits N]    (default 2000)
#
# Starts PostgreSQL (catalog), Trino and Spark Connect like the tests; dev-profile lakegate.
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
N=2000
[ "${1:-}" = "--commits" ] && N=$2
scripts/setup.sh >/dev/null
cargo build --bin lakegate -q
export LAKEGATE_BIN="$PWD/target/debug/lakegate"
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"
exec .cache/venv/bin/python bench/maintenance/decay.py "$N"

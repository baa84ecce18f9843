#!/usr/bin/env bash
# A mixed workload (the conformance queries: every shape, shuffled) through lakegate, five ways:
# each engine alone, round-robin across the four, and the latency-aware router (one group with
# all four engines, after a warm-up), against the oracle (the best engine per query, in
# hindsight, from the single-engine runs). Prints total/mean/p95 latency and the ratio to the
# oracle. Cache off.
#
#   bench/routing/run.sh [--queries N]
#
# Starts PostgreSQL (catalog), Trino and Spark Connect like the tests; dev-profile lakegate.
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
N=200
[ "${1:-}" = "--queries" ] && N=$2
scripts/setup.sh >/dev/null
cargo build --bin lakegate -q
export LAKEGATE_BIN="$PWD/target/debug/lakegate"
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"
exec .cache/venv/bin/python bench/routing/mixed.py "$N"

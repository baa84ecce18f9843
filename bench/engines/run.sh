#!/usr/bin/env bash
# The conformance queries (tests/fixtures/engine_estate.py) on every engine through lakegate's
# pgwire endpoint, result cache off: a latency table (query shape × engine), median of warm
# runs and the first (cold) run. The raw material the router learns from.
#
#   bench/engines/run.sh [--runs N]
#
# Starts PostgreSQL (catalog), Trino and Spark Connect like the tests do; lakegate is the
# dev-profile binary (dependencies at opt-level 1).
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
RUNS=7
[ "${1:-}" = "--runs" ] && RUNS=$2
scripts/setup.sh >/dev/null
cargo build --bin lakegate -q
export LAKEGATE_BIN="$PWD/target/debug/lakegate"
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"
exec .cache/venv/bin/python bench/engines/latency.py "$RUNS"

#!/usr/bin/env bash
# TPC-H's 22 queries (tests/conformance/tpch.slt) at scale factor SCALE (default 1) on every
# engine through lakegate's pgwire endpoint, checked against PostgreSQL's answers over the same
# rows (taken in this run: the .slt file's answers are for SF 0.01), with PostgreSQL's time
# beside each engine's. Result cache off.
#
#   bench/tpch/run.sh [SCALE]
#
# Starts PostgreSQL (catalog and oracle, with the indexes Q2/Q17/Q20 need there), Trino (4 GiB
# heap) and Spark Connect (3 GiB driver) like the tests do; lakegate is the dev-profile binary
# unless LAKEGATE_BIN names another (a release build: cargo build --release, then
# LAKEGATE_BIN=target/release/lakegate).
set -euo pipefail
# With RUST_BACKTRACE set, iceberg-rust captures a backtrace per error value it builds while
# planning (one per manifest): keep that out of the measurement (docs/findings.md).
export RUST_LIB_BACKTRACE=0
cd "$(dirname "$0")/../.."
export LAKEGATE_TPCH_SCALE=${1:-1}
scripts/setup.sh >/dev/null
if [ -z "${LAKEGATE_BIN:-}" ]; then
  cargo build --bin lakegate --bin lakegate-slt -q
  export LAKEGATE_BIN="$PWD/target/debug/lakegate"
fi
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"
export TRINO_HEAP=${TRINO_HEAP:-4g} TRINO_QUERY_MEMORY=${TRINO_QUERY_MEMORY:-2GB}
export SPARK_DRIVER_MEMORY=${SPARK_DRIVER_MEMORY:-3g}
exec .cache/venv/bin/python bench/tpch/sf.py

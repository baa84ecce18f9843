#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests, then the end-to-end suite with real
# clients (psql, psycopg, SQLAlchemy + pandas, asyncpg, pgJDBC, ADBC, Flight SQL JDBC) against the
# real binary, the MCP SDK against its agent endpoint, and the engines (DuckDB, Trino, Spark Connect; servers started by the tests).
#
#   scripts/test.sh              everything
#   scripts/test.sh --rust       only cargo tests
#   scripts/test.sh --e2e [-k X] only the end-to-end suite (pytest args pass through)
#   scripts/test.sh --fuzz       only the fuzz targets (60 s each, unoptimized build; scripts/fuzz.sh N --release for longer)
# LAKEGATE_FUZZ_SECONDS (default 60) sets the fuzzing time per target in a full run; 0 skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=all
if [ "${1:-}" = "--rust" ]; then mode=rust; shift; fi
if [ "${1:-}" = "--e2e" ]; then mode=e2e; shift; fi
if [ "${1:-}" = "--fuzz" ]; then exec scripts/fuzz.sh "${LAKEGATE_FUZZ_SECONDS:-60}"; fi

scripts/setup.sh
export LAKEGATE_PYTHON="$PWD/.cache/venv/bin/python"
export LAKEGATE_JARS="$PWD/.cache/jars"
export LAKEGATE_DUCKDB_EXTENSIONS="$PWD/.cache/duckdb/v1.5.5"

TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
# A first build (a fresh clone, CI) gains nothing from incremental state and would write
# 1.7 GB of it beside the 3.3 GB it needs; a target dir already built keeps its own setting.
if [ ! -d "$TARGET/debug/incremental" ] && [ -z "${CARGO_INCREMENTAL:-}" ]; then
  export CARGO_INCREMENTAL=0
fi
# Binaries and tests in one build: `cargo test` alone would build the binaries again under the
# tests' feature set (dev-dependencies unify features), two copies of the workspace's crates.
cargo build --workspace --all-targets
export LAKEGATE_BIN="$TARGET/debug/lakegate"

if [ "$mode" != e2e ]; then
  cargo test --workspace --no-fail-fast
fi
if [ "$mode" != rust ]; then
  "$LAKEGATE_PYTHON" -m pytest -q tests/e2e "$@"
  if [ $# -eq 0 ]; then
    # The client drivers' older line (tests/requirements-older.txt) on the driver tests.
    echo "e2e: the driver tests with $(grep -v '^#' tests/requirements-older.txt | tr '\n' ' ')"
    "$PWD/.cache/venv-older/bin/python" -m pytest -q tests/e2e/test_bi_clients.py tests/e2e/test_psycopg.py \
      tests/e2e/test_drivers.py::test_psycopg2 tests/e2e/test_mcp.py
  fi
fi
if [ "$mode" = all ] && [ "${LAKEGATE_FUZZ_SECONDS:-60}" != 0 ]; then
  scripts/fuzz.sh "${LAKEGATE_FUZZ_SECONDS:-60}"
fi

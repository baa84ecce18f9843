"""Regenerates what the differential suite verified on each engine (engines/src/verified.rs) and
the expected answers of records that have none. Not part of the test run (its name does not
start with `test_`): run it by name when the suite gains statements or constructs.rs names a
new construct, then rebuild and run tests/e2e/test_conformance.py:

    LAKEGATE_BIN=$PWD/target/release/lakegate .cache/venv/bin/python -m pytest -s \\
        tests/e2e/regenerate_verified.py

It starts the engine estate with lakegates whose engines answer constructs nobody verified on
them (LAKEGATE_UNVERIFIED_CONSTRUCTS=1), writes the expected results of every record from the
PostgreSQL oracle (`lakegate-slt --complete`: the oracle is the truth, so a changed expected
result in the diff is a record whose answer was wrong), runs the suite pinned to DuckDB, Trino
and Spark, and writes their lists with tests/conformance/verified.py.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess

from test_conformance import ROOT, SUITE, run_suite, slt_bin

# Read by the estate's lakegates when they start (this module runs alone).
os.environ["LAKEGATE_UNVERIFIED_CONSTRUCTS"] = "1"


def test_regenerate_verified_constructs(engine_estate, tmp_path):
    done = subprocess.run([slt_bin(), "--url", engine_estate.oracle, "--complete",
                           *map(str, SUITE)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-5000:]
    url = f"postgresql://tester@127.0.0.1:{engine_estate.gateway.port}/lakegate"
    for engine in ("duckdb", "trino", "spark"):
        report = tmp_path / f"{engine}.jsonl"
        done = run_suite(url, engine, report)
        assert report.exists(), done.stderr[-3000:]
        print(done.stdout.strip())
    spec = importlib.util.spec_from_file_location(
        "verified", ROOT / "tests" / "conformance" / "verified.py")
    verified = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(verified)
    verified.main(tmp_path, url)

"""The differential conformance suite: tests/conformance/*.slt hold statements and the answers
a real PostgreSQL gave over the same rows (the engine estate loads `conf.*` into Iceberg and
into the PostgreSQL database `oracle`). lakegate-slt runs every file through lakegate on each
engine (pinned) and routed, comparing column types and text row by row.

- The files must be PostgreSQL's answers: run against the oracle itself, every record matches.
- A pinned Trino, Spark or DuckDB may refuse a statement (an error, never an answer); DataFusion
  (over the files, and `accelerated`: over the estate's in-memory copies of every table) and
  routed sessions must answer.
- Every engine runs it twice: over the lake on local disk and over the same rows on S3 (the
  estate's `s3lake` catalog, served by a second lakegate; Trino and Spark read it through their
  own S3 file systems). The answers must not depend on where the files are.
- What is not yet PostgreSQL's answer is listed, per engine, in tests/conformance/known_gaps.tsv;
  anything else wrong or failing fails this test. `LAKEGATE_CONFORMANCE_UPDATE=1` rewrites that
  list from this run (review the diff: a new line is a new gap).
"""
from __future__ import annotations

import datetime as dt
import json
import os
import zoneinfo
import subprocess
from pathlib import Path

import psycopg
import pytest

from conftest import ROOT, lakegate_bin

SUITE = sorted((ROOT / "tests" / "conformance").glob("*.slt"))
KNOWN = ROOT / "tests" / "conformance" / "known_gaps.tsv"
ENGINES = ["datafusion", "accelerated", "duckdb", "trino", "spark", "auto"]


def slt_bin() -> str:
    return str(Path(lakegate_bin()).with_name("lakegate-slt"))


def run_suite(url: str, engine: str | None, report: Path) -> subprocess.CompletedProcess:
    cmd = [slt_bin(), "--url", url, "--report", str(report)]
    if engine:
        cmd += ["--engine", engine]
    return subprocess.run([*cmd, *map(str, SUITE)], capture_output=True, text=True, timeout=900)


def known_gaps() -> set[tuple[str, str, str]]:
    if not KNOWN.exists():
        return set()
    rows = (line.split("\t") for line in KNOWN.read_text().splitlines()
            if line and not line.startswith("#"))
    return {(e, o, sql) for e, o, sql in rows}


@pytest.fixture(scope="module", params=["local", "s3"])
def conformance(engine_estate, tmp_path_factory, request):
    """One run of the suite per engine over one storage: {engine: report}."""
    out = tmp_path_factory.mktemp(f"conformance-{request.param}")
    gateway = engine_estate.gateway if request.param == "local" else engine_estate.s3_gateway
    lakegate = f"postgresql://tester@127.0.0.1:{gateway.port}/lakegate"
    reports = {}
    for engine in ENGINES:
        path = out / f"{engine}.jsonl"
        done = run_suite(lakegate, engine, path)
        assert path.exists(), done.stderr[-3000:]
        reports[engine] = json.loads(path.read_text().splitlines()[-1])
        print(done.stdout.strip())
    (out / "summary.json").write_text(json.dumps(
        {e: {k: r[k] for k in ("records", "matched", "refused", "wrong", "failed")}
         for e, r in reports.items()}, indent=1))
    return reports


def test_the_expected_results_are_postgresqls_own(engine_estate, tmp_path):
    done = run_suite(engine_estate.oracle, None, tmp_path / "oracle.jsonl")
    assert done.returncode == 0, done.stderr[-5000:]
    report = json.loads((tmp_path / "oracle.jsonl").read_text())
    assert report["records"] >= 300 and report["matched"] == report["records"], report


def test_every_engine_gives_postgresqls_answer_or_refuses(conformance, request):
    seen = {(engine, m["outcome"], m["sql"]) for engine, r in conformance.items()
            for m in r["misses"] if m["outcome"] in ("wrong", "failed")}
    # The gaps are the same on every storage: the local run writes them.
    if os.environ.get("LAKEGATE_CONFORMANCE_UPDATE") and "local" in request.node.name:
        KNOWN.write_text(
            "# engine\toutcome\tstatement — records not yet PostgreSQL's answer (see README)\n"
            + "".join(f"{e}\t{o}\t{s}\n" for e, o, s in sorted(seen)))
    known = known_gaps()
    # A routed session answers with one of the engines: whichever the router picked this run,
    # that engine's known gap explains the routed one.
    allowed = known | {("auto", o, sql) for e, o, sql in known if e != "auto"}
    new = seen - allowed
    details = {(e, m["outcome"], m["sql"]): m["detail"] for e, r in conformance.items()
               for m in r["misses"]}
    assert not new, "new differences from PostgreSQL:\n" + "\n\n".join(
        f"[{e}] {o}: {s}\n{details[(e, o, s)]}" for e, o, s in sorted(new))
    fixed = known - seen
    if fixed:
        print(f"{len(fixed)} known gaps now match PostgreSQL: remove them from {KNOWN.name}")
    for engine, r in conformance.items():
        # A refusal is only ever an error: DataFusion (from files or from memory) and routed
        # sessions never refuse.
        if engine in ("datafusion", "accelerated", "auto"):
            assert r["refused"] == 0, r
        assert r["records"] == conformance["datafusion"]["records"]


# The .slt files compare integers as one class (`I`): the width a driver is told (integer or
# bigint: pgJDBC's getInt vs getLong, pandas' int32 vs int64) is checked here, against the
# oracle's own RowDescription, with the values, on every engine.
INTEGER_TYPED = [
    "SELECT id, qty * 2, qty + 1, qty - 3, -qty, qty / 2, qty % 3, 1, 2147483648, coalesce(qty, 0) "
    "FROM conf.sales WHERE id <= 6 ORDER BY id",
    "SELECT region, sum(qty), sum(qty * 2), count(*) + 1, max(qty) + 1, "
    "sum(CASE WHEN qty > 10 THEN 1 ELSE 0 END) FROM conf.sales GROUP BY region ORDER BY region",
    "SELECT id * 2, id / 3, length(product) + 1 FROM conf.sales WHERE id <= 6 ORDER BY id",
]

# PostgreSQL raises these; an engine whose arithmetic wraps around or answers NULL or infinity
# would answer instead.
ARITHMETIC_ERRORS = [
    ("SELECT qty * 2147483647 FROM conf.sales WHERE qty > 1", "22003"),
    ("SELECT id * 9223372036854775807 FROM conf.sales WHERE id > 1", "22003"),
    ("SELECT id / (qty - qty) FROM conf.sales WHERE qty IS NOT NULL", "22012"),
    ("SELECT qty % (qty - qty) FROM conf.sales WHERE qty IS NOT NULL", "22012"),
]


def test_integer_results_have_postgresqls_types_and_overflow_is_an_error(engine_estate):
    lakegate = f"postgresql://tester@127.0.0.1:{engine_estate.gateway.port}/lakegate"
    with psycopg.connect(engine_estate.oracle, autocommit=True) as pg:
        want = {}
        for sql in INTEGER_TYPED:
            cur = pg.execute(sql)
            want[sql] = ([d.type_code for d in cur.description], cur.fetchall())
        for sql, state in ARITHMETIC_ERRORS:
            with pytest.raises(psycopg.Error) as raised:
                pg.execute(sql).fetchall()
            assert raised.value.sqlstate == state, (sql, raised.value)
    for engine in ENGINES:
        with psycopg.connect(lakegate, autocommit=True,
                             options=f"-c lakegate.engine={engine}") as conn:
            for sql in INTEGER_TYPED:
                cur = conn.execute(sql)
                got = ([d.type_code for d in cur.description], cur.fetchall())
                assert got == want[sql], f"[{engine}] {sql}"
            for sql, state in ARITHMETIC_ERRORS:
                with pytest.raises(psycopg.Error) as raised:
                    conn.execute(sql).fetchall()
                assert raised.value.sqlstate == state, f"[{engine}] {sql}: {raised.value}"


# A session whose TimeZone is not UTC (pgJDBC sends the JVM's zone): PostgreSQL reads a
# parameter without an offset — psycopg's `str` (unknown type), a naive `datetime`
# (timestamp), a `date` — as that wall clock in the session's zone, text or binary.
ZONED_PARAMETERS = [
    ("SELECT count(*) FROM conf.sales WHERE ordered_at >= %s", dt.datetime(2024, 3, 1)),
    ("SELECT count(*) FROM conf.sales WHERE ordered_at >= %s",
     dt.datetime(2024, 3, 1, tzinfo=zoneinfo.ZoneInfo("America/New_York"))),
    ("SELECT count(*) FROM conf.sales WHERE ordered_at >= %s",
     dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)),
    ("SELECT count(*) FROM conf.sales WHERE ordered_at >= %s", dt.date(2024, 3, 1)),
    ("SELECT count(*) FROM conf.sales WHERE ordered_at >= %s", "2024-03-01"),
    ("SELECT count(*) FROM conf.sales WHERE ordered_at < %s::timestamptz", "2024-03-01 00:00"),
    ("SELECT date_trunc('day', ordered_at) AS d, count(*) FROM conf.sales "
     "WHERE ordered_at BETWEEN %s AND %s GROUP BY 1 ORDER BY 1", ("2024-02-01", "2024-02-04")),
]


def test_parameters_without_an_offset_are_read_in_the_sessions_zone(engine_estate):
    lakegate = f"postgresql://tester@127.0.0.1:{engine_estate.gateway.port}/lakegate"
    zone = "-c TimeZone=America/New_York"

    def answers(url: str, options: str) -> dict:
        out = {}
        with psycopg.connect(url, autocommit=True, options=options) as conn:
            for binary in (False, True):
                for sql, params in ZONED_PARAMETERS:
                    args = params if isinstance(params, tuple) else (params,)
                    try:
                        out[binary, sql, str(args)] = conn.cursor(binary=binary).execute(
                            sql, args).fetchall()
                    except psycopg.Error as e:
                        out[binary, sql, str(args)] = e.sqlstate
        return out

    want = answers(engine_estate.oracle, zone)
    assert want[False, ZONED_PARAMETERS[0][0], str((ZONED_PARAMETERS[0][1],))] != \
        want[False, ZONED_PARAMETERS[2][0], str((ZONED_PARAMETERS[2][1],))], \
        "the zone must change the answer, or this test proves nothing"
    for engine in ENGINES:
        got = answers(lakegate, f"{zone} -c lakegate.engine={engine}")
        for key, value in want.items():
            # An engine that computes in UTC refuses (0A000); the others answer exactly.
            refused = engine in ("trino", "spark") and got[key] == "0A000"
            assert refused or got[key] == value, f"[{engine}] {key}: {got[key]} != {value}"
        if engine in ("datafusion", "accelerated", "duckdb", "auto"):
            assert got == want, engine

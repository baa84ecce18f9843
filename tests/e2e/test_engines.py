"""Four engines, one answer: DataFusion, DuckDB (embedded), Trino and Spark (real servers) read the
same Iceberg tables on a shared PostgreSQL catalog, each pinned to the snapshot lakegate resolved.

Every conformance query runs through lakegate on each engine (`SET lakegate.engine`) and must
return the same rows and column types as an independent reader (PyIceberg reads the snapshot,
DuckDB's Python package computes the answer). Also: a table with position-delete files written
by Spark, snapshot pinning across a commit, engine choice by startup option and Flight header,
and an engine killed mid-run (clear error within seconds, the rest keeps serving).

The servers start once for this module (scripts/pg-server.sh, trino-server.sh,
spark-connect.sh) and are stopped by PID.
"""
from __future__ import annotations

import datetime as dt
import decimal
import math

import duckdb
import psycopg
import pyarrow as pa
import pytest

from engine_estate import ACCELERATION, CONFORMANCE, ENGINES, UTC, wait_accelerated


@pytest.fixture(scope="module")
def estate(engine_estate):
    # Cache off: every engine must compute its own answer. Bounded staleness of an hour: the
    # pinning test commits and expects the earlier snapshot to keep answering.
    return engine_estate


@pytest.fixture(scope="module")
def reader(estate):
    """The independent reader: PyIceberg reads each table, DuckDB (Python) computes."""
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    # PostgreSQL's ordering: NULLs last ascending, first descending.
    con.execute("SET default_null_order = 'nulls_last_on_asc_first_on_desc'")
    for name in ["typed", "customers", "with_deletes"]:
        con.register(name, estate.catalog.load_table(f"public.{name}").scan().to_arrow())
    return con


def connect(estate, engine: str) -> psycopg.Connection:
    return psycopg.connect(estate.gateway.dsn, autocommit=True,
                           options=f"-c lakegate.engine={engine}")


def normalise(rows):
    def value(v):
        if isinstance(v, float):
            return None if math.isnan(v) else round(v, 6)
        if isinstance(v, decimal.Decimal):
            return v.normalize()
        if isinstance(v, dt.datetime) and v.tzinfo is not None:
            return v.astimezone(UTC)
        return v
    return [tuple(value(v) for v in row) for row in rows]


def python_types(rows):
    """The Python type of each column's non-null values (int, Decimal, float, str, datetime...)."""
    out = []
    for column in zip(*rows):
        kinds = {type(v).__name__ for v in column if v is not None}
        out.append(",".join(sorted(kinds)))
    return out


def expected_rows(reader, sql: str, params):
    duck_sql = sql.replace("%s", "?")
    return normalise(reader.execute(duck_sql, list(params or [])).fetchall())


@pytest.mark.parametrize("storage", ["local", "s3"])
@pytest.mark.parametrize("name,sql,params", CONFORMANCE, ids=[c[0] for c in CONFORMANCE])
def test_every_engine_gives_the_independent_readers_answer(estate, reader, name, sql, params,
                                                           storage):
    """On the lake on local disk, and on the same rows on S3 (`s3lake`, its with_deletes
    written by Spark through S3FileIO)."""
    want = expected_rows(reader, sql, params)
    assert want, f"{name}: the reference answer must not be empty"
    types = {}
    gateway = estate.gateway if storage == "local" else estate.s3_gateway
    for engine in ENGINES:
        with psycopg.connect(gateway.dsn, autocommit=True,
                             options=f"-c lakegate.engine={engine}") as conn:
            try:
                cur = conn.execute(sql, params)
            except psycopg.errors.FeatureNotSupported as refused:
                # Trino compares, orders and takes extremes of NaN as IEEE 754 does: it is
                # never verified for float comparisons or extremes (engines/src/verified.rs).
                why = str(refused)
                assert engine == "trino" and (":float" in why or "(float)" in why), \
                    f"{name} on {engine}: {why}"
                continue
            got = normalise(cur.fetchall())
            types[engine] = [d.type_code for d in cur.description]
            answered = conn.execute(
                "SELECT engine FROM lakegate.queries WHERE query NOT LIKE '%lakegate.queries%' "
                "ORDER BY query_id DESC LIMIT 1").fetchone()[0]
        assert answered == engine, f"{name}: asked for {engine}, {answered} answered"
        assert got == want, f"{name} on {engine}"
        assert python_types(got) == python_types(want), f"{name} on {engine}: value types"
    assert all(t == types["datafusion"] for t in types.values()), f"{name}: types {types}"
    assert {"datafusion", "duckdb"} <= types.keys(), f"{name}: answered by {sorted(types)}"


def test_a_query_pinned_to_an_earlier_snapshot_reads_it_on_every_engine(estate):
    sql = "SELECT count(*), sum(v) FROM pinned"
    for engine in ENGINES:
        with connect(estate, engine) as conn:
            assert conn.execute(sql).fetchone() == (3, 6), engine
    # The writer commits; the gateway keeps the earlier snapshot (bounded staleness of 1 h).
    table = estate.catalog.load_table("public.pinned")
    first = table.current_snapshot().snapshot_id
    table.append(pa.table({"v": pa.array([100], pa.int64())}))
    assert len(estate.catalog.load_table("public.pinned").scan().to_arrow()) == 4
    for engine in ENGINES:
        with connect(estate, engine) as conn:
            assert conn.execute(sql).fetchone() == (3, 6), f"{engine} read past its pin"
            snapshots = conn.execute(
                "SELECT snapshots FROM lakegate.queries WHERE query LIKE '%FROM pinned%' "
                "ORDER BY query_id DESC LIMIT 1").fetchone()[0]
            assert snapshots == f"public.pinned@{first}", snapshots


def test_engine_is_chosen_by_set_show_reset(estate):
    with psycopg.connect(estate.gateway.dsn, autocommit=True) as conn:
        assert conn.execute("SHOW lakegate.engine").fetchone() == ("auto",)
        conn.execute("SET lakegate.engine = 'duckdb'")
        assert conn.execute("SHOW lakegate.engine").fetchone() == ("duckdb",)
        conn.execute("SELECT count(*) FROM typed WHERE id < 5 AND 'set-show' = 'set-show'")
        assert conn.execute(
            "SELECT engine FROM lakegate.queries WHERE query LIKE '%set-show%' "
            "AND query NOT LIKE '%lakegate.queries%' ORDER BY query_id DESC LIMIT 1"
        ).fetchone() == ("duckdb",)
        with pytest.raises(psycopg.errors.InvalidParameterValue) as bad:
            conn.execute("SET lakegate.engine = 'oracle'")
        assert "datafusion" in str(bad.value)
        conn.execute("RESET lakegate.engine")
        assert conn.execute("SHOW lakegate.engine").fetchone() == ("auto",)


def test_flight_sql_header_pins_an_engine(estate):
    from adbc_driver_flightsql import DatabaseOptions, dbapi as flight
    uri = f"grpc://127.0.0.1:{estate.gateway.flight_port}"
    with flight.connect(uri, db_kwargs={
            DatabaseOptions.RPC_CALL_HEADER_PREFIX.value + "x-lakegate-engine": "trino"}) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) AS n, 'flight-header' AS tag FROM typed")
        assert cur.fetchone() == (500, "flight-header")
        cur.execute("SELECT engine FROM lakegate.queries WHERE query LIKE '%flight-header%' "
                    "AND query NOT LIKE '%lakegate.queries%' ORDER BY query_id DESC LIMIT 1")
        assert cur.fetchone() == ("trino",)
        cur.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_flight_sql_streams_the_schema_its_flight_info_announced_on_every_engine(estate, engine):
    """ADBC compares each batch with the FlightInfo schema ("inconsistent schema" otherwise):
    decimal sums and averages, counts and text arrive exactly as announced, from every engine."""
    from adbc_driver_flightsql import DatabaseOptions, dbapi as flight
    uri = f"grpc://127.0.0.1:{estate.gateway.flight_port}"
    sql = ("SELECT status, count(*) AS n, sum(amount) AS total, min(amount) AS lo, "
           "max(amount) AS hi FROM typed GROUP BY status ORDER BY status")
    with flight.connect(uri, db_kwargs={
            DatabaseOptions.RPC_CALL_HEADER_PREFIX.value + "x-lakegate-engine": engine}) as conn:
        cur = conn.cursor()
        announced = cur.adbc_execute_schema(sql)
        cur.execute(sql)
        table = cur.fetch_arrow_table()
        cur.close()
    assert table.schema.remove_metadata() == announced.remove_metadata(), (engine, table.schema)
    assert str(announced.field("total").type) == "decimal128(22, 2)", announced
    assert table.num_rows > 0 and sum(table.column("n").to_pylist()) == 500


def test_engine_errors_keep_their_sqlstate(estate):
    for engine in ENGINES:
        with connect(estate, engine) as conn:
            with pytest.raises(psycopg.errors.UndefinedColumn):
                conn.execute("SELECT no_such_column FROM typed")
            with pytest.raises(psycopg.errors.UndefinedTable):
                conn.execute("SELECT * FROM no_such_table")


def test_masked_columns_hash_alike_on_every_engine(estate):
    """A `[[mask]]` for one user: each engine runs the masked statement (Trino through its own
    md5 spelling) and every one returns PostgreSQL's md5 hex of the clear value."""
    import hashlib
    gw = estate.lakegate('[cache]\nenabled = false\n[[mask]]\nusers = ["masked"]\n'
                         'columns = ["public.customers.name", "public.customers.id"]\n'
                         + ACCELERATION)
    wait_accelerated(gw)
    clear = sorted(estate.catalog.load_table("public.customers").scan().to_arrow().to_pylist(),
                   key=lambda r: r["id"])
    md5 = lambda v: hashlib.md5(str(v).encode()).hexdigest()  # noqa: E731
    want = [(md5(r["id"]), md5(r["name"]), r["country"]) for r in clear]
    for engine in ENGINES:
        dsn = (f"host=127.0.0.1 port={gw.port} user=masked dbname=lakegate "
               f"options='-c lakegate.engine={engine}'")
        with psycopg.connect(dsn, autocommit=True) as conn:
            got = conn.execute("SELECT id, name, country FROM customers ORDER BY country, name")
            assert sorted(got.fetchall()) == sorted(want), engine
            used = conn.execute("SELECT engine FROM lakegate.queries WHERE query NOT LIKE "
                                "'%lakegate.queries%' ORDER BY query_id DESC LIMIT 1").fetchone()
            assert used == (engine,), (engine, used)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_server_side_cursor_reads_in_pieces_to_its_end_on_every_engine(estate, engine):
    """psycopg's named cursor: DECLARE, then FETCH FORWARD n until fewer rows come, then once
    more after the end (the stream had ended: a FETCH must read nothing, never fail)."""
    dsn = f"host=127.0.0.1 port={estate.gateway.port} user=tester dbname=lakegate " \
          f"options='-c lakegate.engine={engine}'"
    with psycopg.connect(dsn) as conn:
        with conn.cursor(name="pieces") as cur:
            cur.itersize = 7
            cur.execute("SELECT id FROM typed WHERE id <= 30 ORDER BY id")
            assert [r[0] for r in cur] == list(range(1, 31))
            assert cur.fetchmany(5) == []
            assert cur.fetchall() == []
        assert conn.execute("SELECT 1").fetchone() == (1,)
        answered = conn.execute(
            "SELECT engine FROM lakegate.queries WHERE query LIKE 'SELECT id FROM typed WHERE id <= 30%' "
            "ORDER BY query_id DESC LIMIT 1").fetchone()
        assert answered == (engine,), answered

"""psycopg 3: parameters, text and binary results, named cursors, errors and SQLSTATEs."""
import datetime as dt
import decimal
import re

import psycopg
import pytest
from psycopg import errors


def connect(gateway, **kw):
    return psycopg.connect(gateway.dsn, autocommit=kw.pop("autocommit", True), **kw)


def test_aggregate_matches_pyiceberg(gateway, expected):
    with connect(gateway) as conn:
        rows = conn.execute(
            "SELECT coalesce(status, '<null>') AS s, count(*), sum(amount) FROM orders GROUP BY 1 ORDER BY 1"
        ).fetchall()
    got = {s: [c, str(t)] for s, c, t in rows}
    assert got == expected["orders_by_status"]


@pytest.mark.parametrize("binary", [False, True])
def test_point_lookup_with_parameter(gateway, expected, binary):
    with connect(gateway) as conn:
        cur = conn.cursor(binary=binary)
        row = cur.execute(
            "SELECT order_id, customer_id, amount, status, order_ts FROM orders WHERE order_id = %s", (42,)
        ).fetchone()
    want = expected["order_42"]
    assert row[0] == 42
    assert str(row[1]) == want["customer_id"]
    assert str(row[2]) == want["amount"]
    assert isinstance(row[2], decimal.Decimal)
    assert row[3] == (None if want["status"] == "None" else want["status"])
    assert isinstance(row[4], dt.datetime) and row[4].tzinfo is not None
    assert row[4] == dt.datetime.fromisoformat(want["order_ts"])


@pytest.mark.parametrize("binary", [False, True])
def test_all_types_round_trip(gateway, binary):
    with connect(gateway) as conn:
        cur = conn.cursor(binary=binary)
        rows = cur.execute("SELECT * FROM all_types ORDER BY id").fetchall()
    first, second, nulls = rows
    assert first[1] is True and first[2] == -7 and first[3] == 9007199254740993
    assert first[4] == pytest.approx(1.5) and first[5] == -2.25
    assert first[6] == decimal.Decimal("1234.567")
    assert first[7] == "héllo wörld ✓"
    assert first[8] == dt.date(2024, 2, 29)
    assert first[9] == dt.time(13, 45, 30, 123456)
    assert first[10] == dt.datetime(2024, 2, 29, 13, 45, 30, 123456)
    assert first[11] == dt.datetime(2024, 2, 29, 13, 45, 30, 123456, tzinfo=dt.timezone.utc)
    assert bytes(first[12]) == b"\x00\x01\xfe\xff"
    assert first[13] == [1, 2, 3]
    assert first[14] == "12345678-1234-5678-1234-567812345678"  # Iceberg uuid, as text
    assert second[5] == 1e100 and second[6] == decimal.Decimal("-0.001") and second[7] == ""
    assert all(v is None for v in nulls[1:])


def test_named_cursor_streams_in_chunks(gateway, expected):
    with connect(gateway, autocommit=False) as conn:
        with conn.cursor(name="big") as cur:
            cur.itersize = 37
            cur.execute("SELECT order_id FROM orders ORDER BY order_id")
            ids = [r[0] for r in cur]
        conn.commit()
    assert len(ids) == expected["orders_count"]
    assert ids == sorted(ids) and ids[-1] == expected["orders_max_id"]


@pytest.mark.parametrize(
    "sql, error",
    [
        ("SELEC 1", errors.SyntaxError),
        ("SELECT * FROM no_such_table", errors.UndefinedTable),
        ("SELECT no_such_column FROM orders", errors.UndefinedColumn),
        ("INSERT INTO orders VALUES (1)", errors.FeatureNotSupported),
        ("CREATE TABLE t (a int)", errors.FeatureNotSupported),
        ("SET no_such_setting = 1", errors.UndefinedObject),
    ],
)
def test_errors_carry_sqlstate_and_connection_survives(gateway, sql, error):
    with connect(gateway) as conn:
        with pytest.raises(error) as info:
            conn.execute(sql)
        assert info.value.diag.message_primary
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_failed_transaction_needs_rollback(gateway):
    with connect(gateway, autocommit=False) as conn:
        with pytest.raises(errors.UndefinedTable):
            conn.execute("SELECT * FROM nope")
        with pytest.raises(errors.InFailedSqlTransaction):
            conn.execute("SELECT 1")
        conn.rollback()
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_set_show_reset(gateway):
    with connect(gateway) as conn:
        conn.execute("SET TimeZone = 'Europe/Paris'")
        assert conn.execute("SHOW timezone").fetchone() == ("Europe/Paris",)
        assert conn.info.parameter_status("TimeZone") == "Europe/Paris"
        conn.execute("RESET TimeZone")
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
        assert conn.execute("SELECT current_setting('search_path')").fetchone() == ("public",)


def test_startup_reports_postgres_parameters(gateway):
    with connect(gateway) as conn:
        assert conn.info.parameter_status("TimeZone") == "UTC"
        # The version of the PostgreSQL whose catalog clients read (the catalog mirror's).
        assert re.fullmatch(r"1[5-9]\.\d+ \(lakegate [0-9.]+\)",
                            conn.info.parameter_status("server_version"))
        assert conn.info.parameter_status("client_encoding") == "UTF8"
        assert conn.info.parameter_status("standard_conforming_strings") == "on"
        assert conn.info.parameter_status("integer_datetimes") == "on"
        assert conn.info.parameter_status("DateStyle").startswith("ISO")


def test_postgres_sql_that_bi_tools_send(gateway, expected):
    with connect(gateway) as conn:
        (n,) = conn.execute("SELECT count(*) FROM orders WHERE status ILIKE 'SHIP%'").fetchone()
        assert n == expected["orders_by_status"]["shipped"][0]
        rows = conn.execute(
            "WITH d AS (SELECT date_trunc('day', order_ts) AS day, amount FROM orders) "
            "SELECT day::text, extract(year FROM day) AS y, sum(amount), "
            "rank() OVER (ORDER BY sum(amount) DESC) FROM d GROUP BY day ORDER BY day"
        ).fetchall()
        assert len(rows) > 1 and all(r[1] == 2026 for r in rows)
        (agg,) = conn.execute(
            "SELECT string_agg(DISTINCT segment, ',' ORDER BY segment) FROM customers"
        ).fetchone()
        assert agg == "enterprise,smb"
        (now,) = conn.execute("SELECT now()").fetchone()
        assert isinstance(now, dt.datetime)
        (v,) = conn.execute("SELECT version()").fetchone()
        # The version of the PostgreSQL whose catalog the client reads (the catalog mirror's).
        assert v.startswith(f"PostgreSQL {conn.info.parameter_status('server_version').split()[0]} ")
        assert conn.execute("SELECT current_database(), current_schema()").fetchone() == ("lakegate", "public")
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert isinstance(pid, int)


def test_multi_statement_simple_query(gateway):
    with connect(gateway) as conn:
        cur = conn.cursor()
        cur.execute("SELECT 1; SELECT 2 AS two")
        assert cur.fetchall() == [(1,)]
        assert cur.nextset() and cur.fetchall() == [(2,)]


def test_cross_namespace_join(gateway):
    with connect(gateway) as conn:
        rows = conn.execute(
            "SELECT r.name, count(c.customer_id) FROM sales.regions r "
            "JOIN customers c ON c.customer_id % 2 + 1 = r.region_id GROUP BY r.name ORDER BY 1"
        ).fetchall()
    assert rows == [("amer", 25), ("emea", 25)]


def test_statement_timeout_cancels_with_57014_and_connection_survives(gateway):
    with connect(gateway) as conn:
        conn.execute("SET statement_timeout = '300ms'")
        assert conn.execute("SHOW statement_timeout").fetchone() == ("300ms",)
        with pytest.raises(errors.QueryCanceled) as info:
            conn.execute("SELECT count(*) FROM generate_series(1, 4000000000) AS g(v) WHERE v % 7 = 3")
        assert "statement timeout" in str(info.value)
        conn.execute("RESET statement_timeout")
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_recursive_cte_with_a_column_list(gateway):
    with connect(gateway) as conn:
        rows = conn.execute(
            "WITH RECURSIVE t(n, depth) AS (SELECT 1, 0 UNION ALL SELECT n + 1, depth + 1 FROM t WHERE n < 3) "
            "SELECT n, depth FROM t ORDER BY n"
        ).fetchall()
    assert rows == [(1, 0), (2, 1), (3, 2)]


def test_absurd_parameter_number_is_refused_cheaply(gateway):
    with connect(gateway) as conn:
        with pytest.raises(errors.SyntaxError) as info:
            conn.execute("SELECT $1000000000::int FROM orders", prepare=True)
        assert "65535" in str(info.value)
        # Without a table PostgreSQL itself answers, with its own error.
        with pytest.raises(errors.UndefinedParameter):
            conn.execute("SELECT $1000000000::int", prepare=True)
        assert conn.execute("SELECT 1").fetchone() == (1,)


# psycopg 3.3 drops its prepared statements on DEALLOCATE ALL / DISCARD ALL; 3.2 does not.
PSYCOPG_FORGETS_ON_DEALLOCATE = tuple(int(p) for p in psycopg.__version__.split(".")[:2]) >= (3, 3)


def test_connection_pool_resets_work_as_in_postgresql(gateway):
    """psycopg, psycopg_pool and pgbouncer reset sessions with DEALLOCATE ALL, DISCARD ALL and
    RESET ALL: each works as PostgreSQL's does, and prepared statements keep working after."""
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        sql = "SELECT order_id FROM orders WHERE order_id = %s"
        for i in (1, 2, 3):  # prepared by psycopg from the second execution on
            assert conn.execute(sql, [i], prepare=True).fetchone() == (i,)
        conn.execute("SET TimeZone = 'Europe/Paris'")
        assert conn.execute("DEALLOCATE ALL").statusmessage == "DEALLOCATE ALL"
        with pytest.raises(psycopg.errors.InvalidSqlStatementName) as e:
            conn.execute("DEALLOCATE no_such_statement")
        assert e.value.sqlstate == "26000" and "no_such_statement" in str(e.value)
        raw = conn.pgconn
        assert raw.prepare(b"mine", b"SELECT 41 + 1").status == psycopg.pq.ExecStatus.COMMAND_OK
        assert conn.execute("DEALLOCATE mine").statusmessage == "DEALLOCATE"
        assert raw.describe_prepared(b"mine").status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert conn.execute("RESET ALL").statusmessage == "RESET"
        assert conn.execute("SHOW TimeZone").fetchone() == ("UTC",)
        assert conn.execute("DISCARD ALL").statusmessage == "DISCARD ALL"
        if PSYCOPG_FORGETS_ON_DEALLOCATE:
            assert conn.execute(sql, [4], prepare=True).fetchone() == (4,)
        else:
            # psycopg 3.2 keeps its statement after DEALLOCATE ALL; PostgreSQL says exactly this.
            with pytest.raises(psycopg.errors.InvalidSqlStatementName,
                               match='prepared statement "_pg3_0" does not exist'):
                conn.execute(sql, [4], prepare=True)


def test_current_database_is_the_one_connected_to(gateway):
    dsn = gateway.dsn.replace("dbname=lakegate", "dbname=analytics")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT current_database(), current_catalog").fetchone() == (
            "analytics", "analytics")
        assert ("analytics",) in conn.execute("SELECT datname FROM pg_database").fetchall()
        catalogs = conn.execute("SELECT DISTINCT table_catalog FROM information_schema.tables "
                                "WHERE table_schema = 'public'").fetchall()
        assert catalogs == [("analytics",)]
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] > 0

"""What BI tools ask before they query: psql meta-commands, SQLAlchemy's inspector (Superset,
pandas), asyncpg's type introspection, pgJDBC's DatabaseMetaData (DBeaver, Metabase)."""
import asyncio
import os
import subprocess

import asyncpg
import pandas as pd
import pytest
import sqlalchemy as sa

from conftest import PGJDBC_LINES, run_java


def psql(gateway, *args: str) -> str:
    env = dict(os.environ, PGCONNECT_TIMEOUT="10")
    out = subprocess.run(
        ["psql", "-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", str(gateway.port),
         "-U", "tester", "-d", "lakegate", *args],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_psql_query(gateway, expected):
    out = psql(gateway, "-At", "-c", "SELECT count(*) FROM orders")
    assert out.strip() == str(expected["orders_count"])


def test_psql_meta_commands(gateway):
    assert "lakegate" in psql(gateway, "-c", r"\l")
    schemas = psql(gateway, "-c", r"\dn")
    assert "public" in schemas and "sales" in schemas
    tables = psql(gateway, "-c", r"\dt")
    for t in ("orders", "customers", "all_types"):
        assert t in tables
    described = psql(gateway, "-c", r"\d orders")
    for column in ("order_id", "customer_id", "order_ts", "amount", "status"):
        assert column in described
    assert "timestamp with time zone" in described
    assert "numeric(12,2)" in described or "numeric" in described


def test_sqlalchemy_schemas_tables_and_pandas(gateway, expected):
    engine = sa.create_engine(f"postgresql+psycopg://tester@127.0.0.1:{gateway.port}/lakegate")
    try:
        insp = sa.inspect(engine)
        # SQLAlchemy 2.1 filters schemas with `NOT LIKE 'pg/_%' ESCAPE '/'`.
        assert {"public", "sales"} <= set(insp.get_schema_names())
        assert {"orders", "customers", "all_types"} <= set(insp.get_table_names())
        assert "regions" in insp.get_table_names(schema="sales")
        with engine.connect() as conn:
            df = pd.read_sql("SELECT order_id, amount FROM orders ORDER BY order_id", conn)
        assert len(df) == expected["orders_count"]
        assert int(df["order_id"].max()) == expected["orders_max_id"]
    finally:
        engine.dispose()


def test_sqlalchemy_reflects_columns(gateway):
    engine = sa.create_engine(f"postgresql+psycopg://tester@127.0.0.1:{gateway.port}/lakegate")
    try:
        cols = {c["name"]: c for c in sa.inspect(engine).get_columns("orders")}
        assert set(cols) == {"order_id", "customer_id", "order_ts", "amount", "status"}
        assert isinstance(cols["order_id"]["type"], sa.BigInteger)
        assert cols["order_id"]["nullable"] is False
    finally:
        engine.dispose()


def test_asyncpg(gateway, expected):
    async def run():
        conn = await asyncpg.connect(host="127.0.0.1", port=gateway.port, user="tester", database="lakegate")
        try:
            row = await conn.fetchrow("SELECT order_id, amount, status FROM orders WHERE order_id = $1", 42)
            assert row["order_id"] == 42
            assert str(row["amount"]) == expected["order_42"]["amount"]
            n = await conn.fetchval("SELECT count(*) FROM orders WHERE customer_id = $1", 8)
            assert n > 0
            rows = await conn.fetch("SELECT id, b, i, l, d, n, s, dt, ts, tstz, bin FROM all_types ORDER BY id")
            assert rows[0]["s"] == "héllo wörld ✓" and rows[0]["l"] == 9007199254740993
            assert str(rows[0]["n"]) == "1234.567" and rows[2]["s"] is None
        finally:
            await conn.close()

    asyncio.run(run())


def test_asyncpg_array_columns(gateway):
    async def run():
        conn = await asyncpg.connect(host="127.0.0.1", port=gateway.port, user="tester", database="lakegate")
        try:
            rows = await conn.fetch("SELECT li FROM all_types ORDER BY id")
            assert rows[0]["li"] == [1, 2, 3]
        finally:
            await conn.close()

    asyncio.run(run())


JAVA_TEST = r"""
import java.sql.*;
public class JdbcCheck {
  public static void main(String[] a) throws Exception {
    try (Connection c = DriverManager.getConnection(a[0], "tester", "")) {
      DatabaseMetaData md = c.getMetaData();
      StringBuilder tables = new StringBuilder();
      try (ResultSet rs = md.getTables(null, "public", "%", new String[]{"TABLE"})) {
        while (rs.next()) tables.append(rs.getString("TABLE_NAME")).append(',');
      }
      System.out.println("tables=" + tables);
      StringBuilder cols = new StringBuilder();
      try (ResultSet rs = md.getColumns(null, "public", "orders", "%")) {
        while (rs.next()) cols.append(rs.getString("COLUMN_NAME")).append(':').append(rs.getString("TYPE_NAME")).append(',');
      }
      System.out.println("columns=" + cols);
      try (PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM orders WHERE order_id <= ?")) {
        ps.setLong(1, 100);
        try (ResultSet rs = ps.executeQuery()) { rs.next(); System.out.println("count=" + rs.getLong(1)); }
      }
    }
  }
}
"""


@pytest.mark.parametrize("jar", PGJDBC_LINES)
def test_pgjdbc_metadata_and_query(gateway, tmp_path, jar):
    url = f"jdbc:postgresql://127.0.0.1:{gateway.port}/lakegate"
    lines = run_java(tmp_path, jar, "JdbcCheck", JAVA_TEST, [url])
    assert {"orders", "customers", "all_types"} <= set(lines["tables"].strip(",").split(","))
    cols = dict(c.split(":") for c in lines["columns"].strip(",").split(","))
    assert cols["order_id"] == "int8" and cols["status"] == "text"
    assert lines["count"] == "100"

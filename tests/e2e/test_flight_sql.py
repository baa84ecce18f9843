"""Arrow Flight SQL with real clients: the ADBC Flight SQL driver (dbapi, prepared statement
with a bound parameter, get_objects) and pyarrow.flight issuing raw Flight SQL commands.
Answers are compared with PyIceberg reading the same tables, and with pgwire."""
import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow as pa
import pyarrow.flight as fl

from flight_commands import statement_query
import pytest

import warehouse as wh
from conftest import run_java


def connect(gateway):
    return flight_sql.connect(f"grpc://127.0.0.1:{gateway.flight_port}")


def test_query_matches_pyiceberg(gateway, lake_dir, expected):
    with connect(gateway) as conn, conn.cursor() as cur:
        cur.execute("SELECT order_id, amount FROM orders ORDER BY order_id")
        table = cur.fetch_arrow_table()
    truth = wh.catalog(str(lake_dir)).load_table("public.orders").scan(
        selected_fields=("order_id", "amount")).to_arrow().sort_by("order_id")
    assert table.num_rows == expected["orders_count"]
    assert table.column("order_id").to_pylist() == truth.column("order_id").to_pylist()
    assert table.column("amount").to_pylist() == truth.column("amount").to_pylist()
    assert table.schema.field("amount").type == pa.decimal128(12, 2)


def test_prepared_statement_with_bound_parameter(gateway, expected):
    with connect(gateway) as conn, conn.cursor() as cur:
        for order_id in (42, 7):
            cur.execute("SELECT order_id, customer_id, status FROM orders WHERE order_id = ?",
                        parameters=(order_id,))
            rows = cur.fetchall()
            assert len(rows) == 1 and rows[0][0] == order_id
        assert str(rows[0][1]) != "" and rows[0][0] == 7
        cur.execute("SELECT customer_id FROM orders WHERE order_id = ?", parameters=(42,))
        assert str(cur.fetchone()[0]) == expected["order_42"]["customer_id"]


def test_get_objects_lists_catalogs_schemas_tables_columns(gateway):
    with connect(gateway) as conn:
        objects = conn.adbc_get_objects(depth="all").read_all().to_pylist()
    assert [c["catalog_name"] for c in objects] == ["lakegate"]
    schemas = {s["db_schema_name"]: s for s in objects[0]["catalog_db_schemas"]}
    assert {"public", "sales"} <= set(schemas)
    tables = {t["table_name"]: t for t in schemas["public"]["db_schema_tables"]}
    assert {"orders", "customers", "all_types"} <= set(tables)
    columns = [c["column_name"] for c in tables["orders"]["table_columns"]]
    assert columns == ["order_id", "customer_id", "order_ts", "amount", "status"]


def test_same_rows_and_types_as_pgwire(gateway):
    sql = "SELECT id, b, i, l, d, n, s, dt, ts, tstz FROM all_types ORDER BY id"
    with connect(gateway) as conn, conn.cursor() as cur:
        cur.execute(sql)
        flight_rows = cur.fetchall()
    with psycopg.connect(gateway.dsn) as pg:
        pg_rows = pg.execute(sql).fetchall()
    assert [tuple(r) for r in flight_rows] == [tuple(r) for r in pg_rows]


def test_errors_are_grpc_statuses(gateway):
    client = fl.FlightClient(f"grpc://127.0.0.1:{gateway.flight_port}")
    with connect(gateway) as conn, conn.cursor() as cur:
        with pytest.raises(Exception) as syntax:
            cur.execute("SELEC 1")
        assert "INVALID_ARGUMENT" in str(syntax.value) or "InvalidArgument" in type(syntax.value).__name__
        with pytest.raises(Exception) as missing:
            cur.execute("SELECT * FROM no_such_table")
        assert "NOT_FOUND" in str(missing.value) or "relation" in str(missing.value)
        assert "no_such_table" in str(missing.value)
        with pytest.raises(Exception) as write:
            cur.execute("INSERT INTO orders VALUES (1)")
        assert "read-only" in str(write.value)
        cur.execute("SELECT 1 AS one")
        assert cur.fetchall() == [(1,)]
    client.close()


def test_raw_flight_sql_commands_with_pyarrow(gateway, expected):
    """CommandStatementQuery by hand: GetFlightInfo, then DoGet on the returned ticket."""
    client = fl.FlightClient(f"grpc://127.0.0.1:{gateway.flight_port}")
    try:
        any_bytes = statement_query("SELECT count(*) AS n FROM orders")
        info = client.get_flight_info(fl.FlightDescriptor.for_command(any_bytes))
        assert info.schema.names == ["n"]
        table = client.do_get(info.endpoints[0].ticket).read_all()
        assert table.column("n").to_pylist() == [expected["orders_count"]]
    finally:
        client.close()


FLIGHT_JDBC_TEST = r"""
import java.sql.*;
public class FlightJdbcCheck {
  public static void main(String[] a) throws Exception {
    try (Connection c = DriverManager.getConnection(a[0])) {
      StringBuilder tables = new StringBuilder();
      try (ResultSet rs = c.getMetaData().getTables(null, "public", "%", null)) {
        while (rs.next()) tables.append(rs.getString("TABLE_NAME")).append(',');
      }
      System.out.println("tables=" + tables);
      try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT count(*) AS n, max(order_id) AS m FROM orders")) {
        rs.next();
        System.out.println("count=" + rs.getLong(1) + "," + rs.getLong(2));
      }
      try (PreparedStatement ps = c.prepareStatement("SELECT count(*) FROM orders WHERE order_id <= ?")) {
        ps.setLong(1, 100);
        try (ResultSet rs = ps.executeQuery()) { rs.next(); System.out.println("prepared=" + rs.getLong(1)); }
      }
    }
  }
}
"""


def test_flight_sql_jdbc_driver(gateway, expected, tmp_path):
    url = f"jdbc:arrow-flight-sql://127.0.0.1:{gateway.flight_port}/?useEncryption=false"
    lines = run_java(tmp_path, "flight-sql-jdbc-driver-*.jar", "FlightJdbcCheck", FLIGHT_JDBC_TEST, [url],
                     jvm_flags=["--add-opens=java.base/java.nio=ALL-UNNAMED"])
    assert {"orders", "customers", "all_types"} <= set(lines["tables"].strip(",").split(","))
    assert lines["count"] == f"{expected['orders_count']},{expected['orders_max_id']}"
    assert lines["prepared"] == "100"

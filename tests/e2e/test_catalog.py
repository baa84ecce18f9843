"""The PostgreSQL catalog mirror: catalog statements through lakegate get PostgreSQL's own
answer. The engine estate loads `conf.*` into Iceberg and into the oracle PostgreSQL with the
same DDL, so the introspection SQL BI tools send is compared row for row — and type for type,
in text and in binary — between lakegate and the oracle (database names aside)."""
from __future__ import annotations

import os
import subprocess
import time

import psycopg
import pytest
import sqlalchemy as sa

from conftest import run_java

# What the tools send, by tool (trimmed to the `conf` schema both databases hold).
REPLAYS = {
    "grafana columns": (
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'conf' AND table_name = 'sales' ORDER BY ordinal_position"),
    "metabase columns": (
        "SELECT c.table_name, c.column_name, c.ordinal_position, c.data_type, c.udt_name, "
        "c.is_nullable, c.numeric_precision, c.numeric_scale, c.datetime_precision, "
        "c.character_maximum_length, c.column_default, c.is_identity "
        "FROM information_schema.columns c WHERE c.table_schema = 'conf' "
        "ORDER BY c.table_name, c.ordinal_position"),
    "metabase tables": (
        "SELECT t.table_schema, t.table_name, t.table_type, obj_description(pc.oid, 'pg_class') "
        "FROM information_schema.tables t JOIN pg_catalog.pg_class pc ON pc.relname = t.table_name "
        "JOIN pg_catalog.pg_namespace n ON n.oid = pc.relnamespace AND n.nspname = t.table_schema "
        "WHERE t.table_schema = 'conf' ORDER BY t.table_name"),
    "metabase primary keys": (
        "SELECT kcu.column_name FROM information_schema.table_constraints tc "
        "JOIN information_schema.key_column_usage kcu ON tc.constraint_name = kcu.constraint_name "
        "AND tc.table_schema = kcu.table_schema WHERE tc.constraint_type = 'PRIMARY KEY' "
        "AND tc.table_schema = 'conf' ORDER BY kcu.ordinal_position"),
    "psql \\d columns": (
        "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, "
        "a.attnum, a.attidentity, a.attgenerated, col_description(a.attrelid, a.attnum) "
        "FROM pg_catalog.pg_attribute a WHERE a.attrelid = 'conf.sales'::regclass "
        "AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"),
    "psql \\dt": (
        "SELECT n.nspname, c.relname, CASE c.relkind WHEN 'r' THEN 'table' WHEN 'v' THEN 'view' "
        "END, pg_catalog.pg_get_userbyid(c.relowner) IS NOT NULL "
        "FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r','p','v') AND n.nspname OPERATOR(pg_catalog.~) '^(conf)$' "
        "COLLATE pg_catalog.default ORDER BY 1, 2"),
    "psql \\df": (
        "SELECT pg_catalog.pg_get_function_result(p.oid), "
        "pg_catalog.pg_get_function_arguments(p.oid) FROM pg_catalog.pg_proc p "
        "WHERE p.proname = 'lower' ORDER BY 2"),
    "sqlalchemy 2.1 schema names": (
        "SELECT pg_catalog.pg_namespace.nspname FROM pg_catalog.pg_namespace "
        "WHERE pg_catalog.pg_namespace.nspname NOT LIKE 'pg/_%' ESCAPE '/' "
        "AND nspname IN ('conf', 'information_schema') ORDER BY 1"),
    "pgjdbc primary keys (_pg_expandarray)": (
        "SELECT NULL AS TABLE_CAT, n.nspname AS TABLE_SCHEM, ct.relname AS TABLE_NAME, "
        "a.attname AS COLUMN_NAME, (information_schema._pg_expandarray(i.indkey)).n AS KEY_SEQ "
        "FROM pg_catalog.pg_class ct JOIN pg_catalog.pg_attribute a ON (ct.oid = a.attrelid) "
        "JOIN pg_catalog.pg_namespace n ON (ct.relnamespace = n.oid) "
        "JOIN pg_catalog.pg_index i ON (a.attrelid = i.indrelid) "
        "WHERE n.nspname = 'conf' AND i.indisprimary ORDER BY 3, 5"),
    "dbeaver current_schemas": (
        "SELECT n.nspname = ANY(current_schemas(true)), n.nspname FROM pg_catalog.pg_namespace n "
        "WHERE n.nspname IN ('conf', 'pg_catalog') ORDER BY 2"),
    "npgsql type loading": (
        "SELECT typ.typname, typ.typtype, typ.typcategory, elemtyp.typname AS elemtypname "
        "FROM pg_type AS typ LEFT JOIN pg_type AS elemtyp ON elemtyp.oid = typ.typelem "
        "WHERE typ.typname IN ('int8', 'numeric', '_text', 'timestamptz', 'bool') ORDER BY 1"),
    "reg casts": "SELECT 'conf.sales'::regclass::text, 'int8'::regtype, to_regclass('conf.nope')",
    "correlated subquery": (
        "SELECT c.relname, (SELECT count(*) FROM pg_attribute a WHERE a.attrelid = c.oid "
        "AND a.attnum > 0) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'conf' ORDER BY 1"),
}


def rows_and_types(url: str, sql: str, binary: bool = False, prepare: bool | None = None):
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.cursor(binary=binary)
        cur.execute(sql, prepare=prepare)
        return cur.fetchall(), [(d.name, d.type_code) for d in cur.description]


@pytest.fixture(scope="module")
def lakegate_url(engine_estate):
    return f"postgresql://tester@127.0.0.1:{engine_estate.gateway.port}/lakegate"


@pytest.mark.parametrize("name", REPLAYS)
def test_catalog_replays_get_postgresqls_answer(engine_estate, lakegate_url, name):
    sql = REPLAYS[name]
    want = rows_and_types(engine_estate.oracle, sql)
    assert rows_and_types(lakegate_url, sql) == want
    assert rows_and_types(lakegate_url, sql, binary=True) == rows_and_types(
        engine_estate.oracle, sql, binary=True)


def test_parameters_pass_through_in_both_formats(engine_estate, lakegate_url):
    sql = ("SELECT a.attname, a.attnum FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c "
           "ON c.oid = a.attrelid WHERE c.relname = %s AND a.attnum BETWEEN %s AND %s ORDER BY 2")
    args = ("sales", 2, 4)
    for binary in (False, True):
        got = []
        for url in (lakegate_url, engine_estate.oracle):
            with psycopg.connect(url, autocommit=True) as conn:
                got.append(conn.cursor(binary=binary).execute(sql, args).fetchall())
        assert got[0] == got[1] == [("region", 2), ("product", 3), ("qty", 4)]


def test_a_lake_querys_types_are_the_catalogs(lakegate_url):
    with psycopg.connect(lakegate_url, autocommit=True) as conn:
        cur = conn.execute("SELECT * FROM conf.sales LIMIT 0")
        sent = [(d.name, d.type_code) for d in cur.description]
        catalog = conn.execute(
            "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = 'conf.sales'::regclass "
            "AND attnum > 0 ORDER BY attnum").fetchall()
    assert sent == [(n, t) for n, t in catalog]


@pytest.mark.parametrize("sql", [
    "SELECT * FROM conf.sales LIMIT 0",
    "SELECT s.id, price AS p, price * 2, discount FROM conf.sales s WHERE id < 3",
    "SELECT r.region, r.target, s.price FROM conf.regions r JOIN conf.sales s USING (region) LIMIT 1",
    "SELECT region, sum(price) FROM conf.sales GROUP BY region",
])
def test_a_lake_querys_row_description_is_postgresqls(engine_estate, lakegate_url, sql):
    """Table OID (as each side's own catalog numbers it), attribute number and typmod."""
    def described(url):
        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(sql)
            res = cur.pgresult
            tables = {oid: name for oid, name in conn.execute(
                "SELECT oid::int8, relname FROM pg_class WHERE relnamespace = 'conf'::regnamespace")}
            return [(d.name, d.type_code, d.precision, d.scale, tables.get(res.ftable(i), res.ftable(i)),
                     res.ftablecol(i)) for i, d in enumerate(cur.description)]
    assert described(lakegate_url) == described(engine_estate.oracle)


def test_errors_are_postgresqls(lakegate_url):
    with psycopg.connect(lakegate_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable) as e:
            conn.execute("SELECT 'conf.nope'::regclass")
        assert 'relation "conf.nope" does not exist' in str(e.value)
        # The session goes on.
        assert conn.execute("SELECT count(*) FROM pg_class WHERE relname = 'sales'").fetchone() == (1,)


def test_the_version_reported_is_the_catalogs(lakegate_url, engine_estate):
    with psycopg.connect(lakegate_url, autocommit=True) as conn:
        reported = conn.info.parameter_status("server_version").split()[0]
        (num,) = conn.execute("SHOW server_version_num").fetchone()
        (version,) = conn.execute("SELECT version()").fetchone()
    with psycopg.connect(engine_estate.oracle) as oracle:
        real = oracle.info.parameter_status("server_version").split()[0]
    assert reported == real and version.startswith(f"PostgreSQL {real} ")
    major, minor = (int(p) for p in real.split(".")[:2])
    assert num == str(major * 10000 + minor)


def test_tables_appear_and_disappear_with_the_lake(engine_estate, lakegate_url):
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "k", LongType(), required=True, doc="the key"),
                    NestedField(2, "v", StringType(), required=False),
                    identifier_field_ids=[1])
    engine_estate.catalog.create_namespace("mirror_probe")
    try:
        engine_estate.catalog.create_table("mirror_probe.t", schema=schema)
        sql = ("SELECT c.column_name, c.data_type, c.is_nullable, "
               "col_description('mirror_probe.t'::regclass, c.ordinal_position::int) "
               "FROM information_schema.columns c WHERE c.table_schema = 'mirror_probe' "
               "ORDER BY c.ordinal_position")
        deadline = time.monotonic() + 10
        with psycopg.connect(lakegate_url, autocommit=True) as conn:
            while True:
                try:
                    rows = conn.execute(sql).fetchall()
                except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
                    rows = []
                if rows or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert rows == [("k", "bigint", "NO", "the key"), ("v", "text", "YES", None)]
            pk = conn.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'mirror_probe.t'::regclass "
                "AND i.indisprimary").fetchall()
            assert pk == [("k",)]
            engine_estate.catalog.drop_table("mirror_probe.t")
            engine_estate.catalog.drop_namespace("mirror_probe")
            deadline = time.monotonic() + 10
            while conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'mirror_probe'"
                               ).fetchone() != (0,):
                assert time.monotonic() < deadline, "the dropped namespace is still listed"
                time.sleep(0.2)
    finally:
        for drop in (lambda: engine_estate.catalog.drop_table("mirror_probe.t"),
                     lambda: engine_estate.catalog.drop_namespace("mirror_probe")):
            try:
                drop()
            except Exception:
                pass


def test_sqlalchemy_reflection_is_postgresqls(engine_estate, lakegate_url):
    def reflect(url):
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        try:
            insp = sa.inspect(engine)
            return (insp.get_columns("sales", schema="conf"),
                    insp.get_pk_constraint("sales", schema="conf"),
                    insp.get_indexes("sales", schema="conf"),
                    insp.get_foreign_keys("sales", schema="conf"),
                    sorted(insp.get_table_names(schema="conf")))
        finally:
            engine.dispose()

    got, want = reflect(lakegate_url), reflect(engine_estate.oracle)
    assert repr(got) == repr(want)
    assert any(c["name"] == "price" and repr(c["type"]) == "NUMERIC(precision=10, scale=2)"
               for c in got[0])


def test_psql_describe_matches_postgresql(engine_estate, lakegate_url):
    def psql(url, *args):
        out = subprocess.run(["psql", "-X", "-v", "ON_ERROR_STOP=1", url, *args],
                             capture_output=True, text=True, timeout=60,
                             env=dict(os.environ, PGCONNECT_TIMEOUT="10"))
        assert out.returncode == 0, out.stderr
        return out.stdout

    for command in (r"\d conf.sales", r"\d+ conf.regions", r"\dt conf.*", r"\dn conf",
                    r"\df pg_catalog.lower", r"\dT pg_catalog.int8"):
        assert psql(lakegate_url, "-c", command) == psql(engine_estate.oracle, "-c", command), command


JDBC_METADATA = r"""
import java.sql.*;
public class JdbcMeta {
  static String dump(ResultSet rs) throws SQLException {
    StringBuilder out = new StringBuilder();
    ResultSetMetaData md = rs.getMetaData();
    int rows = 0;
    while (rs.next()) {
      rows++;
      for (int i = 1; i <= md.getColumnCount(); i++) {
        String label = md.getColumnLabel(i);
        if (label.equalsIgnoreCase("TABLE_CAT") || label.equalsIgnoreCase("TABLE_CATALOG") || label.equalsIgnoreCase("PKTABLE_CAT")
            || label.equalsIgnoreCase("FKTABLE_CAT") || label.equalsIgnoreCase("FUNCTION_CAT")
            || label.equalsIgnoreCase("SPECIFIC_NAME")) continue;
        out.append(label).append('=').append(rs.getString(i)).append(';');
      }
      out.append('|');
    }
    rs.close();
    return rows + ":" + out.toString().replace("\n", " ");
  }
  public static void main(String[] a) throws Exception {
    try (Connection c = DriverManager.getConnection(a[0], a[1], "")) {
      DatabaseMetaData md = c.getMetaData();
      System.out.println("schemas=" + dump(md.getSchemas(null, "conf")));
      System.out.println("tables=" + dump(md.getTables(null, "conf", "%", new String[]{"TABLE"})));
      System.out.println("columns=" + dump(md.getColumns(null, "conf", "sales", "%")));
      System.out.println("pks=" + dump(md.getPrimaryKeys(null, "conf", "sales")));
      System.out.println("imported=" + dump(md.getImportedKeys(null, "conf", "sales")));
      System.out.println("exported=" + dump(md.getExportedKeys(null, "conf", "sales")));
      System.out.println("indexes=" + dump(md.getIndexInfo(null, "conf", "sales", false, true)));
      StringBuilder types = new StringBuilder();
      try (ResultSet rs = md.getTypeInfo()) {
        while (rs.next()) types.append(rs.getString("TYPE_NAME")).append(',');
      }
      System.out.println("types=" + types);
      System.out.println("functions=" + dump(md.getFunctions(null, "pg_catalog", "lower")).split(":")[0]);
      try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery("SELECT price FROM conf.sales LIMIT 1")) {
        ResultSetMetaData rm = rs.getMetaData();
        System.out.println("price=" + rm.getPrecision(1) + "," + rm.getScale(1) + "," + rm.getColumnTypeName(1));
      }
    }
  }
}
"""


def test_pgjdbc_database_metadata_is_postgresqls(engine_estate, tmp_path):
    port = engine_estate.gateway.port
    got = run_java(tmp_path, "postgresql-*.jar", "JdbcMeta", JDBC_METADATA,
                   [f"jdbc:postgresql://127.0.0.1:{port}/lakegate", "tester"])
    oracle_port = engine_estate.pg_port
    want = run_java(tmp_path, "postgresql-*.jar", "JdbcMeta", JDBC_METADATA,
                    [f"jdbc:postgresql://127.0.0.1:{oracle_port}/oracle", "postgres"])
    for key in ("schemas", "tables", "columns", "pks", "imported", "exported", "indexes",
                "functions"):
        assert got[key] == want[key], key
    # Every table has its row type (and its array): the lake has tables the oracle does not.
    got_types, want_types = set(got["types"].split(",")), set(want["types"].split(","))
    with psycopg.connect(f"postgresql://tester@127.0.0.1:{port}/lakegate") as conn:
        tables = {r[0] for r in conn.execute("SELECT relname FROM pg_class WHERE relkind = 'r'")}
    assert want_types <= got_types
    assert {t.removeprefix("_") for t in got_types - want_types} <= tables  # row and array types
    # ResultSetMetaData of a lake query: the typmod PostgreSQL sends for the column.
    assert got["price"] == want["price"] == "10,2,numeric"

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
    # Power BI (Npgsql): navigation, then "Select related tables" (its foreign-key query).
    "power bi tables": (
        "select TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE from INFORMATION_SCHEMA.tables "
        "where TABLE_SCHEMA = 'conf' order by TABLE_SCHEMA, TABLE_NAME"),
    "power bi character sets": "select character_set_name from INFORMATION_SCHEMA.character_sets",
    "power bi foreign keys": (
        "select pkcol.TABLE_SCHEMA AS PK_TABLE_SCHEMA, pkcol.TABLE_NAME AS PK_TABLE_NAME, "
        "pkcol.COLUMN_NAME as PK_COLUMN_NAME, fkcol.COLUMN_NAME as FK_COLUMN_NAME, "
        "fkcol.ORDINAL_POSITION as ORDINAL, fkcon.CONSTRAINT_SCHEMA || '_' || 'sales' || '_' || "
        "pkcol.TABLE_NAME || '_' || fkcon.CONSTRAINT_NAME as FK_NAME "
        "from (select distinct constraint_catalog, constraint_schema, unique_constraint_schema, "
        "constraint_name, unique_constraint_name from INFORMATION_SCHEMA.REFERENTIAL_CONSTRAINTS) "
        "fkcon inner join INFORMATION_SCHEMA.KEY_COLUMN_USAGE fkcol "
        "on fkcon.CONSTRAINT_SCHEMA = fkcol.CONSTRAINT_SCHEMA "
        "and fkcon.CONSTRAINT_NAME = fkcol.CONSTRAINT_NAME "
        "inner join INFORMATION_SCHEMA.KEY_COLUMN_USAGE pkcol "
        "on fkcon.UNIQUE_CONSTRAINT_SCHEMA = pkcol.CONSTRAINT_SCHEMA "
        "and fkcon.UNIQUE_CONSTRAINT_NAME = pkcol.CONSTRAINT_NAME "
        "where fkcol.TABLE_SCHEMA = 'conf' and fkcol.TABLE_NAME = 'sales' "
        "and pkcol.ORDINAL_POSITION = fkcol.ORDINAL_POSITION "
        "order by FK_NAME, fkcol.ORDINAL_POSITION"),
    # Tableau through psqlODBC: its session checks and SQLTables.
    "tableau lc_collate": 'show "lc_collate"',
    "psqlodbc large object type": "select oid, typbasetype from pg_type where typname = 'lo'",
    "psqlodbc tables": (
        "select relname, nspname, relkind from pg_catalog.pg_class c, pg_catalog.pg_namespace n "
        "where relkind in ('r', 'v', 'm', 'f', 'p') and nspname = 'conf' "
        "and n.oid = relnamespace order by nspname, relname"),
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


# Npgsql's type loading, one simple-protocol batch (PostgresDatabaseInfo.GenerateLoadTypesQuery,
# with ranges and multiranges, table composites not loaded): what Power BI sends on connecting.
NPGSQL_TYPES = """SELECT version();
SELECT ns.nspname, t.oid, t.typname, t.typtype, t.typnotnull, t.elemtypoid
FROM (
    SELECT typ.oid, typ.typnamespace, typ.typname, typ.typtype, typ.typrelid, typ.typnotnull,
        typ.relkind, elemtyp.oid AS elemtypoid, elemtyp.typname AS elemtypname,
        elemcls.relkind AS elemrelkind,
        CASE WHEN elemproc.proname='array_recv' THEN 'a' ELSE elemtyp.typtype END AS elemtyptype
    FROM (
        SELECT typ.oid, typnamespace, typname, typrelid, typnotnull, relkind, typelem AS elemoid,
            CASE WHEN proc.proname='array_recv' THEN 'a' ELSE typ.typtype END AS typtype,
            CASE
                WHEN proc.proname='array_recv' THEN typ.typelem
                WHEN typ.typtype='r' THEN rngsubtype
                WHEN typ.typtype='m' THEN (SELECT rngtypid FROM pg_range WHERE rngmultitypid = typ.oid)
                WHEN typ.typtype='d' THEN typ.typbasetype
            END AS elemtypoid
        FROM pg_type AS typ
        LEFT JOIN pg_class AS cls ON (cls.oid = typ.typrelid)
        LEFT JOIN pg_proc AS proc ON proc.oid = typ.typreceive
        LEFT JOIN pg_range ON (pg_range.rngtypid = typ.oid)
    ) AS typ
    LEFT JOIN pg_type AS elemtyp ON elemtyp.oid = elemtypoid
    LEFT JOIN pg_class AS elemcls ON (elemcls.oid = elemtyp.typrelid)
    LEFT JOIN pg_proc AS elemproc ON elemproc.oid = elemtyp.typreceive
) AS t
JOIN pg_namespace AS ns ON (ns.oid = typnamespace)
WHERE
    typtype IN ('b', 'r', 'm', 'e', 'd') OR -- Base, range, multirange, enum, domain
    (typtype = 'c' AND relkind='c') OR
    (typtype = 'p' AND typname IN ('record', 'void')) OR
    (typtype = 'a' AND (
        elemtyptype IN ('b', 'r', 'm', 'e', 'd') OR
        (elemtyptype = 'p' AND elemtypname IN ('record', 'void')) OR
        (elemtyptype = 'c' AND elemrelkind='c')
    ))
ORDER BY CASE
       WHEN typtype IN ('b', 'e', 'p') THEN 0
       WHEN typtype = 'r' THEN 1
       WHEN typtype = 'm' THEN 2
       WHEN typtype = 'c' THEN 3
       WHEN typtype = 'd' AND elemtyptype <> 'a' THEN 4
       WHEN typtype = 'a' THEN 5
       WHEN typtype = 'd' AND elemtyptype = 'a' THEN 6
END;
-- Load field definitions for (free-standing) composite types
SELECT typ.oid, att.attname, att.atttypid
FROM pg_type AS typ
JOIN pg_namespace AS ns ON (ns.oid = typ.typnamespace)
JOIN pg_class AS cls ON (cls.oid = typ.typrelid)
JOIN pg_attribute AS att ON (att.attrelid = typ.typrelid)
WHERE
  (typ.typtype = 'c' AND cls.relkind='c') AND
  attnum > 0 AND     -- Don't load system attributes
  NOT attisdropped
ORDER BY typ.oid, att.attnum;
-- Load enum fields
SELECT pg_type.oid, enumlabel
FROM pg_enum
JOIN pg_type ON pg_type.oid=enumtypid
ORDER BY oid, enumsortorder;
"""


def version_prefix(rows):
    """`PostgreSQL 15.18`: lakegate names itself after the version (see
    test_the_version_reported_is_the_catalogs)."""
    return tuple(" ".join(v.split()[:2]) for v in rows[0])


def result_sets(url: str, batch: str):
    """Every result of a simple-protocol batch: its columns and its rows (sorted: within one
    ORDER BY group the order is the heap's)."""
    out = []
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(batch)
        while True:
            columns = [(d.name, d.type_code) for d in cur.description]
            rows = cur.fetchall()
            if columns == [("version", 25)]:
                rows = [version_prefix(rows)]
            out.append((columns, sorted(rows, key=repr)))
            if not cur.nextset():
                return out


def test_npgsql_type_loading_batch_is_postgresqls(engine_estate, lakegate_url):
    got = result_sets(lakegate_url, NPGSQL_TYPES)
    assert len(got) == 4 and len(got[1][1]) > 100, got[:2]
    assert got == result_sets(engine_estate.oracle, NPGSQL_TYPES)


def tableau_session(url: str):
    """What Tableau sends through psqlODBC (UseDeclareFetch, Fetch=2048) to draw a bar chart:
    session settings, then the chart's query through a cursor WITH HOLD in a transaction."""
    seen = []
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in ["set DateStyle to 'ISO'", "set extra_float_digits to 2",
                    "show transaction_isolation", "select version()"]:
            cur = conn.execute(sql)
            rows = cur.fetchall() if cur.description else cur.statusmessage
            seen.append(version_prefix(rows) if sql == "select version()" else rows)
        conn.execute("BEGIN")
        conn.execute(
            'declare "SQL_CUR0x7f01" cursor with hold for SELECT "sales"."region" AS "region", '
            'SUM("sales"."qty") AS "sum:qty:ok", COUNT(1) AS "cnt:sales:ok" '
            'FROM "conf"."sales" "sales" GROUP BY 1')
        rows = conn.execute('fetch 2048 in "SQL_CUR0x7f01"').fetchall()
        seen.append(sorted(rows, key=repr))
        conn.execute('close "SQL_CUR0x7f01"')
        conn.execute("COMMIT")
    return seen


def test_a_tableau_odbc_session_is_postgresqls(engine_estate, lakegate_url):
    got = tableau_session(lakegate_url)
    assert len(got[-1]) == 6, got  # five regions and NULL
    assert got == tableau_session(engine_estate.oracle)


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


@pytest.mark.parametrize("sql", [
    "SELECT 1",
    "select 0 AS Big, true, false AS \"Ok\", 2147483648, 9223372036854775807",
])
def test_a_row_of_literals_is_postgresqls(engine_estate, lakegate_url, sql):
    """A pool's validation query is answered by the gateway itself (service/constant.rs):
    names, types, rows and the command tag as PostgreSQL's, in text and binary, over the
    simple and the extended protocol."""
    def answered(url):
        out = []
        with psycopg.connect(url, autocommit=True) as conn:
            for binary in (False, True):
                for prepare in (False, True):
                    cur = conn.cursor(binary=binary)
                    cur.execute(sql, prepare=prepare)
                    out.append(([(d.name, d.type_code) for d in cur.description],
                                cur.fetchall(), cur.statusmessage))
            # The simple protocol (no parameters, no prepare).
            out.append(conn.pgconn.exec_(sql.encode()).get_value(0, 0))
        return out
    assert answered(lakegate_url) == answered(engine_estate.oracle)


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

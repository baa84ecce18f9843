"""One plan for every statement: what Execute refuses, Describe refuses too, on every door a
client has — pgwire Parse/Describe (libpq PQprepare + PQdescribePrepared through psycopg,
pgJDBC `prepareStatement(...).getMetaData()`), Flight SQL GetFlightInfo, CreatePreparedStatement
and GetSchema (ADBC `execute_schema`, pyarrow.flight), and EXPLAIN ROUTE — with nothing of the
denied table in the reply. A masked column is described as what the user receives (text), and
`statement_timeout` stops a Flight SQL query as it stops a pgwire one."""
from __future__ import annotations

import hashlib
import time

import adbc_driver_flightsql.dbapi as flight_sql
import psycopg
import pyarrow as pa
import pyarrow.flight as fl
import pytest
from psycopg import pq

import warehouse as wh
from conftest import run_java, start_gateway
from flight_commands import statement_query
from test_security import hashed, login

# Nothing of public.orders may show in a refusal: not a column name, not a type.
ORDERS_COLUMNS = ("order_id", "customer_id", "order_ts", "amount", "status", "numeric", "int8")


@pytest.fixture(scope="module")
def planned(lake_dir, tmp_path_factory):
    """alice reads everything; bob reads sales.* only; bot reads customers with customer_id
    and name masked; Flight calls time out after 5 s unless their header says otherwise."""
    cfg = tmp_path_factory.mktemp("plan") / "plan.toml"
    cfg.write_text(f"""
[auth]
mask_salt = "pepper"
[limits]
statement_timeout = "5s"
[[auth.users]]
name = "alice"
password = "{hashed('a-pass')}"
roles = ["analyst", "admin"]
[[auth.users]]
name = "bob"
password = "{hashed('b-pass')}"
roles = ["sales"]
[[auth.users]]
name = "bot"
password = "{hashed('bot-pass')}"
roles = ["agent"]
[[access]]
roles = ["analyst"]
groups = ["*"]
tables = ["*"]
[[access]]
roles = ["sales"]
groups = ["*"]
tables = ["sales.*"]
[[access]]
roles = ["agent"]
groups = ["*"]
tables = ["public.customers"]
[[mask]]
roles = ["agent"]
columns = ["public.customers.customer_id", "public.customers.name"]
""")
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    yield gw
    gw.proc.terminate()
    gw.proc.wait(timeout=15)


def assert_leaks_nothing(message: str) -> None:
    assert "permission denied for table public.orders" in message, message
    for word in ORDERS_COLUMNS:
        assert word not in message.replace("public.orders", ""), (word, message)


DENIED = "SELECT * FROM orders WHERE order_id = $1"


def test_parse_describe_of_a_denied_table_is_42501_with_nothing_of_the_table(planned):
    with login(planned, "bob", "b-pass") as b:
        pgconn = b.pgconn
        prepared = pgconn.prepare(b"leak", DENIED.encode())
        assert prepared.status == pq.ExecStatus.FATAL_ERROR
        assert prepared.error_field(pq.DiagnosticField.SQLSTATE) == b"42501"
        assert_leaks_nothing(prepared.error_message.decode())
        # Nothing was prepared: describing it finds no statement (and so no columns).
        described = pgconn.describe_prepared(b"leak")
        assert described.status == pq.ExecStatus.FATAL_ERROR
        assert described.nfields == 0
        # The same statement through the extended protocol with a parameter, and EXPLAIN
        # ROUTE, simple and extended: refused alike.
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
            b.execute("SELECT * FROM orders WHERE order_id = %s", [1])
        assert_leaks_nothing(str(e.value))
        for explain in ("EXPLAIN ROUTE SELECT * FROM orders",):
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                b.execute(explain, prepare=False)
            assert_leaks_nothing(str(e.value))
            explained = pgconn.prepare(b"explained", explain.encode())
            assert explained.error_field(pq.DiagnosticField.SQLSTATE) == b"42501"
        # A cursor over it: refused at DECLARE's Parse too.
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            with b.transaction():
                b.execute("DECLARE c CURSOR FOR SELECT * FROM orders")
        # What bob may read still prepares and describes.
        ok = pgconn.prepare(b"mine", b"SELECT name FROM sales.regions")
        assert ok.status == pq.ExecStatus.COMMAND_OK
        assert pgconn.describe_prepared(b"mine").fname(0) == b"name"
    # alice may read orders: the same Parse describes its columns.
    with login(planned, "alice", "a-pass") as a:
        a.pgconn.prepare(b"ok", DENIED.encode())
        d = a.pgconn.describe_prepared(b"ok")
        assert [d.fname(i).decode() for i in range(d.nfields)][:2] == ["order_id", "customer_id"]


JAVA = r"""
import java.sql.*;
public class PlanCheck {
  public static void main(String[] a) throws Exception {
    try (Connection c = DriverManager.getConnection(a[0], "bob", "b-pass")) {
      try (PreparedStatement ps = c.prepareStatement("SELECT * FROM orders WHERE order_id = ?")) {
        ResultSetMetaData md = ps.getMetaData();
        System.out.println("denied=no columns=" + (md == null ? 0 : md.getColumnCount()));
      } catch (SQLException e) {
        System.out.println("denied=" + e.getSQLState());
        System.out.println("message=" + e.getMessage().replace('\n', ' '));
      }
    }
    try (Connection c = DriverManager.getConnection(a[0], "bot", "bot-pass");
         PreparedStatement ps = c.prepareStatement(
             "SELECT customer_id, name, segment FROM customers WHERE segment = ? ORDER BY 1")) {
      ResultSetMetaData md = ps.getMetaData();
      StringBuilder types = new StringBuilder();
      for (int i = 1; i <= md.getColumnCount(); i++) {
        types.append(md.getColumnLabel(i)).append(':').append(md.getColumnTypeName(i)).append(',');
      }
      System.out.println("types=" + types);
      ps.setString(1, "smb");
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        System.out.println("first_id=" + rs.getString(1));
        System.out.println("first_id_type=" + rs.getMetaData().getColumnTypeName(1));
      }
    }
  }
}
"""


def test_pgjdbc_get_metadata_is_refused_and_a_masked_column_is_described_as_text(planned, tmp_path):
    url = f"jdbc:postgresql://127.0.0.1:{planned.port}/lakegate?prepareThreshold=1"
    out = run_java(tmp_path, "postgresql-*.jar", "PlanCheck", JAVA, [url])
    assert out["denied"] == "42501", out
    assert_leaks_nothing(out["message"])
    # customer_id is a bigint in the lake; bot receives its hash, and Describe says so.
    assert out["types"] == "customer_id:text,name:text,segment:text,", out
    assert out["first_id_type"] == "text"
    # The smallest smb customer's id, hashed (ORDER BY sorts the hashes, as bot sees them).
    assert len(out["first_id"]) == 32 and all(c in "0123456789abcdef" for c in out["first_id"])


def flight(gw, user: str, password: str, **headers: str):
    kwargs = {"username": user, "password": password}
    kwargs.update({f"adbc.flight.sql.rpc.call_header.{k}": v for k, v in headers.items()})
    return flight_sql.connect(f"grpc://127.0.0.1:{gw.flight_port}", db_kwargs=kwargs)


def test_flight_sql_schema_calls_are_refused_with_permission_denied(planned):
    with flight(planned, "bob", "b-pass") as conn, conn.cursor() as cur:
        # ADBC execute_schema: GetSchema (falls back to a prepared statement's schema).
        with pytest.raises(Exception) as e:
            cur.adbc_execute_schema("SELECT * FROM orders")
        assert "PERMISSION_DENIED" in str(e.value) or "ermission denied" in str(e.value), e.value
        assert_leaks_nothing(str(e.value))
        # CreatePreparedStatement (ADBC prepares every parameterised statement).
        with pytest.raises(Exception) as e:
            cur.adbc_prepare("SELECT * FROM orders WHERE order_id = ?")
        assert_leaks_nothing(str(e.value))
        # What bob may read still describes.
        schema = cur.adbc_execute_schema("SELECT name FROM sales.regions")
        assert schema.names == ["name"]
    # pyarrow.flight: GetFlightInfo and GetSchema of a raw CommandStatementQuery.
    client = fl.FlightClient(f"grpc://127.0.0.1:{planned.flight_port}")
    token = client.authenticate_basic_token("bob", "b-pass")
    options = fl.FlightCallOptions(headers=[token])
    descriptor = fl.FlightDescriptor.for_command(statement_query("SELECT * FROM orders"))
    for call in (client.get_flight_info, client.get_schema):
        # PERMISSION_DENIED: pyarrow calls it "unauthorized".
        with pytest.raises(Exception) as e:
            call(descriptor, options)
        assert "unauthorized" in str(e.value).lower(), e.value
        assert_leaks_nothing(str(e.value))
    # GetSchema answers for a statement bob may read.
    mine = fl.FlightDescriptor.for_command(statement_query("SELECT name FROM sales.regions"))
    assert client.get_schema(mine, options).schema.names == ["name"]
    client.close()


def test_a_masked_column_is_described_and_served_as_text_over_flight(planned):
    with flight(planned, "bot", "bot-pass") as conn, conn.cursor() as cur:
        schema = cur.adbc_execute_schema("SELECT customer_id, segment FROM customers")
        assert str(schema.field("customer_id").type) in ("string", "large_string", "string_view"), schema
        cur.execute("SELECT customer_id FROM customers WHERE segment = 'smb' ORDER BY 1 LIMIT 1")
        value = cur.fetchone()[0]
    ids = {hashlib.md5(f"pepper{i}".encode()).hexdigest() for i in range(1, 200)}
    assert value in ids, value


SLOW = "SELECT count(*) FROM generate_series(1, 4000000000) AS g(v) WHERE v % 7 = 3"


def test_statement_timeout_cancels_a_flight_sql_query(planned):
    # A header sets the call's timeout; the statement stops in bounded time with the same
    # message as pgwire's 57014, and the next call on the connection works.
    with flight(planned, "alice", "a-pass", **{"x-lakegate-statement-timeout": "400ms"}) as conn:
        with conn.cursor() as cur:
            started = time.monotonic()
            with pytest.raises(Exception) as e:
                cur.execute(SLOW)
                cur.fetchall()
            took = time.monotonic() - started
            assert "statement timeout" in str(e.value), e.value
            assert took < 4.0, took
            cur.execute("SELECT count(*) FROM orders")
            assert cur.fetchone()[0] > 0
    # Without a header, `[limits] statement_timeout` (5 s here) applies to Flight calls too.
    with flight(planned, "alice", "a-pass") as conn, conn.cursor() as cur:
        started = time.monotonic()
        with pytest.raises(Exception) as e:
            cur.execute(SLOW)
            cur.fetchall()
        assert "statement timeout" in str(e.value), e.value
        assert 4.0 < time.monotonic() - started < 20.0
    # The refusal is in the history as the statement's error.
    with login(planned, "alice", "a-pass") as a:
        errors = a.execute("SELECT error FROM lakegate.queries WHERE query LIKE '%4000000000%' "
                           "AND user_name = 'alice'").fetchall()
        assert errors and all("statement timeout" in (r[0] or "") for r in errors), errors


def test_a_kept_plan_serves_only_the_user_settings_and_versions_it_was_made_for(planned, lake_dir):
    """What the gateway planned for a statement is kept and reused by the next plan of the same
    text only for the same user, settings and table versions. Interleaved users with and
    without masks, a search_path that makes the same text name another table, and commits
    between executions each get their own answer, over the extended protocol (unnamed and
    prepared statements) and over Flight SQL."""
    cat = wh.catalog(str(lake_dir))
    values = pa.schema([pa.field("v", pa.int64(), nullable=False)])
    for ns, n in (("public", 3), ("sales", 5)):
        cat.create_table(f"{ns}.kept_twin", schema=wh.Schema(
            wh.NestedField(1, "v", wh.LongType(), required=True))).append(
            pa.table({"v": pa.array(range(n), pa.int64())}, schema=values))
    try:
        check_kept_plans(planned, cat, values)
    finally:  # the lake is shared: later tests list these namespaces
        for ns in ("public", "sales"):
            cat.drop_table(f"{ns}.kept_twin")


def check_kept_plans(planned, cat, values) -> None:

    q = "SELECT customer_id, name FROM customers WHERE segment = %s"
    ids = range(5, 51, 5)  # the enterprise customers
    clear = sorted((i, f"customer {i}") for i in ids)

    def md5(value: str) -> str:
        return hashlib.md5(f"pepper{value}".encode()).hexdigest()

    masked = sorted((md5(str(i)), md5(f"customer {i}")) for i in ids)
    with login(planned, "alice", "a-pass") as a, login(planned, "bot", "bot-pass") as b:
        for prepare in (False, True, False, True):
            assert sorted(a.execute(q, ["enterprise"], prepare=prepare).fetchall()) == clear
            assert sorted(b.execute(q, ["enterprise"], prepare=prepare).fetchall()) == masked
        count = "SELECT count(*), sum(v) FROM kept_twin"
        for prepare in (False, True):
            a.execute("SET search_path = public")
            assert a.execute(count, prepare=prepare).fetchone() == (3, 3)
            a.execute("SET search_path = sales")
            assert a.execute(count, prepare=prepare).fetchone() == (5, 10)
        # A commit between two executions: the next one reads it.
        cat.load_table("sales.kept_twin").append(
            pa.table({"v": pa.array([100], pa.int64())}, schema=values))
        assert a.execute(count).fetchone() == (6, 110)
        assert a.execute(count, prepare=True).fetchone() == (6, 110)
    # Flight SQL: the same text for the masked user, then for alice.
    flight_q = "SELECT customer_id, name FROM customers WHERE segment = 'enterprise'"
    for user, password, want in (("bot", "bot-pass", masked), ("alice", "a-pass", clear),
                                 ("bot", "bot-pass", masked)):
        with flight(planned, user, password) as conn, conn.cursor() as cur:
            cur.execute(flight_q)
            assert sorted(cur.fetchall()) == want, user

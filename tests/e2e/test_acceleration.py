"""Exact acceleration: tables named in [acceleration] are held in memory at their current
snapshot and the `accelerated` engine answers from them — the same answers as the files, never
a stale one. A gateway of its own over the shared lake, on tables of its own (`serving.*`)."""
from __future__ import annotations

import datetime as dt
import decimal
import re
import subprocess
import time
import urllib.request

import psycopg
import pyarrow as pa
import pytest

import warehouse as wh
from conftest import start_gateway

UTC = dt.timezone.utc
EVENTS = pa.schema([
    pa.field("event_id", pa.int64(), nullable=False),
    pa.field("customer_id", pa.int32(), nullable=False),
    pa.field("event_ts", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("kind", pa.string()),
    pa.field("amount", pa.decimal128(10, 2)),
    pa.field("day", pa.date32()),
])


def events(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    start = dt.datetime(2024, 3, 9, 22, 0, tzinfo=UTC)
    return pa.table({
        "event_id": pa.array(ids, pa.int64()),
        "customer_id": pa.array([i % 37 for i in ids], pa.int32()),
        "event_ts": pa.array([start + dt.timedelta(minutes=7 * i) for i in ids],
                             pa.timestamp("us", tz="UTC")),
        "kind": [None if i % 11 == 0 else ("view", "cart", "buy", "")[i % 4] for i in ids],
        "amount": pa.array([None if i % 13 == 0 else decimal.Decimal(i % 97) / 4 for i in ids],
                           pa.decimal128(10, 2)),
        "day": pa.array([dt.date(2024, 3, 1) + dt.timedelta(days=i % 20) for i in ids], pa.date32()),
    }, schema=EVENTS)


def metrics(gw) -> str:
    with urllib.request.urlopen(gw.http + "/metrics", timeout=10) as r:
        return r.read().decode()


def metric(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if m and all(dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")).get(k) == v
                     for k, v in labels.items()):
            total += float(m.group(2))
    return total


def held_snapshot(gw, table: str) -> float | None:
    """The snapshot held (a Prometheus sample: the id as a float)."""
    text = metrics(gw)
    if metric(text, "lakegate_acceleration", table=table, stat="held") != 1:
        return None
    return metric(text, "lakegate_acceleration", table=table, stat="snapshot_id")


def wait_held(gw, table: str, snapshot: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while held_snapshot(gw, table) != float(snapshot):
        assert time.time() < deadline, (
            f"{table} not held at {snapshot}: "
            + "\n".join(l for l in metrics(gw).splitlines() if "acceleration{" in l)
            + "".join(list(gw.log_tail)[-20:]))
        time.sleep(0.1)


@pytest.fixture(scope="module")
def serving(lake_dir, tmp_path_factory):
    """`serving.events` (identifier field event_id) and `serving.kinds`, and a gateway that
    accelerates `serving.*` with an index on customer_id and `day`."""
    cat = wh.catalog(str(lake_dir))
    cat.create_namespace("serving")
    table = cat.create_table("serving.events", schema=wh.Schema(
        wh.NestedField(1, "event_id", wh.LongType(), required=True),
        wh.NestedField(2, "customer_id", wh.IntegerType(), required=True),
        wh.NestedField(3, "event_ts", wh.TimestamptzType(), required=True),
        wh.NestedField(4, "kind", wh.StringType()),
        wh.NestedField(5, "amount", wh.DecimalType(10, 2)),
        wh.NestedField(6, "day", wh.DateType()),
        identifier_field_ids=[1]))
    for c in range(6):
        table.append(events(1 + c * 100, 100))
    kinds = cat.create_table("serving.kinds", schema=wh.Schema(
        wh.NestedField(1, "kind", wh.StringType(), required=True),
        wh.NestedField(2, "label", wh.StringType())))
    kinds.append(pa.table({"kind": ["view", "cart", "buy", ""], "label": ["V", "C", "B", None]},
                          schema=pa.schema([pa.field("kind", pa.string(), nullable=False),
                                            pa.field("label", pa.string())])))
    config = tmp_path_factory.mktemp("accel") / "lakegate.toml"
    config.write_text('[cache]\nenabled = false\n\n[acceleration]\ntables = ["serving.*"]\n'
                      'index = ["serving.events.customer_id", "serving.events.day"]\n'
                      'refresh = "200ms"\n')
    gw = start_gateway(wh.flags(str(lake_dir)), ["--config", str(config)])
    try:
        for name in ("events", "kinds"):
            wait_held(gw, f"serving.{name}",
                      cat.load_table(f"serving.{name}").metadata.current_snapshot_id)
        yield gw, cat
    finally:
        gw.proc.terminate()
        try:
            gw.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            gw.proc.kill()


# Point lookups, lists, the app's range read, text and date keys, filters the index cannot
# use, aggregates, a join of two held tables, NULLs.
QUERIES = [
    ("SELECT * FROM serving.events WHERE event_id = %s", (17,)),
    ("SELECT * FROM serving.events WHERE event_id = %s", (99999,)),
    ("SELECT event_id, kind FROM serving.events WHERE event_id IN (3, 5, 300, 301) ORDER BY 1", ()),
    ("SELECT event_id, event_ts, amount FROM serving.events WHERE customer_id = %s "
     "ORDER BY event_ts DESC LIMIT 20", (5,)),
    ("SELECT count(*), sum(amount) FROM serving.events WHERE customer_id = 5 AND amount > 3", ()),
    ("SELECT event_id FROM serving.events WHERE kind = '' ORDER BY 1 LIMIT 7", ()),
    ("SELECT count(*) FROM serving.events WHERE kind IS NULL", ()),
    ("SELECT count(*) FROM serving.events WHERE day = DATE '2024-03-04'", ()),
    ("SELECT count(*) FROM serving.events WHERE event_id = 7.0", ()),
    ("SELECT count(*) FROM serving.events WHERE customer_id::text = '5'", ()),
    ("SELECT kind, count(*), sum(amount), avg(amount), min(event_ts) FROM serving.events "
     "GROUP BY kind ORDER BY kind NULLS FIRST", ()),
    ("SELECT k.label, count(*) FROM serving.events e JOIN serving.kinds k ON e.kind = k.kind "
     "GROUP BY k.label ORDER BY 1 NULLS LAST", ()),
    ("SELECT date_trunc('day', event_ts) AS d, count(*) FROM serving.events "
     "WHERE customer_id = 3 GROUP BY 1 ORDER BY 1", ()),
]


def answers(gw, engine: str, zone: str = "UTC") -> dict:
    out = {}
    with psycopg.connect(gw.dsn, autocommit=True,
                         options=f"-c lakegate.engine={engine} -c TimeZone={zone}") as conn:
        for binary in (False, True):
            for sql, params in QUERIES:
                out[binary, sql, params] = conn.cursor(binary=binary).execute(
                    sql, params or None).fetchall()
    return out


def test_accelerated_answers_are_the_files_answers_in_any_zone(serving):
    gw, _ = serving
    before = metric(metrics(gw), "lakegate_queries_total", engine="accelerated")
    for zone in ("UTC", "America/New_York"):
        want = answers(gw, "datafusion", zone)
        got = answers(gw, "accelerated", zone)
        assert got == want, zone
    assert want[False, QUERIES[0][0], QUERIES[0][1]], "the point lookup must find its row"
    assert not want[False, QUERIES[1][0], QUERIES[1][1]]
    served = metric(metrics(gw), "lakegate_queries_total", engine="accelerated") - before
    assert served >= 2 * 2 * len(QUERIES), served


def test_a_routed_session_is_answered_from_memory(serving):
    gw, _ = serving
    before = metric(metrics(gw), "lakegate_queries_total", engine="accelerated")
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        for i in range(20):
            assert conn.execute("SELECT event_id FROM serving.events WHERE event_id = %s",
                                (i + 1,)).fetchall() == [(i + 1,)]
        plan = dict(conn.execute(
            "EXPLAIN ROUTE SELECT * FROM serving.events WHERE event_id = 1").fetchall())
        print(f"routed after the session: {plan}")
        assert plan["choice"] == "accelerated", plan
        other = dict(conn.execute("EXPLAIN ROUTE SELECT * FROM public.orders").fetchall())
        assert "public.orders is not accelerated" in other["declined by accelerated"], other
    assert metric(metrics(gw), "lakegate_queries_total", engine="accelerated") - before >= 18


def test_every_commit_is_seen_by_the_next_statement_and_read_incrementally(serving):
    gw, cat = serving
    table = "serving.events"
    loads = lambda kind: metric(metrics(gw), "lakegate_acceleration", table=table, stat=kind)  # noqa: E731
    full, incremental = loads("full_loads"), loads("incremental_loads")
    with psycopg.connect(gw.dsn, autocommit=True) as routed, \
            psycopg.connect(gw.dsn, autocommit=True,
                            options="-c lakegate.engine=accelerated") as pinned:
        for round_ in range(4):
            first = 10_000 + round_ * 10
            cat.load_table(table).append(events(first, 10))
            truth = len(cat.load_table(table).scan().to_arrow())
            # The very next statement sees the commit, whichever engine answers it.
            assert routed.execute(f"SELECT count(*) FROM {table}").fetchone() == (truth,)
            assert routed.execute(f"SELECT event_id FROM {table} WHERE event_id = %s",
                                  (first + 9,)).fetchall() == [(first + 9,)]
            # Pinned to memory: the new rows, or a refusal while the copy catches up; never
            # the old count.
            try:
                got = pinned.execute(f"SELECT count(*) FROM {table}").fetchone()
                assert got == (truth,)
            except psycopg.errors.FeatureNotSupported as e:
                assert "is held at snapshot" in str(e) or "loading" in str(e), e
            wait_held(gw, table, cat.load_table(table).metadata.current_snapshot_id)
            assert pinned.execute(f"SELECT count(*) FROM {table}").fetchone() == (truth,)
            assert pinned.execute(f"SELECT event_id FROM {table} WHERE event_id = %s",
                                  (first + 9,)).fetchall() == [(first + 9,)]
    assert loads("full_loads") == full, "an append must not re-read the table"
    assert loads("incremental_loads") >= incremental + 4


def test_a_rewrite_drops_the_rewritten_files_rows(serving):
    """PyIceberg's delete rewrites the files holding the rows (an overwrite commit): the copy
    lets the old files go and reads the new ones."""
    gw, cat = serving
    table = cat.load_table("serving.events")
    table.delete("customer_id = 4")
    truth = cat.load_table("serving.events").scan().to_arrow()
    wait_held(gw, "serving.events", cat.load_table("serving.events").metadata.current_snapshot_id)
    with psycopg.connect(gw.dsn, autocommit=True,
                         options="-c lakegate.engine=accelerated") as conn:
        assert conn.execute("SELECT count(*) FROM serving.events").fetchone() == (len(truth),)
        assert conn.execute(
            "SELECT count(*) FROM serving.events WHERE customer_id = 4").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM serving.events WHERE customer_id = 5").fetchone() == (
            sum(1 for c in truth.column("customer_id").to_pylist() if c == 5),)


def test_a_table_beyond_max_bytes_is_not_held_and_statements_read_files(lake_dir, serving,
                                                                        tmp_path):
    config = tmp_path / "small.toml"
    config.write_text('[cache]\nenabled = false\n\n[acceleration]\n'
                      'tables = ["serving.events"]\nmax_bytes = 4096\nrefresh = "200ms"\n')
    gw = start_gateway(wh.flags(str(lake_dir)), ["--config", str(config)])
    try:
        deadline = time.time() + 30
        while metric(metrics(gw), "lakegate_acceleration", table="serving.events",
                     stat="full_loads") == 0 and "max_bytes" not in explain(gw):
            assert time.time() < deadline, metrics(gw)[-2000:]
            time.sleep(0.1)
        assert held_snapshot(gw, "serving.events") is None
        assert "does not fit [acceleration] max_bytes" in explain(gw)
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            status = conn.execute("SELECT status, snapshot_id FROM lakegate.acceleration "
                                  "WHERE table_name = 'serving.events'").fetchone()
        assert status[0].startswith("not held: needs ") and status[1] is None, status
        truth = len(wh.catalog(str(lake_dir)).load_table("serving.events").scan().to_arrow())
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT count(*) FROM serving.events").fetchone() == (truth,)
        with psycopg.connect(gw.dsn, autocommit=True,
                             options="-c lakegate.engine=accelerated") as conn:
            with pytest.raises(psycopg.errors.FeatureNotSupported, match="max_bytes"):
                conn.execute("SELECT count(*) FROM serving.events")
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)


def explain(gw) -> str:
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        rows = dict(conn.execute("EXPLAIN ROUTE SELECT count(*) FROM serving.events").fetchall())
    return rows.get("declined by accelerated", "")


def test_a_kept_plan_binds_each_executions_values_and_never_freezes_the_clock(serving):
    """The embedded engines keep a statement's plan per table version: every execution binds
    its own parameters, and a plan calling now() is planned anew each time."""
    gw, cat = serving
    truth = {r["event_id"]: r["customer_id"]
             for r in cat.load_table("serving.events").scan().to_arrow().to_pylist()}
    for engine in ("datafusion", "accelerated"):
        with psycopg.connect(gw.dsn, autocommit=True,
                             options=f"-c lakegate.engine={engine}") as conn:
            for i in (1, 2, 250, 599, 1, 99999):
                got = conn.execute("SELECT customer_id FROM serving.events WHERE event_id = %s",
                                   (i,), prepare=True).fetchall()
                assert got == ([(truth[i],)] if i in truth else []), (engine, i)
            clock = "SELECT now(), count(*) FROM serving.events WHERE event_id = %s"
            first = conn.execute(clock, (1,), prepare=True).fetchone()[0]
            time.sleep(0.05)
            second = conn.execute(clock, (1,), prepare=True).fetchone()[0]
            assert second > first, engine


def answer_as_literals(gw, statements, literal, options, count_truth) -> int:
    """Runs each (prepared, literal form, executions) of `statements` on both engines with the
    session `options`: each execution's answer must equal the literal form's with its values
    written by `literal`, and a `count(*)`'s answer `count_truth(values)` when that is not
    None. Returns how many executions found rows."""
    found = 0
    for engine in ("datafusion", "accelerated"):
        with psycopg.connect(gw.dsn, autocommit=True,
                             options=f"-c lakegate.engine={engine} {options}") as conn:
            for sql, written, executions in statements:
                for values in executions:
                    values = values if isinstance(values, tuple) else (values,)
                    got = conn.execute(sql, values, prepare=True).fetchall()
                    want = conn.execute(written.format(*map(literal, values))).fetchall()
                    assert got == want, (engine, sql, values)
                    found += bool(want) and want != [(0,)]
                    truth = count_truth(values) if sql.startswith("SELECT count(*)") else None
                    if truth is not None:
                        assert want == [(truth,)], (engine, values)
    return found


def test_untyped_parameters_of_a_kept_plan_answer_as_literals_do(serving):
    """Parameters a client sends untyped (psycopg's `str`, pgbench's values) take their type
    from the column they are compared with; a kept plan is then optimised once with its
    placeholders in place and each execution only binds. Every execution must answer as the
    same statement with its values written as literals does (a fresh plan), on both engines, in
    a zone other than UTC, NULL and values matching nothing included."""
    gw, cat = serving
    rows = cat.load_table("serving.events").scan().to_arrow().to_pylist()
    statements = [
        ("SELECT event_id, kind FROM serving.events WHERE event_id = %s",
         "SELECT event_id, kind FROM serving.events WHERE event_id = {}",
         ["17", "250", "99999", None, "17"]),
        ("SELECT event_id, amount FROM serving.events WHERE kind = %s ORDER BY event_id LIMIT 5",
         "SELECT event_id, amount FROM serving.events WHERE kind = {} ORDER BY event_id LIMIT 5",
         ["buy", "", "nothing", "view", "buy"]),
        ("SELECT count(*) FROM serving.events WHERE day = %s AND customer_id BETWEEN %s AND %s",
         "SELECT count(*) FROM serving.events WHERE day = {} AND customer_id BETWEEN {} AND {}",
         [("2024-03-04", "0", "4"), ("2024-03-05", "2", "9"), ("1999-01-01", "0", "9"),
          ("2024-03-04", "0", "4")]),
        ("SELECT event_id FROM serving.events WHERE event_ts >= %s ORDER BY event_id LIMIT 3",
         "SELECT event_id FROM serving.events WHERE event_ts >= {} ORDER BY event_id LIMIT 3",
         ["2024-03-04 10:00:00", "2024-03-05", "2030-01-01", "2024-03-04 10:00:00"]),
    ]

    def literal(v):
        return "NULL" if v is None else "'" + v.replace("'", "''") + "'"

    def truth(values):
        # A quoted '0' compared with an integer is the integer 0 (PostgreSQL's `unknown`), not
        # text: customer 10 is not between '0' and '4'.
        if not values[0]:
            return None
        day = dt.date.fromisoformat(values[0])
        low, high = int(values[1]), int(values[2])
        return sum(1 for r in rows if r["day"] == day and low <= r["customer_id"] <= high)

    found = answer_as_literals(gw, statements, literal, "-c TimeZone=America/New_York", truth)
    assert found >= 8, "most executions must find rows"


def test_declared_parameter_types_of_a_kept_plan_answer_as_literals_do(serving):
    """Parameters a driver declares in Parse (psycopg's `int` as int2, int4 or int8 by its
    value, `date`, `Decimal` as numeric) reach the engine under a cast to the declared type; a
    kept plan types its placeholders by those casts and is optimised once. A `bigint` declared
    for the `integer` column is bound first instead. Every execution must answer as the same
    statement with its values written as literals, on both engines, as the rows say."""
    gw, cat = serving
    rows = cat.load_table("serving.events").scan().to_arrow().to_pylist()
    day = dt.date(2024, 3, 4)
    statements = [
        ("SELECT event_id, kind FROM serving.events WHERE event_id = %s",
         "SELECT event_id, kind FROM serving.events WHERE event_id = {}",
         [17, 250, 99999, 2**40, 17, 40_000]),
        ("SELECT count(*) FROM serving.events WHERE day = %s AND customer_id BETWEEN %s AND %s",
         "SELECT count(*) FROM serving.events WHERE day = {} AND customer_id BETWEEN {} AND {}",
         [(day, 0, 4), (day + dt.timedelta(days=1), 2, 9), (dt.date(1999, 1, 1), 0, 9),
          (day, 0, 4), (day, 2**33, 2**34)]),
        ("SELECT event_id FROM serving.events WHERE customer_id = %s AND amount > %s "
         "ORDER BY event_id LIMIT 5",
         "SELECT event_id FROM serving.events WHERE customer_id = {} AND amount > {} "
         "ORDER BY event_id LIMIT 5",
         [(3, decimal.Decimal("10.5")), (36, decimal.Decimal("0")), (3, decimal.Decimal("10.5")),
          (2**40, decimal.Decimal("1"))]),
    ]

    def literal(v):
        if isinstance(v, dt.date):
            return f"DATE '{v.isoformat()}'"
        return str(v)

    def truth(values):
        return sum(1 for r in rows
                   if r["day"] == values[0] and values[1] <= r["customer_id"] <= values[2])

    found = answer_as_literals(gw, statements, literal, "", truth)
    assert found >= 8, "most executions must find rows"


def test_lakegate_acceleration_lists_each_held_table_and_indexes_hot_columns(serving):
    """The columns the telemetry finds filtered on most are indexed from the next copy on."""
    gw, cat = serving
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        for kind in ("buy", "cart", "view") * 5:
            conn.execute("SELECT count(*) FROM serving.events WHERE kind = %s", (kind,))
    cat.load_table("serving.events").append(events(20_000, 5))
    current = cat.load_table("serving.events").metadata.current_snapshot_id
    wait_held(gw, "serving.events", current)
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        rows = {r[0]: r for r in conn.execute(
            "SELECT table_name, status, snapshot_id, rows, bytes, files, indexed_columns, "
            "full_loads FROM lakegate.acceleration ORDER BY table_name").fetchall()}
    held = rows["serving.events"]
    assert held[1:3] == ("held", current), held
    assert held[3] == len(cat.load_table("serving.events").scan().to_arrow())
    assert held[4] > 0 and held[5] >= 1 and held[7] == 1, held
    # The identifier field, the two configured columns and the hot one.
    assert held[6] == "customer_id, day, event_id, kind", held
    assert rows["serving.kinds"][1] == "held"

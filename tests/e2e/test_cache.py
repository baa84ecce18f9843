"""The result cache keyed by Iceberg snapshots: exact under concurrent commits, one execution per
commit under a refresh storm, bounded in bytes. Statistics come from `lakegate.cache_stats`."""
import contextlib
import threading
import time

import psycopg
import pyarrow as pa

import warehouse as wh
from conftest import start_gateway

TICKS = pa.schema([pa.field("tick", pa.int64(), nullable=False)])


@contextlib.contextmanager
def configured_gateway(lake_dir, tmp_path, toml: str):
    """A gateway of its own, started with a config file."""
    config = tmp_path / "lakegate.toml"
    config.write_text(toml)
    gw = start_gateway(wh.flags(str(lake_dir)), ["--config", str(config)])
    try:
        yield gw
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)


def stats(conn) -> dict:
    return dict(conn.execute("SELECT name, value FROM lakegate.cache_stats").fetchall())


def make_table(lake_dir, name: str):
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table(f"public.{name}", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    return cat, table


def append(cat, name: str, first: int, count: int):
    cat.load_table(f"public.{name}").append(
        pa.table({"tick": pa.array(range(first, first + count), pa.int64())}, schema=TICKS))


def test_no_stale_answer_while_a_writer_commits(gateway, lake_dir):
    cat, _ = make_table(lake_dir, "cache_live")
    append(cat, "cache_live", 1, 10)
    committed = {"rows": 10}
    stop = threading.Event()
    errors: list[str] = []

    def writer():
        n = 10
        while not stop.is_set():
            append(cat, "cache_live", n + 1, 10)
            n += 10
            committed["rows"] = n  # set only after the commit returned
            time.sleep(0.05)

    queries = {"n": 0}

    def reader():
        with psycopg.connect(gateway.dsn, autocommit=True) as conn:
            while not stop.is_set():
                floor = committed["rows"]
                count, top = conn.execute("SELECT count(*), max(tick) FROM cache_live").fetchone()
                ceiling = committed["rows"] + 10  # a commit may land before its counter moves
                queries["n"] += 1
                if not (floor <= count <= ceiling and count == top and count % 10 == 0):
                    errors.append(f"answer {count}/{top} outside [{floor}, {ceiling}]")

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(12)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors[:5]
    assert queries["n"] >= 300, queries
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        final = len(cat.load_table("public.cache_live").scan().to_arrow())
        assert conn.execute("SELECT count(*) FROM cache_live").fetchone() == (final,)
        assert stats(conn)["hits"] > 0


def test_refresh_storm_executes_about_once_per_commit(gateway, lake_dir):
    cat, _ = make_table(lake_dir, "cache_storm")
    append(cat, "cache_storm", 1, 5)
    sql = "SELECT count(*), sum(tick) FROM cache_storm"
    conns = [psycopg.connect(gateway.dsn, autocommit=True) for _ in range(200)]
    try:
        before = stats(conns[0])
        stop = threading.Event()
        commits = {"n": 0}
        answered = {"n": 0}
        lock = threading.Lock()

        def client(conn):
            while not stop.is_set():
                conn.execute(sql).fetchone()
                with lock:
                    answered["n"] += 1

        threads = [threading.Thread(target=client, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for i in range(4):
            time.sleep(1.0)
            append(cat, "cache_storm", 100 + i * 5, 5)
            commits["n"] += 1
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(timeout=60)
        after = stats(conns[0])
    finally:
        for c in conns:
            c.close()
    executions = after["executions"] - before["executions"]
    # one execution for the starting snapshot plus one per commit (a little slack for a commit
    # landing while a computation for the previous snapshot is in flight)
    assert executions <= commits["n"] + 3, (executions, commits, answered)
    assert answered["n"] >= 20 * executions, (executions, answered)
    assert after["single_flight_joins"] + after["hits"] > before["single_flight_joins"] + before["hits"]


def test_non_deterministic_and_system_queries_are_not_cached(gateway):
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        before = stats(conn)["bypassed"]
        a = conn.execute("SELECT now(), count(*) FROM customers").fetchone()[0]
        time.sleep(0.01)
        b = conn.execute("SELECT now(), count(*) FROM customers").fetchone()[0]
        assert a != b
        assert stats(conn)["bypassed"] >= before + 2


def test_cache_bounds(lake_dir, tmp_path):
    with configured_gateway(lake_dir, tmp_path, "[cache]\nmax_bytes = 200000\nmax_entry_bytes = 20000\n") as gw, \
            psycopg.connect(gw.dsn, autocommit=True) as conn:
        small = "SELECT * FROM orders WHERE order_id = 1"
        conn.execute(small).fetchall()
        conn.execute(small).fetchall()
        assert stats(conn)["hits"] == 1
        big = "SELECT order_id, status FROM orders"  # ~1000 rows: well over 20 kB of Arrow
        # Too large to cache: answered from what was read while trying plus the rest of the
        # same run (not run twice) — every row exactly once.
        ids = wh.catalog(str(lake_dir)).load_table("public.orders").scan().to_arrow()["order_id"]
        for _ in range(2):
            rows = conn.execute(big).fetchall()
            assert sorted(r[0] for r in rows) == sorted(ids.to_pylist())
        s = stats(conn)
        assert s["too_large"] >= 2 and s["hits"] == 1
        # far more distinct answers than fit: the store stays within max_bytes
        for order_id in range(2, 400):
            conn.execute("SELECT * FROM orders WHERE order_id = %s", (order_id,)).fetchall()
        s = stats(conn)
        assert 0 < s["bytes"] <= 200000, s


def test_bounded_staleness_skips_lookups_but_never_exceeds_the_bound(lake_dir, tmp_path):
    cat, _ = make_table(lake_dir, "cache_stale")
    append(cat, "cache_stale", 1, 10)
    with configured_gateway(lake_dir, tmp_path, '[cache]\nmax_staleness = "2s"\n') as gw, \
            psycopg.connect(gw.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM cache_stale").fetchone() == (10,)
        for _ in range(5):
            conn.execute("SELECT count(*) FROM cache_stale").fetchone()
        assert stats(conn)["token_reused_within_staleness"] >= 5
        append(cat, "cache_stale", 11, 10)
        committed = time.monotonic()
        (seen,) = conn.execute("SELECT count(*) FROM cache_stale").fetchone()
        assert seen in (10, 20)  # within the bound an older answer is allowed
        time.sleep(max(0.0, 2.2 - (time.monotonic() - committed)))
        assert conn.execute("SELECT count(*) FROM cache_stale").fetchone() == (20,)


def test_query_history_shows_the_snapshots_that_answered(gateway, lake_dir):
    cat, _ = make_table(lake_dir, "cache_hist")
    append(cat, "cache_hist", 1, 3)
    snapshot = cat.load_table("public.cache_hist").current_snapshot().snapshot_id
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        for _ in range(2):
            assert conn.execute("SELECT count(*) FROM cache_hist").fetchone() == (3,)
        rows = conn.execute(
            "SELECT cache, snapshots, engine, rows FROM lakegate.queries "
            "WHERE query LIKE '%cache_hist%' AND query NOT LIKE '%lakegate.queries%' ORDER BY query_id"
        ).fetchall()
    assert [r[0] for r in rows[-2:]] == ["miss", "hit"]
    assert all(r[1] == f"public.cache_hist@{snapshot}" for r in rows[-2:])
    # The miss ran on an engine the router chose; the hit ran on none.
    assert rows[-2][2] in ("datafusion", "duckdb") and rows[-1][2] == ""
    assert rows[-1][3] == 1

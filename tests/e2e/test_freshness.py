"""The freshness contract: a commit by another writer is visible to the very next query on
every open connection, with no restart and no TTL. Uses its own tables so the shared
expectations of other tests stay valid."""
import psycopg
import pyarrow as pa

import warehouse as wh

TICKS = pa.schema([pa.field("tick", pa.int64(), nullable=False)])


def ticks(first: int, count: int) -> pa.Table:
    return pa.table({"tick": pa.array(range(first, first + count), pa.int64())}, schema=TICKS)


def test_commit_is_visible_to_the_next_query_on_open_connections(gateway, lake_dir):
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.ticks", schema=wh.Schema(
        wh.NestedField(1, "tick", wh.LongType(), required=True)))
    table.append(ticks(1, 10))
    a = psycopg.connect(gateway.dsn, autocommit=True)
    b = psycopg.connect(gateway.dsn, autocommit=True)
    try:
        assert a.execute("SELECT count(*) FROM ticks").fetchone() == (10,)
        assert b.execute("SELECT max(tick) FROM ticks").fetchone() == (10,)
        for round_ in range(3):
            cat.load_table("public.ticks").append(ticks(11 + round_ * 5, 5))
            truth = len(cat.load_table("public.ticks").scan().to_arrow())
            assert a.execute("SELECT count(*) FROM ticks").fetchone() == (truth,)
            assert b.execute("SELECT max(tick) FROM ticks").fetchone() == (10 + (round_ + 1) * 5,)
    finally:
        a.close()
        b.close()


def test_new_table_appears_without_restart(gateway, lake_dir):
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        conn.execute("SELECT 1")  # connection open before the table exists
        cat = wh.catalog(str(lake_dir))
        t = cat.create_table("sales.targets", schema=wh.Schema(
            wh.NestedField(1, "region_id", wh.IntegerType(), required=True)))
        t.append(pa.table({"region_id": pa.array([7], pa.int32())},
                          schema=pa.schema([pa.field("region_id", pa.int32(), nullable=False)])))
        assert conn.execute("SELECT region_id FROM sales.targets").fetchall() == [(7,)]
        names = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'sales' ORDER BY 1")]
        assert names == ["regions", "targets"]

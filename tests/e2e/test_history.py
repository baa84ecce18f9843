"""The query history (`lakegate.queries`) survives a restart when `[history] path` is set, and
records each query's shape and routing group."""
import psycopg

import warehouse as wh
from conftest import start_gateway


def test_history_survives_a_restart(lake_dir, tmp_path):
    config = tmp_path / "lakegate.toml"
    history = tmp_path / "history.jsonl"
    config.write_text(f'[history]\npath = "{history}"\ncapacity = 50\n')

    def run(sqls):
        gw = start_gateway(["--config", str(config), *wh.flags(str(lake_dir))])
        try:
            with psycopg.connect(gw.dsn, autocommit=True) as conn:
                for sql in sqls:
                    conn.execute(sql).fetchall()
                return conn.execute(
                    "SELECT query_id, query, shape, routing_group, engine FROM lakegate.queries "
                    "WHERE query NOT LIKE '%lakegate.queries%' ORDER BY query_id").fetchall()
        finally:
            gw.proc.terminate()
            gw.proc.wait(timeout=10)

    first = run(["SELECT count(*) FROM orders WHERE order_id = 3",
                 "SELECT status, count(*) FROM orders GROUP BY status"])
    assert [r[2] for r in first] == ["aggregate", "aggregate"]
    assert {r[3] for r in first} == {"default"}
    # After a restart the earlier queries are still there, and ids keep counting up.
    second = run(["SELECT order_id FROM orders WHERE order_id = 1"])
    assert second[: len(first)] == first
    assert second[-1][0] > first[-1][0] and second[-1][2] == "point_lookup"
    # Bounded: the last 50 records across runs; the file is trimmed at the next start.
    third = run([f"SELECT order_id FROM orders WHERE order_id = {i}" for i in range(60)])
    # The router starts from what the kept history observed, not cold.
    gw = start_gateway(["--config", str(config), *wh.flags(str(lake_dir))])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            learned = conn.execute(
                "SELECT sum(queries) FROM lakegate.routing WHERE shape = 'point_lookup'"
            ).fetchone()[0]
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)
    assert learned and learned >= 40, learned
    ids = [r[0] for r in third]
    assert len(ids) <= 50 and ids == sorted(ids)
    assert any("order_id = 59" in r[1] for r in third)
    assert len(history.read_text().splitlines()) <= 50 + 62

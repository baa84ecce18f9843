"""Prometheus `/metrics` and the JSON admin API, scraped after real queries."""
from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import psycopg
import pyarrow as pa

import warehouse as wh


def get(gw, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(gw.http + path, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(text: str, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(rf"^{name}(?:\{{(.*)\}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def test_metrics_move_with_real_queries(gateway):
    _, before = get(gateway, "/metrics")
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        for i in range(3):
            conn.execute("SELECT order_id FROM orders WHERE order_id = %s", (i + 1,)).fetchall()
        try:
            conn.execute("SELECT nope FROM orders")
        except psycopg.Error:
            pass
        hits = dict(conn.execute("SELECT name, value FROM lakegate.cache_stats").fetchall())["hits"]
    status, after = get(gateway, "/metrics")
    assert status == 200
    ok = dict(frontend="pg", shape="point_lookup", outcome="ok")
    assert metric(after, "lakegate_queries_total", **ok) - \
        metric(before, "lakegate_queries_total", **ok) >= 3
    errors = dict(frontend="pg", outcome="error")
    assert metric(after, "lakegate_queries_total", **errors) - \
        metric(before, "lakegate_queries_total", **errors) >= 1
    assert metric(after, "lakegate_query_duration_seconds_count", shape="point_lookup") >= 3
    assert metric(after, "lakegate_cache", stat="hits") >= hits
    assert metric(after, "lakegate_catalog_tokens", stat="lookups") > 0
    assert metric(after, "lakegate_table", table="public.orders", stat="data_files") > 0
    assert 'lakegate_group_queries{group="default",state="running"}' in after


def test_admin_api_agrees_with_the_system_tables(gateway):
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM customers").fetchall()
        rows = conn.execute("SELECT query_id, query, engine FROM lakegate.queries "
                            "ORDER BY query_id DESC LIMIT 5").fetchall()
    status, body = get(gateway, "/api/queries?limit=50")
    assert status == 200
    api = {q["id"]: q for q in json.loads(body)["queries"]}
    for query_id, query, engine in rows:
        assert api[query_id]["sql"] == query and api[query_id]["engine"] == engine
    slowest = json.loads(get(gateway, "/api/queries?limit=3&slowest=true")[1])["queries"]
    assert [q["millis"] for q in slowest] == sorted((q["millis"] for q in slowest), reverse=True)
    assert get(gateway, "/api/health") == (200, '{"status":"ok"}')
    status, ready = get(gateway, "/api/ready")
    assert status == 200 and json.loads(ready)["status"] == "ready"
    engines = {e["engine"]: e for e in json.loads(get(gateway, "/api/engines")[1])["engines"]}
    assert engines["datafusion"]["healthy"] and engines["datafusion"]["is_default"]
    routing = json.loads(get(gateway, "/api/routing")[1])
    assert routing["default_group"] == "default" and routing["groups"][0]["name"] == "default"
    assert any(o["shape"] == "aggregate" for o in routing["observed"])
    cache = json.loads(get(gateway, "/api/cache")[1])
    assert {"hits", "misses", "bytes", "entries"} <= cache.keys()


def test_snapshot_age_resets_after_a_commit(gateway, lake_dir):
    cat = wh.catalog(str(lake_dir))
    table = cat.create_table("public.fresh_metrics", schema=pa.schema([("v", pa.int64())]))
    table.append(pa.table({"v": pa.array([1], pa.int64())}))
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM fresh_metrics").fetchall()
        time.sleep(2.2)
        age = metric(get(gateway, "/metrics")[1], "lakegate_table",
                     table="public.fresh_metrics", stat="snapshot_age_seconds")
        assert age >= 2, age
        table.append(pa.table({"v": pa.array([2], pa.int64())}))
        conn.execute("SELECT count(*) FROM fresh_metrics").fetchall()
    tables = {t["name"]: t for t in json.loads(get(gateway, "/api/tables")[1])["tables"]}
    assert tables["public.fresh_metrics"]["snapshot_age_seconds"] < 2
    assert tables["public.fresh_metrics"]["records"] == 2


def test_cli_views_of_a_running_gateway(gateway):
    import subprocess
    from conftest import lakegate_bin
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        conn.execute("SELECT count(*) FROM orders WHERE amount > 1").fetchall()

    def cli(*args):
        out = subprocess.run([lakegate_bin(), *args, "--http", gateway.http],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout

    status = cli("status")
    assert "datafusion" in status and "healthy" in status and "default" in status
    assert "public.orders" in cli("tables")
    slowest = cli("queries", "--slowest", "--limit", "5")
    assert len(slowest.strip().splitlines()) >= 2 and "sql" in slowest.splitlines()[0]
    down = subprocess.run([lakegate_bin(), "status", "--http", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=30)
    assert down.returncode != 0 and "is the gateway running" in down.stderr

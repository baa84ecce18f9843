"""The Iceberg SQL catalog on PostgreSQL (the one Spark's JdbcCatalog, Trino and Flink share):
tables PyIceberg writes there are served by lakegate, and commits are visible at once."""
import shutil
import socket
import tempfile
import subprocess
from pathlib import Path

import psycopg
import pytest

import warehouse as wh
from conftest import ROOT, start_gateway


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_catalog():
    # Not under pytest's tmp dir: that is private to root, and the server runs as `postgres`.
    data = Path(tempfile.mkdtemp(prefix="lakegate-pgcat-"))
    data.chmod(0o755)
    port = free_port()
    script = str(ROOT / "scripts" / "pg-server.sh")
    subprocess.run([script, "start", str(data / "pg"), str(port)], check=True, timeout=120)
    try:
        yield data, port
    finally:
        subprocess.run([script, "stop", str(data / "pg")], check=False, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def test_sql_catalog_on_postgresql(pg_catalog):
    data, port = pg_catalog
    lake_dir = data / "lake"
    cat = wh.catalog(str(lake_dir), uri=f"postgresql+psycopg2://postgres@127.0.0.1:{port}/postgres")
    cat.create_namespace("public")
    spec = wh.PartitionSpec(wh.PartitionField(source_id=3, field_id=1000,
                                              transform=wh.DayTransform(), name="order_day"))
    cat.create_table("public.orders", schema=wh.ORDERS_SCHEMA, partition_spec=spec)
    for c in range(3):
        wh.append_orders(cat, c * 40 + 1, 40)
    truth = cat.load_table("public.orders").scan().to_arrow()
    gw = start_gateway([
        "--catalog-uri", f"postgresql://postgres@127.0.0.1:{port}/postgres",
        "--catalog-name", "lake",
        "--warehouse", f"file://{Path(lake_dir).resolve()}/warehouse",
    ])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            count, total = conn.execute("SELECT count(*), sum(amount) FROM orders").fetchone()
            assert count == len(truth) == 120
            assert total == sum(a for a in truth.column("amount").to_pylist() if a is not None)
            wh.append_orders(cat, 1001, 7)
            assert conn.execute("SELECT count(*) FROM orders").fetchone() == (127,)
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")]
            assert tables == ["orders"]
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def rest_catalog():
    data = Path(tempfile.mkdtemp(prefix="lakegate-rest-"))
    port = free_port()
    script = str(ROOT / "scripts" / "rest-catalog.sh")
    subprocess.run([script, "start", str(data), str(port)], check=True, timeout=300)
    try:
        yield data, port
    finally:
        subprocess.run([script, "stop", str(data)], check=False, timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def test_rest_catalog(rest_catalog):
    """Apache Iceberg's own REST catalog server: PyIceberg writes, lakegate reads."""
    from pyiceberg.catalog import load_catalog

    _, port = rest_catalog
    cat = load_catalog("lake", type="rest", uri=f"http://127.0.0.1:{port}")
    cat.create_namespace("public")
    spec = wh.PartitionSpec(wh.PartitionField(source_id=3, field_id=1000,
                                              transform=wh.DayTransform(), name="order_day"))
    cat.create_table("public.orders", schema=wh.ORDERS_SCHEMA, partition_spec=spec)
    cat.load_table("public.orders").append(wh.orders_batch(1, 60))
    gw = start_gateway(["--catalog-uri", f"http://127.0.0.1:{port}", "--catalog-name", "lake"])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            assert conn.execute("SELECT count(*), max(order_id) FROM orders").fetchone() == (60, 60)
            cat.load_table("public.orders").append(wh.orders_batch(61, 5))
            assert conn.execute("SELECT count(*) FROM orders").fetchone() == (65,)
            assert ("public",) in conn.execute(
                "SELECT schema_name FROM information_schema.schemata").fetchall()
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)

"""`lakegate demo`: the one command a newcomer runs creates a real-time-shaped estate and serves
it. PyIceberg reads the same catalog independently and must agree."""
import subprocess
import time

import psycopg
from pyiceberg.catalog.sql import SqlCatalog

from conftest import lakegate_bin


def test_demo_creates_and_serves_the_estate(tmp_path):
    proc = subprocess.Popen(
        [lakegate_bin(), "demo", "--dir", str(tmp_path / "demo"), "--order-commits", "12",
         "--pg-listen", "127.0.0.1:0", "--flight-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 120
        line = ""
        while time.time() < deadline and not line.startswith("lakegate listening"):
            line = proc.stdout.readline()
            assert proc.poll() is None, proc.stderr.read()
        port = int(line.split("pg=")[1].split()[0].rsplit(":", 1)[1])
        cat = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/demo/catalog.db",
                         warehouse=f"file://{tmp_path}/demo/warehouse")
        orders = cat.load_table("public.orders")
        truth = orders.scan().to_arrow()
        assert len(orders.snapshots()) == 12, "orders is written in many small commits"
        assert len(orders.spec().fields) == 1, "orders is partitioned (by day)"
        with psycopg.connect(f"host=127.0.0.1 port={port} user=demo dbname=lakegate") as conn:
            assert conn.execute("SELECT count(*) FROM orders").fetchone() == (len(truth),)
            (days,) = conn.execute("SELECT count(DISTINCT date_trunc('day', order_ts)) FROM orders").fetchone()
            assert days > 1
            for table in ("customers", "events"):
                n = len(cat.load_table(f"public.{table}").scan().to_arrow())
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (n,) and n > 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)

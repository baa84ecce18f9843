"""psycopg2 (client-side parameters over the simple protocol, named cursors as DECLARE/FETCH)
and node-postgres (the extended protocol from Node.js), each at its newest release and an
older line (scripts/setup.sh installs both node-postgres lines; the older psycopg2 runs in the
older-driver venv); and what clients see when the catalog mirror's PostgreSQL dies."""
import glob
import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import psycopg2
import psycopg2.extras
import pytest
import warehouse as wh

from conftest import ROOT, start_gateway

NODE_PG_LINES = ["8.23.1", "8.16.3"]


def test_psycopg2(gateway, expected):
    conn = psycopg2.connect(host="127.0.0.1", port=gateway.port, user="tester", dbname="lakegate")
    try:
        cur = conn.cursor(cursor_factory=psycopg2.extras.RealDictCursor)
        cur.execute("SELECT order_id, amount, status FROM orders WHERE order_id = %s", (42,))
        row = cur.fetchone()
        assert row["order_id"] == 42 and str(row["amount"]) == expected["order_42"]["amount"]
        cur.execute("SELECT count(*) FROM orders WHERE status = %(s)s OR status = %(s)s", {"s": "x"})
        assert cur.fetchone()["count"] == 0
        # A named cursor is DECLARE … CURSOR inside a transaction, fetched in pages.
        named = conn.cursor(name="pages")
        named.itersize = 7
        named.execute("SELECT order_id FROM orders ORDER BY order_id")
        ids = [r[0] for r in named]
        assert len(ids) == expected["orders_count"] and ids == sorted(ids)
        named.close()
        conn.rollback()
        # Catalog introspection psycopg2 users run (the catalog mirror answers).
        cur.execute("SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                    "WHERE attrelid = 'orders'::regclass AND attname = 'amount'")
        assert cur.fetchone()["t"].startswith("numeric")
        with pytest.raises(psycopg2.errors.UndefinedTable):
            cur.execute("SELECT * FROM no_such_table")
        conn.rollback()
    finally:
        conn.close()


NODE_SCRIPT = r"""
const { Client } = require('pg');
(async () => {
  const c = new Client({ host: '127.0.0.1', port: +process.argv[2], user: 'tester', database: 'lakegate' });
  await c.connect();
  const out = {};
  out.count = (await c.query('SELECT count(*) AS n FROM orders')).rows[0].n;
  const r = await c.query('SELECT order_id, amount, status, order_ts FROM orders WHERE order_id = $1', [42]);
  out.row = { id: r.rows[0].order_id, amount: r.rows[0].amount, ts_is_date: r.rows[0].order_ts instanceof Date };
  out.types = r.fields.map(f => f.dataTypeID);
  const p = await c.query({ name: 'by-customer', text: 'SELECT count(*) AS n FROM orders WHERE customer_id = $1', values: [8] });
  out.prepared = p.rows[0].n;
  const again = await c.query({ name: 'by-customer', text: 'SELECT count(*) AS n FROM orders WHERE customer_id = $1', values: [8] });
  out.again = again.rows[0].n;
  out.typname = (await c.query('SELECT typname FROM pg_type WHERE oid = $1', [1700])).rows[0].typname;
  try { await c.query('SELECT * FROM no_such_table'); } catch (e) { out.code = e.code; }
  out.after = (await c.query('SELECT 1 AS one')).rows[0].one;
  await c.end();
  console.log(JSON.stringify(out));
})().catch(e => { console.error(e); process.exit(1); });
"""


@pytest.mark.parametrize("version", NODE_PG_LINES)
def test_node_postgres(gateway, expected, version, tmp_path):
    modules = ROOT / ".cache" / f"node-pg-{version}" / "node_modules"
    if not (modules / "pg").exists():
        pytest.fail(f"node-postgres {version} is not installed: run scripts/setup.sh")
    script = tmp_path / "check.js"
    script.write_text(NODE_SCRIPT)
    done = subprocess.run(["node", str(script), str(gateway.port)], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, NODE_PATH=str(modules)))
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["count"] == str(expected["orders_count"])  # int8 arrives as a string
    assert got["row"] == {"id": "42", "amount": expected["order_42"]["amount"], "ts_is_date": True}
    assert got["types"] == [20, 1700, 25, 1184]
    assert got["prepared"] == got["again"] and int(got["prepared"]) > 0
    assert got["typname"] == "numeric"
    assert got["code"] == "42P01" and got["after"] == 1


def test_a_lost_catalog_mirror_falls_back_to_the_emulated_catalog(lake_dir):
    """The mirror's PostgreSQL killed under a running gateway: catalog statements and statements
    without tables are still answered (by the emulated catalog and the engines), promptly."""
    gw = start_gateway(wh.flags(str(lake_dir)))
    try:
        pids = glob.glob(os.path.join(
            tempfile.gettempdir(), f"lakegate-pgcat-run-{gw.proc.pid}-*", "data", "postmaster.pid"))
        assert len(pids) == 1, pids
        postmaster = int(Path(pids[0]).read_text().splitlines()[0])
        catalog = "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = 'orders'"
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            assert conn.execute(catalog).fetchone() == (1,)
            os.kill(postmaster, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while Path(f"/proc/{postmaster}").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            started = time.monotonic()
            for _ in range(3):
                assert conn.execute(catalog).fetchone()[0] >= 1
                assert conn.execute("SELECT 1").fetchone()[0] == 1
            assert time.monotonic() - started < 10
        with psycopg.connect(gw.dsn, autocommit=True) as fresh:
            assert fresh.execute(catalog).fetchone()[0] >= 1
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=30)

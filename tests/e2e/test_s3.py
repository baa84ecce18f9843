"""A lake on object storage: PyIceberg writes an Iceberg table to a real S3 API server (moto,
scripts/s3-server.sh), and `lakegate serve --warehouse s3://…` answers over it with nothing
configured but the standard AWS environment variables (path-style addressing chosen for the
loopback endpoint): DataFusion through iceberg-rust's opendal storage, DuckDB through httpfs
with a secret made from the same settings."""
from __future__ import annotations

import decimal
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import psycopg
import pytest

from conftest import ROOT, start_gateway
from engine_estate import free_port

SCRIPT = str(ROOT / "scripts" / "s3-server.sh")
KEYS = {"AWS_ACCESS_KEY_ID": "lakegate-test", "AWS_SECRET_ACCESS_KEY": "lakegate-secret",
        "AWS_REGION": "us-east-1"}


def rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "order_id": pa.array(ids, pa.int64()),
        "amount": pa.array([decimal.Decimal(i) / 4 for i in ids], pa.decimal128(12, 2)),
        "status": pa.array(["paid" if i % 3 else "open" for i in ids], pa.string()),
    })


@pytest.fixture(scope="module")
def s3_lake():
    """An S3 server, a bucket, and a SQLite catalog whose table lives in s3://lake/warehouse."""
    from pyiceberg.catalog.sql import SqlCatalog
    root = Path(tempfile.mkdtemp(prefix="lakegate-s3-"))
    port = free_port()
    subprocess.run([SCRIPT, "start", str(root / "s3"), str(port)], check=True, timeout=60)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/lake", method="PUT"),
                               timeout=10).close()
        catalog = SqlCatalog("lake", **{
            "uri": f"sqlite:///{root}/catalog.db", "warehouse": "s3://lake/warehouse",
            "s3.endpoint": endpoint, "s3.access-key-id": KEYS["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": KEYS["AWS_SECRET_ACCESS_KEY"], "s3.region": "us-east-1",
            # PyIceberg's pyarrow S3 client fails moto's multipart completion; s3fs does not.
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
        })
        catalog.create_namespace("shop")
        table = catalog.create_table("shop.orders", schema=rows(1, 1).schema)
        table.append(rows(1, 600))
        table.append(rows(601, 400))
        yield {"root": root, "endpoint": endpoint, "catalog": catalog, "table": table}
    finally:
        subprocess.run([SCRIPT, "stop", str(root / "s3")], check=False, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def gateway_on_s3(s3_lake, catalog: str, warehouse: str):
    """A gateway started with the AWS variables as its only storage settings."""
    return start_gateway(["--catalog-uri", f"sqlite://{catalog}", "--catalog-name", "lake",
                          "--warehouse", warehouse],
                         env=dict(KEYS, AWS_ENDPOINT_URL=s3_lake["endpoint"]))


@pytest.fixture(scope="module")
def s3_gateway(s3_lake):
    gw = gateway_on_s3(s3_lake, f"{s3_lake['root']}/catalog.db", "s3://lake/warehouse")
    yield gw
    gw.proc.terminate()
    gw.proc.wait(timeout=15)


def answer(gw, sql: str, engine: str = "auto"):
    with psycopg.connect(f"postgresql://tester@127.0.0.1:{gw.port}/lakegate", autocommit=True,
                         options=f"-c lakegate.engine={engine}") as conn:
        return conn.execute(sql).fetchall()


def test_a_lake_on_s3_answers_with_the_environments_credentials(s3_gateway):
    want = [(1000, decimal.Decimal("125125.00"))]
    sql = "SELECT count(*), sum(amount) FROM shop.orders"
    for engine in ("datafusion", "duckdb", "auto"):
        assert answer(s3_gateway, sql, engine) == want, engine
    assert answer(s3_gateway, "SELECT status, count(*) FROM shop.orders GROUP BY 1 ORDER BY 1",
                  "datafusion") == [("open", 333), ("paid", 667)]
    assert answer(s3_gateway, "SELECT order_id, amount FROM shop.orders WHERE order_id = 777",
                  "datafusion") == [(777, decimal.Decimal("194.25"))]


def test_a_commit_on_s3_is_read_by_the_next_statement(s3_lake, s3_gateway):
    s3_lake["table"].append(rows(1001, 10))
    for engine in ("datafusion", "duckdb"):
        assert answer(s3_gateway, "SELECT count(*), max(order_id) FROM shop.orders",
                      engine) == [(1010, 1010)], engine


def object_requests(gw) -> dict[str, int]:
    """`lakegate_object_store_requests` from /metrics, by request kind."""
    text = urllib.request.urlopen(f"{gw.http}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("lakegate_object_store_requests{"):
            kind = line.split('request="', 1)[1].split('"', 1)[0]
            out[kind] = int(float(line.rsplit(" ", 1)[1]))
    return out


def reads(counts: dict[str, int]) -> int:
    return counts.get("get", 0) + counts.get("range_get", 0) + counts.get("head", 0)


def test_an_unchanged_table_is_served_from_the_object_cache(s3_lake, s3_gateway):
    """Statements on a table that did not change make no object-store request (each statement
    is new to the result cache); after a commit only the new metadata and file are fetched."""
    sql = "SELECT count(*), sum(amount) FROM shop.orders WHERE order_id > {}"
    # Ids run from 1 without gaps; how many there are depends on the tests before this one.
    total = answer(s3_gateway, sql.format(0), "datafusion")[0][0]
    before = object_requests(s3_gateway)
    for i in range(1, 4):
        assert answer(s3_gateway, sql.format(i), "datafusion")[0][0] == total - i
    assert reads(object_requests(s3_gateway)) == reads(before), object_requests(s3_gateway)
    s3_lake["table"].append(rows(2001, 5))
    assert answer(s3_gateway, sql.format(0), "datafusion")[0][0] == total + 5
    after = object_requests(s3_gateway)
    # The new metadata JSON, manifest list and manifest (whole GETs), the new data file (its
    # footer range holds the whole small file); nothing already read.
    assert after.get("get", 0) - before.get("get", 0) <= 3, (before, after)
    assert after.get("range_get", 0) - before.get("range_get", 0) == 1, (before, after)
    metrics = urllib.request.urlopen(f"{s3_gateway.http}/metrics", timeout=10).read().decode()
    # These files are smaller than the footer prefetch: the footer read holds the whole file,
    # so every later read is a metadata-tier hit.
    hits = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
            if line.startswith('lakegate_object_cache{stat="hits",tier="metadata"}')]
    assert hits and hits[0] > 0, hits


def test_the_catalog_lists_the_s3_table(s3_gateway):
    assert answer(s3_gateway, "SELECT table_name FROM information_schema.tables "
                              "WHERE table_schema = 'shop'") == [("orders",)]


def test_maintenance_compacts_a_table_on_s3(s3_lake, s3_gateway, tmp_path):
    """`lakegate maintenance run --once` rewrites the small files through the object store and
    commits; every engine reads the same rows afterwards."""
    before = answer(s3_gateway, "SELECT count(*), sum(amount) FROM shop.orders", "datafusion")
    files_before = len(s3_lake["table"].refresh().inspect.files())
    assert files_before >= 3
    out = maintain(s3_lake, tmp_path, min_input_files=2, orphan_min_age="1h")
    assert len(s3_lake["table"].refresh().inspect.files()) < files_before, out
    for engine in ("datafusion", "duckdb"):
        assert answer(s3_gateway, "SELECT count(*), sum(amount) FROM shop.orders",
                      engine) == before, engine


def test_orphans_on_s3_are_listed_and_removed(s3_lake, s3_gateway, tmp_path):
    """A file a failed write left under the table's location is listed through the object
    store and deleted once older than `orphan_min_age`; referenced files stay."""
    before = answer(s3_gateway, "SELECT count(*), sum(amount) FROM shop.orders", "datafusion")
    key = s3_lake["table"].location().removeprefix("s3://") + "/data/left-by-a-failed-write.parquet"
    url = f"{s3_lake['endpoint']}/{key}"
    urllib.request.urlopen(urllib.request.Request(url, data=b"junk", method="PUT"),
                           timeout=10).close()
    # Asked with credentials: moto once answered an anonymous GET of the removed key with 403,
    # not 404 (stop 45's cold run), which says nothing about whether it is gone.
    import s3fs
    fs = s3fs.S3FileSystem(key=KEYS["AWS_ACCESS_KEY_ID"], secret=KEYS["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": s3_lake["endpoint"]})
    assert fs.exists(key)
    time.sleep(2)
    sweep_orphans(s3_lake, tmp_path)
    fs.invalidate_cache()
    assert not fs.exists(key), "the orphan is still stored"
    for engine in ("datafusion", "duckdb"):
        assert answer(s3_gateway, "SELECT count(*), sum(amount) FROM shop.orders",
                      engine) == before, engine


def maintain(s3_lake, tmp_path, min_input_files: int, orphan_min_age: str) -> str:
    """`lakegate maintenance run --once` on the S3 lake, the AWS variables its only settings."""
    cmd, env = maintenance_cmd(s3_lake, tmp_path, min_input_files, orphan_min_age)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def sweep_orphans(s3_lake, tmp_path) -> None:
    """Orphan removal with a 1 s floor, run again past the threshold when the writers'
    write-to-commit gap raised it (3× the longest seen) and young files were kept."""
    maintain(s3_lake, tmp_path, min_input_files=1000, orphan_min_age="1s")
    ops = [json.loads(l) for l in (tmp_path / "ops.jsonl").read_text().splitlines()]
    detail = [o for o in ops if o["kind"] == "remove_orphans"][-1]["detail"]
    raised = re.search(r"threshold ((?:\d+[hms] ?)+) \(3×", detail)
    if raised and not re.search(r", 0 unreferenced but younger", detail):
        unit = {"h": 3600, "m": 60, "s": 1}
        time.sleep(sum(int(n) * unit[u] for n, u in re.findall(r"(\d+)([hms])",
                                                                 raised.group(1))) + 1)
        maintain(s3_lake, tmp_path, min_input_files=1000, orphan_min_age="1s")


def maintenance_cmd(s3_lake, tmp_path, min_input_files: int, orphan_min_age: str,
                    endpoint: str | None = None) -> tuple[list[str], dict]:
    from conftest import lakegate_bin
    cfg = tmp_path / "maint.toml"
    cfg.write_text(f"""[maintenance]
min_input_files = {min_input_files}
settle_after = "1s"
snapshot_min_age = "1s"
keep_snapshots = 10
orphan_min_age = "{orphan_min_age}"
log_path = "{tmp_path}/ops.jsonl"
""")
    env = dict(os.environ, **KEYS, AWS_ENDPOINT_URL=endpoint or s3_lake["endpoint"])
    return [lakegate_bin(), "maintenance", "run", "--once", "--config", str(cfg),
            "--catalog-uri", f"sqlite://{s3_lake['root']}/catalog.db", "--catalog-name", "lake",
            "--warehouse", "s3://lake/warehouse", "--table", "shop.orders"], env


def test_the_demo_is_pointed_at_s3_with_one_flag(s3_lake, tmp_path):
    """`lakegate demo --warehouse s3://…` writes the demo's tables to the object store (AWS_*
    variables only) and serves them from there."""
    from conftest import lakegate_bin
    env = dict(os.environ, **KEYS, AWS_ENDPOINT_URL=s3_lake["endpoint"])
    out = subprocess.run(
        [lakegate_bin(), "demo", "--dir", str(tmp_path / "demo"), "--warehouse",
         "s3://lake/demo", "--order-commits", "3", "--no-serve"],
        capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "--warehouse s3://lake/demo" in out.stdout
    gw = gateway_on_s3(s3_lake, f"{tmp_path}/demo/catalog.db", "s3://lake/demo")
    try:
        assert answer(gw, "SELECT count(*) FROM orders", "datafusion") == [(600,)]
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)
    assert not (tmp_path / "demo" / "warehouse").exists(), "nothing written locally"


def test_a_data_file_deleted_out_of_band_is_named_in_the_error(s3_lake, s3_gateway):
    """58P01 (undefined_file) naming the missing object, and the session goes on. (A file the
    gateway has read is served from its object cache: Iceberg files never change, so the
    deleted file is one a new commit added.)"""
    table = s3_lake["table"].refresh()
    seen = set(table.inspect.files().column("file_path").to_pylist())
    table.append(rows(5001, 3))
    fresh = set(table.refresh().inspect.files().column("file_path").to_pylist()) - seen
    assert len(fresh) == 1, fresh
    path = fresh.pop()
    with table.io.new_input(path).open() as f:
        kept = f.read()
    table.io.delete(path)
    with psycopg.connect(f"postgresql://tester@127.0.0.1:{s3_gateway.port}/lakegate",
                         autocommit=True, options="-c lakegate.engine=datafusion") as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT sum(amount) FROM shop.orders").fetchall()
        assert e.value.sqlstate == "58P01", (e.value.sqlstate, str(e.value))
        assert path.rsplit("/", 1)[-1] in str(e.value)
        assert "lakegate-secret" not in str(e.value)
        assert conn.execute("SELECT 1").fetchone() == (1,)
    # Put it back for the tests after this one.
    with table.io.new_output(path).create(overwrite=True) as f:
        f.write(kept)


def test_credentials_the_store_refuses_are_named_without_the_secret(s3_lake, tmp_path):
    """A store that does not know the key id (moto with authentication on) fails the statement
    with 58030 naming the key id and the object, never the secret; the session goes on."""
    port = free_port()
    subprocess.run([SCRIPT, "start", str(tmp_path / "auth-s3"), str(port)], check=True,
                   timeout=60, env=dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0"))
    try:
        shutil.copy(s3_lake["root"] / "catalog.db", tmp_path / "catalog.db")
        gw = start_gateway(["--catalog-uri", f"sqlite://{tmp_path}/catalog.db",
                            "--catalog-name", "lake", "--warehouse", "s3://lake/warehouse"],
                           env={"AWS_ACCESS_KEY_ID": "AKIAWRONGKEY",
                                "AWS_SECRET_ACCESS_KEY": "wrong-secret",
                                "AWS_REGION": "us-east-1",
                                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"})
        try:
            for engine in ("datafusion", "duckdb"):
                with psycopg.connect(f"postgresql://tester@127.0.0.1:{gw.port}/lakegate",
                                     autocommit=True,
                                     options=f"-c lakegate.engine={engine}") as conn:
                    with pytest.raises(psycopg.Error) as e:
                        conn.execute("SELECT count(*) FROM shop.orders").fetchall()
                    message = str(e.value)
                    print(engine, e.value.sqlstate, message)
                    assert e.value.sqlstate == "58030", (engine, e.value.sqlstate, message)
                    assert "AKIAWRONGKEY" in message and "lake" in message, message
                    assert "wrong-secret" not in message, message
                    assert conn.execute("SELECT 1").fetchone() == (1,)
        finally:
            gw.proc.terminate()
            gw.proc.wait(timeout=15)
    finally:
        subprocess.run([SCRIPT, "stop", str(tmp_path / "auth-s3")], check=False, timeout=60)


def proxy_call(port: int, path: str) -> dict:
    """The proxy's control endpoint: `stats`, `reset` or `config?key=value` (POST); its counters."""
    method = "GET" if path == "stats" else "POST"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/__proxy/{path}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def start_proxy(upstream: str, port: int, delay_ms: float = 0) -> subprocess.Popen:
    """tests/fixtures/s3_proxy.py on `port` in front of `upstream`, once it answers."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fixtures" / "s3_proxy.py"),
                             "--upstream", upstream, "--port", str(port), "--delay-ms",
                             str(delay_ms)], stdout=subprocess.DEVNULL)
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/__proxy/stats", timeout=2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("s3_proxy did not start")


def gateway_through(s3_lake, port: int, tmp_path) -> object:
    """A gateway whose S3 endpoint is the proxy on `port`, result and object caches off (every
    statement reads the store)."""
    cfg = tmp_path / "gw.toml"
    cfg.write_text("[cache]\nenabled = false\n[storage.cache]\nenabled = false\n")
    return start_gateway(["--catalog-uri", f"sqlite://{s3_lake['root']}/catalog.db",
                          "--catalog-name", "lake", "--warehouse", "s3://lake/warehouse",
                          "--config", str(cfg)],
                         env=dict(KEYS, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}"))


def test_throttling_is_retried(s3_lake, tmp_path):
    """Every third GET answered `503 SlowDown` (S3's throttling, injected by the proxy): the
    statements are retried with backoff and answer as without throttling."""
    port = free_port()
    proxy = start_proxy(s3_lake["endpoint"], port)
    gw = gateway_through(s3_lake, port, tmp_path)
    sql = "SELECT count(*), sum(amount) FROM shop.orders"
    try:
        want = answer(gw, sql, "datafusion")
        proxy_call(port, "config?slowdown_every=3")
        for engine in ("datafusion", "duckdb"):
            for _ in range(3):
                assert answer(gw, sql, engine) == want, engine
        stats = proxy_call(port, "stats")
        assert stats["slowdowns"] >= 3, stats
    finally:
        proxy.kill()
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_a_store_that_goes_away_mid_query_fails_the_statement_in_bounded_time(
        s3_lake, tmp_path):
    """The S3 endpoint's process is killed while a statement reads (the object cache off, so
    every statement reads the store): the statement fails within a bounded time with 58000
    saying the object store cannot be reached, the session stays usable, and once the
    endpoint is back the next statement answers."""
    import threading
    port = free_port()
    proxy = start_proxy(s3_lake["endpoint"], port)
    gw = gateway_through(s3_lake, port, tmp_path)
    sql = "SELECT count(*) FROM shop.orders"
    try:
        want = answer(gw, sql, "datafusion")
        # Every request now waits 2 s in the proxy: the endpoint dies while the statement's
        # first read is in flight.
        proxy_call(port, "config?delay_ms=2000")
        with psycopg.connect(f"postgresql://tester@127.0.0.1:{gw.port}/lakegate",
                             autocommit=True, options="-c lakegate.engine=datafusion") as conn:
            threading.Timer(0.8, proxy.kill).start()
            started = time.time()
            with pytest.raises(psycopg.Error) as e:
                conn.execute(sql).fetchall()
            took = time.time() - started
            assert took < 45, took
            assert e.value.sqlstate == "58000", (e.value.sqlstate, str(e.value))
            assert "object store" in str(e.value), str(e.value)
            assert conn.execute("SELECT 1").fetchone() == (1,)
            proxy.wait(timeout=10)
            proxy = start_proxy(s3_lake["endpoint"], port)
            assert conn.execute(sql).fetchall() == want
    finally:
        proxy.kill()
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_a_compaction_killed_mid_write_commits_nothing(s3_lake, s3_gateway, tmp_path):
    """`maintenance run --once` is killed (SIGKILL) once it has begun writing its output to
    the store: the table keeps its snapshot and its answers; what the dead run wrote is left as
    orphans, which the next orphan sweep removes."""
    table = s3_lake["table"]
    table.append(rows(7001, 4))
    table.append(rows(7005, 4))
    sql = "SELECT count(*), sum(amount) FROM shop.orders"
    before = answer(s3_gateway, sql, "datafusion")
    snapshot = table.refresh().metadata.current_snapshot_id
    import s3fs
    fs = s3fs.S3FileSystem(key=KEYS["AWS_ACCESS_KEY_ID"], secret=KEYS["AWS_SECRET_ACCESS_KEY"],
                           client_kwargs={"endpoint_url": s3_lake["endpoint"]})
    location = table.location().removeprefix("s3://")

    def stored() -> set[str]:
        fs.invalidate_cache()
        return set(fs.find(f"{location}/data"))

    existing = stored()
    port = free_port()
    proxy = start_proxy(s3_lake["endpoint"], port, delay_ms=300)
    try:
        cmd, env = maintenance_cmd(s3_lake, tmp_path, 2, "1h", f"http://127.0.0.1:{port}")
        run = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            stats = proxy_call(port, "stats")
            if stats["answered"].get("PUT", 0) + stats["answered"].get("POST", 0) > 0:
                break
            assert run.poll() is None, "maintenance ended before writing"
            time.sleep(0.05)
        run.kill()
        run.wait(timeout=30)
    finally:
        proxy.kill()
    assert table.refresh().metadata.current_snapshot_id == snapshot
    assert answer(s3_gateway, sql, "datafusion") == before
    orphans = stored() - existing
    assert orphans, "the killed run had written a data file"
    time.sleep(2)
    sweep_orphans(s3_lake, tmp_path)
    assert not (orphans & stored()), orphans & stored()
    assert answer(s3_gateway, sql, "datafusion") == before


def test_a_rest_catalog_whose_tables_live_on_s3(s3_lake, tmp_path):
    """Iceberg's own REST catalog server with an s3:// warehouse (S3FileIO): PyIceberg writes
    through it, lakegate reads on DataFusion and DuckDB with only the AWS variables set, and
    sees the next commit."""
    from pyiceberg.catalog import load_catalog
    port = free_port()
    script = str(ROOT / "scripts" / "rest-catalog.sh")
    env = dict(os.environ, **KEYS, AWS_ENDPOINT_URL=s3_lake["endpoint"],
               REST_WAREHOUSE="s3://lake/rest")
    subprocess.run([script, "start", str(tmp_path / "rest"), str(port)], check=True,
                   timeout=300, env=env)
    gw = None
    try:
        cat = load_catalog("rest", type="rest", uri=f"http://127.0.0.1:{port}", **{
            "s3.endpoint": s3_lake["endpoint"], "s3.access-key-id": KEYS["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": KEYS["AWS_SECRET_ACCESS_KEY"], "s3.region": "us-east-1",
            "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"})
        cat.create_namespace("shop")
        table = cat.create_table("shop.orders", schema=rows(1, 1).schema)
        assert table.location().startswith("s3://lake/rest/"), table.location()
        table.append(rows(1, 200))
        gw = start_gateway(["--catalog-uri", f"http://127.0.0.1:{port}",
                            "--catalog-name", "lake"],
                           env=dict(KEYS, AWS_ENDPOINT_URL=s3_lake["endpoint"]))
        sql = "SELECT count(*), sum(amount) FROM shop.orders"
        for engine in ("datafusion", "duckdb"):
            assert answer(gw, sql, engine) == [(200, decimal.Decimal("5025.00"))], engine
        table.append(rows(201, 10))
        for engine in ("datafusion", "duckdb"):
            assert answer(gw, sql, engine)[0][0] == 210, engine
    finally:
        if gw is not None:
            gw.proc.terminate()
            gw.proc.wait(timeout=15)
        subprocess.run([script, "stop", str(tmp_path / "rest")], check=False, timeout=60)

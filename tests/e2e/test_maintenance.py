"""The maintenance loop against real writers and readers: compaction, snapshot expiry, orphan
removal and manifest rewrites keep every row (PyIceberg, DuckDB, Spark and Trino agree before
and after), survive a live writer committing every 100 ms, never delete a file in flight, and
sort by the column queries filter on so the same query reads fewer files afterwards."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import EqualTo

import warehouse as wh
from conftest import lakegate_bin, start_gateway

MAINT = """
[maintenance]
min_input_files = 2
settle_after = "1s"
keep_snapshots = 3
snapshot_min_age = "1s"
orphan_min_age = "1h"
max_manifests = 4
target_file_size = {target}
log_path = "{log}"
[history]
path = "{history}"
"""


def config(dir_: Path, target: int = 128 << 20, extra: str = "") -> Path:
    path = dir_ / "maint.toml"
    path.write_text(MAINT.format(target=target, log=dir_ / "ops.jsonl",
                                 history=dir_ / "history.jsonl") + extra)
    return path


def maintain(flags: list[str], cfg: Path, table: str | None = None, plan: bool = False) -> str:
    cmd = [lakegate_bin(), "maintenance", "plan" if plan else "run", *([] if plan else ["--once"]),
           "--config", str(cfg), *flags, *(["--table", table] if table else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def operations(cfg_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (cfg_dir / "ops.jsonl").read_text().splitlines() if line]


def rows(table, columns) -> list[tuple]:
    t = table.scan().to_arrow()
    return sorted(zip(*[t[c].to_pylist() for c in columns]))


# ---------------------------------------------------------------------------------------------
# Compaction with delete files, expiry and manifest rewrite: four engines agree afterwards.


@pytest.fixture(scope="module")
def estate(engine_estate):
    return engine_estate


def estate_flags(e) -> list[str]:
    return ["--catalog-uri", f"postgresql://postgres@127.0.0.1:{e.pg_port}/postgres",
            "--catalog-name", "lake", "--warehouse", e.warehouse]


def test_every_engine_reads_the_same_rows_after_maintenance(estate, tmp_path):
    spark = estate.spark_session()
    spark.sql("CREATE TABLE lake.public.m_deletes (id BIGINT, name STRING) USING iceberg "
              "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read')")
    for i in range(6):
        spark.sql(f"INSERT INTO lake.public.m_deletes SELECT id, concat('n', id) "
                  f"FROM range({i * 500 + 1}, {(i + 1) * 500 + 1})")
    spark.sql("DELETE FROM lake.public.m_deletes WHERE id % 7 = 0")
    spark.stop()
    table = estate.catalog.load_table("public.m_deletes")
    before = rows(table, ["id", "name"])
    assert len(before) == 3000 - 3000 // 7
    files_before = table.inspect.files().to_pylist()
    spark_snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    assert len(spark_snapshots) == 7
    assert any(f["content"] == 1 for f in files_before), "Spark wrote position deletes"
    # Expiry also keeps every snapshot younger than snapshot_min_age (1 s): Spark's seven
    # commits can all fall within it on a fast run, so let them age past it first.
    newest = table.metadata.current_snapshot().timestamp_ms / 1000
    time.sleep(max(0.0, newest + 1.5 - time.time()))

    cfg = config(tmp_path)
    out = maintain(estate_flags(estate), cfg, "public.m_deletes")
    ops = operations(tmp_path)
    kinds = {(o["kind"], o["result"]) for o in ops}
    assert ("compact", "ok") in kinds, out
    assert ("expire_snapshots", "ok") in kinds, out

    table = estate.catalog.load_table("public.m_deletes")
    assert table.metadata.current_snapshot().summary.operation.value == "replace"
    files = table.inspect.files().to_pylist()
    assert [f for f in files if f["content"] != 0] == [], "delete files were folded in"
    assert len(files) == 1
    kept = {s.snapshot_id for s in table.metadata.snapshots}
    # Expiry ran first and kept the newest 3; compaction and the manifest rewrite came after.
    assert kept & set(spark_snapshots) == set(spark_snapshots[-3:])
    assert rows(table, ["id", "name"]) == before, "PyIceberg"

    # Each engine reads the new snapshot with its own Iceberg reader.
    gw = estate.lakegate('[cache]\nenabled = false\n')
    for engine in ["datafusion", "duckdb", "trino", "spark"]:
        with psycopg.connect(gw.dsn, autocommit=True,
                             options=f"-c lakegate.engine={engine}") as conn:
            got = conn.execute("SELECT id, name FROM m_deletes ORDER BY id").fetchall()
            assert got == before, engine
            snaps = conn.execute(
                "SELECT snapshots FROM lakegate.queries WHERE query LIKE '%%m_deletes ORDER%%' "
                "AND error IS NULL AND engine = %s ORDER BY query_id DESC LIMIT 1",
                (engine,)).fetchone()[0]
            assert str(table.metadata.current_snapshot_id) in snaps, engine
    # Spark on its own, outside lakegate.
    spark = estate.spark_session()
    n = spark.sql("SELECT count(*), sum(id) FROM lake.public.m_deletes").collect()[0]
    spark.stop()
    assert (n[0], n[1]) == (len(before), sum(r[0] for r in before))


def test_a_live_writer_loses_nothing_while_maintenance_runs(estate, tmp_path):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("v", pa.string(), nullable=True)])
    estate.catalog.create_table("public.m_live", schema=schema)
    cfg = tmp_path / "live.toml"
    cfg.write_text(f"""
[cache]
enabled = false
[maintenance]
interval = "1s"
min_commits = 5
min_input_files = 5
settle_after = "1h"
keep_snapshots = 5
snapshot_min_age = "2s"
orphan_min_age = "1h"
max_manifests = 8
include = ["public.m_live"]
log_path = "{tmp_path / 'ops.jsonl'}"
""")
    gw = estate.lakegate(cfg.read_text(), ["--maintenance"])
    committed: list[int] = []
    retries = [0]
    stop = time.time() + float(os.environ.get("LAKEGATE_LIVE_WRITER_SECONDS", "40"))

    def writer():
        next_id = 1
        table = estate.catalog.load_table("public.m_live")
        while time.time() < stop:
            batch = pa.table({"id": pa.array(range(next_id, next_id + 5), pa.int64()),
                              "v": pa.array([f"r{i}" for i in range(next_id, next_id + 5)])},
                             schema=schema)
            for _ in range(20):
                try:
                    table.append(batch)
                    break
                except CommitFailedException:
                    retries[0] += 1
                    table = estate.catalog.load_table("public.m_live")
            else:
                raise AssertionError("writer could not commit in 20 attempts")
            committed.extend(range(next_id, next_id + 5))
            next_id += 5
            time.sleep(0.1)

    t = threading.Thread(target=writer)
    t.start()
    # Readers through lakegate meanwhile: every answer is a whole number of commits.
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        while t.is_alive():
            n = conn.execute("SELECT count(*), count(DISTINCT id) FROM m_live").fetchone()
            assert n[0] == n[1] and n[0] % 5 == 0, n
            time.sleep(0.5)
    t.join()
    time.sleep(3)  # one more cycle over the settled table
    table = estate.catalog.load_table("public.m_live")
    ids = sorted(table.scan().to_arrow()["id"].to_pylist())
    assert ids == sorted(committed), "no row lost or duplicated"
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM m_live").fetchone()[0] == len(committed)
        ops = conn.execute("SELECT kind, result, detail FROM lakegate.operations "
                           "WHERE \"table\" = 'public.m_live'").fetchall()
    compactions = [o for o in ops if o[0] == "compact" and o[1] == "ok"]
    assert len(compactions) >= 3, ops
    assert all(o[1] in ("ok", "noop", "conflict") for o in ops), ops
    files = len(table.inspect.files())
    commits = len(committed) // 5
    print(f"live writer: {commits} commits, {retries[0]} writer retries, "
          f"{len(compactions)} compactions, {files} data files at the end, "
          f"{sum(1 for o in ops if 're-applied' in o[2])} compactions re-applied over appends")
    assert files < commits / 4, (files, commits)
    # Stop this gateway's loop now: later tests measure latency on the same two cores.
    gw.proc.terminate()
    gw.proc.wait(timeout=30)


# ---------------------------------------------------------------------------------------------
# Orphans and query-aware sorting, on SQLite lakes of their own.


def test_orphan_removal_spares_a_file_in_flight(tmp_path):
    cat = wh.catalog(str(tmp_path))
    cat.create_namespace("public")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    table = cat.create_table("public.o", schema=schema)
    for i in range(3):
        table.append(pa.table({"id": pa.array([i], pa.int64())}, schema=schema))
    data_dir = Path(table.metadata.location.removeprefix("file://")) / "data"
    old = data_dir / "abandoned-by-a-crashed-writer.parquet"
    inflight = data_dir / "written-not-yet-committed.parquet"
    pq.write_table(pa.table({"id": pa.array([100], pa.int64())}, schema=schema), old)
    pq.write_table(pa.table({"id": pa.array([7, 8], pa.int64())}, schema=schema), inflight)
    two_days_ago = time.time() - 2 * 86400
    os.utime(old, (two_days_ago, two_days_ago))

    out = maintain(wh.flags(str(tmp_path)), config(tmp_path), "public.o")
    assert not old.exists(), out
    assert inflight.exists(), "a young unreferenced file must survive"
    orphan_ops = [o for o in operations(tmp_path) if o["kind"] == "remove_orphans"]
    assert orphan_ops and orphan_ops[-1]["files_deleted"] == 1, orphan_ops
    # The writer commits its file later: the table has its rows.
    table = cat.load_table("public.o")
    table.add_files([f"file://{inflight}"])
    assert sorted(cat.load_table("public.o").scan().to_arrow()["id"].to_pylist()) == [0, 1, 2, 7, 8]


def test_orphan_age_threshold_follows_the_writers_write_to_commit_gap(tmp_path):
    """A writer that holds a written file 3 s before committing it: with a floor of 1 s, orphan
    removal waits 3 × its gap (9 s or more) for unreferenced files, so another file of that
    writer, 2 s old, is kept, while one abandoned long ago is deleted."""
    cat = wh.catalog(str(tmp_path))
    cat.create_namespace("public")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    table = cat.create_table("public.slow", schema=schema)
    table.append(pa.table({"id": pa.array([1], pa.int64())}, schema=schema))
    data_dir = Path(table.metadata.location.removeprefix("file://")) / "data"
    held = data_dir / "held-by-a-slow-writer.parquet"
    pq.write_table(pa.table({"id": pa.array([2], pa.int64())}, schema=schema), held)
    time.sleep(3)
    table.add_files([f"file://{held}"])
    pending = data_dir / "written-2s-ago.parquet"
    old = data_dir / "abandoned.parquet"
    for f in (pending, old):
        pq.write_table(pa.table({"id": pa.array([3], pa.int64())}, schema=schema), f)
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    time.sleep(2)
    cfg = config(tmp_path, extra='[[maintenance.policy]]\nmatch = "public.slow"\n'
                                 'orphan_min_age = "1s"\n')
    out = maintain(wh.flags(str(tmp_path)), cfg, "public.slow")
    assert not old.exists(), out
    assert pending.exists(), "younger than 3 x the writer's gap: kept"
    op = [o for o in operations(tmp_path) if o["kind"] == "remove_orphans"][-1]
    assert op["files_deleted"] == 1, op
    # At least the 3 s the writer held its file (more when the machine is loaded).
    found = re.search(r"threshold (\d+)s \(3× the longest write-to-commit gap seen, (\d+)s\)",
                      op["detail"])
    assert found, op
    threshold, gap = int(found.group(1)), int(found.group(2))
    assert gap >= 3 and 3 * gap <= threshold <= 3 * (gap + 1), op


def overlap(table, column: str) -> float:
    """Mean fraction of other files whose [min, max] of `column` overlaps each file's by more
    than a shared boundary value."""
    ranges = [(f["readable_metrics"][column]["lower_bound"],
               f["readable_metrics"][column]["upper_bound"])
              for f in table.inspect.files().to_pylist()]
    if len(ranges) < 2:
        return 0.0
    hits = [sum(1 for j, (lo2, hi2) in enumerate(ranges) if j != i and lo2 < hi and lo < hi2)
            for i, (lo, hi) in enumerate(ranges)]
    return sum(hits) / (len(ranges) * (len(ranges) - 1))


def test_compaction_sorts_by_the_column_queries_filter_on(tmp_path):
    cat = wh.catalog(str(tmp_path))
    cat.create_namespace("public")
    schema = pa.schema([pa.field("event_id", pa.int64(), nullable=False),
                        pa.field("customer_id", pa.int64(), nullable=False),
                        pa.field("payload", pa.string(), nullable=True)])
    table = cat.create_table("public.events", schema=schema)
    rnd = random.Random(7)
    for c in range(16):
        n = 12_000
        ids = range(c * n, (c + 1) * n)
        table.append(pa.table({
            "event_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([rnd.randint(1, 20_000) for _ in ids], pa.int64()),
            "payload": pa.array([f"{rnd.getrandbits(64):x}" for _ in ids]),
        }, schema=schema))
    table = cat.load_table("public.events")
    before_rows = rows(table, ["event_id", "customer_id", "payload"])

    def files_read(customer: int) -> int:
        return len(list(cat.load_table("public.events").scan(
            row_filter=EqualTo("customer_id", customer)).plan_files()))

    cfg = config(tmp_path, target=1 << 20)
    gw = start_gateway([*wh.flags(str(tmp_path)), "--config", str(cfg)])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            for c in rnd.sample(range(1, 20_001), 40):
                conn.execute("SELECT count(*) FROM events WHERE customer_id = %s", (c,))
            conn.execute("SELECT count(*) FROM events WHERE event_id = 5")
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)
    probe = [11, 4_321, 9_999, 17_000]
    read_before = [files_read(c) for c in probe]
    overlap_before = overlap(table, "customer_id")

    out = maintain(wh.flags(str(tmp_path)), cfg, "public.events")
    compacted = [o for o in operations(tmp_path) if o["kind"] == "compact"]
    assert compacted and compacted[-1]["result"] == "ok", out
    assert "sorted by customer_id" in compacted[-1]["detail"], compacted[-1]
    table = cat.load_table("public.events")
    assert rows(table, ["event_id", "customer_id", "payload"]) == before_rows
    read_after = [files_read(c) for c in probe]
    overlap_after = overlap(table, "customer_id")
    print(f"files read per point query: {read_before} -> {read_after}; "
          f"customer_id range overlap {overlap_before:.2f} -> {overlap_after:.2f}; "
          f"{len(table.inspect.files())} files")
    assert len(table.inspect.files()) >= 2, "target size splits the output"
    assert overlap_before > 0.9 and overlap_after < 0.1
    assert max(read_after) <= 2 and min(read_before) == 16

    # The system tables show it.
    gw = start_gateway([*wh.flags(str(tmp_path)), "--config", str(cfg)])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            ops = conn.execute("SELECT kind, result, files_before, files_after FROM lakegate.operations "
                               "WHERE \"table\" = 'public.events' ORDER BY id").fetchall()
            assert ("compact", "ok", 16, len(table.inspect.files())) in ops, ops
            health = conn.execute("SELECT score, data_files, sort_columns FROM lakegate.table_health "
                                  "WHERE \"table\" = 'public.events'").fetchone()
            assert health[1] == len(table.inspect.files())
            assert health[0] > 90, health
            parts = conn.execute("SELECT count(*) FROM lakegate.table_partitions "
                                 "WHERE \"table\" = 'public.events'").fetchone()
            assert parts == (1,)
            conn.execute("SELECT count(*) FROM events WHERE customer_id = 3").fetchone()
        # The admin API and the metrics say the same.
        import urllib.request
        api = json.loads(urllib.request.urlopen(f"{gw.http}/api/operations").read())
        assert len(api["operations"]) == len(ops)
        assert api["operations"][0]["id"] == max(o["id"] for o in api["operations"])
        metrics = urllib.request.urlopen(f"{gw.http}/metrics").read().decode()
        score = [l for l in metrics.splitlines()
                 if l.startswith("lakegate_table_health{") and 'table="public.events"' in l
                 and 'stat="score"' in l]
        assert score and float(score[0].rsplit(" ", 1)[1]) == pytest.approx(health[0], abs=1)
        sent = [l for l in metrics.splitlines()
                if l.startswith('lakegate_telemetry_events{outcome="sent"}')]
        assert sent and float(sent[0].rsplit(" ", 1)[1]) >= 1, sent
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)


def test_policies_cascade_and_a_table_property_wins(tmp_path):
    """`[maintenance]` < a namespace rule < a table rule < the table's own property: `maintenance
    policy` names the level of each key, the run keeps the snapshots the property says, the
    other table of the namespace keeps the rule's, and the change is in the operations log."""
    wh.build(str(tmp_path))
    cat = wh.catalog(str(tmp_path))
    for _ in range(8):  # customers: 9 snapshots (orders has 20)
        customers = cat.load_table("public.customers")
        customers.append(customers.scan(limit=1).to_arrow())
    orders = cat.load_table("public.orders")
    with orders.transaction() as tx:
        tx.set_properties({"lakegate.maintenance.keep_snapshots": "3",
                           "lakegate.maintenance.settle_after": "soon"})
    cfg = config(tmp_path, extra="""
[[maintenance.policy]]
match = "public.*"
keep_snapshots = 6
snapshot_min_age = "0s"
min_commits = 1
[[maintenance.policy]]
match = "public.orders"
max_manifests = 100
""")
    flags = wh.flags(str(tmp_path))
    shown = subprocess.run([lakegate_bin(), "maintenance", "policy", "--table", "public.orders",
                            "--config", str(cfg), *flags], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr[-2000:]
    lines = {l.split()[0]: l for l in shown.stdout.splitlines()[1:] if l.startswith("  ") and not l.startswith("  ignored")}
    assert "table property lakegate.maintenance.keep_snapshots" in lines["keep_snapshots"], shown.stdout
    assert lines["keep_snapshots"].split()[1] == "3"
    assert "namespace: policy public.*" in lines["min_commits"]
    assert "table: policy public.orders" in lines["max_manifests"]
    assert "catalog: [maintenance]" in lines["min_input_files"], "set in [maintenance]"
    assert lines["target_manifest_size"].rstrip().endswith("default")
    assert "ignored: settle_after = soon" in shown.stdout, "an unreadable value is reported"

    maintain(flags, cfg)
    expired = {o["table"]: o for o in operations(tmp_path) if o["kind"] == "expire_snapshots"}
    assert expired["public.orders"]["files_after"] == 3, "the property's keep_snapshots"
    assert expired["public.customers"]["files_after"] == 6, "the namespace rule's, not [maintenance]'s 3"
    changes = [o for o in operations(tmp_path) if o["kind"] == "policy_change"]
    by_table = {o["table"]: o for o in changes}
    assert "keep_snapshots=3 (table property" in by_table["public.orders"]["detail"]
    assert by_table["public.orders"]["reason"] == "was: defaults"
    # A second run with nothing changed records no new change; a changed property does.
    maintain(flags, cfg)
    assert len([o for o in operations(tmp_path) if o["kind"] == "policy_change"]) == len(changes)
    with cat.load_table("public.orders").transaction() as tx:
        tx.set_properties({"lakegate.maintenance.keep_snapshots": "4"})
    maintain(flags, cfg, "public.orders")
    last = [o for o in operations(tmp_path) if o["kind"] == "policy_change"][-1]
    assert "keep_snapshots=4" in last["detail"] and "keep_snapshots=3" in last["reason"], last

    gw = start_gateway([*flags, "--config", str(cfg)])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            got = dict(conn.execute(
                "SELECT key, source FROM lakegate.maintenance_policy WHERE \"table\" = 'public.orders'"
            ).fetchall())
        assert got["keep_snapshots"] == "table property lakegate.maintenance.keep_snapshots"
        assert got["min_commits"] == "namespace: policy public.*"
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_expiry_keeps_a_snapshot_an_open_cursor_reads(tmp_path):
    """A cursor (or any long read) holds its snapshot: the loop, told to keep one snapshot with no
    minimum age, expires every other old snapshot around it, keeps that one while the cursor is
    open — its rows all arrive — and expires it once the cursor is closed."""
    wh.build(str(tmp_path), order_commits=4)
    cfg = config(tmp_path, extra="")
    text = cfg.read_text().replace('keep_snapshots = 3', 'keep_snapshots = 1').replace(
        'snapshot_min_age = "1s"', 'snapshot_min_age = "0s"')
    # No result cache: the cursor's rows come from the engine as it reads the files.
    cfg.write_text(text.replace("[maintenance]", '[maintenance]\ninterval = "1s"\nmin_commits = 1')
                   + "[cache]\nenabled = false\n")
    cat = wh.catalog(str(tmp_path))

    def snapshots() -> set[int]:
        return {s.snapshot_id for s in cat.load_table("public.orders").snapshots()}

    def expiries() -> int:
        return len([o for o in operations(tmp_path) if o["kind"] == "expire_snapshots"
                    and o["table"] == "public.orders" and o["result"] == "ok"]) \
            if (tmp_path / "ops.jsonl").exists() else 0

    def wait(condition, what: str, seconds: float = 90):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if condition():
                return
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    gw = start_gateway([*wh.flags(str(tmp_path)), "--config", str(cfg), "--maintenance"])
    try:
        wait(lambda: expiries() >= 1, "the first cycle")
        time.sleep(1.5)  # its compactions are committed
        held = cat.load_table("public.orders").current_snapshot().snapshot_id
        older = snapshots() - {held}
        assert older, "the first cycle's compactions left snapshots behind the current one"
        expected = len(cat.load_table("public.orders").scan().to_arrow())
        with psycopg.connect(gw.dsn) as conn:
            conn.execute("DECLARE c CURSOR FOR SELECT order_id FROM orders")
            first = conn.execute("FETCH 10 FROM c").fetchall()
            before = expiries()
            for i in range(3):
                wh.append_orders(cat, 10_000 + i * 10, 10)
            # The next expiry removes every snapshot but the current one — and the cursor's.
            wait(lambda: expiries() > before, "an expiry after the writer's commits")
            now = snapshots()
            assert held in now, "the snapshot the open cursor reads is kept"
            assert not (older & now), "the snapshots nobody reads are expired"
            rest = conn.execute("FETCH ALL FROM c").fetchall()
            assert len(first) + len(rest) == expected
            conn.execute("CLOSE c")
            conn.rollback()
        wh.append_orders(cat, 20_000, 10)
        wait(lambda: held not in snapshots(), "the released snapshot to be expired")
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_a_consumer_tag_holds_what_it_has_not_read(tmp_path):
    """A consumer is a ref `consumer.<name>` it moves as it reads the table's changes: expiry keeps
    every snapshot from its position on, lets go when it advances, and stops waiting for it once
    it is further behind than `max_consumer_lag` (reported, not silently dropped)."""
    wh.build(str(tmp_path), order_commits=6)
    cfg = config(tmp_path, extra="""
[[maintenance.policy]]
match = "public.orders"
keep_snapshots = 1
snapshot_min_age = "0s"
min_input_files = 100
max_manifests = 100
""")
    flags = wh.flags(str(tmp_path))
    cat = wh.catalog(str(tmp_path))

    def history() -> list[int]:
        t = cat.load_table("public.orders")
        return [s.snapshot_id for s in sorted(t.snapshots(), key=lambda s: s.timestamp_ms)]

    def move(tag: str, snapshot: int) -> None:
        t = cat.load_table("public.orders")
        ms = t.manage_snapshots()
        if tag in t.metadata.refs:
            ms = ms.remove_tag(tag)
        ms.create_tag(snapshot, tag).commit()

    s = history()
    assert len(s) == 6
    move("consumer.etl", s[2])
    maintain(flags, cfg, "public.orders")
    assert history() == s[2:], "the consumer's position and everything after it stay"
    move("consumer.etl", s[5])
    maintain(flags, cfg, "public.orders")
    assert history() == [s[5]], "it advanced: what it read goes"

    time.sleep(1.5)
    for i in range(3):
        wh.append_orders(cat, 50_000 + i * 10, 10)
    with cat.load_table("public.orders").transaction() as tx:
        tx.set_properties({"lakegate.maintenance.max_consumer_lag": "1s"})
    newer = history()[1:]
    gw = start_gateway([*flags, "--config", str(cfg)])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT consumer, snapshot_id, commits_behind, holds_expiry, lag_s "
                               "FROM lakegate.consumers WHERE \"table\" = 'public.orders'").fetchone()
            assert row[:4] == ("etl", s[5], 3, False), row
            assert row[4] >= 1.0
            reasons = conn.execute("SELECT reasons FROM lakegate.table_health "
                                   "WHERE \"table\" = 'public.orders'").fetchone()[0]
            assert "consumer etl stalled" in reasons, reasons
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)
    maintain(flags, cfg, "public.orders")
    assert history() == [s[5], newer[-1]], "past max_consumer_lag: only its tagged snapshot stays"


def test_manual_mode_holds_operations_until_approved_and_replans_a_stale_approval(tmp_path):
    """`mode = "manual"` on one table: its operations wait (listed over HTTP, SQL and the CLI)
    while the other tables run on autopilot; an approved operation runs at the next cycle; one
    approved before a writer's commit is planned again and waits for a new approval."""
    wh.build(str(tmp_path), order_commits=6)
    cfg = config(tmp_path, extra="""
[[maintenance.policy]]
match = "public.orders"
mode = "manual"
keep_snapshots = 1
snapshot_min_age = "0s"
min_commits = 1
""")
    cfg.write_text(cfg.read_text().replace("[maintenance]", '[maintenance]\ninterval = "1s"'))
    cat = wh.catalog(str(tmp_path))
    gw = start_gateway([*wh.flags(str(tmp_path)), "--config", str(cfg), "--maintenance"])

    def pending() -> list[dict]:
        with urllib.request.urlopen(f"{gw.http}/api/pending_operations", timeout=10) as r:
            return json.loads(r.read())["operations"]

    def wait(condition, what: str, seconds: float = 60):
        deadline = time.time() + seconds
        while time.time() < deadline:
            found = condition()
            if found:
                return found
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    def cli(*args: str) -> str:
        out = subprocess.run([lakegate_bin(), "maintenance", *args, "--http", gw.http],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        return out.stdout

    def expiry() -> dict | None:
        return next((o for o in pending() if o["kind"] == "expire_snapshots"), None)

    try:
        held = wait(expiry, "the expiry of public.orders to be held")
        snapshots = len(list(cat.load_table("public.orders").snapshots()))
        assert snapshots == 6, "nothing ran on the manual table"
        assert not [o for o in operations(tmp_path) if o["table"] == "public.orders"
                    and o["kind"] != "policy_change"], "no operation of the manual table ran"
        assert str(held["id"]) in cli("pending")
        # The loop's own service levels count the held table as backlog.
        with urllib.request.urlopen(f"{gw.http}/api/maintenance", timeout=10) as r:
            slo = json.loads(r.read())
        assert slo["tables"] == 4 and slo["maintained"] == 4, slo
        assert slo["backlog"] >= 1 and slo["failure_ratio"] == 0.0, slo
        with urllib.request.urlopen(f"{gw.http}/metrics", timeout=10) as r:
            metrics = r.read().decode()
        assert re.search(r'lakegate_maintenance_slo\{stat="backlog"\} [1-9]', metrics), metrics[-2000:]
        status = subprocess.run([lakegate_bin(), "status", "--http", gw.http], capture_output=True,
                                text=True, timeout=60)
        assert "maintenance: 4 of 4 tables maintained" in status.stdout, status.stdout
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM lakegate.pending_operations WHERE \"table\" = 'public.orders'")]
        assert held["id"] in ids

        # Approved, then a writer commits before the next cycle: planned again, not executed.
        wh.append_orders(cat, 90_000, 5)
        assert "approved" in cli("approve", str(held["id"]))
        replanned = wait(lambda: [o for o in operations(tmp_path) if "re-planned" in o["detail"]],
                         "the stale approval to be re-planned")
        assert replanned[0]["kind"] == "expire_snapshots" and "approved by local" in replanned[0]["detail"]
        again = wait(lambda: (e := expiry()) and e["approved_by"] is None and e, "a new approval request")
        assert len(list(cat.load_table("public.orders").snapshots())) == 7, "still nothing expired"

        # Approved for the table as it is: runs at the next cycle.
        cli("approve", str(again["id"]))
        done = wait(lambda: [o for o in operations(tmp_path) if o["table"] == "public.orders"
                             and o["kind"] == "expire_snapshots" and o["result"] == "ok"],
                    "the approved expiry to run")
        assert "approved by local" in done[0]["reason"]
        assert len(list(cat.load_table("public.orders").snapshots())) == 1
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_policies_mode_runs_allowed_kinds_inside_its_windows_within_its_budget(tmp_path):
    """`mode = "policies"`: outside its windows nothing runs; inside, only the kinds in `allow`,
    and no more than `max_operations_per_hour`; the rest is deferred, with the reason."""
    import datetime as dt
    wh.build(str(tmp_path), order_commits=6)
    now = dt.datetime.now(dt.timezone.utc)
    closed = f"{(now + dt.timedelta(hours=2)):%H}:00-{(now + dt.timedelta(hours=3)):%H}:00"
    cfg = config(tmp_path, extra=f"""
[[maintenance.policy]]
match = "public.orders"
mode = "policies"
allow = ["compact", "expire_snapshots"]
windows = ["{closed}"]
max_operations_per_hour = 1
keep_snapshots = 1
snapshot_min_age = "0s"
min_commits = 1
""")
    flags = wh.flags(str(tmp_path))

    def ran() -> list[dict]:
        return [o for o in operations(tmp_path) if o["table"] == "public.orders"
                and o["kind"] not in ("policy_change", "layout_experiment")]

    out = maintain(flags, cfg, "public.orders")
    assert f"deferred by its policy: outside its windows ({closed} UTC" in out, out
    assert ran() == [], "nothing runs outside the windows"
    # The table's owner opens the whole day: one operation runs, the budget stops the rest,
    # and kinds not allowed never run.
    cat = wh.catalog(str(tmp_path))
    with cat.load_table("public.orders").transaction() as tx:
        tx.set_properties({"lakegate.maintenance.windows": "00:00-24:00"})
    out = maintain(flags, cfg, "public.orders")
    assert len(ran()) == 1 and ran()[0]["kind"] in ("compact", "expire_snapshots"), ran()
    assert "budget of 1 operations per hour is spent" in out, out
    assert re.search(r"(remove_orphans|rewrite_manifests) public.orders: deferred by its policy: "
                     r"\S+ is not allowed \(allow: compact, expire_snapshots\)", out), out
    shown = subprocess.run([lakegate_bin(), "maintenance", "policy", "--table", "public.orders",
                            "--config", str(cfg), *flags], capture_output=True, text=True,
                           timeout=120).stdout
    assert re.search(r"windows\s+00:00-24:00\s+table property", shown), shown
    assert re.search(r"mode\s+policies\s+table: policy public.orders", shown), shown

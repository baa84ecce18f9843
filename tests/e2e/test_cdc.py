"""CDC tables: an upsert stream written by Flink's own Iceberg sink (PyFlink 2.1 with
iceberg-flink-runtime, tests/fixtures/flink_upsert.py) is made of equality deletes. Every engine
reads them as the stream left them, the health counts them, and compaction folds them into the
partitions' files and drops them while the stream keeps upserting.

The oracle is the stream itself: `flink_upsert.expected` is each key's last upsert. PyIceberg
cannot be the reader here (it refuses equality deletes); Spark reading outside lakegate is
checked against the same oracle.
"""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import psycopg
import pytest

from conftest import lakegate_bin
from engine_estate import ACCELERATION, CDC_COMMITS, ENGINES, start_flink_writer, wait_accelerated
from flink_upsert import PER_COMMIT, expected

COLUMNS = "id, region, balance, version"


@pytest.fixture(scope="module")
def estate(engine_estate):
    return engine_estate


def connect(estate, engine: str) -> psycopg.Connection:
    return psycopg.connect(estate.gateway.dsn, autocommit=True,
                           options=f"-c lakegate.engine={engine}")


def by_region(rows) -> list[tuple]:
    out: dict[str, list] = {}
    for _id, region, balance, version in rows:
        n, s, m = out.get(region, [0, 0, -1])
        out[region] = [n + 1, s + balance, max(m, version)]
    return [(r, *out[r]) for r in sorted(out)]


def test_equality_deletes_read_as_the_stream_left_them_on_every_engine(estate):
    want = expected(0, CDC_COMMITS)
    assert len(want) < CDC_COMMITS * PER_COMMIT, "the stream replaced rows by key"
    table = estate.catalog.load_table("cdc.accounts")
    summary = table.metadata.current_snapshot().summary
    assert int(summary["total-equality-deletes"]) == CDC_COMMITS * PER_COMMIT
    wait_accelerated(estate.gateway)
    for engine in ENGINES:
        with connect(estate, engine) as conn:
            got = conn.execute(f"SELECT {COLUMNS} FROM cdc.accounts ORDER BY id").fetchall()
            assert got == want, engine
            agg = conn.execute("SELECT region, count(*), sum(balance), max(version) "
                               "FROM cdc.accounts GROUP BY region ORDER BY region").fetchall()
            assert [tuple(r) for r in agg] == by_region(want), engine
            # A key filter: an old version of a replaced row must not come back.
            key = want[0][0]
            one = conn.execute(f"SELECT {COLUMNS} FROM cdc.accounts WHERE id = %s",
                               (key,)).fetchall()
            assert one == [want[0]], engine
            used = conn.execute("SELECT engine FROM lakegate.queries WHERE query LIKE "
                                "'%%cdc.accounts WHERE id%%' ORDER BY query_id DESC LIMIT 1"
                                ).fetchone()[0]
            assert used == engine
    # Spark on its own, outside lakegate, agrees with the oracle.
    spark = estate.spark_session()
    n = spark.sql("SELECT count(*), sum(balance) FROM lake.cdc.accounts").collect()[0]
    spark.stop()
    assert (n[0], n[1]) == (len(want), sum(r[2] for r in want))


def test_health_counts_equality_deletes_and_the_keys_they_cover(estate):
    with connect(estate, "datafusion") as conn:
        row = conn.execute(
            "SELECT delete_files, delete_records, equality_delete_files, "
            "equality_delete_records, reasons FROM lakegate.table_health "
            "WHERE \"table\" = 'cdc.accounts'").fetchone()
    table = estate.catalog.load_table("cdc.accounts")
    summary = table.metadata.current_snapshot().summary
    assert row[0] == row[2] == int(summary["total-delete-files"]) > 0, row
    assert row[1] == row[3] == CDC_COMMITS * PER_COMMIT, row
    assert f"{row[2]} of them equality deletes" in row[4], row


def test_compaction_applies_and_drops_equality_deletes_while_the_stream_upserts(estate,
                                                                                 tmp_path: Path):
    first = start_flink_writer(estate, "cdc.churn", 0, 6)
    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    cfg = tmp_path / "maint.toml"
    cfg.write_text(f"""
[maintenance]
min_input_files = 2
settle_after = "0s"
keep_snapshots = 100
orphan_min_age = "1h"
log_path = "{tmp_path / 'ops.jsonl'}"
""")
    # The stream goes on: 12 more commits, about one a second.
    writer = start_flink_writer(estate, "cdc.churn", 6, 18)
    try:
        seen = []
        while len(seen) < 2:  # it is committing
            line = writer.stdout.readline()
            assert line, "the writer stopped early"
            if line.startswith("commit "):
                seen.append(line)
        run = subprocess.run(
            [lakegate_bin(), "maintenance", "run", "--once", "--config", str(cfg),
             "--catalog-uri", f"postgresql://postgres@127.0.0.1:{estate.pg_port}/postgres",
             "--catalog-name", "lake", "--warehouse", estate.warehouse,
             "--table", "cdc.churn"], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        rest, _ = writer.communicate(timeout=300)
        assert writer.returncode == 0, rest[-3000:]
    finally:
        if writer.poll() is None:
            writer.kill()
    ops = [json.loads(line) for line in (tmp_path / "ops.jsonl").read_text().splitlines()]
    compactions = [o for o in ops if o["kind"] == "compact" and o["result"] == "ok"]
    assert compactions, ops
    table = estate.catalog.load_table("cdc.churn")
    # In commit order (the metadata file does not keep its list ordered).
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number)
    replaced = [i for i, s in enumerate(snapshots) if s.summary.operation.value == "replace"]
    assert replaced, [s.summary.operation for s in snapshots]
    # The stream committed before and after the compaction's commit.
    assert 0 < replaced[0] < len(snapshots) - 1, [
        (s.sequence_number, s.summary.operation.value) for s in snapshots]
    compacted = snapshots[replaced[-1]]
    assert int(compacted.summary["removed-delete-files"]) > 0, compacted.summary
    # The equality deletes each compacted partition had at the compaction's read are gone;
    # the ones the stream committed after it stay (and apply to the rewritten files).
    for op in compactions:
        read_at = table.metadata.snapshot_by_id(op["snapshot_before"]).sequence_number
        stale = [e for e in table.inspect.entries().to_pylist()
                 if e["status"] != 2 and e["data_file"]["content"] == 2
                 and e["sequence_number"] <= read_at
                 and f"region={e['data_file']['partition']['region']}" == op["partition"]]
        assert not stale, (op, stale)
    stream = [s for s in snapshots if s.summary.operation.value != "replace"]
    print(f"CDC compaction under a live upsert stream: {len(stream)} Flink commits, "
          + "; ".join(f"{o['partition']}: files {o['files_before']} -> {o['files_after']}, "
                      f"{o['detail']}, {o['millis']:.0f} ms" for o in compactions))
    want = expected(0, 18)
    # A gateway of its own: the estate's keeps version tokens for an hour (max_staleness).
    gw = estate.lakegate("[cache]\nenabled = false\n" + ACCELERATION)
    wait_accelerated(gw)
    for engine in ENGINES:
        with psycopg.connect(gw.dsn, autocommit=True,
                             options=f"-c lakegate.engine={engine}") as conn:
            got = conn.execute(f"SELECT {COLUMNS} FROM cdc.churn ORDER BY id").fetchall()
            assert got == want, engine
    spark = estate.spark_session()
    n = spark.sql("SELECT count(*), sum(balance) FROM lake.cdc.churn").collect()[0]
    spark.stop()
    assert (n[0], n[1]) == (len(want), sum(r[2] for r in want))


"""Several gateways behind one address: three `lakegate serve --maintenance` replicas on one
PostgreSQL catalog that is also their `[state]` database. Clients get identical answers from
each; one replica leads the maintenance loop (a lease row with an expiry); killed with SIGKILL
while it compacts, another takes the lease within the lease time, the interrupted compaction
leaves no partial commit, no two replicas ever work on one table at once (checked from the
shared operations log), and any replica's admin API shows the whole estate's operations."""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

import psycopg
import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

LEASE_S = 3
DAYS = 6
COMMITS = 10
ROWS = 25_000  # per day and commit


@pytest.fixture(scope="module")
def estate(engine_estate):
    return engine_estate


def api(gw, path: str) -> dict:
    with urllib.request.urlopen(f"{gw.http}{path}", timeout=10) as r:
        return json.loads(r.read())


def checksum(conn) -> tuple:
    return tuple(conn.execute(
        "SELECT count(*), sum(id), sum(customer_id) FROM r_events").fetchone())


def test_replicas_share_one_maintenance_leader_and_survive_its_death(estate, tmp_path):
    schema = Schema(NestedField(1, "id", LongType(), required=True),
                    NestedField(2, "day", StringType(), required=True),
                    NestedField(3, "customer_id", LongType(), required=True),
                    NestedField(4, "payload", StringType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000,
                                        transform=IdentityTransform(), name="day"))
    # Not maintained until the test watches (a table property; read at every cycle).
    table = estate.catalog.create_table("public.r_events", schema=schema, partition_spec=spec,
                                        properties={"lakegate.maintenance.enabled": "false"})
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False),
                       pa.field("day", pa.string(), nullable=False),
                       pa.field("customer_id", pa.int64(), nullable=False),
                       pa.field("payload", pa.string())])
    n = 0
    for c in range(COMMITS):
        ids = range(n, n + DAYS * ROWS)
        table.append(pa.table({
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([f"2026-12-0{1 + i % DAYS}" for i in ids]),
            "customer_id": pa.array([(i * 7919) % 50_000 for i in ids], pa.int64()),
            "payload": pa.array([f"p{i:x}" for i in ids]),
        }, schema=arrow))
        n += DAYS * ROWS
    want = (n, n * (n - 1) // 2, sum((i * 7919) % 50_000 for i in range(n)))
    # A table in manual mode: its operations wait for an operator, whichever replica leads.
    manual = estate.catalog.create_table("public.r_manual", schema=schema,
                                         properties={"lakegate.maintenance.mode": "manual"})
    for c in range(3):
        manual.append(pa.table({"id": pa.array([c], pa.int64()), "day": ["2026-12-01"],
                                "customer_id": pa.array([c], pa.int64()),
                                "payload": ["m"]}, schema=arrow))
    state_uri = f"postgresql://postgres@127.0.0.1:{estate.pg_port}/postgres"
    replicas = {}
    for name in ["r1", "r2", "r3"]:
        replicas[name] = estate.lakegate(f"""
[cache]
enabled = false
[maintenance]
interval = "1s"
min_input_files = 2
settle_after = "1s"
keep_snapshots = 100
orphan_min_age = "1h"
include = ["public.r_events", "public.r_manual"]
log_path = "{tmp_path / (name + '-ops.jsonl')}"
[state]
uri = "{state_uri}"
lease = "{LEASE_S}s"
replica = "{name}"
poll = "300ms"
""", ["--maintenance"])
    # Clients spread over the replicas get one answer.
    for gw in replicas.values():
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            assert checksum(conn) == want

    # The leader compacts: kill it while it holds the table's lock.
    with psycopg.connect(state_uri, autocommit=True) as state:
        with estate.catalog.load_table("public.r_events").transaction() as tx:
            tx.set_properties({"lakegate.maintenance.enabled": "true"})
        deadline = time.time() + 120
        while True:
            row = state.execute("SELECT holder FROM lakegate_leases "
                                "WHERE name = 'table:public.r_events' AND expires_at > now()"
                                ).fetchone()
            if row:
                break
            assert time.time() < deadline, "no replica started compacting"
            time.sleep(0.02)
        leader = row[0]
        assert state.execute("SELECT holder FROM lakegate_leases WHERE name = "
                             "'maintenance-leader'").fetchone()[0] == leader
        assert api(replicas[leader], "/api/state")["leading"] is True
        os.kill(replicas[leader].proc.pid, signal.SIGKILL)
        killed_at = time.time()
        survivors = {k: v for k, v in replicas.items() if k != leader}
        while True:
            leading = [k for k, gw in survivors.items() if api(gw, "/api/state")["leading"]]
            if leading:
                break
            assert time.time() - killed_at < LEASE_S + 10, "no replica took the lease"
            time.sleep(0.1)
        takeover = time.time() - killed_at
        # Within the lease time, plus one loop interval and the poll above.
        assert takeover <= LEASE_S + 2.5, takeover
        new_leader = leading[0]

        # The new leader finishes the work (one file per day) and logs it.
        deadline = time.time() + 180
        while True:
            rows = state.execute("SELECT replica, record::text FROM lakegate_operations"
                                 ).fetchall()
            finished = len(estate.catalog.load_table("public.r_events").inspect.files()) <= DAYS
            logged = any(r == new_leader and json.loads(j)["kind"] == "compact"
                         and json.loads(j)["result"] == "ok" for r, j in rows)
            if finished and logged:
                break
            assert time.time() < deadline, ("the table was not compacted", rows)
            time.sleep(0.5)
    ops = [dict(json.loads(r), replica=replica) for replica, r in rows]
    compactions = [o for o in ops if o["table"] == "public.r_events" and o["kind"] == "compact"]
    assert {o["replica"] for o in compactions if o["result"] == "ok"} >= {new_leader}
    # Never two replicas on the table at once.
    spans = sorted((o["started_us"], o["started_us"] + o["millis"] * 1000, o["replica"])
                   for o in ops if o["table"] == "public.r_events")
    for (s1, e1, r1), (s2, e2, r2) in zip(spans, spans[1:]):
        assert r1 == r2 or s2 >= e1, (spans, "overlapping operations")

    # No partial commit: every replace kept its rows, and the answers are the same.
    table = estate.catalog.load_table("public.r_events")
    for s in table.metadata.snapshots:
        if s.summary.operation.value == "replace":
            assert s.summary["added-records"] == s.summary["deleted-records"], s.summary
    for gw in survivors.values():
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            assert checksum(conn) == want
    t = table.scan().to_arrow()
    assert (len(t), sum(t["id"].to_pylist())) == want[:2]

    # Any replica's admin API shows every replica's operations.
    follower = next(k for k in survivors if k != new_leader)
    shown = api(survivors[follower], "/api/operations")["operations"]
    assert {o["replica"] for o in shown} >= {new_leader}, shown[:3]
    state_view = api(survivors[follower], "/api/state")
    assert state_view == {"shared": True, "replica": follower, "leader": new_leader,
                          "leading": False}
    # The leader holds the manual table's compaction; a follower lists it and approves it.
    deadline = time.time() + 60
    while True:
        held = [o for o in api(survivors[follower], "/api/pending_operations")["operations"]
                if o["table"] == "public.r_manual" and o["kind"] == "compact"
                and o["replica"] == new_leader]
        if held:
            break
        assert time.time() < deadline, "the leader's held operation is not listed elsewhere"
        time.sleep(0.3)
    req = urllib.request.Request(
        f"{survivors[follower].http}/api/pending_operations/{held[0]['id']}/approve",
        method="POST")
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.loads(r.read())["operation"]["replica"] == new_leader
    deadline = time.time() + 60
    while True:
        ran = [o for o in api(survivors[follower], "/api/operations")["operations"]
               if o["table"] == "public.r_manual" and o["kind"] == "compact"
               and o["result"] == "ok"]
        if ran:
            break
        assert time.time() < deadline, "the approved operation did not run on the leader"
        time.sleep(0.3)
    assert ran[0]["replica"] == new_leader and "approved by local" in ran[0]["reason"], ran
    # Queries run on other replicas are in this one's history too.
    with psycopg.connect(survivors[follower].dsn, autocommit=True) as conn:
        seen = conn.execute("SELECT count(*) FROM lakegate.queries WHERE query LIKE "
                            "'%sum(customer_id) FROM r_events%'"
                            ).fetchone()[0]
    assert seen >= 5, "its own two and the other replicas' checksums"
    print(f"replicas: {leader} killed while compacting; {new_leader} led after "
          f"{takeover:.1f} s (lease {LEASE_S} s); "
          f"{len([o for o in compactions if o['result'] == 'ok'])} compactions, none overlapping")


def test_a_big_compaction_runs_on_spark_sorted_the_way_lakegate_chose(estate, tmp_path):
    """`[maintenance] executor = "spark"`: a compaction past `executor_min_bytes` runs as
    Iceberg's rewrite_data_files on Spark Connect, for the partition and with the sort the
    planner chose; the log says executor=spark; PyIceberg and DuckDB read the same rows."""
    import pyarrow.parquet as pq
    schema = Schema(NestedField(1, "id", LongType(), required=True),
                    NestedField(2, "day", StringType(), required=True),
                    NestedField(3, "customer_id", LongType(), required=True))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000,
                                        transform=IdentityTransform(), name="day"))
    table = estate.catalog.create_table("public.x_big", schema=schema, partition_spec=spec,
                                        properties={"lakegate.maintenance.enabled": "false"})
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=False),
                       pa.field("day", pa.string(), nullable=False),
                       pa.field("customer_id", pa.int64(), nullable=False)])
    for c in range(6):
        ids = range(c * 3000, (c + 1) * 3000)
        table.append(pa.table({
            "id": pa.array(ids, pa.int64()),
            "day": pa.array([f"2026-12-0{1 + i % 3}" for i in ids]),
            "customer_id": pa.array([(i * 7919) % 5_000 for i in ids], pa.int64()),
        }, schema=arrow))
    before = estate.catalog.load_table("public.x_big").scan().to_arrow()
    want = (len(before), sum(before["id"].to_pylist()), sum(before["customer_id"].to_pylist()))
    gw = estate.lakegate(f"""
[cache]
enabled = false
[maintenance]
interval = "1s"
min_input_files = 2
settle_after = "1s"
keep_snapshots = 100
orphan_min_age = "1h"
include = ["public.x_big"]
executor = "spark"
executor_min_bytes = 1
log_path = "{tmp_path / 'ops.jsonl'}"
""", ["--maintenance"])
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        for c in range(0, 5_000, 250):  # the planner will sort by customer_id
            conn.execute("SELECT count(*) FROM x_big WHERE customer_id = %s", (c,))
    with estate.catalog.load_table("public.x_big").transaction() as tx:
        # Decided already: no branch experiment before the hand-over.
        tx.set_properties({"lakegate.maintenance.enabled": "true",
                           "lakegate.layout.sort_columns": "customer_id"})
    deadline = time.time() + 300
    while True:
        path = tmp_path / "ops.jsonl"
        ops = [json.loads(l) for l in path.read_text().splitlines()] if path.exists() else []
        done = [o for o in ops if o["kind"] == "compact" and o["result"] == "ok"]
        if len(done) >= 3:
            break
        assert time.time() < deadline, ops
        assert not [o for o in ops if o["kind"] == "compact" and o["result"] == "failed"], ops
        time.sleep(0.5)
    for o in done:
        assert o["detail"].startswith("executor=spark: rewrite_data_files, sorted by "
                                      "customer_id, where day = '2026-12-0"), o
        assert o["files_before"] == 6 and o["files_after"] == 1, o
    table = estate.catalog.load_table("public.x_big")
    props = table.metadata.current_snapshot().summary.additional_properties
    assert props.get("app-id", "").startswith("local-"), props  # committed by Spark
    after = table.scan().to_arrow()
    assert (len(after), sum(after["id"].to_pylist()),
            sum(after["customer_id"].to_pylist())) == want, "PyIceberg"
    with psycopg.connect(gw.dsn, autocommit=True, options="-c lakegate.engine=duckdb") as conn:
        assert tuple(conn.execute("SELECT count(*), sum(id), sum(customer_id) FROM x_big"
                                  ).fetchone()) == want, "DuckDB"
    for f in table.inspect.files().to_pylist():
        customers = pq.read_table(f["file_path"].removeprefix("file://"))["customer_id"]
        values = customers.to_pylist()
        assert values == sorted(values), f["file_path"]
    print(f"spark executor: {len(done)} partitions compacted by rewrite_data_files, "
          f"{[round(o['millis']) for o in done]} ms")

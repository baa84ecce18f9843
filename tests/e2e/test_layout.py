"""Layouts proven on a branch before they touch main: when the maintenance loop would sort a
table by a column it has not been laid out by, it compacts a sample partition that way into
the Iceberg branch `lakegate-layout`, replays the table's hot predicates against the branch and
main, and applies the layout only when the branch reads clearly less (then main is
fast-forwarded to the branch) — or records it as rejected and keeps compacting as before. The
experiment is an operation in the log, with the numbers, and on the table's console page."""
from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path

import psycopg
import pyarrow as pa

import warehouse as wh
from conftest import start_gateway

SCHEMA = pa.schema([pa.field("event_id", pa.int64(), nullable=False),
                    pa.field("customer_id", pa.int64(), nullable=False),
                    pa.field("payload", pa.string(), nullable=True)])
ROWS = 12_000


def fill(cat, name: str, commits: int, rnd: random.Random):
    """`commits` appends of ROWS rows: event ids in order, customers at random."""
    table = cat.create_table(name, schema=SCHEMA,
                             properties={"lakegate.maintenance.enabled": "false"})
    for c in range(commits):
        ids = range(c * ROWS, (c + 1) * ROWS)
        table.append(pa.table({
            "event_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([rnd.randint(1, 20_000) for _ in ids], pa.int64()),
            "payload": pa.array([f"{rnd.getrandbits(64):x}" for _ in ids]),
        }, schema=SCHEMA))
    return cat.load_table(name)


def rows(table) -> list[tuple]:
    t = table.scan().to_arrow()
    return sorted(zip(*[t[c].to_pylist() for c in SCHEMA.names]))


def test_a_layout_that_reads_less_is_applied_and_one_that_does_not_is_rejected(tmp_path: Path):
    cat = wh.catalog(str(tmp_path))
    cat.create_namespace("public")
    rnd = random.Random(11)
    # Queries look customers up: sorting by customer_id lets each read one file of four.
    by_customer = fill(cat, "public.by_customer", 16, rnd)
    # Queries look events up by id, and each commit already holds one id range: one sorted
    # file per megabyte reads more than main's small files.
    by_id = fill(cat, "public.by_id", 8, rnd)
    before = {"by_customer": rows(by_customer), "by_id": rows(by_id)}
    cfg = tmp_path / "layout.toml"
    cfg.write_text(f"""
[cache]
enabled = false
[maintenance]
interval = "1s"
min_input_files = 2
settle_after = "1s"
target_file_size = {1 << 20}
keep_snapshots = 100
orphan_min_age = "1h"
log_path = "{tmp_path / 'ops.jsonl'}"
""")
    gw = start_gateway([*wh.flags(str(tmp_path)), "--config", str(cfg), "--maintenance"])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            for c in rnd.sample(range(1, 20_001), 20):
                conn.execute("SELECT count(*) FROM by_customer WHERE customer_id = %s", (c,))
            for e in rnd.sample(range(8 * ROWS), 20):
                conn.execute("SELECT payload FROM by_id WHERE event_id = %s", (e,))
        # Now the loop may work on them, with the heat those queries left.
        for name in ["public.by_customer", "public.by_id"]:
            with cat.load_table(name).transaction() as tx:
                tx.set_properties({"lakegate.maintenance.enabled": "true"})
        deadline = time.time() + 180
        while True:
            ops = [json.loads(line) for line in
                   (tmp_path / "ops.jsonl").read_text().splitlines()] \
                if (tmp_path / "ops.jsonl").exists() else []
            done = {o["table"] for o in ops if o["kind"] == "compact" and o["result"] == "ok"}
            if {"public.by_customer", "public.by_id"} <= done:
                break
            assert time.time() < deadline, ops
            time.sleep(0.5)
        time.sleep(3)  # more cycles: a decided layout is not tried again
        ops = [json.loads(line) for line in (tmp_path / "ops.jsonl").read_text().splitlines()]
        experiments = {}
        for o in ops:
            if o["kind"] == "layout_experiment":
                assert o["table"] not in experiments, f"tried twice: {o}"
                experiments[o["table"]] = o

        applied = experiments["public.by_customer"]
        assert applied["result"] == "ok" and "applied" in applied["detail"], applied
        assert "the table sorted by customer_id on branch lakegate-layout" in applied["detail"], applied
        assert applied["files_after"] < applied["files_before"], applied
        assert applied["bytes_after"] <= 0.9 * applied["bytes_before"], applied
        table = cat.load_table("public.by_customer")
        assert table.properties["lakegate.layout.sort_columns"] == "customer_id"
        assert "lakegate-layout" not in table.metadata.refs, "the branch is dropped"
        compact = [o for o in ops if o["table"] == "public.by_customer" and o["kind"] == "compact"]
        assert "main fast-forwarded" in compact[0]["detail"], compact
        # Main is the branch's snapshot: sorted files, every row kept.
        assert table.metadata.current_snapshot_id == applied["snapshot_after"]
        assert len(table.inspect.files()) >= 2
        assert rows(table) == before["by_customer"]

        rejected = experiments["public.by_id"]
        assert "rejected" in rejected["detail"], rejected
        assert rejected["bytes_after"] > rejected["bytes_before"], rejected
        table = cat.load_table("public.by_id")
        assert table.properties["lakegate.layout.rejected_sort_columns"] == "event_id"
        assert "lakegate.layout.sort_columns" not in table.properties
        assert "lakegate-layout" not in table.metadata.refs
        compact = [o for o in ops if o["table"] == "public.by_id" and o["kind"] == "compact"
                   and o["result"] == "ok"]
        assert compact and "sorted by" not in compact[0]["detail"], compact
        assert table.metadata.current_snapshot_id != rejected["snapshot_after"]
        assert rows(table) == before["by_id"]

        # The table's console page gets both from the admin API.
        page = json.loads(urllib.request.urlopen(f"{gw.http}/api/table/public.by_customer").read())
        kinds = [o["kind"] for o in page["operations"]]
        assert "layout_experiment" in kinds, kinds
        print(f"layout experiments: by_customer {applied['detail']}; by_id {rejected['detail']}")
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)

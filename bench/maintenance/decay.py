"""Table decay with and without the maintenance loop, and compaction throughput (see run.sh)."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import DayTransform

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

import warehouse as wh  # noqa: E402
from conftest import lakegate_bin, start_gateway  # noqa: E402
from engine_estate import running_estate  # noqa: E402

UTC = dt.timezone.utc
BASE = dt.datetime(2026, 11, 1, tzinfo=UTC)
ROWS_PER_COMMIT = 10
MINUTES_PER_COMMIT = 5  # event time per commit: ~3.5 days of partitions per 1000 commits
ON = """
[cache]
enabled = false
[maintenance]
interval = "2s"
min_commits = 20
min_input_files = 8
settle_after = "20s"
keep_snapshots = 20
snapshot_min_age = "10s"
orphan_min_age = "1h"
max_manifests = 16
include = ["public.orders_on"]
"""
OFF = "[cache]\nenabled = false\n"


def batch(i: int) -> pa.Table:
    first = i * ROWS_PER_COMMIT
    ids = list(range(first, first + ROWS_PER_COMMIT))
    t0 = BASE + dt.timedelta(minutes=MINUTES_PER_COMMIT * i)
    return pa.table({
        "order_id": pa.array(ids, pa.int64()),
        "customer_id": pa.array([(k * 7) % 500 + 1 for k in ids], pa.int64()),
        "order_ts": pa.array([t0 + dt.timedelta(seconds=k) for k in range(ROWS_PER_COMMIT)],
                             pa.timestamp("us", tz="UTC")),
        "amount": pa.array([decimal.Decimal(k % 1000) / 10 for k in ids], pa.decimal128(12, 2)),
        "status": pa.array(["shipped" if k % 3 else "open" for k in ids]),
    }, schema=wh.orders_batch(0, 1).schema)


def dashboard(conn, table: str, upto: int) -> float:
    """p50 of 5 runs of the dashboard query over the last day of event time."""
    since = BASE + dt.timedelta(minutes=MINUTES_PER_COMMIT * upto) - dt.timedelta(days=1)
    sql = (f"SELECT date_trunc('hour', order_ts) AS h, count(*), sum(amount) FROM {table} "
           f"WHERE order_ts >= %s GROUP BY 1 ORDER BY 1")
    ms = []
    for _ in range(5):
        t = time.perf_counter()
        conn.execute(sql, (since,)).fetchall()
        ms.append((time.perf_counter() - t) * 1000)
    return statistics.median(ms)


def decay(e, mode: str, commits: int) -> list[dict]:
    name = f"orders_{mode}"
    table = e.catalog.create_table(
        f"public.{name}", schema=wh.ORDERS_SCHEMA,
        partition_spec=PartitionSpec(PartitionField(3, 1000, DayTransform(), "order_day")))
    gw = e.lakegate(ON if mode == "on" else OFF, ["--maintenance"] if mode == "on" else [])
    points = []
    every = max(1, commits // 10)
    retries = 0
    started = time.time()
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        for i in range(commits):
            for _ in range(50):
                try:
                    table.append(batch(i))
                    break
                except CommitFailedException:
                    retries += 1
                    table = e.catalog.load_table(f"public.{name}")
            if (i + 1) % every == 0 or i == 0:
                p50 = dashboard(conn, name, i + 1)
                h = conn.execute("SELECT data_files, manifests, snapshots, score FROM "
                                 "lakegate.table_health WHERE \"table\" = %s",
                                 (f"public.{name}",)).fetchone()
                points.append({"commits": i + 1, "p50_ms": p50, "files": h[0],
                               "manifests": h[1], "snapshots": h[2], "score": h[3]})
                print(f"  {mode:>3} {i + 1:>6} commits: p50 {p50:7.1f} ms, {h[0]:>5} files, "
                      f"{h[1]:>5} manifests, {h[2]:>5} snapshots, health {h[3]:.0f}", flush=True)
        ops = conn.execute("SELECT kind, result, count(*) FROM lakegate.operations "
                           "GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
    print(f"  {mode}: {commits} commits in {time.time() - started:.0f} s, {retries} writer "
          f"retries; operations: {ops}")
    return points


def throughput(e, tmp: Path) -> dict:
    """Bin-pack compaction of identical copies: lakegate vs Spark's rewrite_data_files."""
    import random
    rnd = random.Random(3)
    out = {}
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("payload", pa.string())])
    for name in ["tp_lakegate", "tp_spark"]:
        e.catalog.create_table(f"public.{name}", schema=schema)
    for c in range(30):
        n = 40_000
        data = pa.table({"id": pa.array(range(c * n, (c + 1) * n), pa.int64()),
                         "k": pa.array([rnd.randint(1, 1 << 30) for _ in range(n)], pa.int64()),
                         "payload": pa.array([f"{rnd.getrandbits(80):x}" for _ in range(n)])},
                        schema=schema)
        for name in ["tp_lakegate", "tp_spark"]:
            e.catalog.load_table(f"public.{name}").append(data)
    size = sum(f["file_size_in_bytes"] for f in
               e.catalog.load_table("public.tp_lakegate").inspect.files().to_pylist())
    cfg = tmp / "tp.toml"
    cfg.write_text(f'[maintenance]\nmin_input_files = 2\nsettle_after = "1s"\n'
                   f'log_path = "{tmp / "tp-ops.jsonl"}"\n')
    t = time.perf_counter()
    subprocess.run([lakegate_bin(), "maintenance", "run", "--once", "--config", str(cfg),
                    "--catalog-uri", f"postgresql://postgres@127.0.0.1:{e.pg_port}/postgres",
                    "--catalog-name", "lake", "--warehouse", e.warehouse,
                    "--table", "public.tp_lakegate"], check=True, capture_output=True)
    wall = time.perf_counter() - t
    ops = [json.loads(x) for x in (tmp / "tp-ops.jsonl").read_text().splitlines()]
    compact = [o for o in ops if o["kind"] == "compact"]
    out["lakegate"] = (size, sum(o["millis"] for o in compact) / 1000, wall)
    spark = e.spark_session()
    spark.sql("SELECT count(*) FROM lake.public.tp_spark").collect()  # warm the session
    t = time.perf_counter()
    spark.sql("CALL lake.system.rewrite_data_files(table => 'public.tp_spark', "
              "options => map('min-input-files', '2', 'rewrite-all', 'true'))").collect()
    out["spark"] = (size, time.perf_counter() - t, None)
    spark.stop()
    for name in ["tp_lakegate", "tp_spark"]:
        t = e.catalog.load_table(f"public.{name}")
        assert len(t.scan().to_arrow()) == 30 * 40_000, name
        out[name + "_files"] = len(t.inspect.files())
    return out


def svg(results: dict[str, list[dict]], path: Path) -> None:
    w, h, pad = 640, 360, 50
    xs = max(p["commits"] for pts in results.values() for p in pts)
    ys = max(p["p50_ms"] for pts in results.values() for p in pts) * 1.1
    lines = []
    for mode, color in [("off", "#c0392b"), ("on", "#27ae60")]:
        pts = " ".join(f"{pad + p['commits'] / xs * (w - 2 * pad):.1f},"
                       f"{h - pad - p['p50_ms'] / ys * (h - 2 * pad):.1f}" for p in results[mode])
        lines.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>'
                     f'<text x="{w - pad - 120}" y="{pad + (0 if mode == "off" else 18)}" '
                     f'fill="{color}">maintenance {mode}</text>')
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
        f'font-size="12"><rect width="100%" height="100%" fill="white"/>'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>'
        f'<text x="{w / 2 - 40}" y="{h - 15}">commits</text>'
        f'<text x="5" y="{pad - 10}">dashboard p50 (ms), max {ys / 1.1:.0f}</text>'
        + "".join(lines) + "</svg>")


def main() -> None:
    commits = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    out_dir = ROOT / "bench" / "maintenance" / "out"
    out_dir.mkdir(exist_ok=True)
    with running_estate(start_gateway, OFF) as e:
        results = {}
        for mode in ["off", "on"]:
            print(f"maintenance {mode}: {commits} commits of {ROWS_PER_COMMIT} rows", flush=True)
            results[mode] = decay(e, mode, commits)
        tp = throughput(e, e.root)
    print()
    print(f"| commits | off p50 ms | off files | off manifests | on p50 ms | on files | on manifests |")
    print("|---|---|---|---|---|---|---|")
    for a, b in zip(results["off"], results["on"]):
        print(f"| {a['commits']} | {a['p50_ms']:.1f} | {a['files']} | {a['manifests']} | "
              f"{b['p50_ms']:.1f} | {b['files']} | {b['manifests']} |")
    for mode in ["off", "on"]:
        pts = results[mode]
        print(f"maintenance {mode}: last p50 / first p50 = {pts[-1]['p50_ms'] / pts[1]['p50_ms']:.2f}x "
              f"(vs the first measured point after {pts[1]['commits']} commits: "
              f"{pts[-1]['p50_ms'] / pts[0]['p50_ms']:.2f}x vs commit 1)")
    size, secs, wall = tp["lakegate"]
    print(f"compaction throughput on {size / 1e6:.1f} MB in 30 files (bin-pack, no sort): "
          f"lakegate {size / 1e6 / secs:.1f} MB/s ({secs:.2f} s compacting, {wall:.2f} s CLI wall "
          f"incl. start) -> {tp['tp_lakegate_files']} files; "
          f"Spark rewrite_data_files {size / 1e6 / tp['spark'][1]:.1f} MB/s ({tp['spark'][1]:.2f} s) "
          f"-> {tp['tp_spark_files']} files")
    (out_dir / "decay.json").write_text(json.dumps({"results": results, "throughput": tp}, indent=1))
    svg(results, out_dir / "decay.svg")
    print(f"plot: {out_dir / 'decay.svg'}")


if __name__ == "__main__":
    main()

"""Serving speed: lakegate next to PostgreSQL holding the same rows with indexes (see run.sh).

shop.orders is written as a streaming writer leaves it — COMMITS small appends into a table
partitioned by day(event_ts), so each commit adds a few files and one manifest — then read by
pgbench (`-M extended` and `-M simple`, CLIENTS clients) on both servers: SELECT 1, a point
lookup on 100 hot ids (result-cache hits), a point lookup over all ids and one customer's last
20 orders (both read from files: lakegate's result cache off), the dashboard aggregate repeated
(hits), and the dashboard with lakegate's result cache off; then the dashboard's median latency
for one client. Each case on the table as streamed and after `lakegate maintenance run --once`.
Printed per case: tps of both, the ratio, and lakegate's CPU per statement (utime+stime of the
gateway process from /proc over the transactions pgbench counted). Then ADBC over Flight SQL for
the point lookup, the gateway's idle RSS, and its RSS with 1,000 idle connections open. The
`accel` cases run on a third gateway (result cache off) that holds shop.orders in memory
([acceleration], indexes on order_id and customer_id): uncached answers from the copy.
"""
from __future__ import annotations

import datetime as dt
import decimal
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import start_gateway  # noqa: E402
from engine_estate import free_port, wait_accelerated  # noqa: E402

# A RUST_BACKTRACE in the shell (this machine sets it) makes every error value capture a
# backtrace, and iceberg-rust builds errors on the read path it then drops (7% of a point
# lookup from files, perf, 2026-12-05); a gateway in service runs without it.
os.environ.setdefault("RUST_LIB_BACKTRACE", "0")

ROWS = int(os.environ.get("BENCH_ROWS", "50000"))
COMMITS = int(os.environ.get("BENCH_COMMITS", "150"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "8"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "10"))
CUSTOMERS = 2000
START = dt.datetime(2024, 1, 1)
# Consecutive orders are this far apart, so one commit's rows span three to four days.
STEP = dt.timedelta(seconds=int(3.45 * 86400 * COMMITS / ROWS))
HOT = 100
CLK = os.sysconf("SC_CLK_TCK")

CASES = [
    ("SELECT 1", "SELECT 1;\n", "cached"),
    (f"point, {HOT} hot ids", f"\\set id random(1, {HOT})\n"
     "SELECT * FROM shop.orders WHERE order_id = :id;\n", "cached"),
    # Misses read from files: on the gateway with the result cache off (with it on, repeats of
    # the 2,000 customers become hits within seconds).
    ("point, all ids", f"\\set id random(1, {ROWS})\n"
     "SELECT * FROM shop.orders WHERE order_id = :id;\n", "uncached"),
    ("customer's last 20", f"\\set c random(0, {CUSTOMERS - 1})\n"
     "SELECT * FROM shop.orders WHERE customer_id = :c ORDER BY event_ts DESC LIMIT 20;\n",
     "uncached"),
    ("dashboard", "SELECT status, count(*), sum(amount) FROM shop.orders "
     "GROUP BY status ORDER BY status;\n", "cached"),
    ("dashboard, cache off", "SELECT status, count(*), sum(amount) FROM shop.orders "
     "GROUP BY status ORDER BY status;\n", "uncached"),
    # The same misses on a gateway that holds shop.orders in memory ([acceleration]).
    ("point, all ids, accel", f"\\set id random(1, {ROWS})\n"
     "SELECT * FROM shop.orders WHERE order_id = :id;\n", "accelerated"),
    ("customer's last 20, accel", f"\\set c random(0, {CUSTOMERS - 1})\n"
     "SELECT * FROM shop.orders WHERE customer_id = :c ORDER BY event_ts DESC LIMIT 20;\n",
     "accelerated"),
    ("dashboard, accel", "SELECT status, count(*), sum(amount) FROM shop.orders "
     "GROUP BY status ORDER BY status;\n", "accelerated"),
]
ACCELERATION = ('[cache]\nenabled = false\n\n[acceleration]\ntables = ["shop.orders"]\n'
                'index = ["shop.orders.order_id", "shop.orders.customer_id"]\n')


def orders(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "order_id": pa.array(ids, pa.int64()),
        "customer_id": pa.array([i % CUSTOMERS for i in ids], pa.int64()),
        "amount": pa.array([decimal.Decimal(i % 10_000) / 4 for i in ids], pa.decimal128(12, 2)),
        "status": pa.array([("paid", "open", "shipped")[i % 3] for i in ids], pa.string()),
        "event_ts": pa.array([START + STEP * i for i in ids], pa.timestamp("us")),
    })


def load_lake(root: Path) -> list[str]:
    """shop.orders in COMMITS appends; the gateway flags for its catalog."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import (DecimalType, LongType, NestedField, StringType,
                                 TimestampType)
    root.mkdir(parents=True, exist_ok=True)
    cat = SqlCatalog("lake", uri=f"sqlite:///{root}/catalog.db",
                     warehouse=f"file://{root}/warehouse")
    cat.create_namespace("shop")
    schema = Schema(
        NestedField(1, "order_id", LongType(), required=False),
        NestedField(2, "customer_id", LongType(), required=False),
        NestedField(3, "amount", DecimalType(12, 2), required=False),
        NestedField(4, "status", StringType(), required=False),
        NestedField(5, "event_ts", TimestampType(), required=False),
        identifier_field_ids=[],
    )
    spec = PartitionSpec(PartitionField(5, 1000, DayTransform(), "event_day"))
    t = cat.create_table("shop.orders", schema=schema, partition_spec=spec)
    per = ROWS // COMMITS
    for c in range(COMMITS):
        t.append(orders(c * per + 1, per if c < COMMITS - 1 else ROWS - c * per))
    files = len(t.inspect.files())
    manifests = len(t.inspect.manifests())
    print(f"shop.orders: {ROWS} rows in {COMMITS} commits, {files} files, {manifests} manifests",
          flush=True)
    return ["--catalog-uri", f"sqlite://{root}/catalog.db", "--catalog-name", "lake",
            "--warehouse", f"file://{root}/warehouse"]


def load_postgres(port: int) -> None:
    """The same rows in PostgreSQL, with indexes on order_id and customer_id."""
    table = orders(1, ROWS)
    with psycopg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres",
                         autocommit=True) as conn:
        conn.execute("CREATE SCHEMA shop")
        conn.execute("CREATE TABLE shop.orders (order_id bigint PRIMARY KEY, customer_id bigint, "
                     "amount numeric(12,2), status text, event_ts timestamp)")
        with conn.cursor().copy("COPY shop.orders FROM STDIN") as copy:
            for row in zip(*(table.column(c).to_pylist() for c in table.column_names)):
                copy.write_row(row)
        conn.execute("CREATE INDEX ON shop.orders (customer_id)")
        conn.execute("VACUUM ANALYZE shop.orders")


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A /proc status memory field in MB: VmRSS (all resident pages) or RssAnon (the heap and
    stacks, without the file-backed pages of the 250 MB executable)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_text(pid: int) -> str:
    return f"{rss_mb(pid):.0f} MB (anonymous {rss_mb(pid, 'RssAnon'):.0f} MB)"


def pgbench(port: int, user: str, db: str, script: Path, mode: str) -> tuple[float, int]:
    """(tps, transactions) of one pgbench run."""
    done = subprocess.run(
        ["pgbench", "-n", "-M", mode, "-c", str(CLIENTS), "-j", "2", "-T", str(SECONDS),
         "-f", str(script), "-h", "127.0.0.1", "-p", str(port), "-U", user, db],
        capture_output=True, text=True, timeout=SECONDS * 10 + 60)
    tps, count = 0.0, 0
    for line in done.stdout.splitlines():
        if line.startswith("tps = "):
            tps = float(line.split()[2])
        if line.startswith("number of transactions actually processed"):
            count = int(line.split(":")[1].split("/")[0])
    if count == 0:
        print(f"  pgbench failed on port {port}: {done.stderr.strip()[-400:]}", flush=True)
    return tps, count


def p50_ms(port: int, user: str, db: str, script: Path, work: Path) -> float:
    """The median latency of one client running `script` for SECONDS (pgbench's per-statement
    log: the third field is the latency in µs)."""
    logs = work / "latency"
    logs.mkdir(exist_ok=True)
    for old in logs.iterdir():
        old.unlink()
    subprocess.run(
        ["pgbench", "-n", "-M", "extended", "-c", "1", "-T", str(SECONDS), "-f", str(script),
         "-l", "--log-prefix", str(logs / "log"), "-h", "127.0.0.1", "-p", str(port),
         "-U", user, db],
        capture_output=True, text=True, timeout=SECONDS * 10 + 60, cwd=logs)
    us = sorted(int(line.split()[2]) for f in logs.iterdir() for line in f.read_text().splitlines())
    return us[len(us) // 2] / 1000 if us else float("nan")


def dashboard_p50(label: str, pg_port: int, gateways: dict, work: Path) -> None:
    """The dashboard's median latency for one client: cache off from files, and accelerated."""
    script = work / "dashboard.sql"
    script.write_text(next(sql for name, sql, _ in CASES if name == "dashboard, cache off"))
    pg = p50_ms(pg_port, "postgres", "postgres", script, work)
    files = p50_ms(gateways["uncached"].port, "bench", "lakegate", script, work)
    wait_accelerated(gateways["accelerated"])
    accel = p50_ms(gateways["accelerated"].port, "bench", "lakegate", script, work)
    print(f"{label:<9} dashboard p50, 1 client: PostgreSQL {pg:.1f} ms, lakegate cache off "
          f"{files:.1f} ms (files), {accel:.1f} ms (accelerated)", flush=True)


def run_cases(label: str, pg_port: int, gateways: dict, work: Path, out: list) -> None:
    for mode in ("extended", "simple"):
        for name, sql, which in CASES:
            script = work / "case.sql"
            script.write_text(sql)
            gw = gateways[which]
            if which == "accelerated":
                wait_accelerated(gw)
            pg_tps, _ = pgbench(pg_port, "postgres", "postgres", script, mode)
            before = cpu_ticks(gw.proc.pid)
            lg_tps, count = pgbench(gw.port, "bench", "lakegate", script, mode)
            ticks = cpu_ticks(gw.proc.pid) - before
            us = ticks / CLK / count * 1e6 if count else float("nan")
            out.append((label, mode, name, pg_tps, lg_tps, us))
            ratio = lg_tps / pg_tps if pg_tps else float("nan")
            print(f"{label:<9} {mode:<9} {name:<26} {pg_tps:>10.0f} {lg_tps:>10.1f} "
                  f"{ratio:>7.3f} {us:>10.0f}", flush=True)


def answered_from_memory(gw, timeout: float = 60) -> None:
    """Until the accelerated engine answers shop.orders at its current snapshot (after the
    maintenance commit, its copy is stale until the refresher reads the rewritten files)."""
    deadline = time.time() + timeout
    with psycopg.connect(f"postgresql://bench@127.0.0.1:{gw.port}/lakegate", autocommit=True,
                         options="-c lakegate.engine=accelerated") as conn:
        while True:
            try:
                conn.execute("SELECT count(*) FROM shop.orders").fetchone()
                return
            except psycopg.errors.FeatureNotSupported:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)


def flight_point(gw, pg_port: int, label: str, n: int = 2000) -> None:
    """Sequential point lookups: ADBC over Flight SQL (lakegate) vs psycopg (PostgreSQL)."""
    import adbc_driver_flightsql.dbapi as flight
    sql_lg = "SELECT * FROM shop.orders WHERE order_id = ?"
    with flight.connect(f"grpc://127.0.0.1:{gw.flight_port}",
                        db_kwargs={"username": "bench", "password": ""}) as conn:
        cur = conn.cursor()
        cur.execute(sql_lg, parameters=(1,))
        cur.fetchall()
        t = time.perf_counter()
        for i in range(n):
            cur.execute(sql_lg, parameters=((i * 7919) % ROWS + 1,))
            cur.fetchall()
        lg = n / (time.perf_counter() - t)
    def psycopg_rate(url: str) -> float:
        with psycopg.connect(url) as conn:
            t = time.perf_counter()
            for i in range(n):
                conn.execute("SELECT * FROM shop.orders WHERE order_id = %s",
                             ((i * 7919) % ROWS + 1,), prepare=True).fetchall()
            return n / (time.perf_counter() - t)
    pg = psycopg_rate(f"postgresql://postgres@127.0.0.1:{pg_port}/postgres")
    wire = psycopg_rate(f"postgresql://bench@127.0.0.1:{gw.port}/lakegate")
    print(f"point lookup, one client, {label}: ADBC/Flight SQL on lakegate {lg:.0f}/s, psycopg on "
          f"lakegate {wire:.0f}/s, psycopg on PostgreSQL {pg:.0f}/s, ratio {lg / pg:.3f}",
          flush=True)


def idle_connections(gw, n: int = 1000) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, n + 200)), hard))
    idle, idle_anon = rss_mb(gw.proc.pid), rss_mb(gw.proc.pid, "RssAnon")
    conns = [psycopg.connect(f"postgresql://bench@127.0.0.1:{gw.port}/lakegate")
             for _ in range(n)]
    time.sleep(1)
    held, held_anon = rss_mb(gw.proc.pid), rss_mb(gw.proc.pid, "RssAnon")
    for c in conns:
        c.close()
    print(f"gateway RSS: {idle:.0f} MB before, {held:.0f} MB with {n} idle connections "
          f"(+{held - idle:.0f} MB; anonymous {idle_anon:.0f} → {held_anon:.0f} MB)", flush=True)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="lakegate-serving-"))
    work.chmod(0o755)  # PostgreSQL runs as its own user (scripts/pg-server.sh)
    pg_dir, pg_port = work / "pg", free_port()
    subprocess.run([str(ROOT / "scripts" / "pg-server.sh"), "start", str(pg_dir), str(pg_port)],
                   check=True, timeout=120)
    gateways = {}
    try:
        flags = load_lake(work / "lake")
        load_postgres(pg_port)
        (work / "nocache.toml").write_text("[cache]\nenabled = false\n")
        gateways["cached"] = start_gateway(flags)
        gateways["uncached"] = start_gateway([*flags, "--config", str(work / "nocache.toml")])
        (work / "accel.toml").write_text(ACCELERATION)
        gateways["accelerated"] = start_gateway([*flags, "--config", str(work / "accel.toml")])
        wait_accelerated(gateways["accelerated"])
        print(f"accelerated gateway RSS with shop.orders held "
              f"{rss_text(gateways['accelerated'].proc.pid)}", flush=True)
        time.sleep(1)
        print(f"gateway idle RSS {rss_text(gateways['cached'].proc.pid)}; "
              f"{CLIENTS} clients, {SECONDS} s per run, {os.cpu_count()} cores", flush=True)
        print(f"{'table':<9} {'mode':<9} {'case':<26} {'pg tps':>10} {'lg tps':>10} "
              f"{'lg/pg':>7} {'lg µs CPU':>10}", flush=True)
        out: list = []
        run_cases("streamed", pg_port, gateways, work, out)
        dashboard_p50("streamed", pg_port, gateways, work)
        maint = work / "maint.toml"
        maint.write_text('[maintenance]\nmin_input_files = 2\nsettle_after = "1s"\n'
                         f'log_path = "{work}/ops.jsonl"\n')
        done = subprocess.run([os.environ["LAKEGATE_BIN"], "maintenance", "run", "--once",
                               "--config", str(maint), *flags, "--table", "shop.orders"],
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            raise SystemExit(f"maintenance failed:\n{done.stderr[-3000:]}")
        answered_from_memory(gateways["accelerated"])
        run_cases("maintained", pg_port, gateways, work, out)
        dashboard_p50("maintained", pg_port, gateways, work)
        print(f"gateway RSS after the runs {rss_text(gateways['cached'].proc.pid)}",
              flush=True)
        flight_point(gateways["uncached"], pg_port, "files")
        flight_point(gateways["accelerated"], pg_port, "accelerated")
        idle_connections(gateways["cached"])
    finally:
        for gw in gateways.values():
            gw.proc.terminate()
            gw.proc.wait(timeout=30)
        subprocess.run([str(ROOT / "scripts" / "pg-server.sh"), "stop", str(pg_dir)],
                       timeout=120)


if __name__ == "__main__":
    main()

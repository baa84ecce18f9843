"""A lake on local disk vs the same lake on S3 vs S3 behind 10 ms of latency per request, on
DataFusion and DuckDB through lakegate's pgwire endpoint (see run.sh).

The S3 server is moto (scripts/s3-server.sh); the latency is added by tests/fixtures/s3_proxy.py,
which also counts every request the gateway's engines make (DataFusion's FileIO and DuckDB's
httpfs alike). The result cache is off: every statement is executed. Printed: cold (first
statement after start) and warm (median) milliseconds (the four gateways run at once and take
turns), object-store requests per warm statement,
what the first statement after a commit fetches, and compaction on S3 vs local.
"""
from __future__ import annotations

import decimal
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psycopg
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import start_gateway  # noqa: E402
from engine_estate import free_port  # noqa: E402

import tpch  # noqa: E402

ENGINES = ["datafusion", "duckdb"]
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench-secret",
        "AWS_REGION": "us-east-1"}
WARM_RUNS = int(os.environ.get("BENCH_WARM_RUNS", "5"))
COMMITS = int(os.environ.get("BENCH_ORDER_COMMITS", "150"))
ROWS = 50_000
SHAPES = {
    "dashboard": lambda i: "SELECT status, count(*), sum(amount) FROM shop.orders "
                           "GROUP BY status ORDER BY status",
    "point lookup": lambda i: f"SELECT * FROM shop.orders WHERE order_id = {(i * 7919) % ROWS + 1}",
}


def orders(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "order_id": pa.array(ids, pa.int64()),
        "customer_id": pa.array([i % 2000 for i in ids], pa.int64()),
        "amount": pa.array([decimal.Decimal(i % 10_000) / 4 for i in ids], pa.decimal128(12, 2)),
        "status": pa.array([("paid", "open", "shipped")[i % 3] for i in ids], pa.string()),
    })


def catalog(root: Path, name: str, warehouse: str, endpoint: str | None):
    from pyiceberg.catalog.sql import SqlCatalog
    props = {"uri": f"sqlite:///{root}/{name}.db", "warehouse": warehouse}
    if endpoint:
        props |= {"s3.endpoint": endpoint, "s3.access-key-id": KEYS["AWS_ACCESS_KEY_ID"],
                  "s3.secret-access-key": KEYS["AWS_SECRET_ACCESS_KEY"],
                  "s3.region": "us-east-1", "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"}
    return SqlCatalog("lake", **props)


def load(cat, tpch_data: Path) -> None:
    """shop.orders as a streaming writer leaves it (COMMITS small appends), and TPC-H."""
    cat.create_namespace("shop")
    per = ROWS // COMMITS
    t = cat.create_table("shop.orders", schema=orders(1, 1).schema)
    for c in range(COMMITS):
        t.append(orders(c * per + 1, per if c < COMMITS - 1 else ROWS - c * per))
    tpch.load_lake(cat, tpch_data)


def proxy(endpoint: str, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(f"{endpoint}/__proxy/{path}", method=method)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def requests_of(stats: dict) -> int:
    return sum(stats["requests"].values())


class Setup:
    """One gateway over one copy of the lake."""

    def __init__(self, name, flags, env, proxy_endpoint=None, cache=True):
        self.name, self.proxy = name, proxy_endpoint
        cfg = Path(tempfile.mkdtemp(prefix="lakegate-s3bench-")) / "gw.toml"
        cfg.write_text("[cache]\nenabled = false\n"
                       f"[storage.cache]\nenabled = {'true' if cache else 'false'}\n")
        self.gw = start_gateway([*flags, "--config", str(cfg)], env=env)

    def stop(self):
        self.gw.proc.terminate()
        self.gw.proc.wait(timeout=30)

    def dsn(self, engine):
        return f"postgresql://bench@127.0.0.1:{self.gw.port}/lakegate", engine

    def count(self):
        return requests_of(proxy(self.proxy, "stats")) if self.proxy else None

    def bytes(self):
        return proxy(self.proxy, "stats")["bytes_out"] if self.proxy else None


def timed(conn, sql: str) -> float:
    t = time.perf_counter()
    conn.execute(sql).fetchall()
    return (time.perf_counter() - t) * 1000


def shapes(setup: Setup, engine: str, out: dict) -> None:
    dsn, _ = setup.dsn(engine)
    with psycopg.connect(dsn, autocommit=True, options=f"-c lakegate.engine={engine}") as conn:
        for shape, sql in SHAPES.items():
            cold = timed(conn, sql(0))
            before = setup.count()
            warm = [timed(conn, sql(i)) for i in range(1, WARM_RUNS + 1)]
            after = setup.count()
            per = None if before is None else (after - before) / WARM_RUNS
            out[setup.name, engine, shape] = (cold, statistics.median(warm), per)


def tpch_run(setup: Setup, engine: str, run: str, suite: Path, out: dict, work: Path) -> None:
    """One pass of the 22 queries; appends (ms of answered, matched, wrong, requests)."""
    tool = Path(os.environ["LAKEGATE_BIN"]).with_name("lakegate-slt")
    url = f"postgresql://bench@127.0.0.1:{setup.gw.port}/lakegate"
    slug = "".join(ch if ch.isalnum() else "_" for ch in setup.name)
    report = work / f"{slug}-{engine}-{run}.jsonl"
    before = setup.count()
    subprocess.run([str(tool), "--url", url, "--engine", engine, "--report", str(report),
                    str(suite)], capture_output=True, text=True, timeout=7200)
    after = setup.count()
    summary = json.loads(report.read_text().splitlines()[-1])
    refused = {m["loc"] for m in summary["misses"]}
    wrong = [m for m in summary["misses"] if m["outcome"] in ("wrong", "failed")]
    ms = sum(t["ms"] for t in summary["times"] if t["loc"] not in refused)
    out.setdefault((setup.name, engine, "tpch"), []).append(
        (ms, summary["matched"], len(wrong), None if before is None else after - before))


def compaction(name: str, cat, flags: list[str], env: dict, proxy_endpoint, work: Path) -> dict:
    """`lakegate maintenance run --once` on shop.orders: seconds, input MB, requests."""
    table = cat.load_table("shop.orders")
    files = table.inspect.files()
    mb = sum(files.column("file_size_in_bytes").to_pylist()) / 1e6
    slug = "".join(ch if ch.isalnum() else "_" for ch in name)
    cfg = work / f"maint-{slug}.toml"
    cfg.write_text(f'[maintenance]\nmin_input_files = 2\nsettle_after = "1s"\n'
                   f'log_path = "{work}/ops-{slug}.jsonl"\n')
    before = requests_of(proxy(proxy_endpoint, "stats")) if proxy_endpoint else None
    t = time.perf_counter()
    done = subprocess.run([os.environ["LAKEGATE_BIN"], "maintenance", "run", "--once", "--config",
                           str(cfg), *flags, "--table", "shop.orders"], capture_output=True,
                          text=True, timeout=3600, env=dict(os.environ, **env))
    secs = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(f"maintenance on {name} failed:\n{done.stderr[-3000:]}")
    after = requests_of(proxy(proxy_endpoint, "stats")) if proxy_endpoint else None
    left = len(cat.load_table("shop.orders").inspect.files())
    return {"secs": secs, "mb": mb, "files": (len(files), left),
            "requests": None if before is None else after - before}


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="lakegate-s3bench-"))
    s3_dir = root / "s3"
    port, proxy_port = free_port(), free_port()
    script = str(ROOT / "scripts" / "s3-server.sh")
    subprocess.run([script, "start", str(s3_dir), str(port)], check=True, timeout=60)
    s3 = f"http://127.0.0.1:{port}"
    slow = f"http://127.0.0.1:{proxy_port}"
    proxy_proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fixtures" / "s3_proxy.py"),
                                   "--upstream", s3, "--port", str(proxy_port), "--delay-ms", "10"],
                                  stdout=subprocess.DEVNULL)
    setups: list[Setup] = []
    try:
        urllib.request.urlopen(urllib.request.Request(f"{s3}/lake", method="PUT"),
                               timeout=10).close()
        t0 = time.perf_counter()
        data = tpch.generate(root / "tpch")
        local = catalog(root, "local", f"file://{root}/warehouse", None)
        remote = catalog(root, "s3", "s3://lake/warehouse", s3)
        load(local, data)
        load(remote, data)
        print(f"loaded shop.orders ({ROWS} rows in {COMMITS} commits) and TPC-H SF {tpch.SCALE} "
              f"to local disk and S3 in {time.perf_counter() - t0:.0f} s", flush=True)
        suite = root / "tpch.slt"
        shutil.copy(ROOT / "tests" / "conformance" / "tpch.slt", suite)
        local_flags = ["--catalog-uri", f"sqlite://{root}/local.db", "--catalog-name", "lake",
                       "--warehouse", f"file://{root}/warehouse"]
        s3_flags = ["--catalog-uri", f"sqlite://{root}/s3.db", "--catalog-name", "lake",
                    "--warehouse", "s3://lake/warehouse"]
        s3_env = dict(KEYS, AWS_ENDPOINT_URL=s3)
        slow_env = dict(KEYS, AWS_ENDPOINT_URL=slow)
        # Answers at this scale come from the local lake on DataFusion (at SF 0.01 the suite's
        # own PostgreSQL answers stand); every other run must match them.
        first = Setup("local", local_flags, {})
        setups.append(first)
        if tpch.SCALE != "0.01":
            tool = Path(os.environ["LAKEGATE_BIN"]).with_name("lakegate-slt")
            subprocess.run([str(tool), "--url",
                            f"postgresql://bench@127.0.0.1:{first.gw.port}/lakegate",
                            "--engine", "datafusion", "--complete", str(suite)],
                           check=True, capture_output=True, timeout=7200)
        out: dict = {}
        # All four gateways run at once and take turns, so drift on the machine (moto's memory,
        # the page cache) falls on every column alike.
        for setup in [lambda: Setup("s3", s3_flags, s3_env),
                      lambda: Setup("s3 +10ms", s3_flags, slow_env, slow),
                      lambda: Setup("s3 +10ms, no cache", s3_flags, slow_env, slow, cache=False)]:
            setups.append(setup())
        for engine in ENGINES:
            for setup in setups:
                shapes(setup, engine, out)
            for run in ("cold", "warm"):
                for setup in setups:
                    tpch_run(setup, engine, run, suite, out, root)
            print(f"{engine}: done", flush=True)
        commit = after_commit(remote, setups[2])
        for setup in list(setups):
            setup.stop()
            setups.remove(setup)
        comp = {"local": compaction("local", local, local_flags, {}, None, root),
                "s3 +10ms": compaction("s3 +10ms", remote, s3_flags, slow_env, slow, root)}
        report(out, commit, comp)
    finally:
        for s in setups:
            s.stop()
        proxy_proc.terminate()
        subprocess.run([script, "stop", str(s3_dir)], check=False, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def after_commit(cat, setup: Setup) -> dict:
    """One append, then the dashboard once per engine: what each fetches."""
    cat.load_table("shop.orders").append(orders(ROWS + 1, 300))
    got = {}
    for engine in ENGINES:
        dsn, _ = setup.dsn(engine)
        with psycopg.connect(dsn, autocommit=True, options=f"-c lakegate.engine={engine}") as c:
            r0, b0 = setup.count(), setup.bytes()
            ms = timed(c, SHAPES["dashboard"](0))
            got[engine] = (ms, setup.count() - r0, setup.bytes() - b0)
    return got


def report(out: dict, commit: dict, comp: dict) -> None:
    names = ["local", "s3", "s3 +10ms", "s3 +10ms, no cache"]
    binary = os.environ.get("LAKEGATE_BIN", "")
    print(f"\nlakegate {binary}; result cache off; warm = median of {WARM_RUNS}")
    print("ms warm (cold) [object-store requests per warm statement, S3 +10ms runs]")
    print("| query | engine | " + " | ".join(names) + " | S3+10ms / local |")
    print("|---|---|" + "---:|" * (len(names) + 1))
    for shape in SHAPES:
        for engine in ENGINES:
            cells = []
            for n in names:
                cold, warm, per = out[n, engine, shape]
                req = "" if per is None else f" [{per:.1f}]"
                cells.append(f"{warm:.1f} ({cold:.0f}){req}")
            ratio = out["s3 +10ms", engine, shape][1] / max(out["local", engine, shape][1], 1e-9)
            print(f"| {shape} | {engine} | " + " | ".join(cells) + f" | {ratio:.2f}x |")
    for engine in ENGINES:
        cells = []
        for n in names:
            (cold, m, wrong, rc), (warm, _, wrong2, rw) = out[n, engine, "tpch"]
            req = "" if rw is None else f" [{rw}]"
            bad = f" {wrong + wrong2} WRONG/FAILED" if wrong + wrong2 else ""
            cells.append(f"{warm:.0f} ({cold:.0f}){req} {m}/22{bad}")
        ratio = out["s3 +10ms", engine, "tpch"][1][0] / max(out["local", engine, "tpch"][1][0], 1)
        print(f"| TPC-H SF {tpch.SCALE} (sum) | {engine} | " + " | ".join(cells)
              + f" | {ratio:.2f}x |")
    print("\nfirst dashboard after one commit (S3 +10ms): ms, requests, bytes fetched")
    for engine, (ms, reqs, nbytes) in commit.items():
        print(f"  {engine}: {ms:.0f} ms, {reqs} requests, {nbytes / 1e3:.0f} kB")
    print("\ncompaction of shop.orders (maintenance run --once):")
    for name, c in comp.items():
        req = "" if c["requests"] is None else f", {c['requests']} requests"
        print(f"  {name}: {c['files'][0]} -> {c['files'][1]} files, {c['mb']:.1f} MB in "
              f"{c['secs']:.1f} s ({c['mb'] / c['secs']:.1f} MB/s){req}")


if __name__ == "__main__":
    main()

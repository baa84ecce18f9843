"""Mixed-workload routing benchmark (see run.sh)."""
from __future__ import annotations

import random
import statistics
import sys
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import start_gateway  # noqa: E402
from engine_estate import CONFORMANCE, ENGINES, running_estate  # noqa: E402

RULES = """
[[group]]
name = "all"
engines = ["datafusion", "duckdb", "trino", "spark"]
explore = 0.05
cache = false
max_concurrent = 4
"""


def timed(conn, sql, params) -> float:
    t = time.perf_counter()
    conn.execute(sql, params).fetchall()
    return (time.perf_counter() - t) * 1000


def summary(name: str, ms: list[float], oracle_total: float) -> str:
    total = sum(ms)
    p95 = statistics.quantiles(ms, n=20)[18]
    return (f"| {name:<22} | {total:10.0f} | {statistics.mean(ms):8.1f} | {p95:8.1f} | "
            f"{total / oracle_total:6.2f} |")


def main(n: int) -> None:
    rng = random.Random(7)
    workload = [rng.choice(CONFORMANCE) for _ in range(n)]
    with running_estate(start_gateway, "[cache]\nenabled = false\n") as estate:
        rules = estate.root / "rules"
        rules.mkdir()
        (rules / "all.toml").write_text(RULES)
        gw = estate.lakegate("[cache]\nenabled = false\n", ["--rules-dir", str(rules)])
        alone: dict[str, list[float]] = {}
        for engine in ENGINES:
            with psycopg.connect(gw.dsn, autocommit=True,
                                 options=f"-c lakegate.engine={engine}") as conn:
                for _, sql, params in CONFORMANCE:  # warm each query once
                    conn.execute(sql, params).fetchall()
                alone[engine] = [timed(conn, sql, params) for _, sql, params in workload]
        oracle = [min(alone[e][i] for e in ENGINES) for i in range(n)]
        best_engine = [min(ENGINES, key=lambda e: alone[e][i]) for i in range(n)]
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            rr = []
            for i, (_, sql, params) in enumerate(workload):
                conn.execute(f"SET lakegate.engine = '{ENGINES[i % len(ENGINES)]}'")
                rr.append(timed(conn, sql, params))
            conn.execute("RESET lakegate.engine")
            conn.execute("SET lakegate.group = 'all'")
            for _, sql, params in workload[: n // 4]:  # warm-up: the router learns
                conn.execute(sql, params).fetchall()
            first_id = conn.execute("SELECT coalesce(max(query_id), 0) FROM lakegate.queries"
                                    ).fetchone()[0]
            routed = [timed(conn, sql, params) for _, sql, params in workload]
            chosen = [r[0] for r in conn.execute(
                "SELECT engine FROM lakegate.queries WHERE query_id > %s AND shape <> 'metadata' "
                "ORDER BY query_id", (first_id,)).fetchall()]
        agree = sum(1 for c, b in zip(chosen, best_engine) if c == b)
        total_oracle = sum(oracle)
        print(f"{n} queries drawn from {len(CONFORMANCE)} conformance queries "
              f"(all shapes), cache off, ms")
        print("| strategy               |   total ms |  mean ms |   p95 ms | /oracle |")
        print("|------------------------|------------|----------|----------|---------|")
        for e in ENGINES:
            print(summary(f"{e} alone", alone[e], total_oracle))
        print(summary("round-robin", rr, total_oracle))
        print(summary("latency-aware router", routed, total_oracle))
        print(summary("oracle (hindsight)", oracle, total_oracle))
        print(f"router picked the oracle's engine for {agree}/{len(chosen)} queries; "
              f"engines used: " + ", ".join(f"{e}={chosen.count(e)}" for e in ENGINES))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)

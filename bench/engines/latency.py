"""Prints a latency table of the conformance queries on each engine (see run.sh)."""
from __future__ import annotations

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


def main(runs: int) -> None:
    with running_estate(start_gateway, "[cache]\nenabled = false\n") as estate:
        cold: dict[tuple[str, str], float] = {}
        warm: dict[tuple[str, str], float] = {}
        for engine in ENGINES:
            with psycopg.connect(estate.gateway.dsn, autocommit=True,
                                 options=f"-c lakegate.engine={engine}") as conn:
                for name, sql, params in CONFORMANCE:
                    times = []
                    for _ in range(runs + 1):
                        t = time.perf_counter()
                        conn.execute(sql, params).fetchall()
                        times.append((time.perf_counter() - t) * 1000)
                    cold[name, engine] = times[0]
                    warm[name, engine] = statistics.median(times[1:])
        print(f"median of {runs} warm runs, ms (first run in brackets); cache off")
        print(f"| {'query':<18} | " + " | ".join(f"{e:>17}" for e in ENGINES) + " | fastest |")
        print(f"|{'-' * 20}|" + "|".join("-" * 19 for _ in ENGINES) + "|---------|")
        for name, _, _ in CONFORMANCE:
            cells = [f"{warm[name, e]:8.1f} ({cold[name, e]:6.0f})" for e in ENGINES]
            best = min(ENGINES, key=lambda e: warm[name, e])
            print(f"| {name:<18} | " + " | ".join(f"{c:>17}" for c in cells) + f" | {best:<7} |")
        totals = {e: sum(warm[n, e] for n, _, _ in CONFORMANCE) for e in ENGINES}
        print(f"| {'total':<18} | " + " | ".join(f"{totals[e]:17.1f}" for e in ENGINES) + " |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 7)

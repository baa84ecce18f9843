"""TPC-H at a scale factor on every engine, against PostgreSQL's answers (see run.sh)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))

from conftest import start_gateway  # noqa: E402
from engine_estate import ENGINES, running_estate  # noqa: E402

SUITE = ROOT / "tests" / "conformance" / "tpch.slt"
RUNS = [*ENGINES, "auto"]


def slt(*args: str) -> subprocess.CompletedProcess:
    tool = Path(os.environ["LAKEGATE_BIN"]).with_name("lakegate-slt")
    return subprocess.run([str(tool), *args], capture_output=True, text=True, timeout=7200)


def run(url: str, engine: str | None, suite: Path, out: Path) -> dict:
    report = out / f"{engine or 'postgresql'}.jsonl"
    args = ["--url", url, "--report", str(report)]
    if engine:
        args += ["--engine", engine]
    done = slt(*args, str(suite))
    if not report.exists():
        raise SystemExit(f"lakegate-slt did not report:\n{done.stderr[-3000:]}")
    return json.loads(report.read_text().splitlines()[-1])


def main() -> None:
    scale = os.environ.get("LAKEGATE_TPCH_SCALE", "1")
    t0 = time.perf_counter()
    with running_estate(start_gateway, "[cache]\nenabled = false\n") as estate:
        print(f"estate with TPC-H SF {scale} loaded in {time.perf_counter() - t0:.0f} s",
              flush=True)
        out = Path(tempfile.mkdtemp(prefix="lakegate-tpch-"))
        suite = out / "tpch.slt"
        shutil.copy(SUITE, suite)
        done = slt("--url", estate.oracle, "--complete", str(suite))
        if done.returncode != 0:
            raise SystemExit(f"PostgreSQL could not answer:\n{done.stderr[-3000:]}")
        reports = {"postgresql": run(estate.oracle, None, suite, out)}
        lakegate = f"postgresql://tester@127.0.0.1:{estate.gateway.port}/lakegate"
        for engine in RUNS:
            reports[engine] = run(lakegate, engine, suite, out)
            print(f"{engine}: done", flush=True)
        print_table(scale, reports)
        bad = [(e, m) for e, r in reports.items() for m in r["misses"]
               if m["outcome"] in ("wrong", "failed")]
        for engine, m in bad:
            print(f"[{engine}] {m['outcome']} {m['loc']}: {m['detail'][:300]}")
        shutil.rmtree(out, ignore_errors=True)
        sys.exit(1 if bad else 0)


def print_table(scale: str, reports: dict) -> None:
    names = list(reports)
    marks = {e: {m["loc"]: m["outcome"][0].upper() for m in r["misses"]}
             for e, r in reports.items()}
    locs = [t["loc"] for t in reports["postgresql"]["times"]]
    ms = {e: {t["loc"]: t["ms"] for t in r["times"]} for e, r in reports.items()}
    binary = os.environ.get("LAKEGATE_BIN", "")
    print(f"\nTPC-H SF {scale}: ms per query (R refused, W wrong, F failed); lakegate {binary}")
    print("| query | " + " | ".join(f"{n:>10}" for n in names) + " |")
    print("|---|" + "|".join("---:" for _ in names) + "|")
    for i, loc in enumerate(locs, 1):
        cells = []
        for n in names:
            mark = marks[n].get(loc, "")
            cells.append(f"{ms[n].get(loc, 0):>9.0f}{mark or ' '}")
        print(f"| Q{i} | " + " | ".join(cells) + " |")
    print("| matched | " + " | ".join(f"{reports[n]['matched']:>10}" for n in names) + " |")
    answered = {n: sum(ms[n][loc] for loc in locs if loc not in marks[n]) for n in names}
    print("| total ms (answered) | " + " | ".join(f"{answered[n]:>10.0f}" for n in names) + " |")


if __name__ == "__main__":
    main()

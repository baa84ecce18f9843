"""One gateway alone under pgbench, optionally under perf: the A/B and profiling companion of
serving.py (which runs three gateways beside PostgreSQL, where rows move by about ±25%).

    .cache/venv/bin/python bench/serving/alone.py CASE [extended|simple] [SECONDS] [--perf]

CASE is a serving.py case name, or a substring of some ("SELECT 1", "100 hot", "accel"), or
`idle`: the gateway's RSS idle and with 1,000 idle connections (as serving.py prints it);
an accelerated case runs on a gateway with serving.py's [acceleration] config (cache off), once
its copy answers; a "cache off" case on a gateway with the result cache off. BENCH_CONFIG adds
TOML to the gateway's config (`BENCH_CONFIG=$'[storage.cache]\ndecoded_bytes = 0\n'`: an A/B). The lake (serving.py's shop.orders) is built once in
BENCH_LAKE (default /tmp/lakegate-serving-alone); LAKEGATE_BIN names the binary (say which build
when quoting). Each case gets a warm-up (BENCH_WARMUP seconds, default 5: the file-reading cases decode
every small file once in it), then prints tps and the gateway's CPU per
statement; with --perf, `perf record --call-graph dwarf` of the measured run goes to
BENCH_LAKE/perf.data.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import serving as s  # noqa: E402


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--perf"]
    perf = "--perf" in sys.argv
    if not args:
        raise SystemExit(__doc__)
    want, mode = args[0], args[1] if len(args) > 1 else "extended"
    seconds = int(args[2]) if len(args) > 2 else 5
    root = Path(os.environ.get("BENCH_LAKE", "/tmp/lakegate-serving-alone"))
    if (root / "lake" / "catalog.db").exists():
        flags = ["--catalog-uri", f"sqlite://{root}/lake/catalog.db", "--catalog-name", "lake",
                 "--warehouse", f"file://{root}/lake/warehouse"]
    else:
        flags = s.load_lake(root / "lake")
    cases = [c for c in s.CASES if c[0] == want] or [c for c in s.CASES if want in c[0]]
    accelerated = any(which == "accelerated" for _, _, which in cases)
    # BENCH_CONFIG: TOML added to the gateway's config (an A/B of one setting).
    config = os.environ.get("BENCH_CONFIG", "")
    if accelerated:
        config += s.ACCELERATION
        cases = [c for c in cases if c[2] == "accelerated"]
    elif any(which == "uncached" for _, _, which in cases):
        config += "[cache]\nenabled = false\n"
        cases = [c for c in cases if c[2] == "uncached"]
    if config:
        (root / "gateway.toml").write_text(config)
        flags = [*flags, "--config", str(root / "gateway.toml")]
    gw = s.start_gateway(flags)
    try:
        if accelerated:
            s.wait_accelerated(gw)
        for name, sql, _ in cases:
            script = root / "case.sql"
            script.write_text(sql)
            # Long enough for every small file to be decoded once (all 50k ids: ~7,000 lookups).
            s.SECONDS = int(os.environ.get("BENCH_WARMUP", "5"))
            s.pgbench(gw.port, "bench", "lakegate", script, mode)
            s.SECONDS = seconds
            recorder = None
            if perf:
                recorder = subprocess.Popen(
                    ["perf", "record", "-F", "499", "--call-graph", "dwarf,65528", "-o",
                     str(root / "perf.data"), "-p", str(gw.proc.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            before = s.cpu_ticks(gw.proc.pid)
            tps, count = s.pgbench(gw.port, "bench", "lakegate", script, mode)
            ticks = s.cpu_ticks(gw.proc.pid) - before
            if recorder:
                recorder.send_signal(2)
                recorder.wait()
            us = ticks / s.CLK / max(count, 1) * 1e6
            print(f"{name:<26} {mode:<9} {tps:>9.0f} tps {us:>7.0f} µs CPU/statement, "
                  f"RSS {s.rss_mb(gw.proc.pid):.0f} MB", flush=True)
        if want == "idle":
            s.idle_connections(gw)
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=30)


if __name__ == "__main__":
    main()

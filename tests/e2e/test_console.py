"""The web console in a real headless browser (Debian's Chromium driven by playwright-core):
every page loads with no console errors, a table's page shows its partitions and the
maintenance operations on it, screenshots are saved under tests/artifacts/, and the snapshot
lag on the page resets within one refresh after a writer commits."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest

import warehouse as wh
from conftest import ROOT, lakegate_bin, start_gateway

NODE_MODULES = Path(os.environ.get("LAKEGATE_NODE_MODULES", ROOT / ".cache" / "node" / "node_modules"))
ARTIFACTS = ROOT / "tests" / "artifacts"


def test_console_pages_partitions_operations_and_freshness(tmp_path):
    core = NODE_MODULES / "playwright-core" / "index.mjs"
    if not core.exists() or not shutil.which("chromium"):
        pytest.fail("playwright-core or chromium missing: run scripts/setup.sh")
    wh.build(str(tmp_path))
    cfg = tmp_path / "console.toml"
    cfg.write_text(f"""
[maintenance]
min_input_files = 2
settle_after = "1s"
snapshot_min_age = "1s"
orphan_min_age = "1h"
log_path = "{tmp_path / 'ops.jsonl'}"
[history]
path = "{tmp_path / 'history.jsonl'}"
""")
    flags = [*wh.flags(str(tmp_path)), "--config", str(cfg)]
    subprocess.run([lakegate_bin(), "maintenance", "run", "--once", *flags, "--table",
                    "public.orders"], check=True, capture_output=True, timeout=300)
    gw = start_gateway(flags)
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            for day in range(1, 6):
                conn.execute("SELECT count(*) FROM orders WHERE order_ts >= %s::timestamptz",
                             (f"2026-11-{day:02d}T00:00:00Z",)).fetchall()
        node = subprocess.Popen(
            ["node", str(ROOT / "tests" / "console" / "console.mjs"), gw.http, "public.orders",
             str(ARTIFACTS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PLAYWRIGHT_CORE": str(core)})
        try:
            pages = json.loads(node.stdout.readline() or "{}")
            assert pages.get("phase") == "pages", node.stderr.read()[-3000:]
            assert pages["errors"] == [], pages["errors"]
            assert "public.orders" in pages["tables"] and "public.customers" in pages["tables"]
            truth = {p["partition"] for p in json.loads(subprocess.run(
                ["curl", "-s", f"{gw.http}/api/table/public.orders"], capture_output=True,
                text=True, check=True).stdout)["health"]["partitions"]}
            shown = {p.removesuffix("hot").strip() for p in pages["partitions"]}
            assert shown == truth and len(truth) >= 2, (shown, truth)
            # The queries filtered on recent days: those partitions are marked hot, old ones not.
            hot = {p.removesuffix("hot").strip() for p in pages["partitions"] if p.endswith("hot")}
            assert hot and hot != truth, pages["partitions"]
            compactions = [o for o in pages["operations"] if "compact" in o]
            assert compactions and "ok" in compactions[0], pages["operations"]
            assert all(pages["others"][p] > 20 for p in ["routing", "cache", "queries"])
            for name in ["estate", "table", "routing", "cache", "queries"]:
                assert (ARTIFACTS / f"console-{name}.png").stat().st_size > 10_000

            before = json.loads(node.stdout.readline())
            assert before["phase"] == "before" and before["lag"] >= 2.0, before
            wh.append_orders(wh.catalog(str(tmp_path)), 100_000, 5)
            node.stdin.write("committed\n")
            node.stdin.flush()
            after = json.loads(node.stdout.readline() or "{}")
            assert after.get("phase") == "after", node.stderr.read()[-3000:]
            assert after["lag"] < 2.0, (before, after)
            assert after["errors"] == []
        finally:
            node.kill()
            node.wait(timeout=10)
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=10)

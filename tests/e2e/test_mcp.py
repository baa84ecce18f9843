"""Agents over the Model Context Protocol, driven by the official Python SDK (`mcp` on PyPI, the
newest release; scripts/test.sh runs this file again with the 1.x line) against the real binary:
over streamable HTTP (`/mcp`, basic auth) and over stdio (`lakegate mcp`). The agent lists and
calls every tool, reads a table's schema resource, gets masked values hashed, is refused above
its scan cap with the estimate and a fix, waits on an admin's approval (and is refused after a
rejection), and is cut off by its budget (53400). Answers are compared with PyIceberg's."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import warehouse as wh
from conftest import lakegate_bin, start_gateway

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from importlib.metadata import version as _version  # noqa: E402

MODERN_SDK = int(_version("mcp").split(".")[0]) >= 2

PASSWORDS = {"agent": "agent-pass", "capped": "capped-pass", "bot": "bot-pass", "admin": "admin-pass"}
TOOLS = {"list_tables", "describe_table", "query", "explain_query", "table_health"}


def hashed(password: str) -> str:
    import subprocess
    out = subprocess.run([lakegate_bin(), "hash-password"], input=password + "\n",
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip()


def config_text() -> str:
    users = "".join(
        f'[[auth.users]]\nname = "{u}"\npassword = "{hashed(p)}"\n'
        f'roles = ["{"admin" if u == "admin" else "agent"}"]\n'
        for u, p in PASSWORDS.items())
    return users + """
[[access]]
roles = ["agent"]
tables = ["public.*"]
groups = ["*"]
[[access]]
roles = ["admin"]
tables = ["*"]
groups = ["*"]

[[mask]]
roles = ["agent"]
columns = ["public.customers.name"]

[mcp]
approval_timeout = "60s"

[[mcp.agent]]
users = ["agent"]
expensive = "approve"
unfiltered_scan_bytes = 1

[[mcp.agent]]
users = ["capped"]
max_scan_bytes = 16384

[[mcp.agent]]
users = ["bot"]
queries_per_minute = 3
"""


@pytest.fixture(scope="module")
def cfg(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "mcp.toml"
    path.write_text(config_text())
    return path


@pytest.fixture(scope="module")
def agents_gw(lake_dir, cfg):
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    yield gw
    gw.proc.terminate()
    gw.proc.wait(timeout=15)


def basic(user: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()


@contextlib.asynccontextmanager
async def http_session(gw, user: str):
    """An initialized ClientSession over streamable HTTP as `user` (either SDK line)."""
    headers = {"Authorization": basic(user)}
    if MODERN_SDK:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as client:
            async with streamable_http_client(f"{gw.http}/mcp", http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session
    else:
        from mcp.client.streamable_http import streamablehttp_client
        async with streamablehttp_client(f"{gw.http}/mcp", headers=headers) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def field(obj, snake: str, camel: str):
    """An attribute of an SDK model: snake_case in the 2.x SDK, camelCase in 1.x."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def is_error(result) -> bool:
    return bool(field(result, "is_error", "isError"))


def answer(result) -> dict:
    """A tool result's JSON (structured content, else the text)."""
    structured = field(result, "structured_content", "structuredContent")
    if structured is not None:
        return structured
    return json.loads(result.content[0].text)


async def call(session, tool: str, **arguments) -> dict:
    result = await session.call_tool(tool, arguments)
    out = answer(result)
    assert not is_error(result), out
    return out


async def refused(session, tool: str, **arguments) -> dict:
    result = await session.call_tool(tool, arguments)
    assert is_error(result), answer(result)
    return answer(result)["error"]


def http_text(gw, path: str) -> tuple[int, dict, str]:
    request = urllib.request.Request(f"{gw.http}{path}")
    request.add_header("Authorization", basic("admin"))
    with urllib.request.urlopen(request, timeout=10) as r:
        return r.status, dict(r.headers), r.read().decode()


def admin_request(gw, method: str, path: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{gw.http}{path}", method=method)
    request.add_header("Authorization", basic("admin"))
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def cli(*args: str, check: bool = True) -> str:
    import subprocess
    out = subprocess.run([lakegate_bin(), *args], capture_output=True, text=True, timeout=60)
    if check:
        assert out.returncode == 0, out.stderr
    return out.stdout + out.stderr


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 120))


def test_tools_answer_exactly_with_masks_and_access(agents_gw, expected):
    async def go():
        async with http_session(agents_gw, "agent") as s:
            tools = {t.name for t in (await s.list_tools()).tools}
            assert tools == TOOLS
            listed = await call(s, "list_tables")
            names = {t["table"] for t in listed["tables"]}
            assert "public.orders" in names and "sales.regions" not in names, "access rules"
            orders = next(t for t in listed["tables"] if t["table"] == "public.orders")
            assert orders["rows"] == expected["orders_count"]
            assert orders["snapshot_lag_s"] >= 0

            described = await call(s, "describe_table", table="public.orders")
            columns = {c["name"]: c["type"] for c in described["columns"]}
            assert columns["amount"] == "numeric(12,2)" and columns["order_id"] == "bigint"
            assert described["partitioning"] == [{"column": "order_ts", "transform": "day"}]
            assert len(described["sample_rows"]) == 5

            got = await call(s, "query", sql="SELECT count(*) AS n, sum(amount) AS total "
                                             "FROM public.orders WHERE order_id > 0")
            assert got["rows"] == [[expected["orders_count"], expected["orders_amount_sum"]]]
            assert [c["name"] for c in got["columns"]] == ["n", "total"]
            assert got["snapshots"][0].startswith("public.orders@")
            assert got["engine"] and got["scan_bytes"] > 0 and got["truncated"] is False

            one = await call(s, "query", sql="SELECT * FROM public.orders WHERE order_id = 42")
            row = dict(zip([c["name"] for c in one["columns"]], one["rows"][0]))
            assert str(row["amount"]) == expected["order_42"]["amount"]

            masked = await call(s, "query", sql="SELECT customer_id, name FROM public.customers "
                                                "WHERE customer_id = 3")
            assert masked["rows"][0][0] == 3
            assert masked["rows"][0][1] != "customer 3", "masked for role agent"
            assert re.fullmatch(r"[0-9a-f]{32}", masked["rows"][0][1]), masked
            sample = await call(s, "describe_table", table="public.customers")
            assert all(r[1] != f"customer {r[0]}" for r in sample["sample_rows"]), "masked sample"

            cut = await call(s, "query", sql="SELECT order_id FROM public.orders WHERE order_id < 500 "
                                             "ORDER BY order_id")
            assert cut["truncated"] is True and cut["row_count"] == 100 and "note" in cut

            denied = await refused(s, "describe_table", table="sales.regions")
            assert denied["sqlstate"] == "42501" and denied["fix"]
            denied = await refused(s, "query", sql="SELECT * FROM sales.regions WHERE region_id = 1")
            assert denied["sqlstate"] == "42501"
            write = await refused(s, "query", sql="DELETE FROM public.orders")
            assert write["sqlstate"] in ("0A000", "25006"), write
            two = await refused(s, "query", sql="SELECT 1; SELECT 2")
            assert two["sqlstate"] == "0A000"

            plan = await call(s, "explain_query", sql="SELECT status, count(*) FROM public.orders "
                                                      "GROUP BY status")
            assert plan["action"] == "wait for approval" and "no filter" in plan["expensive"]
            assert plan["route"]["shape"] == "aggregate" and plan["scan_bytes"] > 0
            health = await call(s, "table_health", table="public.orders")
            assert health["health"]["table"] == "public.orders" and "score" in health["health"]

            resources = (await s.list_resources()).resources
            uris = {str(r.uri) for r in resources}
            assert "lakegate://table/public.orders" in uris
            assert not any("sales.regions" in u for u in uris)
            read = await s.read_resource("lakegate://table/public.customers")
            schema = json.loads(read.contents[0].text)
            assert [c["name"] for c in schema["columns"]] == ["customer_id", "name", "segment"]
    run(go())


def test_a_scan_over_the_cap_is_refused_with_the_estimate_and_a_fix(agents_gw):
    async def go():
        async with http_session(agents_gw, "capped") as s:
            error = await refused(s, "query", sql="SELECT count(*) FROM public.orders")
            assert error["sqlstate"] == "54000"
            assert re.search(r"estimated scan of [\d.]+ \w*B exceeds agent \"capped\"'s max_scan_bytes",
                             error["message"]), error
            assert "order_ts" in error["fix"], "names the partition column to filter on"
            # Small tables fit; a filter on the partition column prunes the estimate under the cap.
            ok = await call(s, "query", sql="SELECT count(*) FROM public.customers")
            assert ok["rows"] == [[50]]
            day = await call(s, "query", sql="SELECT count(*) FROM public.orders WHERE "
                                             "order_ts >= TIMESTAMPTZ '2026-11-25 00:00:00+00' AND "
                                             "order_ts < TIMESTAMPTZ '2026-11-26 00:00:00+00'")
            # The fixture's order i is at 2026-11-01 + 37 min × i (tests/fixtures/warehouse.py).
            assert day["rows"] == [[sum(1 for i in range(1, 1001) if (37 * i) // 1440 == 24)]]
            assert 0 < day["scan_bytes"] <= 16384
            # Expensive (a cross join) under the default policy: refused with the reason.
            cross = await refused(s, "query", sql="SELECT count(*) FROM public.customers "
                                                  "CROSS JOIN public.all_types")
            assert cross["sqlstate"] == "54000" and "cross join" in cross["message"], cross
    run(go())


def test_an_expensive_statement_waits_for_approval(agents_gw, expected):
    sql = "SELECT status, count(*) AS n FROM public.orders GROUP BY status ORDER BY status"

    async def go():
        async with http_session(agents_gw, "agent") as s:
            waiting = asyncio.create_task(s.call_tool("query", {"sql": sql}))
            held = None
            for _ in range(200):
                status, body = await asyncio.to_thread(admin_request, agents_gw, "GET", "/api/pending")
                assert status == 200, body
                held = next((p for p in body["pending"] if p["sql"] == sql), None)
                if held:
                    break
                await asyncio.sleep(0.05)
            assert held and held["user"] == "agent" and "no filter" in held["reason"]
            assert not waiting.done(), "the call waits"
            status, _ = await asyncio.to_thread(admin_request, agents_gw, "POST",
                                                f"/api/pending/{held['id']}/approve")
            assert status == 200
            result = await waiting
            out = answer(result)
            assert not is_error(result), out
            assert out["approved_by"] == "admin"
            by_status = {(r[0] if r[0] is not None else "<null>"): r[1] for r in out["rows"]}
            assert by_status == {k: v[0] for k, v in expected["orders_by_status"].items()}

            rejected = asyncio.create_task(s.call_tool("query", {"sql": sql + " LIMIT 1"}))
            for _ in range(200):
                _, body = await asyncio.to_thread(admin_request, agents_gw, "GET", "/api/pending")
                if body["pending"]:
                    break
                await asyncio.sleep(0.05)
            pending_id = body["pending"][0]["id"]
            # The CLI lists and decides through the admin API (an admin's credentials in the URL).
            admin_url = agents_gw.http.replace("http://", f"http://admin:{PASSWORDS['admin']}@")
            listed = await asyncio.to_thread(cli, "agents", "pending", "--http", admin_url)
            assert "no filter" in listed and "agent" in listed, listed
            decided = await asyncio.to_thread(cli, "agents", "reject", str(pending_id), "--http", admin_url)
            assert f"statement {pending_id} of agent: rejected by admin" in decided, decided
            again = await asyncio.to_thread(cli, "agents", "approve", str(pending_id), "--http",
                                            admin_url, check=False)
            assert f"no statement {pending_id} is waiting" in again, again
            error = answer(await rejected)["error"]
            assert error["sqlstate"] == "42501" and "rejected by admin" in error["message"]
            _, body = await asyncio.to_thread(admin_request, agents_gw, "GET", "/api/pending")
            assert body["pending"] == []
            assert [d["decision"]["verdict"] for d in body["decided"][:2]] == ["rejected", "approved"]
    run(go())


def test_a_statement_held_on_one_replica_is_approved_on_another(lake_dir, cfg, tmp_path):
    """Two gateways sharing `[state]` (a PostgreSQL of their own here): the agent's statement
    waits on replica a; replica b lists it and an admin approves it there; a runs it."""
    import shutil
    import socket
    import subprocess
    import tempfile
    scripts = Path(__file__).resolve().parents[2] / "scripts"
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    pg_dir = Path(tempfile.mkdtemp(prefix="lakegate-state-"))  # the postgres user enters it
    pg_dir.chmod(0o755)
    subprocess.run([str(scripts / "pg-server.sh"), "start", str(pg_dir / "pg"), str(port)],
                   check=True, timeout=120)
    gws = []
    try:
        for name in ["a", "b"]:
            path = tmp_path / f"{name}.toml"
            path.write_text(cfg.read_text() + f"""
[state]
uri = "postgresql://postgres@127.0.0.1:{port}/postgres"
replica = "{name}"
poll = "200ms"
""")
            gws.append(start_gateway([*wh.flags(str(lake_dir)), "--config", str(path)]))
        a, b = gws
        sql = "SELECT count(*) AS n FROM public.orders"

        async def go():
            async with http_session(a, "agent") as s:
                waiting = asyncio.create_task(s.call_tool("query", {"sql": sql}))
                held = None
                for _ in range(200):
                    _, body = await asyncio.to_thread(admin_request, b, "GET", "/api/pending")
                    held = next((p for p in body["pending"] if p["sql"] == sql), None)
                    if held:
                        break
                    await asyncio.sleep(0.05)
                assert held and held["replica"] == "a", body
                status, out = await asyncio.to_thread(admin_request, b, "POST",
                                                      f"/api/pending/{held['id']}/approve")
                assert status == 200 and out["replica"] == "a", out
                result = await asyncio.wait_for(waiting, 30)
                got = answer(result)
                assert not is_error(result), got
                assert got["approved_by"] == "admin"
                return got["rows"]
        rows = run(go())
        assert rows and rows[0][0] > 0
    finally:
        for gw in gws:
            gw.proc.terminate()
            gw.proc.wait(timeout=15)
        subprocess.run([str(scripts / "pg-server.sh"), "stop", str(pg_dir / "pg")],
                       check=False, timeout=60)
        shutil.rmtree(pg_dir, ignore_errors=True)


def test_the_budget_cuts_an_agent_off(agents_gw):
    async def go():
        async with http_session(agents_gw, "bot") as s:
            for i in range(3):
                await call(s, "query", sql=f"SELECT count(*) FROM public.customers WHERE customer_id > {i}")
            error = await refused(s, "query", sql="SELECT 1 AS one")
            assert error["sqlstate"] == "53400"
            assert "queries_per_minute = 3" in error["message"]
            assert re.search(r"wait \d+ s", error["fix"]), error
            # Another agent is not affected.
        async with http_session(agents_gw, "capped") as s:
            await call(s, "query", sql="SELECT 1 AS one")
    run(go())


def test_http_needs_credentials_and_agent_queries_feed_the_history(agents_gw):
    request = urllib.request.Request(f"{agents_gw.http}/mcp", method="POST",
                                     data=b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json, text/event-stream"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(request, timeout=10)
    assert e.value.code == 401
    status, body = admin_request(agents_gw, "GET", "/api/queries?limit=200")
    assert status == 200
    mine = [q for q in body["queries"] if q["frontend"] == "mcp"]
    assert mine and {q["user"] for q in mine} >= {"agent", "capped", "bot"}
    assert all(q["shape"] for q in mine if q["error"] is None)
    status, _, metrics = http_text(agents_gw, "/metrics")
    assert status == 200
    assert re.search(r'lakegate_agent_queries_total\{group="[^"]*",outcome="ok",user="bot"\} 3', metrics), \
        [l for l in metrics.splitlines() if "agent" in l]
    assert re.search(r'lakegate_agent_scan_bytes_total\{group="[^"]*",user="agent"\} [1-9]', metrics)


@pytest.mark.skipif(not MODERN_SDK, reason="the 2026-07-28 protocol needs the 2.x SDK")
def test_the_modern_protocol_answers_too(agents_gw, expected):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def go():
        headers = {"Authorization": basic("capped")}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
            transport = streamable_http_client(f"{agents_gw.http}/mcp", http_client=http)
            async with Client(transport, mode="auto") as client:
                result = await client.call_tool("query", {"sql": "SELECT count(*) FROM public.customers"})
                assert answer(result)["rows"] == [[expected["customers_count"]]]
    run(go())


def test_stdio_serves_the_same_tools_and_approvals(lake_dir, cfg, tmp_path, expected):
    errlog = tmp_path / "stderr.log"
    params = StdioServerParameters(
        command=lakegate_bin(),
        args=["mcp", *wh.flags(str(lake_dir)), "--config", str(cfg), "--user", "agent",
              "--http-listen", "127.0.0.1:0"],
        env=dict(os.environ),
    )
    sql = "SELECT count(*) AS n FROM public.orders"

    async def go():
        with errlog.open("w") as err:
            async with stdio_client(params, errlog=err) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    assert {t.name for t in (await s.list_tools()).tools} == TOOLS
                    got = await call(s, "query", sql="SELECT count(*) FROM public.orders WHERE order_id > 0")
                    assert got["rows"] == [[expected["orders_count"]]]
                    masked = await call(s, "query", sql="SELECT name FROM public.customers WHERE customer_id = 1")
                    assert masked["rows"][0][0] != "customer 1"
                    http = None
                    for _ in range(100):
                        found = re.search(r"admin api listening http=(\S+)", errlog.read_text())
                        if found:
                            http = f"http://{found.group(1)}"
                            break
                        await asyncio.sleep(0.05)
                    assert http, errlog.read_text()[-2000:]
                    waiting = asyncio.create_task(s.call_tool("query", {"sql": sql}))

                    class Gw:
                        pass
                    gw = Gw()
                    gw.http = http
                    for _ in range(200):
                        _, body = await asyncio.to_thread(admin_request, gw, "GET", "/api/pending")
                        if body.get("pending"):
                            break
                        await asyncio.sleep(0.05)
                    status, _ = await asyncio.to_thread(
                        admin_request, gw, "POST", f"/api/pending/{body['pending'][0]['id']}/approve")
                    assert status == 200
                    out = answer(await waiting)
                    assert out["rows"] == [[expected["orders_count"]]] and out["approved_by"] == "admin"
    run(go())


def test_stdio_refuses_an_unknown_user(lake_dir, cfg):
    import subprocess
    out = subprocess.run([lakegate_bin(), "mcp", *wh.flags(str(lake_dir)), "--config", str(cfg),
                          "--user", "nobody"], input="", capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "nobody" in out.stderr and "auth.users" in out.stderr


def test_the_typescript_sdk_answers_over_http_and_stdio(agents_gw, lake_dir, cfg):
    """The official TypeScript SDK (@modelcontextprotocol/sdk, scripts/setup.sh) as a client."""
    import shutil
    import subprocess
    from conftest import ROOT
    modules = sorted((ROOT / ".cache").glob("node-mcp-*/node_modules"))
    if not modules or not shutil.which("node"):
        pytest.fail("@modelcontextprotocol/sdk or node missing: run scripts/setup.sh")
    script = ROOT / "tests" / "mcp" / "client.mjs"
    # Node resolves packages from the script's directory upwards: run a copy beside them.
    local = modules[-1].parent / "client.mjs"
    local.write_text(script.read_text())
    stdio_args = json.dumps(["mcp", *wh.flags(str(lake_dir)), "--config", str(cfg), "--user", "agent"])
    for args in (["http", f"{agents_gw.http}/mcp", "agent", PASSWORDS["agent"]],
                 ["stdio", lakegate_bin(), stdio_args]):
        out = subprocess.run(["node", str(local), *args], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-3000:]
        steps = {s["step"]: s for s in map(json.loads, out.stdout.splitlines())}
        assert steps["tools"]["server"] == "lakegate" and set(steps["tools"]["tools"]) == TOOLS
        query = steps["query"]
        assert query["isError"] is False and query["answer"]["rows"][0][0] == 2
        assert query["answer"]["rows"][0][1] != "customer 2", "masked"
        assert steps["denied"]["isError"] is True and steps["denied"]["text"].startswith("ERROR 42501")
        assert "lakegate://table/public.orders" in steps["resources"]["uris"]

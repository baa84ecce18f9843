"""Authentication with real clients: SCRAM-SHA-256 over pgwire (libpq via psycopg), a wrong
password and an unknown user answered alike (28P01, counted), hashed secrets only, trust never
exposed beyond loopback by accident; Flight SQL basic-auth handshake → bearer token (ADBC and
pyarrow.flight), a forged and an expired token refused."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import adbc_driver_flightsql.dbapi as flight_sql
import asyncpg
import psycopg
import pyarrow.flight as fl
import pytest

import warehouse as wh
from flight_commands import statement_query
from conftest import lakegate_bin, start_gateway


def hashed(password: str) -> str:
    out = subprocess.run([lakegate_bin(), "hash-password"], input=password + "\n",
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.strip()


@pytest.fixture(scope="module")
def secured(lake_dir, tmp_path_factory):
    cfg = tmp_path_factory.mktemp("auth") / "auth.toml"
    cfg.write_text(f"""
[auth]
token_ttl = "3s"
[[auth.users]]
name = "alice"
password = "{hashed('correct horse')}"
[[auth.users]]
name = "bob"
password = "{hashed('battery staple')}"
[[auth.users]]
name = "ops"
password = "{hashed('ops-pass')}"
roles = ["monitor"]
""")
    assert "correct horse" not in cfg.read_text()
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    yield gw
    gw.proc.terminate()
    gw.proc.wait(timeout=15)


def dsn(gw, user: str, password: str) -> str:
    return f"host=127.0.0.1 port={gw.port} dbname=lakegate user={user} password='{password}'"


def login(gw, user: str, password: str) -> psycopg.Connection:
    """An autocommit psycopg session as `user` (SCRAM)."""
    return psycopg.connect(dsn(gw, user, password), autocommit=True)


def http_get(url: str, user: str | None = None, password: str = "",
             bearer: str | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a GET, with basic auth or a bearer token when given."""
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    if bearer is not None:
        request.add_header("Authorization", f"Bearer {bearer}")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def failures(gw) -> float:
    status, _, body = http_get(f"{gw.http}/metrics", "ops", "ops-pass")
    assert status == 200, status
    text = body.decode()
    line = next(l for l in text.splitlines() if l.startswith("lakegate_auth_failures_total "))
    return float(line.split()[1])


def test_scram_logs_in_and_wrong_or_unknown_users_fail_alike(secured):
    with psycopg.connect(dsn(secured, "alice", "correct horse"), autocommit=True) as conn:
        assert conn.pgconn.used_password
        assert conn.execute("SELECT current_user, count(*) FROM orders").fetchone()[0] == "alice"
    before = failures(secured)
    messages = []
    for user, password in [("alice", "wrong"), ("mallory", "correct horse")]:
        with pytest.raises(psycopg.OperationalError) as e:
            psycopg.connect(dsn(secured, user, password))
        messages.append(str(e.value).replace(user, "<user>"))
        assert f'password authentication failed for user "{user}"' in str(e.value).lower()
        # libpq does not surface a startup error's SQLSTATE; asyncpg does.
        assert asyncio.run(_asyncpg_sqlstate(secured, user, password)) == "28P01"
    assert messages[0] == messages[1], "an unknown user must look like a wrong password"
    assert failures(secured) == before + 4  # two clients, two attempts each
    # The gateway keeps serving the right users.
    with psycopg.connect(dsn(secured, "bob", "battery staple"), autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


async def _asyncpg_sqlstate(gw, user: str, password: str) -> str | None:
    try:
        conn = await asyncpg.connect(host="127.0.0.1", port=gw.port, user=user,
                                     password=password, database="lakegate")
    except asyncpg.PostgresError as e:
        return e.sqlstate
    await conn.close()
    return None


def test_plain_text_passwords_and_remote_trust_are_refused_at_start(lake_dir, tmp_path):
    cfg = tmp_path / "plain.toml"
    cfg.write_text('[[auth.users]]\nname = "eve"\npassword = "hunter2"\n')
    out = subprocess.run([lakegate_bin(), "serve", *wh.flags(str(lake_dir)), "--config", str(cfg),
                          "--pg-listen", "127.0.0.1:0", "--flight-listen", "127.0.0.1:0",
                          "--http-listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "hash-password" in out.stderr, out.stderr
    out = subprocess.run([lakegate_bin(), "serve", *wh.flags(str(lake_dir)),
                          "--pg-listen", "0.0.0.0:0", "--flight-listen", "127.0.0.1:0",
                          "--http-listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "pg.listen" in out.stderr and "loopback" in out.stderr, out.stderr


def test_flight_sql_basic_auth_then_bearer_tokens(secured):
    uri = f"grpc://127.0.0.1:{secured.flight_port}"
    with flight_sql.connect(uri, db_kwargs={"username": "alice", "password": "correct horse"}) \
            as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM orders")
        assert cur.fetchone()[0] > 0
    with pytest.raises(Exception) as e:
        with flight_sql.connect(uri, db_kwargs={"username": "alice", "password": "nope"}) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
    assert "nauthenticated" in str(e.value) or "UNAUTHENTICATED" in str(e.value), e.value

    client = fl.FlightClient(uri)
    header, value = client.authenticate_basic_token("bob", "battery staple")
    token_call = fl.FlightCallOptions(headers=[(header, value)])
    sql = "SELECT count(*) FROM orders"
    info = client.get_flight_info(fl.FlightDescriptor.for_command(statement_query(sql)), token_call)
    assert info.endpoints
    # No token, a forged token and (after the TTL) the real one are all refused.
    for options in [fl.FlightCallOptions(),
                    fl.FlightCallOptions(headers=[(b"authorization", b"Bearer forged")])]:
        with pytest.raises(fl.FlightUnauthenticatedError):
            client.get_flight_info(fl.FlightDescriptor.for_command(statement_query(sql)), options)
    time.sleep(3.5)
    with pytest.raises(fl.FlightUnauthenticatedError):
        client.get_flight_info(fl.FlightDescriptor.for_command(statement_query(sql)), token_call)


def test_connections_over_the_limit_are_refused_and_the_rest_keep_working(lake_dir, tmp_path):
    cfg = tmp_path / "limits.toml"
    cfg.write_text("[limits]\nmax_connections = 4\nmax_connections_per_user = 3\n")
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    try:
        def dsn_for(user):
            return f"host=127.0.0.1 port={gw.port} dbname=lakegate user={user}"
        # 2x the limit at once, across two users: 3 for u1 (its own cap), 1 for u2 (the total).
        opened, refused = [], []
        for user in ["u1"] * 4 + ["u2"] * 4:
            try:
                opened.append((user, psycopg.connect(dsn_for(user), autocommit=True)))
            except psycopg.OperationalError as e:
                refused.append((user, str(e)))
        assert [u for u, _ in opened] == ["u1", "u1", "u1", "u2"], refused
        assert any('too many connections for role "u1"' in m for _, m in refused), refused
        assert any("too many clients already" in m for _, m in refused), refused
        assert asyncio.run(_asyncpg_sqlstate(gw, "u3", "")) == "53300"
        for _, conn in opened:
            assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] > 0
        opened.pop()[1].close()
        # The slot frees when the gateway sees the connection end (as a PostgreSQL backend
        # exits after its client left): a moment after close() returns, not at once.
        deadline = time.time() + 5
        while True:
            try:
                conn = psycopg.connect(dsn_for("u2"), autocommit=True)
                break
            except psycopg.OperationalError as e:
                if "too many clients" not in str(e) or time.time() > deadline:
                    raise
                time.sleep(0.05)
        with conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        for _, conn in opened:
            conn.close()
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> Path:
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}", cwd=d)
    return d / f"{name}.pem"


def make_server_cert(d: Path, ca: str, out: str) -> None:
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{out}.key", "-out",
             f"{out}.csr", "-subj", "/CN=localhost", cwd=d)
    _openssl("x509", "-req", "-in", f"{out}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{out}.pem", "-days", "2", "-extfile", "san.ext", cwd=d)


def test_scram_over_tls_verify_full_direct_ssl_required_and_reloaded(lake_dir, tmp_path):
    ca1, ca2 = make_ca(tmp_path, "ca1"), make_ca(tmp_path, "ca2")
    make_server_cert(tmp_path, "ca1", "server")
    cfg = tmp_path / "tls.toml"
    cfg.write_text(f"""
[tls]
cert = "{tmp_path / 'server.pem'}"
key = "{tmp_path / 'server.key'}"
require = true
[[auth.users]]
name = "alice"
password = "{hashed('correct horse')}"
""")
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    base = f"host=localhost port={gw.port} dbname=lakegate user=alice password='correct horse'"
    try:
        with psycopg.connect(f"{base} sslmode=verify-full sslrootcert={ca1}",
                             autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] > 0
        # PostgreSQL 17's direct TLS (no SSLRequest round trip; libpq 17+).
        with psycopg.connect(f"{base} sslmode=verify-full sslrootcert={ca1} "
                             "sslnegotiation=direct", autocommit=True) as conn:
            assert conn.pgconn.ssl_in_use and conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(psycopg.OperationalError) as e:
            psycopg.connect(f"{base} sslmode=disable")
        assert "requires TLS" in str(e.value)
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(f"{base} sslmode=verify-full sslrootcert={ca2}")
        # Flight SQL is served over TLS too (and only so), checked against the same CA.
        flight_tls = {"username": "alice", "password": "correct horse",
                      "adbc.flight.sql.client_option.tls_root_certs": ca1.read_text()}
        with flight_sql.connect(f"grpc+tls://localhost:{gw.flight_port}",
                                db_kwargs=flight_tls) as fc, fc.cursor() as cur:
            cur.execute("SELECT count(*) FROM orders")
            assert cur.fetchone()[0] > 0
        with pytest.raises(Exception):
            with flight_sql.connect(f"grpc://localhost:{gw.flight_port}",
                                    db_kwargs={"username": "alice",
                                               "password": "correct horse"}) as fc:
                with fc.cursor() as cur:
                    cur.execute("SELECT 1")
        # A renewed certificate (from another CA) is served without a restart.
        make_server_cert(tmp_path, "ca2", "renewed")
        os.replace(tmp_path / "renewed.key", tmp_path / "server.key")
        os.replace(tmp_path / "renewed.pem", tmp_path / "server.pem")
        deadline = time.time() + 10
        while True:
            try:
                with psycopg.connect(f"{base} sslmode=verify-full sslrootcert={ca2}",
                                     autocommit=True) as conn:
                    assert conn.execute("SELECT 1").fetchone() == (1,)
                break
            except psycopg.OperationalError:
                assert time.time() < deadline, "the renewed certificate was not picked up"
                time.sleep(0.5)
        # Flight SQL serves the renewed certificate too.
        flight_tls["adbc.flight.sql.client_option.tls_root_certs"] = ca2.read_text()
        with flight_sql.connect(f"grpc+tls://localhost:{gw.flight_port}",
                                db_kwargs=flight_tls) as fc, fc.cursor() as cur:
            cur.execute("SELECT 1")
            assert cur.fetchone() == (1,)
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_access_rules_deny_with_42501_before_any_engine_or_cache(lake_dir, tmp_path):
    cfg = tmp_path / "access.toml"
    cfg.write_text(f"""
[[auth.users]]
name = "alice"
password = "{hashed('a-pass')}"
roles = ["analyst", "admin"]
[[auth.users]]
name = "bob"
password = "{hashed('b-pass')}"
roles = ["sales"]
[[access]]
roles = ["analyst"]
groups = ["*"]
tables = ["public.*"]
[[access]]
roles = ["sales"]
groups = ["default"]
tables = ["sales.*"]
""")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "groups.toml").write_text('default_group = "default"\n'
                                       '[[group]]\nname = "default"\nengines = ["datafusion"]\n'
                                       '[[group]]\nname = "reprocess"\nengines = ["datafusion"]\n')
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg),
                        "--rules-dir", str(rules)])
    try:
        # A routing group the user is not granted: 42501 naming the group.
        with login(gw, "bob", "b-pass") as b:
            b.execute("SET lakegate.group = 'reprocess'")
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                b.execute("SELECT count(*) FROM sales.regions")
            assert 'routing group "reprocess"' in str(e.value)
        sql = "SELECT status, count(*) FROM orders GROUP BY status ORDER BY status"
        with login(gw, "alice", "a-pass") as a, login(gw, "bob", "b-pass") as b:
            assert a.execute(sql).fetchall()  # computed and cached for alice
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                b.execute(sql)  # the same statement: never served from alice's cache
            assert "permission denied for table public.orders" in str(e.value)
            assert b.execute("SELECT count(*) FROM sales.regions").fetchone()[0] >= 1
            with pytest.raises(psycopg.errors.InsufficientPrivilege) as e:
                a.execute("SELECT * FROM sales.regions")
            assert e.value.sqlstate == "42501"
            # A join needs every table.
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                b.execute("SELECT count(*) FROM sales.regions r JOIN public.orders o ON true")
            # Catalog listings show each user only what it may read.
            listed = lambda c: {tuple(r) for r in c.execute(  # noqa: E731
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema', 'lakegate')")}
            assert ("public", "orders") in listed(a) and ("sales", "regions") not in listed(a)
            # (other tests may add sales tables to the shared lake)
            assert ("sales", "regions") in listed(b) and {n for n, _ in listed(b)} == {"sales"}
            relnames = {r[0] for r in b.execute("SELECT relname FROM pg_catalog.pg_class")}
            assert "regions" in relnames and "orders" not in relnames and "customers" not in relnames
            schemas = {r[0] for r in b.execute("SELECT nspname FROM pg_catalog.pg_namespace")}
            assert "sales" in schemas and "public" not in schemas, schemas
            # Nothing ran for the denied statements.
            reached = a.execute("SELECT count(*) FROM lakegate.queries WHERE user_name = 'bob' "
                                "AND query LIKE '%orders%' AND engine <> ''").fetchone()[0]
            refused = a.execute("SELECT count(*) FROM lakegate.queries WHERE user_name = 'bob' "
                                "AND error LIKE 'permission denied%'").fetchone()[0]
            # Two tables and one group refused, none of them run.
            assert (reached, refused) == (0, 3), "bob's denied statements reached no engine"
            # Without the admin role, the history shows one's own queries only.
            users = {r[0] for r in b.execute("SELECT DISTINCT user_name FROM lakegate.queries")}
            assert users == {"bob"}, users
        with flight_sql.connect(f"grpc://127.0.0.1:{gw.flight_port}",
                                db_kwargs={"username": "bob", "password": "b-pass"}) as fc:
            objects = fc.adbc_get_objects(depth="tables").read_all().to_pylist()
            seen = {(s["db_schema_name"], t["table_name"]) for c in objects
                    for s in c["catalog_db_schemas"] or [] for t in s["db_schema_tables"] or []}
            assert ("sales", "regions") in seen and {n for n, _ in seen} == {"sales"}, seen
            with fc.cursor() as cur, pytest.raises(Exception) as e:
                cur.execute("SELECT count(*) FROM orders")
                cur.fetchall()
        assert "PERMISSION_DENIED" in str(e.value) or "ermission denied" in str(e.value), e.value
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_group_guardrails_cap_the_scan_and_the_rows_and_refuse_writes(lake_dir, tmp_path):
    table = wh.catalog(str(lake_dir)).load_table("public.orders")
    files = table.inspect.files().to_pylist()
    total = sum(f["file_size_in_bytes"] for f in files)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "groups.toml").write_text(f"""
default_group = "open"
[[group]]
name = "open"
engines = ["datafusion"]
[[group]]
name = "agents"
engines = ["datafusion"]
cache = false
max_scan_bytes = {total // 2}
max_rows = 5
""")
    gw = start_gateway([*wh.flags(str(lake_dir)), "--rules-dir", str(rules)])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            conn.execute("SET lakegate.group = 'agents'")
            with pytest.raises(psycopg.errors.ProgramLimitExceeded) as e:
                conn.execute("SELECT count(*) FROM orders").fetchall()
            assert "exceeds routing group \"agents\"'s max_scan_bytes" in str(e.value), e.value
            # Pruned by the partition filter (the last day of orders): under the cap.
            last_day = max(f["readable_metrics"]["order_ts"]["upper_bound"] for f in files)
            day = last_day.strftime("%Y-%m-%d")
            n = conn.execute(f"SELECT count(*) FROM orders WHERE order_ts >= '{day}T00:00:00Z'")
            assert n.fetchone()[0] > 0
            with pytest.raises(psycopg.errors.ProgramLimitExceeded) as e:
                conn.execute(f"SELECT * FROM orders WHERE order_ts >= '{day}T00:00:00Z'").fetchall()
            assert "max_rows (5)" in str(e.value)
            assert conn.execute("SELECT 1").fetchone() == (1,), "the session survives"
            for write in ["DELETE FROM orders", "INSERT INTO orders (order_id) VALUES (1)",
                          "CREATE TABLE t (a int)"]:
                with pytest.raises(psycopg.errors.FeatureNotSupported):
                    conn.execute(write)
            conn.execute("SET lakegate.group = 'open'")
            assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] > 5
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_shutdown_lets_a_running_query_finish(lake_dir):
    import signal
    import threading
    gw = start_gateway(wh.flags(str(lake_dir)))
    result, error = [], []
    ids = wh.catalog(str(lake_dir)).load_table("public.orders").scan().to_arrow()["order_id"]
    n = 1_000_000
    expected = sum(ids.to_pylist()) * (n * (n - 1) // 2)
    finished = []

    def run():
        try:
            with psycopg.connect(gw.dsn, autocommit=True) as conn:
                result.append(int(conn.execute(
                    f"SELECT sum(o.order_id * r.value) FROM orders o, range({n}) r").fetchone()[0]))
                finished.append(time.time())
        except Exception as e:  # noqa: BLE001 - reported below
            error.append(e)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    started = time.time()
    gw.proc.send_signal(signal.SIGTERM)
    t.join(timeout=60)
    gw.proc.wait(timeout=60)
    assert error == [] and result == [expected], (result, error)
    drained = finished[0] - started
    print(f"query finished {drained:.1f} s after SIGTERM; then the process exited")
    assert drained > 0.2, "the query was still running when the signal came"



def test_a_catalog_that_stops_answering_fails_queries_in_time_and_recovers(engine_estate):
    import signal
    gw = engine_estate.lakegate('[cache]\nenabled = false\n[catalog]\ntimeout = "2s"\n')
    postmaster = int((engine_estate.root / "pg" / "postmaster.pid").read_text().split()[0])
    def freeze(sig):
        # The postmaster and its backends (the pool's connections), one by one.
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                                  text=True).stdout.split()
        for pid in [postmaster, *map(int, children)]:
            os.kill(pid, sig)
    with psycopg.connect(gw.dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM customers").fetchone()[0] > 0
        freeze(signal.SIGSTOP)  # the catalog database freezes (not a refusal)
        try:
            started = time.time()
            with pytest.raises(psycopg.Error) as e:
                conn.execute("SELECT count(*) FROM customers").fetchone()
            waited = time.time() - started
            assert "catalog.timeout" in str(e.value) and waited < 6, (waited, e.value)
        finally:
            freeze(signal.SIGCONT)
        # The same connection works again once the catalog answers.
        deadline = time.time() + 20
        while True:
            try:
                assert conn.execute("SELECT count(*) FROM customers").fetchone()[0] > 0
                break
            except psycopg.Error:
                assert time.time() < deadline, "no recovery after the catalog came back"
                time.sleep(0.5)


def test_a_malformed_message_ends_only_its_own_connection(gateway):
    """pgwire 0.40.7 panics decoding a password message whose length field is below 4 (found by
    the pg_messages fuzz target); the panic must stay inside that connection's task."""
    import socket
    import struct
    body = struct.pack("!i", 196608) + b"user\x00x\x00database\x00lakegate\x00\x00"
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as s:
        s.sendall(struct.pack("!i", len(body) + 4) + body)
        assert s.recv(4096).startswith(b"R")  # authentication ok
        s.sendall(b"p" + struct.pack("!i", 0) + b"junk")
        assert s.recv(4096) == b""  # that connection is closed...
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:  # ...the gateway serves on
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] > 0


def test_the_http_api_and_console_need_an_operator_when_users_are_configured(secured):
    base = secured.http
    # Liveness and readiness stay open for load balancers.
    assert http_get(f"{base}/api/health")[0] == 200
    assert http_get(f"{base}/api/ready")[0] == 200
    for path in ["/metrics", "/api/queries", "/api/table_health", "/"]:
        status, headers, _ = http_get(base + path)
        assert status == 401, (path, status)
        assert headers.get("www-authenticate", "").startswith("Basic realm="), headers
        assert http_get(base + path, "ops", "wrong")[0] == 401
        status, _, body = http_get(base + path, "alice", "correct horse")  # no operator role
        assert status == 403 and b"admin or monitor" in body, (path, status, body)
        assert http_get(base + path, "ops", "ops-pass")[0] == 200, path
    # A Flight SQL bearer token of an operator works too.
    client = fl.FlightClient(f"grpc://127.0.0.1:{secured.flight_port}")
    _, value = client.authenticate_basic_token("ops", "ops-pass")
    token = value.decode().split(" ", 1)[1]
    assert http_get(f"{base}/api/cache", bearer=token)[0] == 200
    assert http_get(f"{base}/api/cache", bearer="forged")[0] == 401
    # The CLI takes the operator in the URL, and says what to do without one.
    host = base.removeprefix("http://")
    ok = subprocess.run([lakegate_bin(), "status", "--http", f"http://ops:ops-pass@{host}"],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run([lakegate_bin(), "status", "--http", base],
                             capture_output=True, text=True, timeout=30)
    assert refused.returncode != 0 and "role admin or monitor" in refused.stderr, refused.stderr


def test_masked_columns_are_hashed_for_the_masked_role_everywhere_in_the_query(lake_dir, tmp_path):
    cfg = tmp_path / "mask.toml"
    cfg.write_text(f"""
[auth]
mask_salt = "pepper"
[[auth.users]]
name = "alice"
password = "{hashed('a-pass')}"
roles = ["analyst"]
[[auth.users]]
name = "bot"
password = "{hashed('b-pass')}"
roles = ["agent"]
[[mask]]
roles = ["agent"]
columns = ["public.customers.name"]
""")
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    try:
        md5 = lambda v: hashlib.md5(f"pepper{v}".encode()).hexdigest()  # noqa: E731
        sql = "SELECT customer_id, name, segment FROM customers ORDER BY customer_id LIMIT 3"
        with login(gw, "alice", "a-pass") as a, login(gw, "bot", "b-pass") as b:
            clear = a.execute(sql).fetchall()
            assert clear[0] == (1, "customer 1", "smb"), clear
            masked = b.execute(sql).fetchall()
            assert masked == [(i, md5(n), s) for i, n, s in clear], masked
            # SELECT * and the extended protocol (Parse/Describe with a parameter) too.
            star = b.execute("SELECT * FROM customers WHERE customer_id = %s", [2]).fetchall()
            assert star == [(2, md5("customer 2"), "smb")], star
            # The clear value matches nothing: a filter cannot probe it.
            probe = "SELECT count(*) FROM customers WHERE name = 'customer 1'"
            assert a.execute(probe).fetchone() == (1,)
            assert b.execute(probe).fetchone() == (0,)
            # Hashes are stable: joins and distinct counts still work.
            join = ("SELECT count(DISTINCT c.name) FROM customers c "
                    "JOIN orders o ON o.customer_id = c.customer_id")
            assert b.execute(join).fetchone() == a.execute(join).fetchone()
            # The same hashes from DuckDB (its own md5).
            b.execute("SET lakegate.engine = 'duckdb'")
            assert b.execute(sql).fetchall() == masked
            # Bot's answer is not alice's cached one, nor the reverse.
            assert a.execute(sql).fetchall() == clear
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_result_bytes_and_idle_in_transaction_limits(lake_dir, tmp_path):
    cfg = tmp_path / "limits.toml"
    cfg.write_text('[limits]\nmax_result_bytes = 50000000\nidle_in_transaction_timeout = "1s"\n')
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    try:
        with psycopg.connect(gw.dsn, autocommit=True) as conn:
            with pytest.raises(psycopg.errors.ProgramLimitExceeded) as e:
                conn.execute("SELECT repeat('x', 1000) FROM orders CROSS JOIN range(1000)"
                             ).fetchall()  # 100 MB
            assert "max_result_bytes" in str(e.value) and e.value.sqlstate == "54000"
            # A statement PostgreSQL itself answers (no FROM item) has the same limit.
            with pytest.raises(psycopg.errors.ProgramLimitExceeded) as e:
                conn.execute("SELECT repeat('x', 60000000)").fetchall()
            assert "max_result_bytes" in str(e.value) and e.value.sqlstate == "54000"
            assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] > 0
            # Outside a transaction, idling is fine.
            time.sleep(1.6)
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # psycopg's default opens a transaction with the first statement.
        idle = psycopg.connect(gw.dsn)
        assert idle.execute("SELECT 1").fetchone() == (1,)
        assert idle.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        time.sleep(2)
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout) as e:
            idle.execute("SELECT 1")
        assert e.value.sqlstate == "25P03" and "idle-in-transaction timeout" in str(e.value)
        assert idle.closed
        # A session may turn it off for itself (as in PostgreSQL).
        with psycopg.connect(gw.dsn) as own:
            own.execute("SET idle_in_transaction_session_timeout = 0")
            own.execute("SELECT 1")
            time.sleep(1.6)
            assert own.execute("SELECT 2").fetchone() == (2,)
            own.rollback()
        # A slow reader is not idle: 20 MB (more than socket buffers hold) read with a pause
        # longer than the timeout after the first row completes.
        with psycopg.connect(gw.dsn) as slow, slow.cursor() as cur:
            got = 0
            for _ in cur.stream("SELECT repeat('x', 1000) FROM generate_series(1, 20000)"):
                got += 1
                if got == 1:
                    time.sleep(1.5)
            assert got == 20000
            slow.rollback()
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)


def test_sql_text_that_would_mean_another_query_never_reaches_a_text_engine(gateway):
    """sqlparser prints the string x\\' (x, backslash, quote) as 'x\\'' — a string that runs on
    into the next literal, so the text DuckDB received became another query: before the fix this
    statement, which reads only `customers`, returned the gateway host's /etc/hostname from
    DuckDB's read_csv. Such statements are refused for text engines and run on DataFusion, which
    takes the parsed statement."""
    sql = ("SELECT 'x\\''' AS a, ' AS a, (SELECT string_agg(column0, $$,$$) FROM "
           "read_csv($$/etc/hostname$$, header = false)) AS b --' AS b FROM customers LIMIT 1")
    with psycopg.connect(gateway.dsn, autocommit=True,
                         options="-c lakegate.engine=duckdb") as pinned:
        with pytest.raises(psycopg.errors.FeatureNotSupported) as e:
            pinned.execute(sql).fetchall()
        assert "does not print back" in str(e.value) and "duckdb" in str(e.value)
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        rows = conn.execute(sql).fetchall()
    assert rows == [("x\\'", " AS a, (SELECT string_agg(column0, $$,$$) FROM "
                             "read_csv($$/etc/hostname$$, header = false)) AS b --")], rows


def test_deeply_nested_calls_are_refused_before_the_parser_spends_minutes(gateway):
    """sqlparser's time doubles with each nested call: 30 levels of abs() would pin a core for
    half an hour. The gateway refuses past limits.max_call_nesting (14) with 54001, at once."""
    with psycopg.connect(gateway.dsn, autocommit=True) as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.StatementTooComplex) as e:
            conn.execute("SELECT " + "abs(" * 30 + "-1" + ")" * 30)
        assert time.monotonic() - started < 2
        assert "limits.max_call_nesting (14)" in str(e.value)
        assert conn.execute("SELECT " + "abs(" * 12 + "-1" + ")" * 12).fetchone() == (1,)
        with pytest.raises(psycopg.errors.StatementTooComplex):
            conn.execute("SELECT " + "(SELECT " * 20 + "1" + ")" * 20)


def test_an_http_client_that_never_finishes_its_headers_is_let_go(lake_dir, tmp_path):
    import socket
    cfg = tmp_path / "http.toml"
    cfg.write_text('[http]\nheader_timeout = "2s"\n')
    gw = start_gateway([*wh.flags(str(lake_dir)), "--config", str(cfg)])
    try:
        host, port = gw.http.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /api/health HTTP/1.1\r\nHost: x\r\n")  # the blank line never comes
            started = time.monotonic()
            data = s.recv(1024)
            waited = time.monotonic() - started
        assert not data.startswith(b"HTTP/1.1 200"), data
        assert 1.5 < waited < 6, waited
        # Complete requests are served as before.
        assert http_get(f"{gw.http}/api/health")[0] == 200
    finally:
        gw.proc.terminate()
        gw.proc.wait(timeout=15)

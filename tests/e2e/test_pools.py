"""Connection pools in front of lakegate, as applications run it: HikariCP (JVM apps, Metabase,
DBeaver; newest release and the older line) over pgJDBC, and pgbouncer in session mode (it resets
each server connection with `DISCARD ALL` between clients) and in transaction mode (server
connections shared between clients per transaction)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

from conftest import run_java
from engine_estate import free_port

HIKARI_LINES = ["HikariCP-7.1.0.jar", "HikariCP-6.3.3.jar"]

POOL_SOURCE = r"""
import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.*;
import java.util.concurrent.*;
import java.util.concurrent.atomic.AtomicInteger;

public class Pool {
    public static void main(String[] a) throws Exception {
        HikariConfig c = new HikariConfig();
        c.setJdbcUrl(a[0]);
        c.setUsername("tester");
        c.setMaximumPoolSize(2);
        c.setMinimumIdle(1);
        // What app pools configure: transactions, read-only sessions, an isolation level.
        c.setAutoCommit(false);
        c.setReadOnly(true);
        c.setTransactionIsolation("TRANSACTION_READ_COMMITTED");
        long total = Long.parseLong(a[1]);
        long maxId = Long.parseLong(a[2]);
        AtomicInteger ok = new AtomicInteger();
        AtomicInteger wrong = new AtomicInteger();
        try (HikariDataSource ds = new HikariDataSource(c)) {
            ExecutorService pool = Executors.newFixedThreadPool(4);
            for (int t = 0; t < 4; t++) {
                final int thread = t;
                pool.submit(() -> {
                    for (int i = 0; i < 12; i++) {
                        // Past 500 ms idle HikariCP validates the connection (isValid).
                        if (i % 6 == 5) sleep(600);
                        try (Connection conn = ds.getConnection();
                             PreparedStatement ps = conn.prepareStatement(
                                 "SELECT count(*) FROM orders WHERE order_id <= ?")) {
                            boolean all = (i + thread) % 2 == 0;
                            ps.setLong(1, all ? maxId : 0);
                            try (ResultSet rs = ps.executeQuery()) {
                                rs.next();
                                if (rs.getLong(1) == (all ? total : 0)) ok.incrementAndGet();
                                else wrong.incrementAndGet();
                            }
                            // Half the borrowers commit; HikariCP rolls the others back.
                            if (i % 2 == 0) conn.commit();
                        } catch (SQLException e) {
                            System.out.println("error=" + e.getSQLState() + " " + e.getMessage());
                            wrong.incrementAndGet();
                        }
                    }
                    return null;
                });
            }
            pool.shutdown();
            pool.awaitTermination(120, TimeUnit.SECONDS);
            System.out.println("created=" + ds.getHikariPoolMXBean().getTotalConnections());
        }
        System.out.println("ok=" + ok.get());
        System.out.println("wrong=" + wrong.get());
    }

    static void sleep(long ms) {
        try { Thread.sleep(ms); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
    }
}
"""


@pytest.mark.parametrize("hikari", HIKARI_LINES)
def test_hikaricp_pool_serves_concurrent_borrowers(gateway, expected, tmp_path, hikari):
    url = f"jdbc:postgresql://127.0.0.1:{gateway.port}/lakegate"
    out = run_java(tmp_path, "postgresql-42.7.14.jar", "Pool", POOL_SOURCE,
                   [url, str(expected["orders_count"]), str(expected["orders_max_id"])],
                   extra_jars=[hikari, "slf4j-api-2.0.17.jar"])
    assert out.get("wrong") == "0" and out.get("ok") == "48", out
    assert int(out["created"]) <= 2


class Bouncer:
    """A pgbouncer in front of the gateway: `lg_session` (session mode, one server
    connection) and `lg_tx` (transaction mode, two)."""

    def __init__(self, root: Path, gateway_port: int):
        self.root, self.port = root, free_port()
        root.mkdir(parents=True, exist_ok=True)
        (root / "users.txt").write_text('"tester" ""\n')
        (root / "pgbouncer.ini").write_text(f"""[databases]
lg_session = host=127.0.0.1 port={gateway_port} dbname=lakegate pool_mode=session pool_size=1
lg_tx = host=127.0.0.1 port={gateway_port} dbname=lakegate pool_mode=transaction pool_size=2
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {root}/users.txt
server_reset_query = DISCARD ALL
max_client_conn = 50
ignore_startup_parameters = extra_float_digits
logfile = {root}/pgbouncer.log
pidfile = {root}/pgbouncer.pid
""")
        cmd = f"pgbouncer -d {root}/pgbouncer.ini"
        if os.geteuid() == 0:
            # pgbouncer refuses to run as root.
            shutil.chown(root, "postgres")
            for f in root.iterdir():
                shutil.chown(f, "postgres")
            subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", cmd], check=True, timeout=30)
        else:
            subprocess.run(cmd.split(), check=True, timeout=30)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with psycopg.connect(self.dsn("lg_tx"), connect_timeout=2, prepare_threshold=None):
                    return
            except psycopg.OperationalError:
                time.sleep(0.2)
        raise RuntimeError(f"pgbouncer did not start: {(root / 'pgbouncer.log').read_text()}")

    def dsn(self, database: str) -> str:
        return f"postgresql://tester@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        pid = (self.root / "pgbouncer.pid").read_text().strip()
        subprocess.run(["kill", pid], check=False, timeout=10)


@pytest.fixture(scope="module")
def bouncer(gateway):
    # Its own directory under /tmp: pytest's are private to the user running the tests, and
    # pgbouncer runs as `postgres` when that user is root.
    root = Path(tempfile.mkdtemp(prefix="lakegate-pgbouncer-"))
    root.chmod(0o755)
    b = Bouncer(root, gateway.port)
    yield b
    b.stop()
    shutil.rmtree(root, ignore_errors=True)


def test_pgbouncer_session_mode_resets_each_server_connection(bouncer, expected):
    """pgbouncer's `DISCARD ALL` between clients leaves the next one PostgreSQL's defaults."""
    with psycopg.connect(bouncer.dsn("lg_session"), autocommit=True) as first:
        first.execute("SET statement_timeout = '5s'")
        assert first.execute("SELECT count(*) FROM orders", prepare=True).fetchone() == (
            expected["orders_count"],)
        first.execute("DECLARE kept CURSOR WITH HOLD FOR SELECT order_id FROM orders")
    # One server connection: the second client gets the same one, reset.
    with psycopg.connect(bouncer.dsn("lg_session"), autocommit=True) as second:
        assert second.execute("SHOW statement_timeout").fetchone() == ("0",)
        with pytest.raises(psycopg.errors.InvalidCursorName):
            second.execute("FETCH 1 FROM kept")
        assert second.execute("SELECT count(*) FROM orders").fetchone() == (
            expected["orders_count"],)


def test_pgbouncer_transaction_mode_shares_server_connections(bouncer, expected):
    """Eight clients over two server connections, each statement or transaction on whichever
    is free (no server-side prepared statements: pgbouncer 1.18 cannot carry them)."""
    errors: list[BaseException] = []
    answers: list[tuple] = []

    def client(n: int) -> None:
        try:
            with psycopg.connect(bouncer.dsn("lg_tx"), autocommit=True,
                                 prepare_threshold=None) as conn:
                for i in range(10):
                    limit = expected["orders_max_id"] if (n + i) % 2 else 0
                    answers.append((limit, conn.execute(
                        "SELECT count(*) FROM orders WHERE order_id <= %s", (limit,)).fetchone()[0]))
                    with conn.transaction():
                        conn.execute("SET LOCAL statement_timeout = '10s'")
                        answers.append(("tx", conn.execute(
                            "SHOW statement_timeout").fetchone()[0]))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert len(answers) == 160
    for key, value in answers:
        if key == "tx":
            assert value == "10s"
        else:
            assert value == (expected["orders_count"] if key else 0)

"""End-to-end fixtures: a PyIceberg-written lakehouse and the real `lakegate` binary on an
ephemeral port, stopped by PID at the end of the session."""
from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

import warehouse as wh  # noqa: E402


def lakegate_bin() -> str:
    return os.environ.get("LAKEGATE_BIN", str(ROOT / "target" / "debug" / "lakegate"))


class Gateway:
    def __init__(self, proc: subprocess.Popen, port: int, dir_: str):
        self.proc, self.port, self.dir = proc, port, dir_

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=tester dbname=lakegate"

    @property
    def url(self) -> str:
        return f"postgresql://tester@127.0.0.1:{self.port}/lakegate"


def start_gateway(flags: list[str], extra: list[str] | None = None,
                  env: dict[str, str] | None = None) -> Gateway:
    """`lakegate serve` on free ports; `env` adds to (or overrides) this process's environment
    for the gateway alone (the AWS_* variables of an S3 lake)."""
    cmd = [lakegate_bin(), "serve", *flags, "--pg-listen", "127.0.0.1:0",
           "--flight-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", *(extra or [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if line.startswith("lakegate listening"):
            addrs = dict(part.split("=", 1) for part in line.split()[2:])
            gw = Gateway(proc, int(addrs["pg"].rsplit(":", 1)[1]), "")
            # Drain stderr (logs) so a chatty gateway never blocks on a full pipe; keep the tail.
            gw.log_tail = collections.deque(maxlen=400)
            threading.Thread(target=lambda: gw.log_tail.extend(proc.stderr), daemon=True).start()
            gw.flight_port = int(addrs["flight"].rsplit(":", 1)[1])
            gw.http = f"http://{addrs['http']}"
            return gw
        if proc.poll() is not None:
            raise RuntimeError(f"lakegate exited: {proc.stderr.read()}")
    proc.kill()
    raise RuntimeError("lakegate did not start within 60s")


def jar_version(jar: Path) -> tuple[int, ...]:
    """`postgresql-42.7.14.jar` → (42, 7, 14)."""
    return tuple(int(p) for p in re.findall(r"\d+", jar.name.rsplit("-", 1)[-1]))


# pgJDBC's newest release and the older line tested beside it (scripts/setup.sh fetches both).
PGJDBC_LINES = ["postgresql-42.7.14.jar", "postgresql-42.7.4.jar"]


def run_java(tmp_path: Path, jar_glob: str, class_name: str, source: str, args: list[str],
             jvm_flags: list[str] | None = None, extra_jars: list[str] | None = None) -> dict:
    """Compiles and runs a small JDBC program against a driver jar from .cache/jars (the newest
    version matching `jar_glob`, and `extra_jars` by name); returns the `key=value` lines it
    prints."""
    jars = Path(os.environ.get("LAKEGATE_JARS", ROOT / ".cache" / "jars"))
    jar = max(jars.glob(jar_glob), key=jar_version, default=None)
    if jar is None:
        pytest.fail(f"{jar_glob} missing: run scripts/setup.sh")
    path = [str(jar)]
    for name in extra_jars or []:
        if not (jars / name).is_file():
            pytest.fail(f"{name} missing: run scripts/setup.sh")
        path.append(str(jars / name))
    classpath = ":".join(path)
    src = tmp_path / f"{class_name}.java"
    src.write_text(source)
    subprocess.run(["javac", "-cp", classpath, "-d", str(tmp_path), str(src)], check=True,
                   timeout=120)
    out = subprocess.run(
        ["java", *(jvm_flags or []), "-cp", f"{tmp_path}:{classpath}", class_name, *args],
        capture_output=True, text=True, timeout=180,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(line.split("=", 1) for line in out.stdout.strip().splitlines() if "=" in line)


@pytest.fixture(scope="session")
def lake_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("lake")
    expected = wh.build(str(d))
    (d / "expected.json").write_text(json.dumps(expected))
    return d


@pytest.fixture(scope="session")
def expected(lake_dir) -> dict:
    return json.loads((lake_dir / "expected.json").read_text())


@pytest.fixture(scope="session")
def gateway(lake_dir):
    gw = start_gateway(wh.flags(str(lake_dir)))
    gw.dir = str(lake_dir)
    yield gw
    gw.proc.terminate()
    try:
        gw.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        gw.proc.kill()


@pytest.fixture(scope="session")
def engine_estate():
    """PostgreSQL catalog, Trino, Spark Connect and a lakegate over them (cache off, versions
    kept for an hour so a commit does not move the pin): started once for the whole run, only
    if a test asks for it. See tests/fixtures/engine_estate.py."""
    from engine_estate import running_estate
    with running_estate(start_gateway, '[cache]\nenabled = false\nmax_staleness = "1h"\n') as e:
        yield e

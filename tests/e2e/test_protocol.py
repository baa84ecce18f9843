"""The extended protocol at the byte level: answers are held until Sync or Flush and then
written at once, as PostgreSQL does (a Flush delivers what is pending; without one nothing
arrives before Sync)."""
import socket
import struct
import time


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


PARSE = message(b"P", cstr("") + cstr("SELECT 41 + 1") + struct.pack("!h", 0))
BIND = message(b"B", cstr("") + cstr("") + struct.pack("!hhh", 0, 0, 0))
DESCRIBE = message(b"D", b"P" + cstr(""))
EXECUTE = message(b"E", cstr("") + struct.pack("!i", 0))
FLUSH = message(b"H")
SYNC = message(b"S")


class Wire:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        body = struct.pack("!i", 196608) + cstr("user") + cstr("tester") + cstr("database") \
            + cstr("lakegate") + b"\0"
        self.sock.sendall(struct.pack("!i", len(body) + 4) + body)
        self.until(b"Z")

    def read(self, timeout: float) -> list[tuple[bytes, bytes]]:
        """Whole messages that arrive within `timeout` seconds."""
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
            if chunk:
                self.buf += chunk
        except socket.timeout:
            pass
        out = []
        while len(self.buf) >= 5:
            n = struct.unpack("!i", self.buf[1:5])[0]
            if len(self.buf) < 1 + n:
                break
            out.append((self.buf[:1], self.buf[5:1 + n]))
            self.buf = self.buf[1 + n:]
        return out

    def until(self, kind: bytes) -> list[bytes]:
        kinds, deadline = [], time.time() + 10
        while time.time() < deadline:
            for k, _ in self.read(1.0):
                kinds.append(k)
                if k == kind:
                    return kinds
        raise AssertionError(f"no {kind!r} within 10 s (got {kinds})")


def test_answers_wait_for_sync_and_flush_delivers_them(gateway):
    wire = Wire(gateway.port)
    try:
        # Without Flush or Sync nothing is written yet.
        wire.sock.sendall(PARSE + BIND + DESCRIBE + EXECUTE)
        assert wire.read(0.5) == []
        # Sync: everything, in order, then ReadyForQuery.
        wire.sock.sendall(SYNC)
        assert wire.until(b"Z") == [b"1", b"2", b"T", b"D", b"C", b"Z"]
        # Flush delivers what is pending without ending the batch.
        wire.sock.sendall(PARSE + FLUSH)
        assert wire.until(b"1") == [b"1"]
        wire.sock.sendall(BIND + EXECUTE + FLUSH)
        assert wire.until(b"C") == [b"2", b"D", b"C"]
        wire.sock.sendall(SYNC)
        assert wire.until(b"Z") == [b"Z"]
    finally:
        wire.sock.close()

"""wslockd against connections that never authenticate (issue 12, finding
5): they get 5 s to finish the handshake, frames of at most 512 bytes
until then, and at most 256 of them may be open at once, 32 from one TCP
address, whatever --max-conns allows; lock clients keep being served."""
import socket
import struct
import time

from lockdlib import EAGAIN, HDR, frame, hello, read_frames, unix_conn

CHALLENGE, ERROR = 0x0102, 0x0302
PROTO = 10


def tcp_from(srv, source):
    return socket.create_connection(("127.0.0.1", srv.port), timeout=5,
                                    source_address=(source, 0))


def first_frame(s, timeout=5):
    """The first frame the server sends, or None at EOF."""
    s.settimeout(timeout)
    data = b""
    try:
        while len(data) < HDR.size or \
                len(data) < HDR.unpack_from(data)[0]:
            chunk = s.recv(65536)
            if not chunk:
                return None
            data += chunk
    except ConnectionResetError:
        return None
    n, _, t, rid = HDR.unpack_from(data)
    return t, data[HDR.size:n]


def greet(srv, source, client_id):
    """A TCP connection from source that sent a HELLO: (socket, the
    server's first frame, None if it closed at once)."""
    s = tcp_from(srv, source)
    s.sendall(hello(client_id=client_id))
    return s, first_frame(s)


def closed_within(s, timeout):
    """True if the server closes s (EOF) within timeout seconds."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def test_handshake_deadline(env):
    srv = env.server(lease_ms=3000)
    t0 = time.monotonic()
    silent = tcp_from(srv, "127.0.0.1")
    no_auth = tcp_from(srv, "127.0.0.1")
    no_auth.sendall(hello(client_id=5))
    assert first_frame(no_auth)[0] == CHALLENGE
    local = unix_conn(srv)
    # Meanwhile lock clients come and go as usual.
    a = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    for s in (silent, no_auth, local):
        assert closed_within(s, 10), "still open after 10 s"
        took = time.monotonic() - t0
        assert 4.5 <= took <= 10, took
        s.close()
    assert srv.log().count("handshake not finished in time") == 3
    # Served all along: the lease held, the lock is still a's.
    assert a.held("k")[1] == 1
    b = env.client(srv, tcp=False)
    assert b.lock_wait("b1", "k", flags="-")[1] == -EAGAIN


def test_small_frames_before_auth(env):
    srv = env.server()
    # Known too long from its first bytes: refused before any body.
    s = tcp_from(srv, "127.0.0.1")
    s.sendall(frame(0x0101, length=4096))
    t0 = time.monotonic()
    got = read_frames(s, timeout=3)
    assert time.monotonic() - t0 < 3
    assert [t for t, _, _ in got] == [ERROR], got
    assert struct.unpack(">I", got[0][2][:4])[0] == PROTO
    assert b"oversized" in got[0][2]
    s.close()
    # Also between HELLO and AUTH, and on the Unix socket.
    s = tcp_from(srv, "127.0.0.1")
    s.sendall(hello(client_id=6) + frame(0x0103, b"A" * 600))
    got = read_frames(s, timeout=3)
    assert [t for t, _, _ in got] == [CHALLENGE, ERROR], got
    s.close()
    s = unix_conn(srv)
    s.sendall(frame(0x0101, b"x" * 497))		# 513 bytes
    got = read_frames(s, timeout=3)
    assert [t for t, _, _ in got] == [ERROR], got
    s.close()
    # After the handshake frames may be as large as ever (a 1024-byte key).
    a = env.client(srv)
    assert a.lock_wait("a1", "k" * 1024)[1] == 0
    assert srv.alive()


def test_unauthenticated_per_address(env):
    srv = env.server()
    held = []
    try:
        for i in range(32):
            s, f = greet(srv, "127.0.0.2", 100 + i)
            held.append(s)
            assert f[0] == CHALLENGE, i
        extra, f = greet(srv, "127.0.0.2", 200)
        extra.close()
        assert f is None, "33rd connection was served"
        # Another address, and a lock client, are still served.
        other, f = greet(srv, "127.0.0.3", 201)
        other.close()
        assert f[0] == CHALLENGE
        a = env.client(srv)
        assert a.lock_wait("a1", "k")[1] == 0
        # Once one of them goes, that address may try again.
        held.pop().close()
        deadline = time.monotonic() + 5
        while True:
            s, f = greet(srv, "127.0.0.2", 202)
            s.close()
            if f is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert f is not None and f[0] == CHALLENGE
    finally:
        for s in held:
            s.close()
    assert "from one address" in srv.log()


def test_unauthenticated_in_all(env):
    srv = env.server()
    held = []
    try:
        for i in range(256):
            s, f = greet(srv, f"127.0.1.{i // 32 + 1}", 1000 + i)
            held.append(s)
            assert f[0] == CHALLENGE, i
        extra, f = greet(srv, "127.0.2.1", 2000)
        extra.close()
        assert f is None, "257th connection was served"
        # The Unix socket (root and our uid only) is not capped.
        b = env.client(srv, tcp=False)
        assert b.lock_wait("b1", "k")[1] == 0
        assert "too many connections in the handshake" in srv.log()
    finally:
        for s in held:
            s.close()
    # Freed: TCP clients are served again.
    a = env.client(srv)
    assert a.lock_wait("a1", "k", flags="-")[1] == -EAGAIN

"""Protocol version 2 (issue 12, finding 7): on TCP every frame after the
handshake carries a MAC under per-session, per-direction keys, over a
sequence number and the frame, so nothing can be forged, injected,
replayed or moved between connections; and a client id names a session
only for whoever proves that session's secret, so a key holder can no
longer take over or end another node's session. Raw sessions speak the
protocol by hand (lockdlib.RawSession); lockclient is libwslock."""
import socket
import struct
import threading
import time

from lockdlib import (EAGAIN, HDR, Client, RawSession, frame, hello,
                      lock_body, read_frames, VERSION)

OK, ERROR, WELCOME = 0x0301, 0x0302, 0x0104
LOCK, UNLOCK, LIST, LIST_ITEM, LIST_END = 0x0201, 0x0202, 0x0501, 0x0502, \
    0x0503
E_PERM, E_SECRET = 9, 11
RESUME, RESUMED, NEW = 1, 1, 4


def take(rs, key, rid):
    rs.send(LOCK, lock_body(key), rid)
    t, r, body = rs.recv()
    assert (t, r) == (OK, rid), (t, r, body)


def test_raw_session_speaks_v2(env):
    srv = env.server()
    rs = RawSession(srv)
    assert rs.welcome["flags"] == NEW and rs.error is None
    take(rs, b"k", 1)
    b = env.client(srv)
    assert b.lock_wait("b1", "k", flags="-")[1] == -EAGAIN


def test_bad_mac_closes_the_connection(env):
    srv = env.server()
    b = env.client(srv)
    rs = RawSession(srv)
    take(rs, b"held", 1)
    data = bytearray(rs.seal(LOCK, lock_body(b"forged"), 2))
    data[-1] ^= 1
    rs.sock.sendall(data)
    assert rs.closed()
    assert "bad MAC" in srv.log()
    assert b.lock_wait("b1", "forged", flags="-")[1] == 0
    # An UNLOCK injected without a MAC (what anyone on the path could
    # do to a version 1 stream) releases nothing either.
    rs = RawSession(srv)
    take(rs, b"victim", 1)
    body = struct.pack(">QQQH", 1, 0, 2**64 - 1, 6) + b"victim"
    rs.sock.sendall(HDR.pack(HDR.size + len(body), VERSION, UNLOCK, 2) + body)
    assert rs.closed()
    assert b.lock_wait("b2", "victim", flags="-")[1] == -EAGAIN
    assert b.lock_wait("b3", "held", flags="-")[1] == -EAGAIN
    assert srv.alive()


def test_replayed_frame_refused(env):
    srv = env.server()
    b = env.client(srv)
    rs = RawSession(srv)
    frame1 = rs.send(LOCK, lock_body(b"once"), 1)
    assert rs.recv()[:2] == (OK, 1)
    rs.send(UNLOCK, struct.pack(">QQQH", 1, 0, 2**64 - 1, 4) + b"once", 2)
    assert rs.recv()[:2] == (OK, 2)
    # The same bytes again: the sequence number moved on.
    rs.sock.sendall(frame1)
    assert rs.closed()
    assert b.lock_wait("b1", "once", flags="-")[1] == 0
    b.unlock("once")
    # A frame of one connection played on another: other keys.
    other = RawSession(srv)
    third = RawSession(srv)
    stolen = other.seal(LOCK, lock_body(b"moved"), 1)
    third.sock.sendall(stolen)
    assert third.closed()
    assert b.lock_wait("b2", "moved", flags="-")[1] == 0
    assert srv.log().count("frame with a bad MAC") == 2


# LIST_ITEM: kind, session, client id, lease left, connected, owner,
# start, end, token, mode, flags, data length; then the data.
ITEM = ">BQQIBQQQQBBH"


def client_ids(srv):
    """{name: client id} of the sessions, from LIST on a raw session."""
    rs = RawSession(srv)
    rs.send(LIST, b"", 7)
    out = {}
    while True:
        t, rid, body = rs.recv()
        if t == LIST_END:
            break
        assert t == LIST_ITEM
        fields = struct.unpack_from(ITEM, body)
        kind, cid, n = fields[0], fields[2], fields[-1]
        data = body[struct.calcsize(ITEM):]
        assert len(data) == n
        if kind == 1:
            out[data.decode()] = cid
    rs.close()
    return out


def test_resume_needs_the_secret(env):
    srv = env.server(lease_ms=2000)
    a = env.client(srv, name="victim")
    assert a.lock_wait("a1", "k")[1] == 0
    cid = client_ids(srv)["victim"]
    # A key holder that knows only the client id: resume, fresh start
    # and a made-up secret are all refused, before anything changes.
    for flags, secret in ((RESUME, None), (0, None),
                          (RESUME, b"\x55" * 32), (0, b"\x55" * 32)):
        rs = RawSession(srv, client_id=cid, flags=flags, secret=secret)
        assert rs.error == E_SECRET, (flags, secret, rs.welcome)
        assert rs.closed()
    assert "secret was not proven" in srv.log()
    # The victim kept its connection, its session and its lock. Time is
    # what is tested here: after longer than a lease, a session that had
    # been ended or taken over would have cost it its lock.
    b = env.client(srv)
    assert b.lock_wait("b1", "k", flags="-")[1] == -EAGAIN
    time.sleep(2.5)
    assert a.held("k")[1] == 1 and a.lost == []
    assert 0 not in [st for _, st in a.states], a.states
    assert b.lock_wait("b2", "k", flags="-")[1] == -EAGAIN


def test_resume_with_the_secret(env):
    srv = env.server(lease_ms=3000)
    b = env.client(srv)
    rs = RawSession(srv)
    take(rs, b"mine", 1)
    cid, secret = rs.client_id, rs.secret
    rs.close()
    # The holder of the secret gets its session back, locks and all.
    again = RawSession(srv, client_id=cid, flags=RESUME, secret=secret)
    assert again.error is None and again.welcome["flags"] == RESUMED
    assert again.secret == secret
    assert b.lock_wait("b1", "mine", flags="-")[1] == -EAGAIN
    # Or starts afresh, which frees them.
    again.close()
    fresh = RawSession(srv, client_id=cid, flags=0, secret=secret)
    assert fresh.error is None and fresh.welcome["flags"] == NEW
    assert fresh.secret != secret
    assert b.lock_wait("b2", "mine", flags="-")[1] == 0


def test_reclaim_needs_the_secret(env):
    """After a restart the secrets come from the state directory."""
    srv = env.server(lease_ms=2000, grace_ms=4000)
    a = env.client(srv, name="victim")
    assert a.lock_wait("a1", "k")[1] == 0
    cid = client_ids(srv)["victim"]
    srv.stop()
    srv.start()
    rs = RawSession(srv, client_id=cid, flags=RESUME)
    assert rs.error == E_SECRET
    rs.close()
    # The real client reclaims its lock with its secret: down, then up.
    def back():
        st = [s for _, s in a.states]
        return 0 in st and st[-1] == 1 and st.index(0) < len(st) - 1
    assert a.wait(back, 15), a.states
    assert a.held("k")[1] == 1 and a.lost == []
    assert "reclaiming" in srv.log()


class Proxy:
    """Forwards one TCP client to the server; once the server has sent
    WELCOME, flips a bit in the MAC of the next frame it sends, once."""

    def __init__(self, srv):
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4)
        self.port = self.lsock.getsockname()[1]
        self.srv = srv
        self.tampered = threading.Event()
        self.stop = False
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while not self.stop:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.srv.port))
            threading.Thread(target=self.pipe, args=(c, s, False),
                             daemon=True).start()
            threading.Thread(target=self.pipe, args=(s, c, True),
                             daemon=True).start()

    def pipe(self, src, dst, from_server):
        buf, welcomed = b"", False
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if not from_server or self.tampered.is_set():
                    dst.sendall(data)
                    continue
                buf += data
                while len(buf) >= HDR.size and \
                        len(buf) >= HDR.unpack_from(buf)[0]:
                    n, _, t, _ = HDR.unpack_from(buf)
                    f, buf = bytearray(buf[:n]), buf[n:]
                    if welcomed and not self.tampered.is_set():
                        f[-1] ^= 1
                        self.tampered.set()
                    welcomed = welcomed or t == WELCOME
                    dst.sendall(f)
                if self.tampered.is_set() and buf:
                    dst.sendall(buf)
                    buf = b""
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.lsock.close()


def test_client_refuses_a_forged_answer(env):
    """libwslock checks the server's MACs: a tampered answer drops the
    connection (it reconnects and resumes), it is never believed."""
    srv = env.server(lease_ms=4000)
    proxy = Proxy(srv)
    try:
        b = env.client(srv)
        assert b.lock_wait("b1", "k")[1] == 0
        a = Client(f"127.0.0.1:{proxy.port}", key=srv.key, name="a")
        env.clients.append(a)
        a.wait_ready()
        # Its first answer after WELCOME is tampered with.
        a.lock("a1", "k", flags="-")
        assert proxy.tampered.wait(10)
        assert a.wait(lambda: any(st == 0 for _, st in a.states), 10)
        st = a.stats()
        assert st["last_err"] == -74 and "Bad message" in st["last_error"]
        # Resumed over a clean connection, the request answered for real.
        assert a.result("a1")[1] == -EAGAIN
        assert a.wait(lambda: a.states[-1][1] == 1, 10)
        assert a.stats()["connects"] == 2
        assert "resumed" in srv.log()
    finally:
        proxy.close()


def test_unix_socket_frames_need_no_mac(env):
    """On the Unix socket the kernel hands over only what the peer
    process (root or our uid, by SO_PEERCRED) wrote: no MAC there."""
    srv = env.server()
    s = socket.socket(socket.AF_UNIX)
    s.connect(srv.sock)
    s.sendall(hello(client_id=5) + frame(LOCK, lock_body(b"u"), 3))
    s.shutdown(socket.SHUT_WR)
    got = read_frames(s)
    assert [(t, rid) for t, rid, _ in got] == [(WELCOME, 0), (OK, 3)]

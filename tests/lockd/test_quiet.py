"""The QUIET lock flag (PROTOCOL.md, WSLOCK_QUIET): granted only when the
lock is free right now, never queued, never a reason to send REVOKE to a
holder; a conflict fails as a try-lock does. wsfs takes its shared locks
on stat and lookup this way, so that looking at a file does not make
another node give its lock back."""
import struct

from lockdlib import EAGAIN, frame, hello, read_frames, unix_conn

EINVAL = 22


def test_quiet_granted_when_free(env):
    srv = env.server()
    a = env.client(srv)
    b = env.client(srv, tcp=False)
    _, st, tok = a.lock_wait("q1", "k", mode="s", flags="q")
    assert st == 0 and tok > 0
    assert a.held("k", mode="s")[1] == 1
    # Shared locks still share, cached or not.
    assert b.lock_wait("q2", "k", mode="s", flags="qc")[1] == 0
    # An owner's quiet upgrade is granted once nothing is in the way.
    b.unlock("k")
    assert a.lock_wait("q3", "k", mode="x", flags="q")[1] == 0
    assert a.held("k", mode="x")[1] == 1


def test_quiet_revokes_no_holder(env):
    srv = env.server()
    a = env.client(srv)
    b = env.client(srv)
    assert a.lock_wait("a1", "k", flags="wc")[1] == 0
    assert b.lock_wait("q1", "k", mode="s", flags="q")[1] == -EAGAIN
    assert b.lock_wait("q2", "k", mode="x", flags="qc")[1] == -EAGAIN
    # A plain try-lock does ask the holder; its REVOKE follows any the
    # quiet ones would have caused on the same connection, so one REVOKE
    # in all means the quiet ones sent none.
    assert b.lock_wait("t1", "k", mode="s", flags="-")[1] == -EAGAIN
    assert a.wait(lambda: len(a.revokes) >= 1)
    assert b.lock_wait("t2", "k", mode="s", flags="-")[1] == -EAGAIN
    assert a.held("k")[1] == 1
    assert len(a.revokes) == 1, a.revokes


def test_quiet_never_queues(env):
    srv = env.server()
    a = env.client(srv)
    b = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    assert b.lock_wait("q1", "k", flags="q")[1] == -EAGAIN
    # Nothing waits: releasing the lock grants nobody, and a LOCK the
    # other client sends afterwards is answered first.
    a.unlock("k")
    assert a.lock_wait("a2", "k")[1] == 0
    assert b.held("k")[1] == 0
    assert list(b.done) == ["q1"]
    a.unlock("k")
    assert b.lock_wait("q2", "k", flags="q")[1] == 0


def test_quiet_yields_to_earlier_waiter(env):
    srv = env.server()
    a = env.client(srv)
    b = env.client(srv)
    c = env.client(srv)
    assert a.lock_wait("a1", "k", mode="s", flags="wc")[1] == 0
    c.lock("c1", "k", mode="x", flags="w")
    # The server asks a for its lock once c waits.
    assert a.wait(lambda: len(a.revokes) == 1)
    # Shared would fit with a's lock but not before c: not free now.
    assert b.lock_wait("q1", "k", mode="s", flags="q")[1] == -EAGAIN
    a.unlock("k")
    assert c.result("c1")[1] == 0


def test_quiet_with_wait_refused(env):
    srv = env.server()
    a = env.client(srv)
    # The library refuses it at once, without a request id.
    a.send("lock q1 k 1 0 - x qw")
    assert a.result("q1")[1] == -EINVAL
    # On the wire QUIET with WAIT (or TEST) is malformed.
    for flags in (0x09, 0x0c, 0x10):
        s = unix_conn(srv)
        body = struct.pack(">QQQBBH", 1, 0, 10, 2, flags, 1) + b"k"
        s.sendall(hello(client_id=90 + flags) + frame(0x0201, body, rid=5))
        got = read_frames(s)
        s.close()
        assert [t for t, _, _ in got] == [0x0104, 0x0302], (flags, got)
        assert struct.unpack(">I", got[1][2][:4])[0] == 2
    assert srv.alive()

"""wslockd against real client processes: locking over TCP and Unix
sockets, authentication, hostile frames, leases, SIGKILL and SIGSTOP of
clients, restart with grace and reclaim, cancel, revoke, fairness,
byte ranges, and the command line."""
import json
import os
import signal
import socket
import struct
import subprocess
import time

import pytest

from lockdlib import (EAGAIN, EBUSY, ECANCELED, ETIMEDOUT, HDR, WSCTL,
                      WSLOCKD, Client, frame, hello, poll_until, read_frames,
                      unix_conn, write_key)

def test_command_line(tmp_path):
    r = subprocess.run([WSLOCKD, "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--state-dir" in r.stdout
    r = subprocess.run([WSLOCKD, "--version"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.startswith("wslockd ")
    for bad in (["--bogus"], ["--lease-ms", "x"], ["--lease-ms", "5"],
                ["--listen", "host:99999"], ["extra"]):
        r = subprocess.run([WSLOCKD, "-f"] + bad, capture_output=True,
                           text=True)
        assert r.returncode == 2, bad
        assert "wslockd" in r.stderr and "--help" in r.stderr
    key = write_key(str(tmp_path / "k"))
    os.chmod(key, 0o640)
    r = subprocess.run([WSLOCKD, "-f", "--listen", "127.0.0.1:0", "--key",
                        key, "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "chmod 600" in r.stderr
    short = write_key(str(tmp_path / "short"), b"x" * 31)
    r = subprocess.run([WSLOCKD, "-f", "--listen", "127.0.0.1:0", "--key",
                        short, "--state-dir", str(tmp_path / "st")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "32" in r.stderr


def test_exclusive_over_tcp_and_unix(env):
    srv = env.server()
    a = env.client(srv, tcp=True)
    b = env.client(srv, tcp=False)
    t1 = a.lock_wait("a1", "k")[2]
    assert a.lock_wait("a1", "k")[1] == 0
    assert b.lock_wait("b1", "k", flags="-")[1] == -EAGAIN
    b.lock("b2", "k", flags="w")
    time.sleep(0.3)
    assert "b2" not in b.done
    a.unlock("k")
    _, st, t2 = b.result("b2")
    assert st == 0 and t2 > t1
    # Shared locks coexist, exclude an exclusive one.
    assert a.lock_wait("a2", "s", mode="s")[1] == 0
    assert b.lock_wait("b3", "s", mode="s")[1] == 0
    c = env.client(srv)
    assert c.lock_wait("c1", "s", flags="-")[1] == -EAGAIN


def test_wrong_key_refused(env, tmp_path):
    srv = env.server()
    bad = write_key(str(tmp_path / "bad.key"))
    c = env.client(srv, key=bad, wait=False)
    c.wait(lambda: c.error is not None or c.ready is not None)
    assert c.ready is None
    assert "Permission denied" in (c.error or "")
    assert "authentication failed" in srv.log()
    # A raw TCP client that skips AUTH gets nothing either.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(hello() + frame(0x0201, b"\0" * 28 + b"k"))
    got = read_frames(s)
    assert [t for t, _, _ in got] == [0x0102, 0x0302]
    assert "not allowed before authentication" in srv.log()


HOSTILE = {
    "garbage": b"\xde\xad\xbe\xef" * 64,
    "short-length": frame(0x0101, length=8),
    "oversized": struct.pack(">IHHQ", 1 << 20, 1, 0x0101, 0),
    "bad-version": frame(0x0101, version=1),	# no MACs: refused
    "unknown-type": None,		# after a valid handshake
    "truncated": None,		# half a frame, then EOF
    "bad-lock-body": None,		# LOCK with mode 7
    "lock-before-hello": frame(0x0201, b"\0" * 28 + b"k"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_frames_close_only_that_connection(env, kind):
    srv = env.server()
    a = env.client(srv)
    assert a.lock_wait("a1", "precious")[1] == 0
    s = unix_conn(srv)
    if kind == "unknown-type":
        s.sendall(hello(client_id=77) + frame(0x7777))
    elif kind == "truncated":
        s.sendall(hello(client_id=78)[:20])
        s.shutdown(socket.SHUT_WR)
    elif kind == "bad-lock-body":
        body = struct.pack(">QQQBBH", 1, 0, 10, 7, 0, 1) + b"k"
        s.sendall(hello(client_id=79) + frame(0x0201, body, rid=5))
    else:
        s.sendall(HOSTILE[kind])
    read_frames(s)		# the server closes: we reach EOF
    s.close()
    assert srv.alive()
    assert "closing connection" in srv.log()
    # The other client's lock survived, and the server still serves.
    b = env.client(srv)
    assert b.lock_wait("b1", "precious", flags="-")[1] == -EAGAIN
    assert a.held("precious")[1] == 1


def held_and_wanted(env):
    """A server with one-second leases, client a holding "k" and client
    b waiting for it: (srv, a, b)."""
    srv = env.server(lease_ms=1000)
    a = env.client(srv)
    b = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    b.lock("b1", "k", flags="w")
    return srv, a, b


def test_sigkill_client_freed_after_lease(env):
    srv, a, b = held_and_wanted(env)
    t0 = time.monotonic()
    a.signal(signal.SIGKILL)
    t, st, _ = b.result("b1", timeout=5)
    assert st == 0
    # Not before the server could have heard from a for a whole lease.
    assert t - t0 >= 0.5, t - t0
    assert t - t0 <= 3.0, t - t0
    assert "lease expired" in srv.log()


def test_sigstop_client_loses_locks(env):
    srv, a, b = held_and_wanted(env)
    a.signal(signal.SIGSTOP)
    t, st, _ = b.result("b1", timeout=5)
    assert st == 0
    a.signal(signal.SIGCONT)
    assert a.wait(lambda: len(a.lost) > 0, 5), a.lines
    assert a.lost[0][1][0] == "k"
    # It never believes it still holds the lock.
    assert a.held("k")[1] == 0
    # And its library started a fresh session that works.
    assert a.wait(lambda: a.states and a.states[-1][1] == 1, 5)
    assert a.lock_wait("a2", "other")[1] == 0


def test_lease_kept_by_renewals(env):
    srv = env.server(lease_ms=500)
    a = env.client(srv)
    b = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    time.sleep(2.0)		# four leases: only renewals keep it
    assert a.held("k")[1] == 1
    assert b.lock_wait("b1", "k", flags="-")[1] == -EAGAIN
    assert not a.lost


def test_restart_reclaim_and_tokens(env):
    srv = env.server(lease_ms=1000, grace_ms=4000)
    a = env.client(srv)
    b = env.client(srv)
    _, st, ta = a.lock_wait("a1", "k1")
    assert st == 0
    assert a.lock_wait("a2", "k2", mode="s", start=0, end=10)[1] == 0
    assert b.lock_wait("b1", "k3")[1] == 0
    # A known client kept away keeps the grace period open until c has
    # tried: a and b alone may be back before c has even started. (A key
    # a reclaims answers AGAIN once it has: c tries a free one.)
    d = env.client(srv, name="d")
    d.signal(signal.SIGSTOP)
    srv.kill()
    srv.start()
    t_start = time.monotonic()
    # A new client may not take anything during grace.
    c = env.client(srv)
    assert c.lock_wait("c1", "free", flags="-")[1] == -EBUSY
    c.lock("c2", "k1", flags="w")
    d.signal(signal.SIGCONT)
    # a and b come back by themselves and reclaim.
    assert a.wait(lambda: [s for _, s in a.states].count(1) >= 2, 5)
    assert b.wait(lambda: [s for _, s in b.states].count(1) >= 2, 5)
    assert a.held("k1")[1] == 1 and a.held("k2", "s", 1, 0, 10)[1] == 1
    assert not a.lost and not b.lost
    # Grace ended early: every known client is back.
    assert poll_until(lambda: "grace period over: every known client" in
                      srv.log(), 5)
    assert time.monotonic() - t_start < 3.5
    # c still waits: a's reclaimed lock is not granted twice.
    assert c.result("c2", timeout=0.5) is None
    a.unlock("k1")
    _, st, tc = c.result("c2")
    assert st == 0
    assert tc > ta and (tc >> 32) > (ta >> 32)
    out = subprocess.run([WSCTL, "locks", "--lockd", srv.unix, "--json"],
                         capture_output=True, text=True, check=True).stdout
    holders = [i for i in json.loads(out) if i["type"] == "holder"]
    assert {h["key"] for h in holders} == {"k1", "k2", "k3"}
    assert any(h["key"] == "k2" and h["end"] == 10 for h in holders)


def test_grace_times_out_for_missing_client(env):
    srv = env.server(lease_ms=1000, grace_ms=1500)
    a = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    a.kill()
    srv.kill()
    srv.start()
    b = env.client(srv)
    t0 = time.monotonic()
    _, st, _ = b.lock_wait("b1", "k", timeout=5)
    assert st == 0
    assert time.monotonic() - t0 >= 1.0
    assert "grace period over: timeout" in srv.log()


def test_reclaim_refused_for_expired_session(env):
    """A client whose session expired before the restart may not reclaim."""
    srv = env.server(lease_ms=1000, grace_ms=3000)
    a = env.client(srv)
    b = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    a.signal(signal.SIGSTOP)
    b.lock("b1", "k", flags="w")
    assert b.result("b1", timeout=5)[1] == 0
    srv.kill()
    a.signal(signal.SIGCONT)
    srv.start()
    assert a.wait(lambda: a.lost, 5)
    assert b.wait(lambda: [s for _, s in b.states].count(1) >= 2, 5)
    assert b.held("k")[1] == 1
    assert a.held("k")[1] == 0


def test_cancel(env):
    srv = env.server()
    a, b, c = env.client(srv), env.client(srv), env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    rid = b.lock("b1", "k", flags="w")
    c.lock("c1", "k", flags="w")
    time.sleep(0.2)
    assert b.cancel(rid) == 0
    assert b.result("b1")[1] == -ECANCELED
    a.unlock("k")
    assert c.result("c1")[1] == 0
    assert b.cancel(rid) < 0


def test_revoke_cached(env):
    srv = env.server()
    a, b = env.client(srv), env.client(srv)
    assert a.lock_wait("a1", "ws/w/1:2", flags="c")[1] == 0
    b.lock("b1", "ws/w/1:2", flags="w")
    assert a.wait(lambda: a.revokes, 5)
    assert a.revokes[0][1][0] == "ws/w/1:2"
    assert "b1" not in b.done
    a.unlock("ws/w/1:2")
    assert b.result("b1")[1] == 0


def test_fifo_writer_not_starved(env):
    srv = env.server()
    a, b, c = env.client(srv), env.client(srv), env.client(srv)
    assert a.lock_wait("a1", "k", mode="s")[1] == 0
    b.lock("b1", "k", mode="x", flags="w")
    time.sleep(0.2)
    assert c.lock_wait("c1", "k", mode="s", flags="-")[1] == -EAGAIN
    c.lock("c2", "k", mode="s", flags="w")
    time.sleep(0.2)
    a.unlock("k")
    assert b.result("b1")[1] == 0
    time.sleep(0.2)
    assert "c2" not in c.done
    b.unlock("k")
    assert c.result("c2")[1] == 0


def test_byte_ranges_and_test(env):
    srv = env.server()
    a, b = env.client(srv), env.client(srv)
    assert a.lock_wait("a1", "f", start=0, end=100)[1] == 0
    a.unlock("f", start=40, end=60)
    assert b.lock_wait("b1", "f", start=40, end=60)[1] == 0
    assert b.lock_wait("b2", "f", start=39, end=41, flags="-")[1] == -EAGAIN
    assert b.test("f", start=90, end=95) == [1, a.session(), 1, 60, 100, 2]
    assert b.test("f", start=100, end=200) == [0]
    # Downgrade a's tail to shared: b may now share it.
    assert a.lock_wait("a2", "f", mode="s", start=60, end=100)[1] == 0
    assert b.lock_wait("b3", "f", mode="s", start=70, end=80)[1] == 0
    assert a.held("f", "x", 1, 0, 40)[1] == 1
    assert a.held("f", "x", 1, 0, 41)[1] == 0
    assert a.held("f", "s", 1, 60, 100)[1] == 1


def test_wsctl_lock_and_locks(env, tmp_path):
    srv = env.server()
    base = [WSCTL, "lock", "--lockd", srv.tcp, "--key", srv.key]
    r = subprocess.run(base + ["job", "--", "sh", "-c",
                               'test -n "$WSLOCK_TOKEN"; exit 7'])
    assert r.returncode == 7
    holder = subprocess.Popen(base + ["job", "--", "sleep", "2"])
    try:
        time.sleep(0.5)
        r = subprocess.run(base + ["--wait", "0", "job", "--", "true"],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "held by someone else" in r.stderr
        r = subprocess.run(base + ["--wait", "0.3", "job", "--", "true"],
                           capture_output=True, text=True)
        assert r.returncode == 1 and "not granted in time" in r.stderr
        out = subprocess.run([WSCTL, "locks", "--lockd", srv.unix],
                             capture_output=True, text=True).stdout
        assert "job" in out and "held" in out
        r = subprocess.run(base + ["--wait", "10", "job", "--", "echo",
                                   "after"], capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == "after\n"
    finally:
        holder.kill()
        holder.wait()
    r = subprocess.run(base + ["job", "--", "/nonexistent/cmd"],
                       capture_output=True, text=True)
    assert r.returncode == 127
    r = subprocess.run([WSCTL, "lock", "job", "true"], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "--" in r.stderr
    bad = write_key(str(tmp_path / "bad"))
    r = subprocess.run([WSCTL, "lock", "--lockd", srv.tcp, "--key", bad,
                        "job", "--", "true"], capture_output=True, text=True)
    assert r.returncode == 1 and "wrong cluster key" in r.stderr


def test_wsctl_keygen(tmp_path):
    k = str(tmp_path / "new.key")
    r = subprocess.run([WSCTL, "keygen", k])
    assert r.returncode == 0
    st = os.stat(k)
    assert st.st_size == 32 and st.st_mode & 0o777 == 0o600
    before = open(k, "rb").read()
    r = subprocess.run([WSCTL, "keygen", k], capture_output=True, text=True)
    assert r.returncode == 1 and "refusing" in r.stderr
    assert open(k, "rb").read() == before
    r = subprocess.run([WSCTL, "keygen"], capture_output=True, text=True)
    assert r.returncode == 2


def test_many_connections(env):
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4200:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 4200")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4200), hard))
    """Thousands of raw sessions on one server; each gets its own lock."""
    srv = env.server(lease_ms=5000)
    socks = []
    try:
        for i in range(2000):
            s = unix_conn(srv)
            key = f"k{i}".encode()
            body = struct.pack(">QQQBBH", 1, 0, 2**64 - 1, 2, 0,
                               len(key)) + key
            s.sendall(hello(client_id=1000 + i) + frame(0x0201, body, 9))
            socks.append(s)
        for s in socks:
            s.settimeout(5)
            data = b""
            while len(data) < 2 * HDR.size + 8 + 32 + 36:
                data += s.recv(4096)
            n, _, t, _ = HDR.unpack_from(data)
            assert t == 0x0104
            _, _, t2, rid = HDR.unpack_from(data, n)
            assert t2 == 0x0301 and rid == 9
    finally:
        for s in socks:
            s.close()
    assert srv.alive()


def test_unix_peer_uid_checked(env):
    """Only root and the server's own uid pass SO_PEERCRED."""
    import shutil
    import tempfile
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    d = tempfile.mkdtemp(prefix="wslockd-peer.")
    try:
        os.chmod(d, 0o755)
        srv = env.server(sockdir=d)
        os.chmod(srv.sock, 0o777)	# let the filesystem allow it
        from lockdlib import LOCKCLIENT
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                            "--clear-groups", LOCKCLIENT, "--addr",
                            srv.unix], input="quit\n", capture_output=True,
                           text=True, timeout=20)
        assert r.returncode == 1
        assert "Permission denied" in r.stdout
        assert "refusing uid 65534" in srv.log()
        # Root still gets in.
        assert env.client(srv, tcp=False).lock_wait("a", "k")[1] == 0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_per_session_limits(env):
    srv = env.server(extra=["--max-locks", "3", "--max-waiters", "1"])
    a, b = env.client(srv), env.client(srv)
    for i in range(3):
        assert a.lock_wait(f"a{i}", f"k{i}")[1] == 0
    assert a.lock_wait("a3", "k3")[1] == -122		# EDQUOT
    # Re-locking what it holds is not growth.
    assert a.lock_wait("a4", "k1", mode="s")[1] == 0
    b.lock("b1", "k0", flags="w")
    assert b.lock_wait("b2", "k1", flags="w", timeout=5)[1] == -122
    a.unlock("k0")
    assert b.result("b1")[1] == 0


def test_wsctl_lock_stops_command_when_lock_lost(env, tmp_path):
    """A wsctl lock frozen past its lease no longer protects its command:
    when it wakes it says so, stops the command and exits 1."""
    srv = env.server(lease_ms=1000)
    marker = tmp_path / "started"
    p = subprocess.Popen([WSCTL, "lock", "--lockd", srv.unix, "job", "--",
                          "sh", "-c", f"touch {marker}; exec sleep 30"],
                         stderr=subprocess.PIPE, text=True)
    try:
        assert poll_until(marker.exists, 10)
        os.kill(p.pid, signal.SIGSTOP)
        b = env.client(srv)
        assert b.lock_wait("b1", "job", timeout=5)[1] == 0
        os.kill(p.pid, signal.SIGCONT)
        _, err = p.communicate(timeout=10)
        assert p.returncode == 1
        assert "lock was lost" in err
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_state_directory(env, tmp_path):
    srv = env.server()
    epoch = os.path.join(srv.state, "epoch")
    assert open(epoch).read() == "1\n"
    a = env.client(srv)
    _, _, t1 = a.lock_wait("a1", "k")
    assert t1 >> 32 == 1
    assert srv.stop() == 0
    srv.start()
    assert open(epoch).read() == "2\n"
    assert oct(os.stat(srv.state).st_mode & 0o777) == "0o700"
    srv.stop()
    # A damaged state file stops the start with a clear reason.
    with open(epoch, "w") as f:
        f.write("garbage\n")
    r = subprocess.run([WSLOCKD, "-f", "--listen", "unix:" + str(tmp_path /
                        "x.sock"), "--state-dir", srv.state],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 1 and "state directory" in r.stderr

"""libwslock with a list of servers (lockd=A,B): a failed connect moves
the client to the next address, and a failover to another server that
holds the same state looks to the client like a restart of the lock
server: it reclaims its locks in the grace period and loses none.

The servers here are plain single wslockd processes; the second one is
started on the first one's state directory, as a replica taking over
would hold the same epoch and known clients (test_ha.py does it with
etcd)."""
import os

from lockdlib import Client, Server, free_port, poll_until, server_addr


def client_for(env, addrs, key, name="c", wait=True):
    c = Client(",".join(addrs), key=key, name=name)
    env.clients.append(c)
    return c.wait_ready() if wait else c


def test_first_address_down_uses_next(env):
    srv = env.server(lease_ms=5000)
    dead = f"127.0.0.1:{free_port()}"
    c = client_for(env, [dead, srv.tcp], srv.key)
    assert server_addr(c) == srv.tcp
    assert c.lock_wait("a", "k", flags="-")[1] == 0


def test_bad_list_is_refused(env):
    srv = env.server(lease_ms=5000)
    for bad in (srv.tcp + ",", "," + srv.tcp, srv.tcp + ",,", "a:1:2"):
        c = Client(bad, key=srv.key)
        env.clients.append(c)
        assert c.wait(lambda: c.error is not None, 10), c.lines
        assert "Invalid argument" in c.error, c.error


def test_failover_reclaims_in_grace(env):
    a = Server(env.tmp, lease_ms=5000, grace_ms=20000)
    env.servers.append(a)
    a.start()
    bdir = os.path.join(env.tmp, "b")
    os.mkdir(bdir)
    b = Server(bdir, lease_ms=5000, grace_ms=20000)
    b.key = a.key
    b.state = a.state		# what a replica taking over knows
    env.servers.append(b)

    c = client_for(env, [a.tcp, b.tcp], a.key, name="holder")
    t0, st, tok = c.lock_wait("x", "obj", flags="c")
    assert st == 0 and tok > 0
    assert server_addr(c) == a.tcp

    a.kill()			# SIGKILL
    b.start()
    # The client finds b, resumes into its grace period, reclaims.
    assert poll_until(lambda: "reclaiming" in b.log(), 15), b.log()
    assert poll_until(lambda: "grace period over: every known client" in
                      b.log(), 15), b.log()
    assert server_addr(c) == b.tcp
    assert c.lost == [], c.lost
    assert c.held("obj")[1:] == (1, tok)

    # Another node cannot take the reclaimed lock; new tokens are above.
    d = client_for(env, [a.tcp, b.tcp], a.key, name="other")
    assert d.lock_wait("y", "obj", flags="-")[1] == -11
    t1, st, tok2 = c.lock_wait("z", "obj2", flags="-")
    assert st == 0 and tok2 >> 32 > tok >> 32

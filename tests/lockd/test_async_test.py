"""wslock_test(): F_GETLK without a blocked thread. The question goes out
like a LOCK with TEST and the answer comes back through the tested
callback: 0 free, 1 with the first conflicting holder, -ECANCELED when
withdrawn; asked while the server is away, it is sent after the
reconnect."""
from lockdlib import ECANCELED


def test_async_test_answers(env):
    srv = env.server()
    a = env.client(srv)
    b = env.client(srv, tcp=False)
    assert a.lock_wait("a1", "f", start=0, end=100)[1] == 0
    b.atest("t1", "f", start=50, end=60)
    assert b.tested("t1") == [1, a.session(), 1, 0, 100, 2]
    b.atest("t2", "f", start=100, end=200)
    assert b.tested("t2") == [0]
    # A shared holder conflicts with exclusive, not with shared.
    assert a.lock_wait("a2", "f", mode="s", start=0, end=100)[1] == 0
    b.atest("t3", "f", mode="s", start=0, end=10)
    assert b.tested("t3") == [0]
    b.atest("t4", "f", mode="x", start=0, end=10)
    assert b.tested("t4") == [1, a.session(), 1, 0, 100, 1]
    # The owner's own lock is no conflict; nothing was taken by tests.
    a.atest("t5", "f", mode="x", start=0, end=100)
    assert a.tested("t5") == [0]
    assert b.held("f", mode="s", start=0, end=10)[1] == 0
    # The blocking form agrees.
    assert b.test("f", start=0, end=10) == [1, a.session(), 1, 0, 100, 1]


def test_async_test_while_down(env):
    srv = env.server(lease_ms=4000)
    a = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    srv.stop()
    assert a.wait(lambda: any(st == 0 for _, st in a.states))
    # Withdrawn before it could be sent: cancelled, from the event loop.
    rid = a.atest("t1", "k")
    assert a.cancel(rid) == 0
    assert a.tested("t1") == [-ECANCELED]
    # Asked while down, answered after the reconnect.
    a.atest("t2", "other")
    srv.start()
    assert a.tested("t2", timeout=15) == [0]
    assert list(a.tests) == ["t1", "t2"]

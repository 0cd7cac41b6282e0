"""Shared workspaces across nodes: writes under cluster locks, reads that
see the other node's writes, and flock/fcntl locks that exclude across
nodes (issue 5). Three wsfs nodes over one SOURCE, one wslockd, each node
in its own network namespace (scripts/cluster). WSFS_LONG=1 runs the
appenders at full size."""
import errno
import json
import os
import subprocess
import time

import pytest

import clusterlib
from clusterlib import LONG, finish, lines, wait_line
from wsfstest import errno_of

NODES = (1, 2, 3)


def per_node_in_order(recs):
    """Each writer's records appear in the order it wrote them."""
    last = {}
    for node, seq in recs:
        if seq <= last.get(node, -1):
            return f"{node} record {seq} after {last[node]}"
        last[node] = seq
    return None


def test_appenders_o_append(cluster):
    n = 10000 if LONG else 400
    procs = [cluster.worker(i, "append", "ws/log", f"node{i}", "--count", n)
             for i in NODES]
    for p in procs:
        finish(p, timeout=1800)
    data = clusterlib.read_file(cluster.src("ws", "log"))
    recs, bad = clusterlib.parse_records(data)
    assert bad == [], f"{len(bad)} torn or corrupt records, e.g. {bad[:3]}"
    expected = {(f"node{i}", s) for i in NODES for s in range(n)}
    assert clusterlib.check_once(recs, expected) == []
    assert per_node_in_order(recs) is None
    # Every node reads what is on the backing store.
    for i in NODES:
        assert clusterlib.read_file(cluster.path(i, "ws", "log")) == data


def test_appenders_pwrite_lock_ordered(cluster):
    """Writers take lockf on the whole file, pwrite at the end they see,
    unlock: the end must be fresh after every grant."""
    n = 10000 if LONG else 150
    procs = [cluster.worker(i, "pwrite", "ws/slots", f"node{i}", n)
             for i in NODES]
    for p in procs:
        finish(p, timeout=3600)
    data = clusterlib.read_file(cluster.src("ws", "slots"))
    assert len(data) == 3 * n * clusterlib.RECSIZE, \
        f"{len(data)} bytes for {3 * n} records: some overwrote others"
    recs, bad = clusterlib.parse_fixed(data)
    assert bad == [], f"{len(bad)} bad slots, e.g. {bad[:3]}"
    expected = {(f"node{i}", s) for i in NODES for s in range(n)}
    assert clusterlib.check_once(recs, expected) == []
    assert per_node_in_order(recs) is None


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


def get(path):
    with open(path, "rb") as f:
        return f.read()


def test_read_after_write(cluster):
    """Node A writes and closes; node B then reads exactly A's bytes, even
    with the old contents in its page cache and the same size."""
    a, b = cluster.path(1, "ws", "f"), cluster.path(2, "ws", "f")
    put(a, b"x" * 4096)
    for i, size in enumerate((4096, 4096, 70000, 70000, 5, 300000)):
        writer, reader = (a, b) if i % 2 == 0 else (b, a)
        get(reader)                 # cache the old contents
        os.stat(reader)             # and attributes
        data = os.urandom(size)
        put(writer, data)
        assert get(reader) == data, f"stale read at step {i}"
        assert os.stat(reader).st_size == size
    # The same through long-lived descriptors: B keeps its file open.
    fd = os.open(b, os.O_RDONLY)
    try:
        os.pread(fd, 4096, 0)
        data = os.urandom(4096)
        put(a, data + b"tail")
        assert os.pread(fd, 8192, 0) == data + b"tail"
    finally:
        os.close(fd)


def test_truncate_rename_unlink_across_nodes(cluster):
    a = lambda *p: cluster.path(1, "ws", *p)  # noqa: E731
    b = lambda *p: cluster.path(2, "ws", *p)  # noqa: E731
    data = os.urandom(100000)
    put(a("t"), data)
    assert get(b("t")) == data
    os.truncate(a("t"), 1000)
    assert os.stat(b("t")).st_size == 1000
    assert get(b("t")) == data[:1000]
    os.truncate(b("t"), 50000)      # grows with zeros, from the other side
    assert get(a("t")) == data[:1000] + bytes(49000)

    # rename: B had looked the old name up.
    os.stat(b("t"))
    os.rename(a("t"), a("u"))
    assert errno_of(os.stat, b("t")) == errno.ENOENT
    assert get(b("u")) == data[:1000] + bytes(49000)
    assert sorted(os.listdir(b())) == ["u"]
    # Rename over an existing file B has open data cached for.
    put(b("v"), b"old v")
    assert get(a("v")) == b"old v"
    os.rename(b("u"), b("v"))
    assert get(a("v")) == data[:1000] + bytes(49000)
    assert errno_of(os.stat, a("u")) == errno.ENOENT

    # unlink
    os.stat(b("v"))
    os.unlink(a("v"))
    assert errno_of(os.stat, b("v")) == errno.ENOENT
    assert os.listdir(b()) == []

    # A name B found missing appears when A creates it.
    assert errno_of(os.stat, b("new")) == errno.ENOENT
    put(a("new"), b"hello")
    assert get(b("new")) == b"hello"
    os.mkdir(a("d"))
    put(a("d", "inner"), b"in d")
    assert get(cluster.path(3, "ws", "d", "inner")) == b"in d"
    os.unlink(a("d", "inner"))
    os.rmdir(a("d"))
    assert errno_of(os.stat, cluster.path(3, "ws", "d")) == errno.ENOENT


def test_flock_command_excludes_across_nodes(cluster):
    put(cluster.path(1, "ws", "lockfile"), b"")
    holder = cluster.popen(1, ["flock", "ws/lockfile", "sh", "-c",
                               "echo locked; read x; true"],
                           stdin=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "locked"
    for n, args in ((2, []), (3, ["-s"]), (1, [])):
        p = cluster.run(n, ["flock", "-n", *args, "ws/lockfile", "true"])
        assert p.returncode == 1, f"node{n} flock -n {args}: {p.stderr}"
    waiter = cluster.popen(2, ["flock", "-w", "60", "ws/lockfile", "sh",
                               "-c", "echo got"])
    time.sleep(1.0)
    assert waiter.poll() is None, "node2 got the lock node1 holds"
    holder.stdin.write("\n")
    holder.stdin.close()
    t0 = time.monotonic()
    finish(holder)
    assert finish(waiter).strip() == "got"
    handover = time.monotonic() - t0
    assert handover < 5, f"handover took {handover:.2f}s"
    p = cluster.run(3, ["flock", "-n", "ws/lockfile", "true"])
    assert p.returncode == 0, p.stderr
    # Shared locks from two nodes coexist.
    s1 = cluster.popen(1, ["flock", "-s", "ws/lockfile", "sh", "-c",
                           "echo locked; read x; true"],
                       stdin=subprocess.PIPE)
    assert s1.stdout.readline().strip() == "locked"
    assert cluster.run(2, ["flock", "-n", "-s", "ws/lockfile",
                           "true"]).returncode == 0
    assert cluster.run(3, ["flock", "-n", "ws/lockfile",
                           "true"]).returncode == 1
    s1.stdin.close()
    finish(s1)


def hold(cluster, n, *args):
    p = cluster.worker(n, "hold", *args, stdin=subprocess.PIPE)
    wait_line(p, "locked")
    return p


def release(p):
    p.stdin.write("\n")
    p.stdin.close()
    assert lines(finish(p))[-1][1] == "released"


def attempt(cluster, n, *args):
    p = cluster.run_worker(n, "try", *args)
    out = lines(p.stdout)
    assert out, f"try {args} on node{n}: {p.stdout}{p.stderr}"
    return out[-1][1:]


def test_lockf_byte_ranges_across_nodes(cluster):
    put(cluster.path(1, "ws", "rl"), b"")
    h = hold(cluster, 1, "ws/rl", "lockf", 0, 100)
    busy = attempt(cluster, 2, "ws/rl", "lockf", 50, 10)
    assert busy[0] == "busy" and busy[1] in ("EAGAIN", "EACCES"), busy
    assert attempt(cluster, 2, "ws/rl", "lockf", 100, 50) == ("ok",)
    assert attempt(cluster, 3, "ws/rl", "lockf", 99, 1, "shared")[0] == \
        "busy"
    assert attempt(cluster, 3, "ws/rl", "ofd", 10, 1)[0] == "busy"
    # Shared ranges on two nodes coexist, exclude a writer on a third.
    s = hold(cluster, 2, "ws/rl", "lockf", 200, 50, "shared")
    assert attempt(cluster, 3, "ws/rl", "lockf", 210, 10, "shared") == \
        ("ok",)
    assert attempt(cluster, 3, "ws/rl", "lockf", 249, 5)[0] == "busy"
    release(h)
    assert attempt(cluster, 3, "ws/rl", "lockf", 0, 200) == ("ok",)
    release(s)
    assert attempt(cluster, 3, "ws/rl", "lockf", 0, 0) == ("ok",)


def test_getlk_reports_other_node(cluster):
    put(cluster.path(1, "ws", "gl"), b"")
    h = hold(cluster, 1, "ws/gl", "lockf", 100, 100)
    p = cluster.run_worker(2, "getlk", "ws/gl", 150, 10, check=True)
    got = lines(p.stdout)[-1][1:]
    assert got[:3] == ("wrlck", "100", "100"), got
    p = cluster.run_worker(2, "getlk", "ws/gl", 0, 100, check=True)
    assert lines(p.stdout)[-1][1:] == ("unlck",)
    release(h)
    p = cluster.run_worker(3, "getlk", "ws/gl", 0, 0, check=True)
    assert lines(p.stdout)[-1][1:] == ("unlck",)
    # A shared holder conflicts with a write lock, not a read lock.
    h = hold(cluster, 1, "ws/gl", "lockf", 0, 10, "shared")
    p = cluster.run_worker(2, "getlk", "ws/gl", 5, 1, check=True)
    assert lines(p.stdout)[-1][1:4] == ("rdlck", "0", "10")
    p = cluster.run_worker(2, "getlk", "ws/gl", 5, 1, "shared", check=True)
    assert lines(p.stdout)[-1][1:] == ("unlck",)
    release(h)


def test_setlkw_interrupted_returns_eintr(cluster):
    put(cluster.path(1, "ws", "il"), b"")
    h = hold(cluster, 1, "ws/il", "lockf", 0, 10)
    w = cluster.worker(2, "setlkw-intr", "ws/il", 5, 10, 1.0,
                       stdin=subprocess.PIPE)
    res = wait_line(w, "result", timeout=30)
    assert res[2:4] == ("-1", "EINTR"), res
    assert 0.9 <= float(res[4]) < 5, f"interrupted after {res[4]}s"
    # Nothing waits on the server any more ...
    waiters = [r for r in cluster.locks() if r["type"] == "waiter"]
    assert waiters == [], waiters
    # ... and when node1 lets go, the interrupted process (still alive,
    # its descriptor open) does not end up holding the range.
    release(h)
    assert attempt(cluster, 3, "ws/il", "lockf", 0, 20) == ("ok",)
    w.stdin.close()
    finish(w)


def test_sqlite_two_nodes(cluster):
    if not os.path.exists("/usr/bin/sqlite3"):
        pytest.skip("sqlite3 CLI not installed (scripts/deps)")
    k = 2000 if LONG else 120
    procs = [cluster.worker(i, "sqlite", "ws/db.sqlite", f"node{i}", k)
             for i in (1, 2)]
    committed = 0
    for p in procs:
        out = lines(finish(p, timeout=1800))
        committed += int(out[-1][2])
    assert committed == 2 * k
    p = cluster.run(3, ["sqlite3", "ws/db.sqlite",
                        "PRAGMA integrity_check; SELECT count(*) FROM t; "
                        "SELECT count(DISTINCT node || ':' || seq) FROM t;"],
                    check=True)
    assert p.stdout.split() == ["ok", str(2 * k), str(2 * k)], p.stdout
    assert not os.path.exists(cluster.src("ws", "db.sqlite-journal"))


def test_wsctl_lock_workspace_serializes(cluster):
    log = "ws/sections"
    put(cluster.path(1, "ws", "sections"), b"")
    body = f"echo start $N >> {log}; sleep 0.1; echo end $N >> {log}"
    procs = [cluster.popen(n, ["env", f"N={n}.{i}", clusterlib.WSCTL, "lock",
                               "--workspace", cluster.path(n, "ws"), "--",
                               "sh", "-c", body])
             for n in NODES for i in range(3)]
    for p in procs:
        finish(p)
    got = get(cluster.src("ws", "sections")).decode().split("\n")[:-1]
    assert len(got) == 18
    for i in range(0, len(got), 2):
        a, b = got[i].split(), got[i + 1].split()
        assert a[0] == "start" and b == ["end", a[1]], got


@pytest.mark.parametrize("kind", ["lockf", "flock", "ofd"])
def test_lock_released_when_holder_dies(cluster, kind):
    """A process killed while holding a lock loses it at once, as with
    local locks; the other node does not wait for a lease."""
    put(cluster.path(1, "ws", "die"), b"")
    h = hold(cluster, 1, "ws/die", kind, 0, 0)
    assert attempt(cluster, 2, "ws/die", kind, 0, 0)[0] == "busy"
    h.kill()
    h.wait(timeout=30)
    t0 = time.monotonic()
    while attempt(cluster, 2, "ws/die", kind, 0, 0) != ("ok",):
        assert time.monotonic() - t0 < 3, \
            f"{kind} lock of a dead process still held after 3 s"
        time.sleep(0.1)


def test_wsctl_lock_workspace_is_cluster_wide(cluster):
    """The workspace lock lives on wslockd and excludes the other nodes."""
    h = cluster.popen(1, [clusterlib.WSCTL, "lock", "--workspace",
                          cluster.path(1, "ws"), "--", "sh", "-c",
                          "echo locked; read x; true"],
                      stdin=subprocess.PIPE)
    assert h.stdout.readline().strip() == "locked"
    rows = cluster.locks()
    sess = {r["session"]: r["name"] for r in rows if r["type"] == "session"}
    held = [r for r in rows if r["type"] == "holder" and
            r["key"].startswith("w/")]
    assert len(held) == 1 and held[0]["mode"] == "exclusive", rows
    assert sess[held[0]["session"]] != "node2"
    p = cluster.run(2, [clusterlib.WSCTL, "lock", "--wait", "0",
                        "--workspace", cluster.path(2, "ws"), "--", "true"])
    assert p.returncode == 1, (p.stdout, p.stderr)
    h.stdin.close()
    finish(h)
    p = cluster.run(2, [clusterlib.WSCTL, "lock", "--wait", "0",
                        "--workspace", cluster.path(2, "ws"), "--", "true"])
    assert p.returncode == 0, p.stderr


def lock_errors(cluster, n):
    """Error answers of the lock operation on node n (wsctl status)."""
    p = cluster.run(n, [clusterlib.WSCTL, "status", "--json",
                        cluster.mnt(n)], check=True)
    return json.loads(p.stdout)["operations"].get("lock", {}).get(
        "errors", 0)


def test_lock_errors_counted(cluster):
    """A lock refused because another node holds it, answered by the
    lock module, is counted as an error of the lock operation like
    every error the handlers answer (issue 15)."""
    put(cluster.path(1, "ws", "ec"), b"")
    h = hold(cluster, 1, "ws/ec", "lockf", 0, 10)
    before = lock_errors(cluster, 2)
    assert attempt(cluster, 2, "ws/ec", "lockf", 0, 10)[0] == "busy"
    assert attempt(cluster, 2, "ws/ec", "ofd", 5, 1)[0] == "busy"
    assert lock_errors(cluster, 2) == before + 2
    release(h)

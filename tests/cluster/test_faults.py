"""Faults in a cluster of wsfs nodes (issue 5): a node killed while it
holds locks, wslockd killed and restarted under load, a node cut off from
the lock server and healed. Nothing acknowledged may be lost, no write may
land without its lock, and the survivors must carry on within the lease.

Times: lease 4 s (wslockd --lease-ms), lock_timeout as each test says;
the margins allow for a loaded two-core machine."""
import os
import subprocess
import time

import clusterlib
from clusterlib import Reader
import wsfstest

MARGIN = 3.0


def oks(reader, node):
    return {(node, int(f[2])) for f in reader.get("ok")}


def check_file(c, path, expected, allow_partial=None):
    """The record file on the backing store holds exactly the expected
    records, none torn. allow_partial: a record prefix that may appear
    torn (a write cut short by a killed daemon)."""
    data = clusterlib.read_file(c.src(*path.split("/")))
    recs, bad = clusterlib.parse_records(data)
    if allow_partial is not None:
        bad = [b for b in bad if not b.startswith(allow_partial)]
    assert bad == [], f"{len(bad)} torn or corrupt records: {bad[:3]}"
    problems = clusterlib.check_once(recs, expected)
    assert problems == [], problems
    return recs


def test_kill_node_holding_locks(cluster_factory):
    c = cluster_factory(lock_timeout=20)
    w1 = Reader(c.worker(1, "append", "ws/k", "node1", "--duration", 120,
                         "--fsync"))
    w1.wait("ok", count=20)
    # node1 also holds an application lock on the whole file.
    h = c.worker(1, "hold", "ws/k", "lockf", 0, 0, stdin=subprocess.PIPE)
    clusterlib.wait_line(h, "locked")
    c.kill(1)
    t_kill = time.monotonic()
    w1.p.wait(timeout=30)       # its next write fails: the daemon is gone
    acked = oks(w1, "node1")
    last = max(s for _, s in acked)

    # node2 writes the same file and takes the lock node1 held.
    c.run_worker(2, "append", "ws/k", "node2", "--count", 1,
                 timeout=c.lease + 60, check=True)
    t_write = time.monotonic() - t_kill
    assert t_write <= c.lease + MARGIN, \
        f"node2 waited {t_write:.1f}s for the dead node's write lock"
    while True:
        got = c.run_worker(2, "try", "ws/k", "lockf", 0, 0)
        if got.returncode == 0:
            break
        assert time.monotonic() - t_kill <= c.lease + MARGIN, \
            "the dead node's lockf lock outlived its lease"
        time.sleep(0.2)

    # Everything node1 had fsynced is there; only the record it was
    # writing when killed may be missing or cut short.
    data = clusterlib.read_file(c.src("ws", "k"))
    recs, bad = clusterlib.parse_records(data)
    bad = [b for b in bad if not b.startswith(b"R node1 %d " % (last + 1))]
    assert bad == [], f"torn records: {bad[:3]}"
    present = set(recs)
    assert acked <= present, f"fsynced records lost: " \
        f"{sorted(acked - present)[:5]}"
    assert ("node2", 0) in present
    extra = present - acked - {("node2", 0), ("node1", last + 1)}
    assert extra == set(), f"records nobody wrote: {sorted(extra)[:5]}"

    # The node comes back and sees the file as it is.
    c.start(1)
    assert clusterlib.read_file(c.path(1, "ws", "k")) == data
    h.kill()


def test_lockd_killed_and_restarted_during_writes(cluster_factory):
    """Each node appends to its own file and all to one directory, so
    every node holds cached locks to reclaim; contention for one file is
    the appenders' business."""
    c = cluster_factory(lock_timeout=30)
    ws = {n: Reader(c.worker(n, "append", f"ws/r{n}", f"node{n}",
                             "--duration", 60, "--interval", 0.005))
          for n in (1, 2, 3)}
    for w in ws.values():
        w.wait("ok", count=20)
    c.kill_lockd()
    time.sleep(1.0)
    c.restart_lockd()
    t_restart = time.monotonic()
    # Writes resume on every node: each gets records through after the
    # restart, within the grace period (1.5 leases) and a margin.
    for n, w in ws.items():
        w.wait("ok", after=t_restart, count=20,
               timeout=1.5 * c.lease + c.lease + 10)
    for n, w in ws.items():
        assert w.stop() == 0, f"node{n} writer failed: {w.get()[-3:]}"
        assert w.get("err") == []
    for n, w in ws.items():
        check_file(c, f"ws/r{n}", oks(w, f"node{n}"))
    c.wait_sessions()
    log = wsfstest.read_log(os.path.join(c.dir, "logs", "lockd.log"))
    assert "reclaiming" in log, "no node reclaimed its locks"


def test_cut_node_during_writes(cluster_factory):
    # The lease is shorter than lock_timeout, so that node2, waiting for
    # the lock node1 holds, gets it when node1's lease ends rather than
    # giving up first.
    lock_timeout = 4
    c = cluster_factory(lock_timeout=lock_timeout, lease_ms=2000)
    with open(c.path(1, "ws", "static"), "wb") as f:
        f.write(b"static contents\n")
    w1 = Reader(c.worker(1, "append", "ws/c", "node1", "--duration", 120,
                         "--keep-going", "--interval", 0.02))
    w1.wait("ok", count=10)
    w2 = Reader(c.worker(2, "append", "ws/c", "node2", "--duration", 120,
                         "--interval", 0.02))
    w2.wait("ok", count=10)
    c.cut(1)
    t_cut = time.monotonic()

    # node1's writes fail with EIO once the lease is in doubt and
    # lock_timeout has passed, and never succeed after the lease.
    err = w1.wait("err", after=t_cut,
                  timeout=c.lease + lock_timeout + 20)[0]
    assert err[3] == "EIO", err
    assert err[0] - t_cut <= c.lease + lock_timeout + MARGIN, \
        f"EIO only {err[0] - t_cut:.1f}s after the cut"
    late = [f for f in w1.get("ok", after=t_cut + c.lease + 0.5)]
    assert late == [], f"node1 wrote without a lease: {late[:3]}"

    # Reads keep working on the cut-off node.
    p = c.run(1, ["cat", "ws/static"], timeout=lock_timeout + 30)
    assert p.returncode == 0 and p.stdout == "static contents\n", \
        f"read on the cut node: {p.returncode} {p.stderr}"

    # node2 gets the lock once node1's lease has run out.
    w2.wait("ok", after=t_cut + c.lease, count=5,
            timeout=c.lease + MARGIN + 10)
    times = [f[0] for f in w2.get("ok", after=t_cut - 1)]
    gap = max(b - a for a, b in zip(times, times[1:]))
    assert gap <= c.lease + MARGIN, f"node2 stalled {gap:.1f}s"

    # Heal: node1 writes again without a restart.
    c.heal(1)
    t_heal = time.monotonic()
    w1.wait("ok", after=t_heal, count=5, timeout=30)
    for w in (w1, w2):
        assert w.stop() == 0
    assert w2.get("err") == []
    failed = {("node1", int(f[2])) for f in w1.get("err")}
    written = oks(w1, "node1") | oks(w2, "node2")
    recs = check_file(c, "ws/c", written)
    assert failed & set(recs) == set(), "a write that failed landed"
    log = wsfstest.read_log(os.path.join(c.dir, "logs", "node1.log"))
    assert "node node1" in log and "ws/c" in log and "EIO" in log, log

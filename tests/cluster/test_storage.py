"""Faults of the storage under a shared mount (issue 16), on a replica-3
GlusterFS volume that every node mounts with its own client
(scripts/cluster up --storage gluster). These always run on GlusterFS,
whatever WSFS_STORAGE says, and skip (saying why) only where GlusterFS is
not installed.

scripts/cluster storage-up runs a volume alone, which clusters started
with STORAGE_FROM use one after another (the other cluster tests share
one volume this way); these tests each run on a volume of their own.

Three nodes append fsynced records to one file while the storage fails
under them:

- bricks killed and restarted, one at a time, each after the writers
  have gone on without it and before the next the volume has healed:
  every record whose fsync succeeded is in the file exactly once, no
  record is torn, and the three bricks end up byte for byte the same;
- one node cut from the storage for longer than the lease, its link to
  the lock server up (it keeps its locks and cannot use them), and then
  cut from both (its locks expire and go to the others): the same
  checks, and the lock history (-o lock_log) shows no two nodes holding
  the file's lock at once and fencing tokens that only grow.

Run as a script ("append PATH NODE"), this file is the writer each node
runs: it appends records, fsyncs each, prints "ok SEQ T0 T1" (when
write() was called and returned, CLOCK_REALTIME ns) once fsync has
succeeded and "err SEQ ERRNO" when the write or the fsync failed, until
SIGTERM.
"""
import errno
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import pytest


NODES = 3
# network.ping-timeout of the volume (scripts/cluster): how long a
# client waits for a silent brick before it fails what it sent there.
PING_TIMEOUT = 10.0


# --- The writer (runs on a node through scripts/cluster exec) -----------

def append(path, node):
    """Append records until SIGTERM; never stop on an error, but do not
    spin on a storage that is away."""
    from clusterworker import record, say
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    seq = 0
    while not stop:
        rec = record(node, seq)
        try:
            t0 = time.time_ns()
            n = os.write(fd, rec)
            t1 = time.time_ns()
            if n != len(rec):
                raise SystemExit(f"short write {n} of {len(rec)}")
            os.fsync(fd)
            # When write() was called and when it returned, on the clock
            # of the lock history.
            say("ok", seq, t0, t1)
        except OSError as e:
            say("err", seq, errno.errorcode.get(e.errno, str(e.errno)))
            time.sleep(0.2)
        seq += 1
    os.close(fd)
    say("done", seq)
    return 0


# --- The checks ------------------------------------------------------------

def start_writers(c, name="log"):
    import clusterlib
    return [clusterlib.Reader(c.popen(n, [
        clusterlib.PYTHON, os.path.abspath(__file__), "append",
        c.path(n, "ws", name), f"node{n}"])) for n in range(1, NODES + 1)]


def acked(writers):
    """{(node, seq)} whose fsync succeeded, and {(node, seq)} that
    failed."""
    ok, err = set(), set()
    for n, w in enumerate(writers, 1):
        for f in w.get("ok"):
            ok.add((f"node{n}", int(f[2])))
        for f in w.get("err"):
            err.add((f"node{n}", int(f[2])))
    return ok, err


def wait_progress(w, count=5, after=None, timeout=90):
    """Wait until writer w has acknowledged count more records after
    the monotonic time after (default now); returns that time."""
    after = time.monotonic() if after is None else after
    w.wait("ok", after=after, count=count, timeout=timeout)
    return after


def stop_writers(writers):
    for w in writers:
        rc = w.stop(timeout=PING_TIMEOUT * 3 + 30)
        assert rc == 0, f"writer exit {rc}: {w.errors[-10:]}"


def check_file(c, writers, name="log"):
    """The file as every node, the admin and every brick sees it: the
    same bytes everywhere, no torn record, every acknowledged record
    exactly once, a failed one at most once, nothing else. Returns
    (acked, failed, the records in file order)."""
    import clusterlib
    ok, err = acked(writers)
    data = clusterlib.read_file(c.src("ws", name))
    views = {"admin": data}
    for n in range(1, NODES + 1):
        views[f"node{n}"] = clusterlib.read_file(c.path(n, "ws", name))
    for b in range(1, clusterlib.BRICKS + 1):
        views[f"brick{b}"] = clusterlib.read_file(c.brick(b, "ws", name))
    differ = {k: len(v) for k, v in views.items() if v != data}
    assert not differ, (f"views of ws/{name} differ from the admin's "
                        f"{len(data)} bytes: {differ}")
    recs, bad = clusterlib.parse_records(data)
    assert not bad, f"{len(bad)} torn or corrupt records, e.g. {bad[:3]}"
    seen = {}
    for r in recs:
        seen[r] = seen.get(r, 0) + 1
    lost = sorted(ok - set(seen))
    dups = sorted(r for r, k in seen.items() if k > 1)
    strange = sorted(set(seen) - ok - err)
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {lost[:5]}"
    assert not dups, f"{len(dups)} records more than once, e.g. {dups[:5]}"
    assert not strange, (f"{len(strange)} records never written, e.g. "
                         f"{strange[:5]}")
    return len(ok), len(err), recs


def check_history(log, writers, recs, kills=()):
    """No node wrote without its lock. In the file: a write acknowledged
    although its node lost its lock while the write was under way
    (outlived) must have landed before that loss, that is before every
    record another node began writing after the loss. In the lock
    history no two nodes held the file's lock at once and tokens grew.
    Returns (grants, lost, outlived, conflicts of the history), and
    fails on a late write; the caller judges the conflicts."""
    from test_history import check, holds, parse_log
    with open(log) as f:
        events = parse_log(f.read())
    bad = check(holds(events, kills))
    lost = [(e[0], e[1]) for e in events if e[2] == "lost"]
    # (node, seq) -> (write called, write returned) of acknowledged ones
    span = {}
    for n, w in enumerate(writers, 1):
        for f in w.get("ok"):
            span[(f"node{n}", int(f[2]))] = (int(f[3]), int(f[4]))
    where = {r: i for i, r in enumerate(recs)}
    outlived, late = [], []
    for (node, seq), (t0, t1) in span.items():
        for t, who in lost:
            if who != node or not t0 < t < t1:
                continue
            outlived.append((node, seq))
            after = [r for r, i in where.items()
                     if i < where[(node, seq)] and r[0] != node and
                     span.get(r, (0, 0))[0] > t]
            if after:
                late.append(f"{node} record {seq} began {(t - t0) / 1e9:.1f}"
                            f" s before its node lost its lock, returned "
                            f"{(t1 - t) / 1e9:.1f} s after, and landed "
                            f"after {len(after)} records written later by "
                            f"others, e.g. {after[:3]}")
    assert not late, "writes landed without their lock:\n" + "\n".join(late)
    return (sum(1 for e in events if e[2] == "grant"), len(lost), outlived,
            bad)


@pytest.fixture
def lock_log():
    d = tempfile.mkdtemp(prefix="wsfs-storage-")
    log = os.path.join(d, "locks.log")
    try:
        yield log
    finally:
        try:
            os.unlink(log)
        except FileNotFoundError:
            pass
        os.rmdir(d)


def gluster_cluster(cluster_factory, log=None):
    c = cluster_factory(storage="gluster", own_storage=True,
                        lock_timeout=10, lease_ms=4000,
                        wsfs_opts=f"lock_log={log}" if log else None)
    return c


def host_gluster_state():
    """What the host's own GlusterFS has: a cluster must not change it."""
    state = {}
    for d in ("/var/lib/glusterd", "/var/log/glusterfs", "/run/gluster"):
        state[d] = sorted(os.listdir(d)) if os.path.isdir(d) else None
    state["socket"] = os.path.exists("/run/glusterd.socket")
    return state


def storage_processes(c):
    """Live processes whose command line names the cluster's directory
    (every glusterd, brick, self-heal daemon and client it started)."""
    import wsfstest
    return wsfstest.processes_naming(c.dir)


# --- The tests -------------------------------------------------------------

def test_gluster_up_status_down(cluster_factory):
    """up --storage gluster: a storage namespace with three bricks
    online, each node on its own GlusterFS client over its own link,
    nothing of the host's GlusterFS touched; down stops all of it and
    keeps the bricks."""
    import clusterlib
    import wsfstest
    before = host_gluster_state()
    c = cluster_factory(storage="gluster", own_storage=True, locking=False)
    names = sorted(n for n in os.listdir("/run/netns")
                   if n.startswith(c.name + "-"))
    assert names == sorted([f"{c.name}-lockd", f"{c.name}-storage"] +
                           [f"{c.name}-node{n}" for n in (1, 2, 3)])
    st = c.script("status").stdout
    for b in (1, 2, 3):
        assert f"brick{b}  online" in st, st
    gmnts = [os.path.join(c.dir, "storage", "mnt", f"node{n}")
             for n in (1, 2, 3)]
    for n, g in enumerate(gmnts, 1):
        assert wsfstest.mountinfo(g)["fstype"] == "fuse.glusterfs", g
        assert wsfstest.mountinfo(c.mnt(n))["source"] == g
        assert f"{g} mounted, storage link up" in st, st
    # Each node reaches the storage over its own link only.
    probe = ("import socket, sys\n"
             "try:\n"
             "    socket.create_connection((sys.argv[1], 24007), timeout=3)\n"
             "except OSError as e:\n"
             "    sys.exit(str(e))\n")
    assert c.run(1, [clusterlib.PYTHON, "-c", probe, "10.215.0.1"],
                 timeout=60).returncode == 0
    assert c.run(1, [clusterlib.PYTHON, "-c", probe, "10.214.2.1"],
                 timeout=60).returncode != 0
    # One volume under all nodes, replicated on every brick.
    with open(c.path(1, "ws", "hello"), "w") as f:
        f.write("from node1\n")
    with open(c.path(3, "ws", "hello")) as f:
        assert f.read() == "from node1\n"
    for b in (1, 2, 3):
        with open(c.brick(b, "ws", "hello")) as f:
            assert f.read() == "from node1\n"
    healed, text = c.heal_info()
    assert healed, text
    assert host_gluster_state() == before
    assert storage_processes(c), "no storage process names the cluster dir"
    assert c.down() is None
    assert sorted(n for n in os.listdir("/run/netns")
                  if n.startswith(c.name + "-")) == []
    for g in gmnts + [c.src()]:
        assert wsfstest.mountinfo(g) is None, g
    assert storage_processes(c) == []
    assert host_gluster_state() == before
    assert os.path.exists(c.brick(2, "ws", "hello"))


def test_shared_storage(cluster_env):
    """storage-up starts a volume alone; clusters with STORAGE_FROM use
    it one at a time, each in a directory of its own with clients of its
    own; 'down' leaves the storage running, storage-down is refused while
    a cluster uses it and stops all of it."""
    import clusterlib
    import wsfstest
    reason = clusterlib.gluster_problem()
    if reason:
        pytest.skip(reason)
    before = host_gluster_state()
    s = clusterlib.Storage()
    made = []
    try:
        s.up()
        a = clusterlib.Cluster(nodes=2, storage="gluster", shared=s)
        made.append(a)
        a.up()
        assert a.src() == s.admin(a.name)
        st = a.script("status").stdout
        assert "storage gluster (shared)" in st, st
        for n in (1, 2):
            g = os.path.join(a.dir, "storage", "mnt", f"node{n}")
            assert wsfstest.mountinfo(g)["fstype"] == "fuse.glusterfs", g
            assert wsfstest.mountinfo(a.mnt(n))["source"] == \
                os.path.join(g, a.name)
        with open(a.path(1, "ws", "hello"), "w") as f:
            f.write("from a\n")
        with open(a.path(2, "ws", "hello")) as f:
            assert f.read() == "from a\n"
        for b in (1, 2, 3):
            assert os.path.exists(a.brick(b, "ws", "hello"))
        # One cluster at a time; the storage stays while one uses it.
        b = clusterlib.Cluster(nodes=1, storage="gluster", shared=s)
        made.append(b)
        p = b.script("up", check=False)
        assert p.returncode == 1 and f"used by the cluster in {a.dir}" in \
            p.stderr, p.stderr
        p = s.script("storage-down", check=False)
        assert p.returncode == 1 and "take it down first" in p.stderr
        assert a.down() is None
        assert storage_processes(a) == []
        assert wsfstest.mountinfo(s.admin()) is not None
        # The next cluster finds the volume running, and a's directory.
        b.up()
        assert os.listdir(b.mnt(1)) == ["ws"]
        assert os.path.exists(s.admin(a.name, "ws", "hello"))
        assert b.down() is None
        assert s.down() is None
        assert sorted(n for n in os.listdir("/run/netns")
                      if n.startswith(s.name + "-")) == []
        assert wsfstest.mountinfo(s.admin()) is None
        assert not [p for p in storage_processes(s)]
        assert host_gluster_state() == before
    finally:
        for c in made:
            c.down()
            c.cleanup()
        s.down()
        s.cleanup()


def test_bricks_killed_under_fsyncing_appenders(cluster_factory, lock_log):
    """Each brick in turn killed and restarted under three fsyncing
    appenders: the writers go on with two bricks of three (quorum), the
    restarted brick is healed, and at the end nothing acknowledged is
    lost or doubled and the bricks are equal."""
    c = gluster_cluster(cluster_factory, lock_log)
    writers = start_writers(c)
    for w in writers:
        wait_progress(w, after=0.0)
    heals = []
    for b in (1, 2, 3, 2):
        c.kill_brick(b)
        t = time.monotonic()
        # The writers go on without the brick (two of three are a
        # quorum): every one acknowledges records written after the kill.
        for w in writers:
            wait_progress(w, after=t)
        c.start_brick(b)
        heals.append(c.wait_healed())
        for w in writers:
            wait_progress(w)
    stop_writers(writers)
    final_heal = c.wait_healed()
    ok, err, recs = check_file(c, writers)
    grants, lost, outlived, bad = check_history(lock_log, writers, recs)
    assert not bad, "\n".join(bad[:20])
    print(f"storage bricks: {ok} records acknowledged, {err} failed, "
          f"{len(recs)} in the file; heal after each restart "
          f"{', '.join(f'{h:.1f}' for h in heals)} s, at the end "
          f"{final_heal:.1f} s; {grants} grants, {lost} lost, "
          f"{len(outlived)} writes outlived their lock")
    assert err == 0, f"{err} records failed with a quorum of bricks up"


@pytest.mark.parametrize("length", ["short", "long"])
@pytest.mark.parametrize("lock_link", ["up", "cut"])
def test_node_cut_from_storage(cluster_factory, lock_log, lock_link,
                               length):
    """node1 cut from the storage for longer than the lease, its lock
    link up or cut too. With the lock link up it keeps its session and
    its locks while its writes cannot reach a brick; with both cut its
    session expires and the others take its locks. Either way: nothing
    acknowledged is lost, no record torn or doubled, node1 writes again
    once healed, and no node wrote without its lock (neither in the lock
    history nor by a write that reached the bricks late)."""
    c = gluster_cluster(cluster_factory, lock_log)
    writers = start_writers(c)
    for w in writers:
        wait_progress(w, after=0.0)
    # Short: past the lease, within the clients' ping timeout (node1's
    # client still waits for the bricks: what it sent before the cut
    # arrives when the link comes back, unless the bricks have dropped
    # the connection). Long: past the ping timeout too (it has given up).
    cut_for = 1.5 * c.lease if length == "short" else \
        max(c.lease, PING_TIMEOUT) + 4.0
    t = time.monotonic()
    c.cut_storage(1)
    if lock_link == "cut":
        c.cut(1)
    cut_done = time.monotonic()
    if lock_link == "cut":
        # The others go on: the lease of node1 expires, its locks are
        # freed and they take them.
        for w in writers[1:]:
            wait_progress(w, after=t + c.lease)
    # What the cut is about is its length, so it lasts that long.
    time.sleep(max(0.0, t + cut_for - time.monotonic()))
    if lock_link == "cut":
        c.heal(1)
    c.heal_storage(1)
    healed = time.monotonic()
    # node1 writes again, and so do the others.
    for w in writers:
        wait_progress(w, after=healed)
    back = min(float(f[0]) for f in writers[0].get("ok", after=healed))
    stop_writers(writers)
    heal_time = c.wait_healed()
    ok, err, recs = check_file(c, writers)
    grants, lost, outlived, bad = check_history(lock_log, writers, recs)
    during = [f for f in writers[0].get() if cut_done < f[0] < healed]
    errs = {}
    for n, w in enumerate(writers, 1):
        for f in w.get("err"):
            k = f"node{n} {f[3]} at {f[0] - t:+.1f}s"
            errs[k] = errs.get(k, 0) + 1
    print(f"storage cut: errors (time from the cut) {errs}")
    print(f"storage cut ({lock_link} lock link, {cut_for:.0f} s): {ok} "
          f"records acknowledged, {err} failed, {len(recs)} in the file; "
          f"node1 acknowledged {sum(1 for f in during if f[1] == 'ok')} "
          f"and failed {sum(1 for f in during if f[1] == 'err')} during "
          f"the cut, wrote again {back - healed:.1f} s after the heal; "
          f"heal {heal_time:.1f} s; {grants} grants, {lost} lost, "
          f"{len(outlived)} writes outlived their lock {outlived[:3]}, "
          f"{len(bad)} conflicts in the lock history")
    assert not bad, "\n".join(bad[:20])


def test_link_back_to_a_name_renamed_over(cluster_factory):
    """A file linked back to a name that a rename took from it: node1
    links f to g, node2 renames h over g (f keeps its other name), node3
    removes g, node1 links f to g again. POSIX allows it; GlusterFS's
    bricks refuse it with EEXIST while they keep a gfid2path xattr per
    name of a file (a rename over a file with other links leaves the old
    name's), so the volume runs without them (storage.gfid2path off;
    README, "Storage under a shared mount"). The coherence checker met
    this as seed 202480, turn 25. On the session's volume."""
    c = cluster_factory(storage="gluster", lock_timeout=10, lease_ms=4000)
    d = ("ws", "d")
    os.mkdir(c.path(1, *d))
    with open(c.path(1, *d, "f"), "w") as f:
        f.write("f\n")
    os.link(c.path(1, *d, "f"), c.path(1, *d, "g"))
    with open(c.path(2, *d, "h"), "w") as f:
        f.write("h\n")
    os.rename(c.path(2, *d, "h"), c.path(2, *d, "g"))
    assert os.stat(c.path(2, *d, "f")).st_nlink == 1
    os.unlink(c.path(3, *d, "g"))
    os.link(c.path(1, *d, "f"), c.path(1, *d, "g"))
    for n in (1, 2, 3):
        st = os.stat(c.path(n, *d, "g"))
        assert st.st_ino == os.stat(c.path(n, *d, "f")).st_ino, n
        assert st.st_nlink == 2, (n, st.st_nlink)
        with open(c.path(n, *d, "g")) as f:
            assert f.read() == "f\n", n
    for b in (1, 2, 3):
        assert os.stat(c.brick(b, *d, "g")).st_ino == \
            os.stat(c.brick(b, *d, "f")).st_ino, b


# Run on node1 by test_files_removed_behind_a_nodes_back: every
# operation's result, "ok ..." or the errno's name, one JSON line.
BEHIND_PROBE = """
import errno, json, os, sys
d, fd = sys.argv[1], None
out = {}
def do(k, f):
    try:
        out[k] = "ok " + str(f())
    except OSError as e:
        out[k] = errno.errorcode.get(e.errno, str(e.errno))
def read_new(p):
    with open(p) as f:
        return f.read().strip()
fd = os.open(os.path.join(d, "kept"), os.O_RDWR)
print("opened", flush=True)
sys.stdin.readline()        # the files are removed meanwhile
do("stat gone", lambda: os.stat(os.path.join(d, "gone")).st_size)
do("open gone", lambda: os.close(os.open(os.path.join(d, "gone"),
                                          os.O_RDONLY)))
do("listdir", lambda: sorted(os.listdir(d)))
do("stat kept", lambda: os.stat(os.path.join(d, "kept")).st_size)
do("fstat kept", lambda: os.fstat(fd).st_size)
do("pread kept", lambda: os.pread(fd, 100, 0))
do("pwrite kept", lambda: os.pwrite(fd, b"more", 0))
do("fsync kept", lambda: os.fsync(fd))
do("close kept", lambda: os.close(fd))
do("unlink kept", lambda: os.unlink(os.path.join(d, "kept")))
do("rename gone", lambda: os.rename(os.path.join(d, "gone"),
                                    os.path.join(d, "x")))
print(json.dumps(out), flush=True)
sys.stdin.readline()        # node2 has changed the directory meanwhile
out = {}
do("stat gone", lambda: os.stat(os.path.join(d, "gone")).st_size)
do("open gone", lambda: os.close(os.open(os.path.join(d, "gone"),
                                          os.O_RDONLY)))
do("stat kept", lambda: os.stat(os.path.join(d, "kept")).st_size)
do("read replaced", lambda: read_new(os.path.join(d, "replaced")))
do("listdir", lambda: sorted(os.listdir(d)))
print(json.dumps(out), flush=True)
"""


def test_files_removed_behind_a_nodes_back(cluster_factory):
    """Files node1 knows (one open, one only looked up) removed, and one
    replaced, through the admin's GlusterFS client, not through wsfs: on
    node1 every operation on them answers (at once, no hang) with a
    result or ENOENT/ESTALE, node1's wsfs lives on, and once node2 has
    changed the directory under its lock node1 reads the replacement."""
    import clusterlib
    c = cluster_factory(storage="gluster", lock_timeout=10, lease_ms=4000)
    d = c.path(1, "ws", "d")
    os.mkdir(d)
    for name in ("gone", "kept", "replaced"):
        with open(os.path.join(d, name), "w") as f:
            f.write(f"old {name}\n")
    for name in ("gone", "kept", "replaced"):
        os.stat(os.path.join(d, name))
    p = c.popen(1, [clusterlib.PYTHON, "-c", BEHIND_PROBE, d],
                stdin=subprocess.PIPE)

    def line(go=True):
        """The probe's next line (after telling it to go on)."""
        if go:
            p.stdin.write("\n")
            p.stdin.flush()
        # Only catches a hang: every operation answers at once.
        assert select.select([p.stdout], [], [], 60)[0], "node1 hangs"
        out = p.stdout.readline()
        assert out, p.stderr.read()
        return out

    try:
        assert line(go=False) == "opened\n"
        for name in ("gone", "kept", "replaced"):
            os.unlink(c.src("ws", "d", name))
        with open(c.src("ws", "d", "replaced"), "w") as f:
            f.write("new replaced\n")
        first = json.loads(line())
        print(f"removed behind node1's back: {first}")
        with open(c.path(2, "ws", "d", "other"), "w") as f:
            f.write("node2\n")
        res = json.loads(line())
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
    # Behind the back of a node that may hold the directory's lock (and
    # cache under it): what it cached, or the object is gone.
    gone = ("ENOENT", "ESTALE")
    for k, r in first.items():
        assert r.startswith("ok") or r in gone, (k, r)
    # Once another node changed the directory, node1 asks the storage.
    assert res["stat gone"] in gone and res["open gone"] in gone and \
        res["stat kept"] in gone, res
    assert res["read replaced"] == "ok new replaced", res
    assert res["listdir"] == "ok ['other', 'replaced']", res
    # node1's wsfs lives on and serves the directory.
    with open(c.path(1, "ws", "d", "other")) as f:
        assert f.read() == "node2\n"
    assert sorted(os.listdir(c.path(1, "ws", "d"))) == ["other",
                                                         "replaced"]


def read_text(path):
    with open(path) as f:
        return f.read()


def evict_and_drop(ws, n):
    """Read ws/x0 .. x<n-1>, which evicts wsfs's other fds (max_fds=2),
    then make the kernel drop GlusterFS's inodes."""
    for i in range(n):
        read_text(os.path.join(ws, f"x{i}"))
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def test_file_whose_handle_went_stale(cluster_factory):
    """The same for regular files. A process's O_PATH fd keeps a file's
    wsfs inode (and its name) in the kernel but opens nothing in wsfs, so
    once wsfs evicted its own fd (max_fds) and the kernel dropped
    GlusterFS's inode, wsfs holds only a dead handle. The file must still
    be found by the name the kernel knows, also after a rename and an
    unlink of another name through the mount; one replaced behind wsfs's
    back must never be taken for the old one, and a symlink put in its
    place never followed (a canary outside the workspace)."""
    c = cluster_factory(storage="gluster", nodes=1, wsfs_opts="max_fds=2",
                        lock_timeout=10, lease_ms=4000)
    ws = c.path(1, "ws")
    d = os.path.join(ws, "d")
    os.makedirs(d)
    for name in ("f", "a", "r", "s", "o"):
        with open(os.path.join(d, name), "w") as f:
            f.write(f"{name}\n")
    for i in range(40):
        with open(os.path.join(ws, f"x{i}"), "w") as f:
            f.write(f"{i}\n")
    os.rename(os.path.join(d, "a"), os.path.join(ws, "b"))
    fds = {}
    fds["f"] = os.open(os.path.join(d, "f"), os.O_PATH)
    # A second name, the newest the kernel was given, then removed.
    os.link(os.path.join(d, "f"), os.path.join(ws, "l"))
    os.unlink(os.path.join(ws, "l"))
    fds["b"] = os.open(os.path.join(ws, "b"), os.O_PATH)
    fds["r"] = os.open(os.path.join(d, "r"), os.O_PATH)
    fds["s"] = os.open(os.path.join(d, "s"), os.O_PATH)
    # An open file: wsfs's own fd keeps GlusterFS's inode, and its handle.
    fds["o"] = os.open(os.path.join(d, "o"), os.O_RDONLY)
    # Replaced through the admin's GlusterFS client, not through wsfs.
    with open(c.src("ws", "d", "r.new"), "w") as f:
        f.write("new\n")
    os.rename(c.src("ws", "d", "r.new"), c.src("ws", "d", "r"))
    with open(c.src("canary"), "w") as f:
        f.write("canary\n")
    os.symlink("../../canary", c.src("ws", "d", "s.new"))
    os.rename(c.src("ws", "d", "s.new"), c.src("ws", "d", "s"))

    try:
        evict_and_drop(ws, 40)	# evicts the fds of f, b, r, s and o
        assert read_text(f"/proc/self/fd/{fds['f']}") == "f\n"
        assert read_text(os.path.join(d, "f")) == "f\n"
        assert read_text(f"/proc/self/fd/{fds['b']}") == "a\n"
        assert os.fstat(fds["f"]).st_size == 2
        assert os.pread(fds["o"], 10, 0) == b"o\n"
        assert os.fstat(fds["o"]).st_size == 2
        with pytest.raises(OSError) as e:
            read_text(f"/proc/self/fd/{fds['r']}")
        assert e.value.errno in (errno.ENOENT, errno.ESTALE), e.value
        # The error passed on names the object.
        assert re.search(r"workspace ws \(\d+\), inode \d+: reopen: the "
                         r"storage answered Stale file handle", c.logs())
        # The name leads to the new file: the kernel asks wsfs again.
        assert read_text(os.path.join(d, "r")) == "new\n"
        # A symlink in the file's place is not the file, and not followed.
        with pytest.raises(OSError) as e:
            read_text(f"/proc/self/fd/{fds['s']}")
        assert e.value.errno in (errno.ENOENT, errno.ESTALE), e.value
        with pytest.raises(OSError) as e:
            read_text(os.path.join(d, "s"))
        assert e.value.errno == errno.ENOENT, e.value
    finally:
        for fd in fds.values():
            os.close(fd)


def test_stale_file_looked_up_again(cluster_factory):
    """A lookup of the name of a file whose handle died enters the file
    again as a new inode (its handle differs), while the kernel may still
    hold the old one (an fd): the old one must still be found, through
    the new one while that lives, and by the name once the kernel forgot
    the new one."""
    c = cluster_factory(storage="gluster", nodes=2, wsfs_opts="max_fds=2",
                        lock_timeout=10, lease_ms=4000)
    ws = c.path(1, "ws")
    d = os.path.join(ws, "d")
    os.makedirs(d)
    with open(os.path.join(d, "f"), "w") as f:
        f.write("f\n")
    for i in range(40):
        with open(os.path.join(ws, f"x{i}"), "w") as f:
            f.write(f"{i}\n")

    fd = os.open(os.path.join(d, "f"), os.O_PATH)
    try:
        evict_and_drop(ws, 40)
        # node2 changes d under its lock: node1 gives d's lock back, and
        # its kernel asks for f's name again.
        with open(c.path(2, "ws", "d", "g"), "w") as f:
            f.write("g\n")
        assert read_text(os.path.join(d, "f")) == "f\n"
        assert read_text(f"/proc/self/fd/{fd}") == "f\n"
        evict_and_drop(ws, 40)	# the kernel forgets the new inode
        assert read_text(f"/proc/self/fd/{fd}") == "f\n"
        assert os.fstat(fd).st_size == 2
    finally:
        os.close(fd)


def test_dead_handle_never_opens_another_file(cluster_factory):
    """GlusterFS's FUSE client gives handles of its node ids, and a dead
    one's id can come back for another object of the same generation:
    then the handle opens that one. Files the kernel holds (fds) whose
    backing fds were evicted are read again and again while the client
    forgets and reuses its inodes: every read must give the file's own
    bytes, never another file's (seen once in CI as test
    test_stale_file_looked_up_again reading x38's bytes through f)."""
    c = cluster_factory(storage="gluster", nodes=1, wsfs_opts="max_fds=2",
                        lock_timeout=10, lease_ms=4000)
    ws = c.path(1, "ws")
    d = os.path.join(ws, "held")
    os.makedirs(d)
    want = {}
    for i in range(12):
        want[i] = f"held file {i}\n"
        with open(os.path.join(d, f"h{i}"), "w") as f:
            f.write(want[i])
    for i in range(60):
        with open(os.path.join(ws, f"x{i}"), "w") as f:
            f.write(f"other {i}\n")

    fds = {i: os.open(os.path.join(d, f"h{i}"), os.O_PATH) for i in want}
    try:
        for rnd in range(6):
            evict_and_drop(ws, 60)
            # New GlusterFS inodes, which may take the dropped ids.
            for i in range(60):
                read_text(os.path.join(ws, f"x{i}"))
            for i, fd in fds.items():
                # Found again by its name (inode_reopen_by_name).
                got = read_text(f"/proc/self/fd/{fd}")
                assert got == want[i], \
                    f"round {rnd}: h{i} read as {got!r}\n{c.logs()}"
    finally:
        for fd in fds.values():
            os.close(fd)


def test_directory_whose_handle_went_stale(cluster_factory):
    """GlusterFS's FUSE client gives file handles that die with its kernel
    inode. A directory that is a process's cwd keeps its wsfs inode in
    the kernel while wsfs evicts its fd (max_fds) and the kernel drops
    GlusterFS's inode (drop_caches, or memory pressure): its next use must
    still find it (reopened by name below its parent), not answer ENOENT
    for a directory that is there."""
    c = cluster_factory(storage="gluster", nodes=1, wsfs_opts="max_fds=2",
                        lock_timeout=10, lease_ms=4000)
    ws = c.path(1, "ws")
    os.makedirs(os.path.join(ws, "d", "sub"))
    with open(os.path.join(ws, "d", "inner"), "w") as f:
        f.write("inner\n")
    for i in range(40):
        with open(os.path.join(ws, f"x{i}"), "w") as f:
            f.write(f"{i}\n")
    p = subprocess.Popen(["sleep", "600"], cwd=os.path.join(ws, "d", "sub"))
    try:
        evict_and_drop(ws, 40)	# evicts the fds of d and sub
        cwd = f"/proc/{p.pid}/cwd"
        assert os.listdir(cwd) == []
        assert sorted(os.listdir(os.path.join(cwd, ".."))) == \
            ["inner", "sub"]
        with open(os.path.join(cwd, "..", "inner")) as f:
            assert f.read() == "inner\n"
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "append":
        sys.exit("usage: test_storage.py append PATH NODE")
    sys.exit(append(sys.argv[2], sys.argv[3]))

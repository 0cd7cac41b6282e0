"""The lock history of three writing wsfs nodes over replicated lock
servers under the faults of issue 17: kill -9 of the active wslockd
replica, SIGSTOP of it past its etcd lease and SIGCONT, its link cut
(every replica and etcd member has a namespace and a link of its own in
scripts/cluster), one etcd member killed, and etcd's quorum lost and
restored.

Each node runs the random writer of test_history.py with its lock
history (-o lock_log); after every fault the test waits until every node
was granted a lock again by the replica that is then active, before the
next fault. At the end the checker of test_history.py must find 0
conflicting holds and tokens that only grow, every writer must finish
when asked to, no node may have lost a lock in a failover (only in the
quorum loss, which outlasts the lease), and while etcd had no quorum no
replica granted anything (its grant counter and the history say so).

The pause of a fault is the longest time any writer went without a
completed write around it; the test prints it per fault, and, with
WSFS_HA_PAUSES=FILE, appends "KIND SECONDS" lines to FILE, for the p50
and p99 over many runs.

Lease 10 s, etcd TTL 2 s, lock_timeout 30 s, as in test_ha_cluster.py.
WSFS_HISTORY_SEED seeds the writers and the choice of etcd members.

Run as a script ("mix MOUNT NODE SEED SECONDS"), this file is the
writer: test_history.py's, printing a line "TIME ok" after every append
and pwrite that succeeded."""
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

import test_history

NODES = 3
REPLICAS = 2
LEASE_MS = 10000
TTL_S = 2
# Grace is 1.5 lease by default: a failover is done within
# TTL + lease/2 (a silent replica) + grace; the rest is for the load.
RESUME_S = TTL_S + LEASE_MS / 1000 * 2 + 40
QUORUMLESS_S = 3.0


# --- The writer ------------------------------------------------------------

def progress(f):
    def wrapped(*a):
        f(*a)
        print("%.6f ok" % time.monotonic(), flush=True)
    return wrapped


def writer(mnt, node, seed, seconds):
    test_history.append = progress(test_history.append)
    test_history.pwrite = progress(test_history.pwrite)
    return test_history.mix(mnt, node, seed, seconds)


# --- Looking at the cluster --------------------------------------------------

def metrics(c, i, timeout=2.0):
    """Replica i's metrics as {name: value} (labels dropped), or None if
    it does not answer (stopped, gone)."""
    import wsfstest

    def connect():
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        try:
            s.connect(os.path.join(c.dir, f"lockd-r{i}.metrics"))
        except OSError:
            s.close()
            raise
        return s
    try:
        data = wsfstest.http_get(connect, timeout=timeout)[2]
    except (OSError, ValueError, IndexError):
        return None
    out = {}
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("wslockd_"):
            name, _, val = line.rpartition(" ")
            try:
                out.setdefault(name.split("{")[0], float(val))
            except ValueError:
                pass
    return out


def active(c):
    """The number of the active replica, or None."""
    p = c.script("active-lockd", check=False)
    return int(p.stdout) if p.returncode == 0 else None


def wait_for(what, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")


def etcd_healthy(c, n):
    p = subprocess.run(
        ["ip", "netns", "exec", f"{c.name}-lockd", "curl", "-s", "-m", "2",
         f"http://10.217.{n}.2:2379/health"], capture_output=True, text=True)
    return '"health":"true"' in p.stdout


class History:
    """The shared lock log, read as it grows."""

    def __init__(self, path):
        self.path, self.off, self.events = path, 0, []

    def read(self):
        with open(self.path, "rb") as f:
            f.seek(self.off)
            data = f.read()
        # Only whole lines; a line being appended is read next time.
        end = data.rfind(b"\n") + 1
        self.off += end
        self.events += test_history.parse_log(data[:end].decode())
        return self.events

    def granted_all(self, after_ns, epoch):
        """Has every node been granted a lock in epoch >= epoch after
        after_ns (realtime)?"""
        got = {e[1] for e in self.read() if e[2] == "grant" and
               e[0] > after_ns and e[5] >> 32 >= epoch}
        return len(got) == NODES


class Faults:
    def __init__(self, c, writers, hist, rng):
        self.c, self.writers, self.hist, self.rng = c, writers, hist, rng
        self.pauses = []
        self.quiet = []         # realtime windows without quorum
        self.marks = []         # (realtime, kind) of each fault's start

    def epoch(self, i):
        m = metrics(self.c, i)
        return int(m["wslockd_epoch"]) if m else 0

    def resumed(self, kind, t_fault, rt_fault, epoch):
        """Wait until every node was granted a lock again, then take the
        pause: the longest gap between two completed writes of a node
        that ends after the fault."""
        self.marks.append((rt_fault, kind))
        wait_for(f"every node granted a lock again after {kind}",
                 lambda: self.hist.granted_all(rt_fault, epoch), RESUME_S)
        t_back = time.monotonic()
        for w in self.writers:
            w.wait("ok", after=t_back, timeout=RESUME_S)
        pause = 0.0
        for w in self.writers:
            ts = [f[0] for f in w.get("ok", after=t_fault - 30)]
            gaps = [b - a for a, b in zip(ts, ts[1:]) if b > t_fault]
            pause = max([pause] + gaps)
        self.pauses.append((kind, pause))
        print(f"ha-history: {kind}: pause {pause:.2f} s")

    def failover(self, kind, start, undo=None):
        """Fault the active replica with start(a); wait until another is
        active and every node is served by it; then undo(a)."""
        c = self.c
        a = wait_for("an active replica", lambda: active(c), 30)
        epoch = self.epoch(a)
        t, rt = time.monotonic(), time.time_ns()
        start(a)
        b = wait_for(f"another active replica after {kind}",
                     lambda: (x := active(c)) not in (None, a) and x, 60)
        assert self.epoch(b) > epoch
        self.resumed(kind, t, rt, epoch + 1)
        if undo:
            undo(a)
        return a

    def kill(self):
        self.failover("kill -9", lambda a: self.c.script("kill-lockd"),
                      lambda a: self.c.script("start-lockd"))

    def pause(self):
        c = self.c

        def cont(a):
            before = metrics(c, a, timeout=0.5)
            assert before is None    # stopped: it does not answer
            c.script("cont-lockd", str(a))
            # Awake, it finds its term over and stands by; it sent
            # nothing meanwhile (the history check says so).
            m = wait_for(f"replica {a} standing by after SIGCONT",
                         lambda: (m := metrics(c, a)) and
                         m["wslockd_active"] == 0 and m, 30)
            assert m["wslockd_stepdowns_total"] >= 1, m
        self.failover("SIGSTOP", lambda a: c.script("stop-lockd"), cont)

    def cut(self):
        c = self.c

        def heal(a):
            c.script("heal-lockd", str(a))
            wait_for(f"replica {a} back on etcd, standing by",
                     lambda: (m := metrics(c, a)) and
                     m["wslockd_etcd_healthy"] == 1 and
                     m["wslockd_active"] == 0, 30)
        self.failover("link cut", lambda a: c.script("cut-lockd", str(a)),
                      heal)

    def etcd_member(self):
        c = self.c
        n = self.rng.randint(1, 3)
        a = wait_for("an active replica", lambda: active(c), 30)
        t, rt = time.monotonic(), time.time_ns()
        c.script("kill-etcd", str(n))
        self.resumed(f"etcd member {n} killed", t, rt, self.epoch(a))
        c.script("start-etcd", str(n))
        wait_for(f"etcd member {n} healthy", lambda: etcd_healthy(c, n), 60)

    def quorum(self):
        """Two members down: no replica may stay active or become it, and
        nothing is granted, until they are back."""
        c = self.c
        for n in (1, 2, 3):
            wait_for(f"etcd member {n} healthy",
                     lambda: etcd_healthy(c, n), 60)
        a = wait_for("an active replica", lambda: active(c), 30)
        epoch = self.epoch(a)
        keep = self.rng.randint(1, 3)
        gone = [n for n in (1, 2, 3) if n != keep]
        t, rt = time.monotonic(), time.time_ns()
        for n in gone:
            c.script("kill-etcd", str(n))
        wait_for("no active replica without quorum",
                 lambda: active(c) is None, 30)
        # A grant sent just before the step-down may be logged a moment
        # later by its node.
        time.sleep(1.0)
        rt0 = time.time_ns()
        g0 = {i: metrics(c, i) for i in range(1, REPLICAS + 1)}
        t_end = time.monotonic() + QUORUMLESS_S
        while time.monotonic() < t_end:
            assert active(c) is None, "a replica is active without quorum"
            time.sleep(0.2)
        g1 = {i: metrics(c, i) for i in range(1, REPLICAS + 1)}
        rt1 = time.time_ns()
        for i in g0:
            assert g0[i]["wslockd_grants_total"] == \
                g1[i]["wslockd_grants_total"], (i, g0[i], g1[i])
        self.quiet.append((rt0, rt1))
        for n in gone:
            c.script("start-etcd", str(n))
        self.resumed("quorum lost", t, rt, epoch + 1)


def test_history_ha_faults(cluster_factory, monkeypatch):
    seed = int(os.environ.get("WSFS_HISTORY_SEED", str(time.time_ns() %
                                                          10**6)))
    rng = random.Random(seed)
    from test_ha_cluster import ha_environment
    ha_environment(monkeypatch, REPLICAS, TTL_S)
    with tempfile.TemporaryDirectory(prefix="wsfs-ha-history-") as d:
        _run(cluster_factory, seed, rng, os.path.join(d, "locks.log"))


def _run(cluster_factory, seed, rng, log):
    # Not at the top: the writer (this file as a script) has no wsfstest.
    import clusterlib
    c = cluster_factory(lock_timeout=30, lease_ms=LEASE_MS,
                        wsfs_opts=f"lock_log={log}")
    os.mkdir(c.src("ws", "d"))
    os.chmod(c.src("ws", "d"), 0o777)
    print(f"ha-history: seed {seed}")
    writers = [clusterlib.Reader(c.popen(n, [
        clusterlib.PYTHON, os.path.abspath(__file__), "mix", c.mnt(n),
        f"node{n}", str(seed * 10 + n), "3600"]))
        for n in range(1, NODES + 1)]
    hist = History(log)
    for w in writers:
        w.wait("ok", count=20, timeout=60)
    f = Faults(c, writers, hist, rng)
    f.kill()
    f.pause()
    f.cut()
    f.etcd_member()
    f.quorum()
    # Every writer finishes when asked to: none is stuck in the mount.
    for n, w in enumerate(writers, 1):
        assert w.stop(timeout=c.lock_timeout + 30) == 0, \
            f"node{n} writer: {w.errors[-5:]}"
    counts = [" ".join(w.get("counts")[-1][2:]) for w in writers]
    err = c.down()          # clean unmounts log the last releases
    assert err is None, err
    events = hist.read()
    bad = test_history.check(test_history.holds(events))
    grants = [e for e in events if e[2] == "grant"]
    # Locks lost, by the fault they came after.
    lost = {}
    for e in events:
        if e[2] == "lost":
            k = max([m for m in f.marks if m[0] <= e[0]],
                    default=(0, "before the faults"))[1]
            lost[k] = lost.get(k, 0) + 1
    print(f"ha-history: {len(grants)} grants, lost {lost or 0}, "
          f"conflicts {len(bad)}; writers: {'; '.join(counts)}")
    assert not bad, "\n".join(bad[:20])
    # A failover is a restart to the nodes: none loses a lock in one.
    # Only a quorum lost for longer than the lease may take locks away.
    assert set(lost) <= {"quorum lost"}, lost
    during = [e for e in grants for rt0, rt1 in f.quiet if rt0 <= e[0] <= rt1]
    assert not during, f"grants while etcd had no quorum: {during[:5]}"
    # Every node's tokens only grow (per key, in grant order, across the
    # epochs of the failovers).
    top = {}
    for e in sorted(grants):
        k = (e[1], e[3])
        assert e[5] >= top.get(k, 0), f"token went back: {e} after {top[k]}"
        top[k] = e[5]
    out = os.environ.get("WSFS_HA_PAUSES")
    if out:
        with open(out, "a") as fp:
            for kind, p in f.pauses:
                fp.write(f"{kind.split()[0]} {p:.3f}\n")


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "mix":
        sys.exit("usage: test_ha_history.py mix MOUNT NODE SEED SECONDS")
    sys.exit(writer(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                    float(sys.argv[5])))

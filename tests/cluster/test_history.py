"""The lock history of a randomized cluster run under faults (issue 5):
three nodes run writers doing random mixes of appends, pwrites,
truncates, renames, creates and unlinks on a few shared files, while a
fault thread kills and restarts nodes, kills and restarts wslockd and cuts
nodes off from the lock server and heals them. Every wsfs writes its lock
history (-o lock_log=FILE, one shared file of O_APPEND lines
"REALTIME_NS NODE EVENT KEY MODE TOKEN"); afterwards the checker rebuilds
every node's hold intervals and fails if two nodes ever held conflicting
locks (ex/ex or ex/sh) on one key at overlapping times, or if a later
conflicting grant carried a fencing token not above an earlier one.

A node logs a grant when it starts relying on a lock and a release before
it tells the server, so a logged interval lies inside the server's hold.
An interval ends at the node's release or lost line; for a node that was
SIGKILLed it ends when the kill was done (the process can no longer act),
and one still open at the end ends at the last line of the log (a clean
unmount logs a release for everything held).

The checker differs from the one of tests/lockd/test_lockd_history.py in where
its intervals come from (log lines and kill times rather than the
client's affirmations), so it is its own small function here.

Seeded (WSFS_HISTORY_SEED, printed); 40 s by default, WSFS_LONG=1 runs
5 minutes, WSFS_HISTORY_SECONDS=N any length.

Run as a script ("mix MOUNT NODE SEED SECONDS"), this file is the writer
each node runs."""
import errno
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time

NODES = 3
FILES = ["h0", "h1", "h2"]
NAMES = FILES + ["d/r0", "d/r1"]


# --- The writer (runs on a node through scripts/cluster exec) -----------

def mix(mnt, node, seed, seconds):
    """Random mutations of the shared files until the time is up or
    SIGTERM; every error is counted, not fatal: the faults make EIO,
    ENOTCONN and ENOENT expected. Prints one line of counts."""
    rng = random.Random(seed)
    ws = os.path.join(mnt, "ws")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    counts = {"ok": 0}
    end = time.monotonic() + seconds
    seq = 0

    def p(name):
        return os.path.join(ws, name)

    ops = {
        "append": lambda: append(p(rng.choice(FILES)), node, seq),
        "pwrite": lambda: pwrite(p(rng.choice(FILES)), node, seq,
                                 rng.randrange(0, 65536)),
        "truncate": lambda: os.truncate(p(rng.choice(FILES)),
                                        rng.randrange(0, 8192)),
        "rename": lambda: os.rename(p(rng.choice(NAMES)),
                                    p(rng.choice(NAMES))),
        "create": lambda: append(p(f"d/{node}-{seq % 8}"), node, seq),
        "unlink": lambda: os.unlink(p(f"d/node{rng.randint(1, NODES)}-"
                                      f"{rng.randrange(8)}")),
    }
    weights = [("append", 4), ("pwrite", 3), ("truncate", 1),
               ("rename", 1), ("create", 2), ("unlink", 1)]
    names = [n for n, w in weights for _ in range(w)]
    while not stop and time.monotonic() < end:
        seq += 1
        op = rng.choice(names)
        try:
            if op in ("rename", "create", "unlink"):
                os.makedirs(p("d"), exist_ok=True)
            ops[op]()
            counts["ok"] += 1
        except OSError as e:
            k = errno.errorcode.get(e.errno, str(e.errno))
            counts[k] = counts.get(k, 0) + 1
            # A dead mount or a cut link: do not spin.
            if e.errno in (errno.ENOTCONN, errno.EIO, errno.ENODEV):
                time.sleep(0.2)
        if rng.random() < 0.3:
            time.sleep(rng.random() * 0.02)
    # The worker's line format: monotonic time first (clusterlib.lines).
    print("%.6f counts %s" % (time.monotonic(), " ".join(
        f"{k}={v}" for k, v in sorted(counts.items()))), flush=True)
    return 0


def append(path, node, seq):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"%s %d\n" % (node.encode(), seq))
        if seq % 7 == 0:
            os.fsync(fd)
    finally:
        os.close(fd)


def pwrite(path, node, seq, off):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, b"[%s %d]" % (node.encode(), seq), off)
    finally:
        os.close(fd)


# --- The checker ---------------------------------------------------------

class Hold:
    """One node's hold of one key, [t0, t1] in realtime ns."""

    def __init__(self, node, key, mode, t0, token):
        self.node, self.key, self.mode = node, key, mode
        self.t0, self.t1, self.token = t0, None, token

    def __repr__(self):
        return (f"{self.node} {self.mode} {self.t0}..{self.t1} "
                f"token {self.token}")


def parse_log(text):
    """[(t, node, event, key, mode, token)] from lock_log lines; raises
    ValueError on a line that is not one (a torn append would be a bug)."""
    events = []
    for n, line in enumerate(text.splitlines(), 1):
        f = line.split()
        if len(f) != 6 or \
                f[2] not in ("grant", "cover", "release", "lost") or \
                f[4] not in ("ex", "sh", "-"):
            raise ValueError(f"lock log line {n}: {line!r}")
        events.append((int(f[0]), f[1], f[2], f[3], f[4], int(f[5])))
    return events


def holds(events, kills=(), end=None):
    """Rebuild the hold intervals. kills: [(t, node)], the moments a
    node's daemon was known dead; end: when still-open holds end (default
    the last event). A grant while the node holds the key (an upgrade)
    ends the old hold and starts a new one."""
    if end is None:
        end = max((e[0] for e in events), default=0)
    seq = sorted([(e[0], 0, e) for e in events] +
                 [(t, 1, (t, node, "killed", None, "-", 0))
                  for t, node in kills], key=lambda x: (x[0], x[1]))
    open_, done = {}, []
    for _, _, (t, node, ev, key, mode, token) in seq:
        if ev == "killed":
            for k in [k for k in open_ if k[0] == node]:
                h = open_.pop(k)
                h.t1 = t
                done.append(h)
            continue
        h = open_.pop((node, key), None)
        if h is not None:
            h.t1 = t
            done.append(h)
        if ev == "grant":
            open_[(node, key)] = Hold(node, key, mode, t, token)
        elif ev == "cover":
            # A new object used under its directory's exclusive lock,
            # with no lock (and no token) of its own: checked for
            # overlaps like any hold, not for tokens.
            open_[(node, key)] = Hold(node, key, mode, t, None)
    for h in open_.values():
        h.t1 = max(end, h.t0)
        done.append(h)
    return done


def check(hs):
    """Return a list of violations: conflicting holds of two nodes that
    overlap in time, and conflicting grants whose tokens do not grow in
    grant order."""
    bad = []
    bykey = {}
    for h in hs:
        bykey.setdefault(h.key, []).append(h)
    for key, lst in bykey.items():
        lst.sort(key=lambda h: h.t0)
        active = []
        # The highest token granted so far, per node and mode.
        top = {}
        for b in lst:
            active = [a for a in active if a.t1 > b.t0]
            for a in active:
                if a.node != b.node and "ex" in (a.mode, b.mode):
                    bad.append(f"overlap on {key}: {a} and {b}")
            if b.token is None:
                active.append(b)
                continue
            for (node, mode), tok in top.items():
                if node != b.node and "ex" in (mode, b.mode) and \
                        b.token <= tok:
                    bad.append(f"token did not grow on {key}: {node} {mode} "
                               f"had {tok}, then {b}")
            k = (b.node, b.mode)
            top[k] = max(top.get(k, 0), b.token)
            active.append(b)
    return bad


def check_text(text, kills=(), end=None):
    return check(holds(parse_log(text), kills, end))


def test_checker_catches_conflicts():
    """The checker must be able to fail."""
    ok = ("100 node1 grant k ex 5\n"
          "200 node1 release k ex 0\n"
          "210 node2 grant k sh 6\n"
          "220 node3 grant k sh 7\n"
          "300 node2 release k sh 0\n"
          "310 node3 release k sh 0\n"
          "400 node2 grant k ex 8\n"
          "450 node2 grant other ex 1\n")
    assert check_text(ok) == []
    # ex/ex overlap: node2 granted before node1 released.
    bad = check_text("100 node1 grant k ex 5\n"
                     "150 node2 grant k ex 6\n"
                     "200 node1 release k ex 0\n")
    assert len(bad) == 1 and "overlap" in bad[0], bad
    # ex/sh overlap, found even when the shared hold never ends in the
    # log (it is still open at the end).
    bad = check_text("100 node1 grant k sh 5\n"
                     "150 node2 grant k ex 6\n"
                     "300 node2 release k ex 0\n")
    assert any("overlap" in b for b in bad), bad
    # lost ends a hold as release does; a token going back is caught.
    bad = check_text("100 node1 grant k ex 9\n"
                     "200 node1 lost k ex 0\n"
                     "300 node2 grant k ex 4\n")
    assert len(bad) == 1 and "token" in bad[0], bad
    # A killed node's holds end at the kill, not at the end of the log.
    kill_text = ("100 node1 grant k ex 5\n"
                 "400 node2 grant k ex 6\n"
                 "500 node2 release k ex 0\n")
    assert check_text(kill_text, kills=[(300, "node1")]) == []
    assert check_text(kill_text) != []
    # An upgrade (a grant while holding) ends the shared hold.
    bad = check_text("100 node1 grant k sh 5\n"
                     "200 node1 grant k ex 6\n"
                     "250 node2 grant k sh 7\n"
                     "300 node1 release k ex 0\n")
    assert len(bad) == 1 and "overlap" in bad[0], bad
    # A cover (no token of its own) overlapping another node's hold is a
    # conflict; a grant after the cover ended is not.
    bad = check_text("100 node1 cover k ex 0\n"
                     "150 node2 grant k sh 6\n"
                     "200 node1 release k ex 0\n")
    assert len(bad) == 1 and "overlap" in bad[0], bad
    assert check_text("90 node2 grant k ex 7\n"
                      "95 node2 release k ex 0\n"
                      "100 node1 cover k ex 0\n"
                      "200 node1 release k ex 0\n"
                      "250 node2 grant k ex 8\n") == []
    # Torn lines are an error of their own.
    try:
        parse_log("100 node1 grant k ex 5\n100 node1 gra\n")
    except ValueError:
        pass
    else:
        raise AssertionError("a torn line was accepted")


# --- The run ---------------------------------------------------------------

def seconds():
    if os.environ.get("WSFS_HISTORY_SECONDS"):
        return float(os.environ["WSFS_HISTORY_SECONDS"])
    return 300.0 if os.environ.get("WSFS_LONG") == "1" else 40.0


class Faults(threading.Thread):
    """Injects the faults of issue 5 at random times until deadline."""

    def __init__(self, c, rng, deadline):
        super().__init__(daemon=True)
        self.c, self.rng, self.deadline = c, rng, deadline
        self.kills = []
        self.counts = {"kill": 0, "restart-lockd": 0, "cut": 0}
        self.error = None

    def run(self):
        c, rng = self.c, self.rng
        try:
            time.sleep(2.0)
            # Each kind once in every three faults, in random order, so
            # that even a short run has them all.
            kinds = []
            while time.monotonic() < self.deadline - 6.0:
                if not kinds:
                    kinds = rng.sample(list(self.counts), len(self.counts))
                kind = kinds.pop()
                n = rng.randint(1, NODES)
                if kind == "kill":
                    c.kill(n)
                    self.kills.append((time.time_ns(), f"node{n}"))
                    time.sleep(rng.uniform(0.3, 2.0))
                    c.start(n)
                elif kind == "restart-lockd":
                    c.restart_lockd()
                else:
                    c.cut(n)
                    # Sometimes past the lease, sometimes not.
                    time.sleep(rng.uniform(0.5, 1.5 * c.lease + 1))
                    c.heal(n)
                self.counts[kind] += 1
                time.sleep(rng.uniform(1.0, 4.0))
        except Exception as e:      # reported by the test
            self.error = e


def test_history_random_faults(cluster_factory):
    seed = int(os.environ.get("WSFS_HISTORY_SEED", str(time.time_ns() %
                                                          10**6)))
    rng = random.Random(seed)
    secs = seconds()
    logdir = tempfile.mkdtemp(prefix="wsfs-history-")
    log = os.path.join(logdir, "locks.log")
    try:
        _run(cluster_factory, seed, rng, secs, log)
    finally:
        try:
            os.unlink(log)
        except FileNotFoundError:
            pass
        os.rmdir(logdir)


def where(pid):
    """What a stuck process is doing, from /proc."""
    import wsfstest
    return wsfstest.where(pid)


def _run(cluster_factory, seed, rng, secs, log):
    import clusterlib
    c = cluster_factory(lock_timeout=10, lease_ms=4000,
                        wsfs_opts=f"lock_log={log}")
    os.mkdir(c.src("ws", "d"))
    os.chmod(c.src("ws", "d"), 0o777)
    print(f"history: seed {seed}, {secs:.0f} s")
    deadline = time.monotonic() + secs
    # Absolute paths: after a kill and start the writer's cwd is the
    # dead mount, the path leads to the new one.
    writers = [clusterlib.Reader(c.popen(n, [
        clusterlib.PYTHON, os.path.abspath(__file__), "mix", c.mnt(n),
        f"node{n}", str(seed * 10 + n), str(secs)]))
        for n in range(1, NODES + 1)]
    faults = Faults(c, rng, deadline)
    faults.start()
    faults.join(secs + 120)
    assert not faults.is_alive(), "the fault thread hangs"
    # Every node back and linked before the end.
    for n in range(1, NODES + 1):
        c.heal(n)
    # A writer that is not done a lock_timeout after the end of its run
    # (plus a margin for the last faults) is stuck in the filesystem.
    stuck = []
    for n, w in enumerate(writers, 1):
        try:
            w.p.wait(timeout=max(1.0, deadline - time.monotonic()) +
                     c.lock_timeout + 15)
        except subprocess.TimeoutExpired:
            stuck.append(f"node{n} writer pid {w.p.pid}: {where(w.p.pid)}")
    assert not stuck, "writers stuck in the filesystem:\n" + \
        "\n".join(stuck) + "\n" + c.script("status", check=False).stdout + \
        "\n" + c.daemon_threads()
    for w in writers:
        w.stop(timeout=10)
    if faults.error is not None:
        raise faults.error
    ops = []
    for n, w in enumerate(writers, 1):
        got = w.get("counts")
        ops.append(f"node{n} " + (" ".join(got[-1][2:]) if got else
                                  f"no counts; stderr {w.errors[-5:]}"))
    err = c.down()          # clean unmounts log the last releases
    assert err is None, err
    with open(log) as f:
        text = f.read()
    events = parse_log(text)
    hs = holds(events, faults.kills)
    bad = check(hs)
    grants = [e for e in events if e[2] == "grant"]
    per_node = {f"node{n}": 0 for n in range(1, NODES + 1)}
    for e in grants:
        per_node[e[1]] = per_node.get(e[1], 0) + 1
    keys = {e[3] for e in grants}
    print(f"history: {len(grants)} grants on {len(keys)} keys "
          f"({', '.join(f'{k} {v}' for k, v in sorted(per_node.items()))}), "
          f"{sum(1 for e in events if e[2] == 'lost')} lost, "
          f"faults {faults.counts}, conflicts {len(bad)}")
    print("history: writers: " + "; ".join(ops))
    assert not bad, "\n".join(bad[:20])
    assert all(v > 0 for v in per_node.values()), per_node
    assert all(v > 0 for v in faults.counts.values()), faults.counts


if __name__ == "__main__":
    if len(sys.argv) != 6 or sys.argv[1] != "mix":
        sys.exit("usage: test_history.py mix MOUNT NODE SEED SECONDS")
    sys.exit(mix(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                 float(sys.argv[5])))

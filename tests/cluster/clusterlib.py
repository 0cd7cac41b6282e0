"""Test harness for the cluster tests: drives scripts/cluster with a
private CLUSTER_DIR and namespace prefix, runs the worker on chosen nodes,
asks wslockd what it holds, and checks the record files the writers
leave behind.

Every cluster gets its own CLUSTER_NAME, so a cluster a developer has up
in /run/wsfs-cluster is never touched; 'down' runs in the fixture's
finally, and the worker processes a test starts are killed by pid before
it.
"""
import json
import os
import re
import shutil
import subprocess
import threading
import time

import wsfstest
from clusterworker import RECSIZE, fixed_record, record

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = os.path.join(wsfstest.SRCDIR, "scripts", "cluster")
WORKER = os.path.join(HERE, "clusterworker.py")
PYTHON = wsfstest.PYTHON

LONG = os.environ.get("WSFS_LONG") == "1"

# What SOURCE is: "local" (one directory) or "gluster" (a replica-3
# GlusterFS volume, each node with its own client); WSFS_STORAGE chooses
# it for the whole suite, a test may ask for one.
STORAGE = os.environ.get("WSFS_STORAGE", "local")
STORAGES = ("local", "gluster")
BRICKS = 3

# The binaries the clusters run: copies taken once per session, so that a
# rebuild in the tree during a run cannot swap a program under a test.
BUILDDIR = wsfstest.BUILDDIR
WSFS = wsfstest.WSFS
WSLOCKD = wsfstest.WSLOCKD
WSCTL = wsfstest.WSCTL
PROGRAMS = ("fs/wsfs", "lockd/wslockd", "tools/wsctl")


def snapshot_binaries():
    """Copy the three programs into a temp build dir and use those.
    Returns the dir (the caller removes it)."""
    global BUILDDIR, WSFS, WSLOCKD, WSCTL
    d = wsfstest.make_base("wsfs-cluster-bin-")
    for prog in PROGRAMS:
        os.makedirs(os.path.join(d, os.path.dirname(prog)), exist_ok=True)
        shutil.copy2(os.path.join(wsfstest.BUILDDIR, prog),
                     os.path.join(d, prog))
    BUILDDIR = d
    WSFS, WSLOCKD, WSCTL = (os.path.join(d, p) for p in PROGRAMS)
    return d

_serial = 0


def environment_problem():
    """Why cluster tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "cluster tests need root (network namespaces, mounts)"
    for tool in ("ip", "nsenter", "fusermount3", "setsid"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    reason = wsfstest.fuse_available()
    if reason:
        return reason
    name = f"wsct-probe-{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", name], capture_output=True,
                       text=True)
    if p.returncode != 0:
        return f"'ip netns add' does not work here: {p.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def gluster_problem():
    """Why a cluster on GlusterFS cannot run here, or None."""
    for tool in ("glusterd", "glusterfs", "gluster"):
        if shutil.which(tool) is None:
            return (f"{tool} not installed (Debian: glusterfs-server, "
                    f"glusterfs-client; scripts/deps installs them)")
    for d in ("/var/lib/glusterd", "/var/log/glusterfs"):
        if not os.path.isdir(d):
            return f"{d} missing: glusterfs-server not installed right"
    return None


class ClusterError(Exception):
    pass


def run_script(owner, args, check, timeout):
    """scripts/cluster ARGS in owner's environment (a Storage or a Cluster);
    a failure, when check is set, raises with owner's logs."""
    p = subprocess.run([SCRIPT, *args], env=owner.env, capture_output=True,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise ClusterError(
            f"scripts/cluster {' '.join(args)}: exit {p.returncode}\n"
            f"{p.stdout}{p.stderr}\n{owner.logs()}")
    return p


class Storage:
    """A GlusterFS volume alone (scripts/cluster storage-up), which the
    clusters of a session use one after another (STORAGE_FROM): each
    cluster mounts it with its own clients and gets a directory of its
    own on it, and the seconds glusterd and a new volume take are spent
    once."""

    def __init__(self):
        self.base = wsfstest.make_base("wsfs-storage-")
        self.dir = os.path.join(self.base, "s")
        global _serial
        _serial += 1
        self.name = f"wsst{os.getpid()}-{_serial}"
        self.env = dict(os.environ, CLUSTER_DIR=self.dir,
                        CLUSTER_NAME=self.name, BUILDDIR=BUILDDIR)
        self.env.pop("STORAGE_FROM", None)
        self.is_up = False

    def admin(self, *parts):
        """A path on the volume, through the storage's own client."""
        return os.path.join(self.dir, "storage", "mnt", "admin", *parts)

    def script(self, *args, check=True, timeout=180):
        return run_script(self, args, check, timeout)

    def up(self):
        self.is_up = True     # 'storage-down' is due even if this fails
        self.script("storage-up")

    def down(self):
        """Stop the storage; returns an error text or None."""
        if not self.is_up:
            return None
        p = self.script("storage-down", check=False)
        if p.returncode != 0:
            return (f"scripts/cluster storage-down: exit {p.returncode}\n"
                    f"{p.stdout}{p.stderr}")
        self.is_up = False
        return None

    def logs(self):
        out = []
        for d, names in ((os.path.join(self.dir, "logs"), None),
                         (os.path.join(self.dir, "storage", "log"),
                          ["glusterd.log", "glustershd.log"])):
            if not os.path.isdir(d):
                continue
            for name in names or sorted(os.listdir(d)):
                if os.path.isfile(os.path.join(d, name)):
                    text = wsfstest.read_log(os.path.join(d, name), 3000)
                    out.append(f"--- storage {name}\n{text}")
        return "\n".join(out)

    def cleanup(self):
        if not self.is_up and wsfstest.mountinfo(self.admin()) is None:
            shutil.rmtree(self.base, ignore_errors=True)


class Cluster:
    """One cluster: nodes 1..nodes, wsfs mounts at mnt(n), all over SOURCE
    src(). Options become the environment of scripts/cluster. On gluster
    storage src() is the admin's GlusterFS mount, and the workspaces are
    made there once the volume is up. With shared (a Storage that is up)
    the cluster runs on that volume, SOURCE being its own directory
    there, instead of on a volume of its own."""

    def __init__(self, nodes=3, lock_timeout=10, lease_ms=4000,
                 grace_ms=None, workspaces=("ws",), wsfs_opts=None,
                 storage=None, shared=None):
        global _serial
        _serial += 1
        self.nodes = nodes
        self.lease = lease_ms / 1000.0
        self.lock_timeout = lock_timeout
        self.storage = storage or STORAGE
        if self.storage not in STORAGES:
            raise ClusterError(f"storage {self.storage!r}: want one of "
                               f"{STORAGES}")
        if shared is not None and self.storage != "gluster":
            raise ClusterError("a shared storage is GlusterFS storage")
        self.shared = shared
        self.workspaces = workspaces
        self.base = wsfstest.make_base("wsfs-cluster-")
        self.dir = os.path.join(self.base, "c")
        self.name = f"wsct{os.getpid()}-{_serial}"
        if shared is not None:
            self.source = shared.admin(self.name)
        elif self.storage == "gluster":
            self.source = os.path.join(self.dir, "storage", "mnt", "admin")
        else:
            self.source = os.path.join(self.base, "src")
            os.makedirs(self.source)
            self._make_workspaces()
        self.env = dict(os.environ, CLUSTER_DIR=self.dir,
                        CLUSTER_NAME=self.name, CLUSTER_NODES=str(nodes),
                        SOURCE=self.source, BUILDDIR=BUILDDIR,
                        LOCK_TIMEOUT=str(lock_timeout),
                        LEASE_MS=str(lease_ms),
                        CLUSTER_STORAGE=self.storage)
        self.env.pop("STORAGE_FROM", None)
        if shared is not None:
            self.env["STORAGE_FROM"] = shared.dir
        if grace_ms is not None:
            self.env["GRACE_MS"] = str(grace_ms)
        if wsfs_opts:
            self.env["WSFS_OPTS"] = wsfs_opts
        self.procs = []
        self.is_up = False

    # paths
    def mnt(self, n):
        return os.path.join(self.dir, "mnt", f"node{n}")

    def path(self, n, *parts):
        return os.path.join(self.mnt(n), *parts)

    def src(self, *parts):
        return os.path.join(self.source, *parts)

    @property
    def keyfile(self):
        return os.path.join(self.dir, "cluster.key")

    @property
    def lockd_unix(self):
        return "unix:" + os.path.join(self.dir, "lockd.sock")

    # scripts/cluster
    def script(self, *args, check=True, timeout=120):
        return run_script(self, args, check, timeout)

    def daemon_threads(self):
        """Where every thread of every node's wsfs is, for a failure
        message about something stuck (from scripts/cluster status)."""
        out = []
        st = self.script("status", check=False).stdout
        for line in st.splitlines():
            w = line.split()
            if len(w) >= 4 and w[0].startswith("node") and w[1:3] == [
                    "wsfs", "pid"]:
                pid = w[3].rstrip(",")
                try:
                    tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
                except OSError as e:
                    out.append(f"{w[0]} wsfs {pid}: {e.strerror}")
                    continue
                for t in tids:
                    try:
                        with open(f"/proc/{pid}/task/{t}/comm") as f:
                            comm = f.read().strip()
                    except OSError:
                        comm = "?"
                    out.append(f"{w[0]} wsfs {pid} thread {t} ({comm}): "
                               f"{wsfstest.where(f'{pid}/task/{t}')}")
        return "\n".join(out)
    def _make_workspaces(self):
        for w in self.workspaces:
            p = os.path.join(self.source, w)
            if not os.path.isdir(p):
                os.mkdir(p)
            os.chmod(p, 0o777)

    def up(self):
        self.is_up = True     # 'down' is due from here on, even if up fails
        self.script("up")
        if self.storage == "gluster":
            self._make_workspaces()

    def down(self):
        """Stop the workers, then the cluster. Returns an error text or
        None."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if not self.is_up:
            return None
        p = self.script("down", check=False, timeout=180)
        if p.returncode != 0:
            return f"scripts/cluster down: exit {p.returncode}\n" \
                   f"{p.stdout}{p.stderr}"
        self.is_up = False
        return None

    def cut(self, n):
        self.script("cut", f"node{n}")

    def heal(self, n):
        self.script("heal", f"node{n}")

    def kill(self, n):
        self.script("kill", f"node{n}")

    def start(self, n):
        self.script("start", f"node{n}")

    def kill_lockd(self):
        self.script("kill-lockd")

    def restart_lockd(self):
        self.script("restart-lockd")

    # the storage (gluster only)
    def brick(self, b, *parts):
        """A path in brick b, on the brick's own directory (on a shared
        storage: in the cluster's directory of the volume)."""
        if self.shared is not None:
            return os.path.join(self.shared.dir, "storage", "bricks",
                                f"b{b}", self.name, *parts)
        return os.path.join(self.dir, "storage", "bricks", f"b{b}", *parts)

    def cut_storage(self, n):
        self.script("cut-storage", f"node{n}")

    def heal_storage(self, n):
        self.script("heal-storage", f"node{n}")

    def kill_brick(self, b):
        self.script("kill-brick", str(b))

    def start_brick(self, b):
        self.script("start-brick", str(b))

    def heal_info(self):
        """(healed, text): healed when every brick is connected and
        nothing is left to heal."""
        p = self.script("heal-info", check=False)
        if p.returncode not in (0, 1):
            raise ClusterError(f"heal-info: exit {p.returncode}\n"
                               f"{p.stdout}{p.stderr}")
        return p.returncode == 0, p.stdout + p.stderr

    def wait_healed(self, timeout=120.0):
        """Wait until the volume has healed; returns the seconds it
        took."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        text = ""
        while time.monotonic() < deadline:
            ok, text = self.heal_info()
            if ok:
                return time.monotonic() - t0
            time.sleep(0.5)
        raise ClusterError(f"volume not healed after {timeout}s:\n{text}\n"
                           f"{self.logs()}")

    # running things on a node
    def argv(self, n, argv):
        return [SCRIPT, "exec", f"node{n}", *argv]

    def popen(self, n, argv, stdin=subprocess.DEVNULL, **kw):
        """Start argv on node n (cwd: its mount). Killed in teardown."""
        p = subprocess.Popen(self.argv(n, argv), env=self.env, stdin=stdin,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, **kw)
        self.procs.append(p)
        return p

    def run(self, n, argv, timeout=120, check=False):
        p = subprocess.run(self.argv(n, argv), env=self.env,
                           capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise ClusterError(f"node{n}: {argv}: exit {p.returncode}\n"
                               f"{p.stdout}{p.stderr}")
        return p

    def worker(self, n, *args, **kw):
        return self.popen(n, [PYTHON, WORKER, *map(str, args)], **kw)

    def run_worker(self, n, *args, timeout=120, check=False):
        return self.run(n, [PYTHON, WORKER, *map(str, args)],
                        timeout=timeout, check=check)

    # wslockd
    def locks(self):
        """wsctl locks --json over the lock server's Unix socket."""
        p = subprocess.run([WSCTL, "locks", "--json", "--lockd",
                            self.lockd_unix], capture_output=True, text=True,
                           timeout=30)
        if p.returncode != 0:
            raise ClusterError(f"wsctl locks: exit {p.returncode}: "
                               f"{p.stderr}")
        return json.loads(p.stdout)

    def held(self, node):
        """{key: "shared" or "exclusive"} of the locks wslockd lists as
        held by node's session."""
        rows = self.locks()
        sid = {r["session"] for r in rows
               if r["type"] == "session" and r["name"] == node}
        return {r["key"]: r["mode"] for r in rows
                if r["type"] == "holder" and r["session"] in sid}

    def sessions(self):
        """Names of the connected sessions."""
        return sorted(r["name"] for r in self.locks()
                      if r["type"] == "session" and r["connected"])

    def wait_sessions(self, timeout=10.0):
        """Wait until every node has a connected session on wslockd."""
        want = sorted(f"node{n}" for n in range(1, self.nodes + 1))
        deadline = time.monotonic() + timeout
        have = []
        while time.monotonic() < deadline:
            have = self.sessions()
            if all(w in have for w in want):
                return
            time.sleep(0.1)
        raise ClusterError(f"nodes without a wslockd session after "
                           f"{timeout}s: want {want}, have {have}\n"
                           f"{self.logs()}")

    # logs
    def logs(self):
        out = []
        d = os.path.join(self.dir, "logs")
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            text = wsfstest.read_log(os.path.join(d, name), 6000)
            out.append(f"--- {name}\n{text}")
        # The bricks and the self-heal daemon log into the storage dir.
        d = os.path.join(self.shared.dir if self.shared else self.dir,
                         "storage", "log")
        names = ["glustershd.log"]
        if os.path.isdir(os.path.join(d, "bricks")):
            names += [os.path.join("bricks", b) for b in
                      sorted(os.listdir(os.path.join(d, "bricks")))]
        for name in names:
            if os.path.exists(os.path.join(d, name)):
                text = wsfstest.read_log(os.path.join(d, name), 3000)
                out.append(f"--- storage/{name}\n{text}")
        return "\n".join(out)

    def sanitizer_reports(self):
        d = os.path.join(self.dir, "logs")
        found = []
        for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
            text = wsfstest.read_log(os.path.join(d, name), 10**7)
            if re.search(r"ERROR: \w+Sanitizer|runtime error:", text):
                found.append(name)
        return found

    def cleanup(self):
        if not self.is_up and wsfstest.mountinfo(self.dir) is None:
            shutil.rmtree(self.base, ignore_errors=True)
            # The cluster's directory on a shared volume goes with it.
            if self.shared is not None:
                shutil.rmtree(self.source, ignore_errors=True)


# Output of the worker.
def lines(text):
    """[(time, word, args...)] from the worker's output."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and re.match(r"^\d+\.\d+$", parts[0]):
            out.append((float(parts[0]), *parts[1:]))
    return out


def finish(p, timeout=120):
    """Wait for a worker; returns its stdout, raising with its stderr if
    it failed."""
    if p.stdin is not None and p.stdin.closed:
        p.stdin = None          # communicate() would flush it
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            # Stuck in a filesystem request SIGKILL cannot end; the
            # cluster's teardown kills the daemon, which frees it.
            out, err = "", "(does not die: stuck in the filesystem)"
        raise ClusterError(f"{p.args} timed out after {timeout}s\n{out}{err}")
    if p.returncode != 0:
        raise ClusterError(f"{p.args}: exit {p.returncode}\n{out}{err}")
    return out


def wait_line(p, word, timeout=30):
    """Read p's stdout until a line with word; returns that line's fields."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            raise ClusterError(f"{p.args} ended before '{word}': "
                               f"{p.stderr.read()}")
        f = lines(line)
        if f and f[0][1] == word:
            return f[0]
    raise ClusterError(f"no '{word}' from {p.args} in {timeout}s")


class Reader:
    """Collects a worker's output lines as they come, in a thread, so a
    test can watch several workers at once."""

    def __init__(self, p):
        self.p = p
        self.lines = []
        self.errors = []
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.errthread = threading.Thread(target=self._run_err, daemon=True)
        self.errthread.start()

    def _run(self):
        for line in self.p.stdout:
            for f in lines(line):
                with self.lock:
                    self.lines.append(f)

    def _run_err(self):
        for line in self.p.stderr:
            with self.lock:
                self.errors.append(line.rstrip("\n"))

    def get(self, word=None, after=0.0):
        with self.lock:
            return [f for f in self.lines
                    if (word is None or f[1] == word) and f[0] > after]

    def wait(self, word, after=0.0, count=1, timeout=30):
        """Wait for count lines with word, later than after; returns
        them."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.get(word, after)
            if len(got) >= count:
                return got
            if self.p.poll() is not None and not self.thread.is_alive():
                break
            time.sleep(0.02)
        raise ClusterError(f"{self.p.args}: {count} '{word}' after "
                           f"{after:.3f} not seen in {timeout}s; last "
                           f"lines {self.get()[-5:]}; exit status "
                           f"{self.p.poll()}; stderr {self.errors[-10:]}")

    def stop(self, timeout=60):
        """SIGTERM the worker and wait; returns its exit status."""
        if self.p.poll() is None:
            self.p.terminate()
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                raise ClusterError(f"{self.p.args} hangs in the "
                                   f"filesystem; last lines "
                                   f"{self.get()[-5:]}")
        self.thread.join(timeout=10)
        return self.p.returncode


# The record files.

def parse_records(data):
    """Split a file of append records into (node, seq) pairs; returns
    (records, bad) where bad lists the lines that are not exactly a
    record the worker writes (torn, interleaved or corrupt)."""
    recs, bad = [], []
    for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else \
            data.split(b"\n"):
        m = re.match(rb"^R (\S+) (\d+) ", line)
        if m:
            node, seq = m.group(1).decode(), int(m.group(2))
            if record(node, seq) == line + b"\n":
                recs.append((node, seq))
                continue
        bad.append(line[:120])
    return recs, bad


def parse_fixed(data):
    """The same for fixed-size pwrite records."""
    recs, bad = [], []
    for off in range(0, len(data), RECSIZE):
        chunk = data[off:off + RECSIZE]
        m = re.match(rb"^F (\S+) (\d+) ", chunk)
        if m:
            node, seq = m.group(1).decode(), int(m.group(2))
            if fixed_record(node, seq) == chunk:
                recs.append((node, seq))
                continue
        bad.append((off, chunk[:80]))
    return recs, bad


def check_once(recs, expected):
    """Every expected (node, seq) present exactly once and nothing else.
    Returns a list of problems."""
    problems = []
    seen = {}
    for r in recs:
        seen[r] = seen.get(r, 0) + 1
    dups = [r for r, c in seen.items() if c > 1]
    missing = sorted(set(expected) - set(seen))
    extra = sorted(set(seen) - set(expected))
    if dups:
        problems.append(f"{len(dups)} records more than once, e.g. "
                        f"{dups[:5]}")
    if missing:
        problems.append(f"{len(missing)} records missing, e.g. "
                        f"{missing[:5]}")
    if extra:
        problems.append(f"{len(extra)} unexpected records, e.g. "
                        f"{extra[:5]}")
    return problems


def read_file(path):
    with open(path, "rb") as f:
        return f.read()

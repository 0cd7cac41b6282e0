"""A real etcd cluster and wslockd replicas for the HA tests: three etcd
members on loopback, each with its own data directory under the test's
temporary directory, and wslockd --etcd processes. Every process is
started here and ended by pid."""
import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

from lockdlib import WSLOCKD, free_port, poll_until, terminate, write_key

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Member:
    def __init__(self, d, name, cluster, client_port, peer_port):
        self.dir = d
        self.name = name
        self.cluster = cluster
        self.client = f"http://127.0.0.1:{client_port}"
        self.peer = f"http://127.0.0.1:{peer_port}"
        self.proc = None
        self.logpath = os.path.join(d, f"{name}.log")

    def start(self):
        args = [ETCD, "--name", self.name,
                "--data-dir", os.path.join(self.dir, self.name),
                "--listen-client-urls", self.client,
                "--advertise-client-urls", self.client,
                "--listen-peer-urls", self.peer,
                "--initial-advertise-peer-urls", self.peer,
                "--initial-cluster", self.cluster,
                "--initial-cluster-state", "new",
                "--initial-cluster-token", "wsfs-test",
                "--logger", "zap", "--log-level", "warn"]
        self.logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen(args, stdout=self.logf,
                                     stderr=subprocess.STDOUT)

    def post(self, path, body, timeout=2):
        req = urllib.request.Request(self.client + path,
                                     data=json.dumps(body).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self):
        if self.alive():
            terminate(self.proc)
        self.proc = None


class Etcd:
    """Three members; kill(i) and start(i) take one down and back."""

    def __init__(self, d, n=3):
        self.dir = d
        ports = [(free_port(), free_port()) for _ in range(n)]
        cluster = ",".join(f"e{i}=http://127.0.0.1:{p[1]}"
                           for i, p in enumerate(ports))
        self.members = [Member(d, f"e{i}", cluster, c, p)
                        for i, (c, p) in enumerate(ports)]

    @property
    def endpoints(self):
        return ",".join(m.client for m in self.members)

    def start(self, timeout=60):
        for m in self.members:
            m.start()
        if not poll_until(self.healthy, timeout, 0.2):
            raise RuntimeError("etcd did not form a cluster")
        return self

    def healthy(self):
        """A write goes through (quorum)."""
        for m in self.members:
            if not m.alive():
                continue
            try:
                m.post("/v3/kv/put", {"key": b64("/probe"),
                                      "value": b64("x")})
                return True
            except OSError:
                pass
        return False

    def leader_index(self):
        for i, m in enumerate(self.members):
            if not m.alive():
                continue
            try:
                st = m.post("/v3/maintenance/status", {})
            except OSError:
                continue
            for j, n in enumerate(self.members):
                try:
                    s2 = n.post("/v3/maintenance/status", {})
                except OSError:
                    continue
                if s2["header"]["member_id"] == st.get("leader"):
                    return j
        return None

    def get(self, key):
        for m in self.members:
            if not m.alive():
                continue
            try:
                r = m.post("/v3/kv/range", {"key": b64(key)})
            except OSError:
                continue
            kvs = r.get("kvs", [])
            return base64.b64decode(kvs[0].get("value", "")).decode() \
                if kvs else None
        raise RuntimeError("no etcd member answers")

    def kill(self, i):
        self.members[i].kill()

    def restart(self, i):
        self.members[i].start()

    def stop(self):
        for m in self.members:
            m.stop()


class Replica:
    """One wslockd --etcd in the foreground on 127.0.0.1."""

    def __init__(self, d, name, endpoints, key, lease_ms=10000,
                 ttl_s=2, extra=()):
        self.dir = os.path.join(d, name)
        os.makedirs(self.dir, exist_ok=True)
        self.name = name
        self.key = key
        self.port = free_port()
        self.endpoints = endpoints
        self.lease_ms = lease_ms
        self.ttl_s = ttl_s
        self.extra = list(extra)
        self.proc = None
        self.logstart = 0
        self.logpath = os.path.join(self.dir, "wslockd.log")

    @property
    def tcp(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        args = [WSLOCKD, "-f", "-v", "--listen", self.tcp, "--key", self.key,
                "--lease-ms", str(self.lease_ms), "--etcd", self.endpoints,
                "--etcd-ttl", str(self.ttl_s)] + self.extra
        self.logf = open(self.logpath, "ab")
        # What this run logs starts here (a restart appends).
        self.logstart = os.path.getsize(self.logpath)
        self.proc = subprocess.Popen(args, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        if not poll_until(lambda: "standing by" in self.runlog() or
                          self.proc.poll() is not None, 10):
            raise RuntimeError("replica did not start:\n" + self.log())
        if self.proc.poll() is not None:
            raise RuntimeError("replica exited:\n" + self.log())
        return self

    def log(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def runlog(self):
        """The log of the current (or last) run only."""
        with open(self.logpath, "rb") as f:
            f.seek(self.logstart)
            return f.read().decode(errors="replace")

    def terms(self):
        return self.runlog().count("active replica, term")

    def stepdowns(self):
        return self.runlog().count("stepping down")

    def active(self):
        """Serving now, by its log; a killed replica is not."""
        return self.proc is not None and self.terms() > self.stepdowns()

    def signal(self, sig):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def stop(self):
        """SIGTERM; the exit status (0 for a clean stop), None if gone."""
        if self.proc is None:
            return None
        rc = terminate(self.proc, cont=True)
        self.proc = None
        return rc


def new_key(d):
    return write_key(os.path.join(d, "cluster.key"))


def wait_active(replicas, timeout=30, exclude=()):
    """The one replica that is active, once exactly one is."""
    def one():
        act = [r for r in replicas if r not in exclude and r.proc is not None
               and r.active()]
        return act[0] if len(act) == 1 else None
    return poll_until(one, timeout, 0.05)


def now():
    return time.monotonic()


class Proxy:
    """A TCP forwarder in front of one etcd member, for cutting one
    replica off etcd while its clients still reach it: cut() drops every
    connection and refuses new ones until heal()."""

    def __init__(self, target_port):
        import socket
        import threading
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.cut_now = False
        self.conns = []
        self.mu = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        import socket
        import threading
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            if self.cut_now:
                c.close()
                continue
            try:
                u = socket.create_connection(("127.0.0.1", self.target), 2)
            except OSError:
                c.close()
                continue
            with self.mu:
                self.conns += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b),
                                 daemon=True).start()

    def _pipe(self, a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d or self.cut_now:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass

    def cut(self):
        import socket
        self.cut_now = True
        with self.mu:
            for s in self.conns:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.conns = []

    def heal(self):
        self.cut_now = False

    def close(self):
        self.closed = True
        self.cut()
        self.lsock.close()

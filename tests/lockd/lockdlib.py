"""Helpers for the wslockd integration tests: start and stop real wslockd
processes, and drive tests/lockd/lockclient (a libwslock client that reads
commands on stdin and prints timestamped answers and events) from Python.

Every process is started by the test and ended by pid, in fixtures that
run even when a test fails."""
import os
import queue
import signal
import socket
import struct
import subprocess
import threading
import time

BUILDDIR = os.environ.get("WSFS_BUILDDIR", os.getcwd())
SRCDIR = os.environ.get("WSFS_SRCDIR", os.getcwd())
WSLOCKD = os.path.join(BUILDDIR, "lockd", "wslockd")
WSCTL = os.path.join(BUILDDIR, "tools", "wsctl")
LOCKCLIENT = os.path.join(BUILDDIR, "tests", "lockd", "lockclient")

EAGAIN, EBUSY, ECANCELED, ETIMEDOUT, ENOLCK, ESTALE = 11, 16, 125, 110, 37, 116


# Raw frames, for tests that speak the protocol by hand (PROTOCOL.md).
HDR = struct.Struct(">IHHQ")


def frame(type_, body=b"", rid=0, version=1, length=None):
    n = HDR.size + len(body) if length is None else length
    return HDR.pack(n, version, type_, rid) + body


def hello(flags=0, client_id=1, name=b"raw"):
    return frame(0x0101, struct.pack(">IQI", flags, client_id, 0) +
                 b"N" * 32 + struct.pack(">H", len(name)) + name)


def read_frames(s, timeout=5):
    """Read until EOF; return the list of (type, id, body) received."""
    s.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    out = []
    while len(data) >= HDR.size:
        n, v, t, rid = HDR.unpack_from(data)
        out.append((t, rid, data[HDR.size:n]))
        data = data[n:]
    return out


def unix_conn(server):
    s = socket.socket(socket.AF_UNIX)
    s.connect(server.sock)
    return s


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def write_key(path, data=None):
    with open(path, "wb") as f:
        f.write(data if data is not None else os.urandom(32))
    os.chmod(path, 0o600)
    return path


class Server:
    """One wslockd in the foreground, listening on TCP 127.0.0.1 and on a
    Unix socket in dir; state and log in dir too."""

    def __init__(self, d, lease_ms=1000, grace_ms=None, extra=(),
                 sockdir=None):
        self.dir = d
        self.key = os.path.join(d, "cluster.key")
        if not os.path.exists(self.key):
            write_key(self.key)
        self.sock = os.path.join(sockdir or d, "lockd.sock")
        self.state = os.path.join(d, "state")
        self.port = free_port()
        self.lease_ms = lease_ms
        self.grace_ms = grace_ms
        self.extra = list(extra)
        self.proc = None
        self.logpath = os.path.join(d, "wslockd.log")
        self.logf = None

    @property
    def tcp(self):
        return f"127.0.0.1:{self.port}"

    @property
    def unix(self):
        return f"unix:{self.sock}"

    def start(self):
        args = [WSLOCKD, "-f", "-v", "--listen", self.unix,
                "--listen", self.tcp, "--key", self.key,
                "--state-dir", self.state,
                "--lease-ms", str(self.lease_ms)] + self.extra
        if self.grace_ms is not None:
            args += ["--grace-ms", str(self.grace_ms)]
        self.logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen(args, stdout=self.logf,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"wslockd exited {self.proc.returncode}:"
                                   f"\n{self.log()}")
            if os.path.exists(self.sock):
                try:
                    socket.create_connection(("127.0.0.1", self.port),
                                             timeout=1).close()
                    return self
                except OSError:
                    pass
            time.sleep(0.02)
        raise RuntimeError("wslockd did not start:\n" + self.log())

    def log(self):
        with open(self.logpath, "rb") as f:
            return f.read().decode(errors="replace")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM; returns the exit status (0 for a clean stop)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        rc = self.proc.returncode
        self.proc = None
        return rc

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.logf:
            self.logf.close()
        self.proc = None


class Client:
    """A lockclient process. Synchronous answers (sent, unlocked, held,
    test, lease, session, cancel) arrive in order on self.replies;
    events (done, lost, revoke, state) are recorded with their times."""

    def __init__(self, addr, key=None, name="lockclient"):
        args = [LOCKCLIENT, "--addr", addr, "--name", name]
        if key:
            args += ["--key", key]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     bufsize=1)
        self.replies = queue.Queue()
        self.cv = threading.Condition()
        self.done = {}
        self.tests = {}
        self.lost = []
        self.revokes = []
        self.states = []
        self.lines = []
        self.noise = []
        self.ready = None
        self.error = None
        self.eof = False
        self.t = threading.Thread(target=self._reader, daemon=True)
        self.t.start()

    def _reader(self):
        for line in self.proc.stdout:
            parts = line.split()
            try:
                t, kind, rest = float(parts[0]), parts[1], parts[2:]
            except (IndexError, ValueError):
                # Not ours: a sanitizer report, kept for the failure text.
                with self.cv:
                    self.lines.append(line.rstrip())
                    self.noise.append(line.rstrip())
                continue
            with self.cv:
                self.lines.append(line.rstrip())
                if kind == "done":
                    self.done[rest[0]] = (t, int(rest[1]), int(rest[2]))
                elif kind == "tested":
                    self.tests[rest[0]] = (t, [int(x) for x in rest[1:]])
                elif kind == "lost":
                    self.lost.append((t, rest))
                elif kind == "revoke":
                    self.revokes.append((t, rest))
                elif kind == "state":
                    self.states.append((t, int(rest[0])))
                elif kind == "ready":
                    self.ready = t
                elif kind == "error":
                    self.error = " ".join(rest)
                else:
                    self.replies.put((t, kind, rest))
                self.cv.notify_all()
        with self.cv:
            self.eof = True
            self.cv.notify_all()

    def wait(self, pred, timeout=10):
        with self.cv:
            return self.cv.wait_for(lambda: pred() or self.eof, timeout) \
                and pred()

    def wait_ready(self, timeout=10):
        if not self.wait(lambda: self.ready is not None or
                         self.error is not None, timeout):
            raise RuntimeError("client not ready: " + "\n".join(self.lines))
        if self.error:
            raise RuntimeError("client failed: " + self.error)
        return self

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def reply(self, timeout=10):
        return self.replies.get(timeout=timeout)

    def lock(self, tag, key, mode="x", flags="-", owner=1, start=0,
             end="-"):
        """Send a lock; returns the library's request id."""
        self.send(f"lock {tag} {key} {owner} {start} {end} {mode} {flags}")
        t, kind, rest = self.reply()
        assert kind == "sent", (kind, rest)
        return int(rest[1])

    def result(self, tag, timeout=10):
        """(time, status, token) of a finished lock, or None."""
        self.wait(lambda: tag in self.done, timeout)
        return self.done.get(tag)

    def lock_wait(self, tag, key, mode="x", flags="w", timeout=10, **kw):
        self.lock(tag, key, mode, flags, **kw)
        r = self.result(tag, timeout)
        assert r is not None, f"no answer to lock {tag}: {self.lines}"
        return r

    def unlock(self, key, owner=1, start=0, end="-"):
        self.send(f"unlock {key} {owner} {start} {end}")
        t, kind, rest = self.reply()
        assert kind == "unlocked" and rest[0] == "0", (kind, rest)
        return t

    def held(self, key, mode="x", owner=1, start=0, end="-"):
        self.send(f"held {key} {owner} {start} {end} {mode}")
        t, kind, rest = self.reply()
        assert kind == "held"
        return t, int(rest[0]), int(rest[1])

    def test(self, key, mode="x", owner=1, start=0, end="-"):
        self.send(f"test {key} {owner} {start} {end} {mode}")
        t, kind, rest = self.reply()
        assert kind == "test"
        return [int(x) for x in rest]

    def atest(self, tag, key, mode="x", owner=1, start=0, end="-"):
        """Send an asynchronous test; returns its request id."""
        self.send(f"atest {tag} {key} {owner} {start} {end} {mode}")
        t, kind, rest = self.reply()
        assert kind == "sent", (kind, rest)
        return int(rest[1])

    def tested(self, tag, timeout=10):
        """The answer to an asynchronous test: [status, conflict...]."""
        self.wait(lambda: tag in self.tests, timeout)
        r = self.tests.get(tag)
        return None if r is None else r[1]

    def cancel(self, reqid):
        self.send(f"cancel {reqid}")
        t, kind, rest = self.reply()
        assert kind == "cancel"
        return int(rest[1])

    def session(self):
        self.send("session")
        return int(self.reply()[2][0])

    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(5)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait()
        try:
            self.proc.stdin.close()
        except OSError:
            pass


class Env:
    """Per-test bag of servers and clients, all stopped at the end."""

    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.servers = []
        self.clients = []
        self.noise = []

    def server(self, **kw):
        s = Server(self.tmp, **kw)
        self.servers.append(s)
        return s.start()

    def client(self, server, tcp=True, key=None, wait=True, name="c"):
        addr = server.tcp if tcp else server.unix
        c = Client(addr, key=(key or server.key) if tcp else None, name=name)
        self.clients.append(c)
        return c.wait_ready() if wait else c

    def cleanup(self):
        for c in self.clients:
            c.kill()
        self.noise = [n for c in self.clients for n in c.noise]
        status = []
        for s in self.servers:
            status.append(s.stop())
        return status


def poll_until(fn, timeout=10, step=0.02):
    """Poll fn until it is true or the time runs out; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)

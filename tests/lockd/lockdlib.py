"""Helpers for the wslockd integration tests: start and stop real wslockd
processes, and drive tests/lockd/lockclient (a libwslock client that reads
commands on stdin and prints timestamped answers and events) from Python.

Every process is started by the test and ended by pid, in fixtures that
run even when a test fails."""
import hashlib
import hmac
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


def terminate(proc, timeout=10, cont=False):
    """SIGTERM proc (after SIGCONT, for one that may be stopped), kill it if
    it is still there after timeout; its exit status."""
    if proc.poll() is None:
        if cont:
            os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def server_addr(c):
    """The address of the server client c is connected to."""
    c.send("server")
    t, kind, rest = c.reply()
    assert kind == "server", (kind, rest)
    return rest[0]


# Raw frames, for tests that speak the protocol by hand (PROTOCOL.md).
HDR = struct.Struct(">IHHQ")
VERSION = 4


def frame(type_, body=b"", rid=0, version=VERSION, length=None):
    n = HDR.size + len(body) if length is None else length
    return HDR.pack(n, version, type_, rid) + body


def hello(flags=0, client_id=1, name=b"raw", nonce=b"N" * 32,
          proof=b"\0" * 32):
    return frame(0x0101, struct.pack(">IQI", flags, client_id, 0) +
                 nonce + proof + struct.pack(">H", len(name)) + name)


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


def lock_body(key, owner=1, start=0, end=2**64 - 1, mode=2, flags=0):
    """The body of a LOCK."""
    return struct.pack(">QQQBBH", owner, start, end, mode, flags,
                       len(key)) + key


def hmac256(key, *parts):
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def labelled(key, label, n1, n2, client_id):
    """wsl_mac: HMAC-SHA256(key, label NUL || n1 || n2 || client id)."""
    return hmac256(key, label + b"\0", n1, n2, struct.pack(">Q", client_id))


def resume_proof(secret, nonce, client_id):
    return hmac256(secret, b"wslock2 resume\0", nonce,
                   struct.pack(">Q", client_id))


class RawSession:
    """The TCP side of PROTOCOL.md by hand: HELLO, CHALLENGE, AUTH, then
    WELCOME and every later frame with a MAC under the per-direction
    keys. For tests that forge, replay or inject frames."""

    def __init__(self, server, client_id=None, flags=0, secret=None,
                 proof=None, key=None):
        self.sock = socket.create_connection(("127.0.0.1", server.port),
                                             timeout=5)
        with open(key or server.key, "rb") as f:
            self.key = f.read()
        self.client_id = client_id if client_id is not None else \
            int.from_bytes(os.urandom(8), "big")
        self.nc = os.urandom(32)
        if proof is None:
            proof = resume_proof(secret, self.nc, self.client_id) \
                if secret is not None else b"\0" * 32
        self.buf = b""
        self.rx = self.tx = 0
        self.sock.sendall(hello(flags, self.client_id, nonce=self.nc,
                                proof=proof))
        t, _, body = self.recv_plain()
        assert t == 0x0102, t
        ns = body
        self.sock.sendall(frame(0x0103, labelled(
            self.key, b"wslock2 client", ns, self.nc, self.client_id)))
        self.c2s = labelled(self.key, b"wslock2 c2s", self.nc, ns,
                            self.client_id)
        self.s2c = labelled(self.key, b"wslock2 s2c", self.nc, ns,
                            self.client_id)
        self.pad = labelled(self.key, b"wslock2 secret", self.nc, ns,
                            self.client_id)
        self.welcome = self.error = None
        raw = self.recv_raw()
        t = HDR.unpack_from(raw)[2]
        if t == 0x0302:			# a refusal: before the keys, no MAC
            self.error = struct.unpack_from(">I", raw, HDR.size)[0]
            return
        t, _, body = self.open(raw)
        assert t == 0x0104, t
        (flags, session, lease, grace, epoch, maxf, maxl,
         maxw) = struct.unpack_from(">IQIIIIII", body)
        self.welcome = {"flags": flags, "session": session}
        self.secret = bytes(a ^ b for a, b in zip(body[36:68], self.pad))

    def recv_raw(self):
        """One whole frame as received, or None at EOF."""
        while len(self.buf) < HDR.size or \
                len(self.buf) < HDR.unpack_from(self.buf)[0]:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                return None
            self.buf += chunk
        n = HDR.unpack_from(self.buf)[0]
        raw, self.buf = self.buf[:n], self.buf[n:]
        return raw

    def recv_plain(self):
        raw = self.recv_raw()
        n, _, t, rid = HDR.unpack_from(raw)
        return t, rid, raw[HDR.size:]

    def open(self, raw):
        """Check the MAC of a frame from the server; (type, id, body)."""
        mac = hmac256(self.s2c, struct.pack(">Q", self.rx), raw[:-32])
        assert hmac.compare_digest(mac, raw[-32:]), "bad MAC from server"
        self.rx += 1
        n, _, t, rid = HDR.unpack_from(raw)
        return t, rid, raw[HDR.size:-32]

    def recv(self):
        """The next frame from the server, MAC checked; None at EOF."""
        raw = self.recv_raw()
        return None if raw is None else self.open(raw)

    def seal(self, type_, body=b"", rid=0):
        """A frame with its MAC, as the next one this client sends."""
        head = HDR.pack(HDR.size + len(body) + 32, VERSION, type_, rid)
        mac = hmac256(self.c2s, struct.pack(">Q", self.tx), head + body)
        self.tx += 1
        return head + body + mac

    def send(self, type_, body=b"", rid=0):
        data = self.seal(type_, body, rid)
        self.sock.sendall(data)
        return data

    def closed(self, timeout=5):
        """True once the server closed the connection; frames before the
        EOF are dropped (their MACs are checked where they can be)."""
        self.sock.settimeout(timeout)
        try:
            while self.recv_raw() is not None:
                pass
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


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
        rc = terminate(self.proc)
        self.logf.close()
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

    def ask(self, line, kind):
        """Send a command; (time, fields) of its reply, which must be of
        that kind."""
        self.send(line)
        t, got, rest = self.reply()
        assert got == kind, (got, rest)
        return t, rest

    def lock(self, tag, key, mode="x", flags="-", owner=1, start=0,
             end="-"):
        """Send a lock; returns the library's request id."""
        _, rest = self.ask(f"lock {tag} {key} {owner} {start} {end} {mode} "
                           f"{flags}", "sent")
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
        t, rest = self.ask(f"unlock {key} {owner} {start} {end}", "unlocked")
        assert rest[0] == "0", rest
        return t

    def held(self, key, mode="x", owner=1, start=0, end="-"):
        t, rest = self.ask(f"held {key} {owner} {start} {end} {mode}", "held")
        return t, int(rest[0]), int(rest[1])

    def test(self, key, mode="x", owner=1, start=0, end="-"):
        _, rest = self.ask(f"test {key} {owner} {start} {end} {mode}", "test")
        return [int(x) for x in rest]

    def atest(self, tag, key, mode="x", owner=1, start=0, end="-"):
        """Send an asynchronous test; returns its request id."""
        _, rest = self.ask(f"atest {tag} {key} {owner} {start} {end} {mode}",
                           "sent")
        return int(rest[1])

    def tested(self, tag, timeout=10):
        """The answer to an asynchronous test: [status, conflict...]."""
        self.wait(lambda: tag in self.tests, timeout)
        r = self.tests.get(tag)
        return None if r is None else r[1]

    def cancel(self, reqid):
        return int(self.ask(f"cancel {reqid}", "cancel")[1][1])

    def session(self):
        self.send("session")
        return int(self.reply()[2][0])

    def stats(self):
        """wslock_conn_stats(): a dict, the last error's text included."""
        _, rest = self.ask("stats", "stats")
        names = ("state", "connects", "attempts", "attempts_down",
                 "state_ms", "last_err")
        d = {n: int(v) for n, v in zip(names, rest)}
        d["last_error"] = " ".join(rest[6:])
        return d

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


def owned_env(tmp, programs):
    """The body of a suite's env fixture: skips unless programs are
    built, yields an Env, then stops every process of it and fails the
    test on a wslockd crash or a sanitizer report of a client."""
    import pytest
    for p in programs:
        if not os.access(p, os.X_OK):
            pytest.skip(f"{p} not built (run make check)")
    e = Env(tmp)
    failed = []
    try:
        yield e
    finally:
        for st, s in zip(e.cleanup(), e.servers):
            # A crash or a sanitizer report makes the exit status non-zero.
            if st not in (0, None):
                failed.append(f"wslockd exited {st}:\n{s.log()[-4000:]}")
    # Whatever a client printed besides its protocol: sanitizer reports.
    if any("Sanitizer" in n or "runtime error" in n for n in e.noise):
        failed.append("client output:\n" + "\n".join(e.noise[:60]))
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)


def poll_until(fn, timeout=10, step=0.02):
    """Poll fn until it is true or the time runs out; returns its value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(step)

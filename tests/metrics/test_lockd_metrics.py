"""The Prometheus endpoint of wslockd (--metrics): the exposition parses as
the text format, by a strict reading of our own and by the reference
parser, and every counter and gauge moves when the thing it counts happens
to a real wslockd driven by real clients (lockclient, wsctl, raw sockets).

The wslockd and client plumbing is tests/lockd/lockdlib.py."""
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest

import wsfstest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lockd"))

import lockdlib  # noqa: E402
from lockdlib import (HDR, WSCTL, WSLOCKD, frame, free_port,  # noqa: E402
                      hello, poll_until, write_key)

REQUIRED = {
    "wslockd_sessions": "gauge",
    "wslockd_connections": "gauge",
    "wslockd_locks_held": "gauge",
    "wslockd_waiters": "gauge",
    "wslockd_grants_total": "counter",
    "wslockd_revokes_total": "counter",
    "wslockd_session_expiries_total": "counter",
    "wslockd_auth_failures_total": "counter",
    "wslockd_bad_frames_total": "counter",
    "wslockd_epoch": "gauge",
    "wslockd_grace_active": "gauge",
    "wslockd_uptime_seconds": "gauge",
}
COUNTERS = [n for n, t in REQUIRED.items() if t == "counter"]

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE_RE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?\}})? "
                       r"(\S+)(?: -?[0-9]+)?$")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')
HELP_RE = re.compile(rf"^# HELP ({NAME}) (.*)$")
TYPE_RE = re.compile(rf"^# TYPE ({NAME}) "
                     r"(counter|gauge|histogram|summary|untyped)$")


def parse_strict(text):
    """Read an exposition the way the text format 0.0.4 says it must be
    written; fail on anything else. Returns {(name, labels): value} with
    labels a frozenset of (name, value) pairs, and {name: type}."""
    assert text.endswith("\n"), "exposition must end with a newline"
    helps, types, samples, done = {}, {}, {}, set()
    current = None
    for line in text.split("\n")[:-1]:
        if line.startswith("#"):
            m = HELP_RE.match(line) or TYPE_RE.match(line)
            assert m, f"malformed comment line: {line!r}"
            name = m.group(1)
            table = helps if line.startswith("# HELP") else types
            assert name not in table, f"second HELP/TYPE for {name}"
            assert name not in done and name != current, \
                f"HELP/TYPE of {name} after its samples"
            table[name] = m.group(2)
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"malformed sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        assert name in helps, f"{name} has no # HELP"
        assert name in types, f"{name} has no # TYPE"
        if name != current:
            assert name not in done, f"samples of {name} are not together"
            if current is not None:
                done.add(current)
            current = name
        key = (name, frozenset(LABEL_RE.findall(labels)))
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
        if types[name] == "counter":
            assert name.endswith("_total"), f"counter {name} lacks _total"
            assert samples[key] >= 0
    assert set(helps) == set(types)
    return samples, types


def parse_reference(text):
    """The same exposition read by the Prometheus Python client."""
    from prometheus_client.parser import text_string_to_metric_families
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def http_get(connect, path="/metrics"):
    """One HTTP/1.0 request on a fresh socket; (status, headers, body),
    the body as long as the answer says."""
    status, headers, body = wsfstest.http_get(connect, path)
    assert int(headers["Content-Length"]) == len(body)
    return status, headers, body.decode()


class Metrics:
    """Where a wslockd serves its metrics, and how to read them."""

    def __init__(self, spec):
        self.spec = spec

    def connect(self):
        if self.spec.startswith("unix:"):
            s = socket.socket(socket.AF_UNIX)
            s.connect(self.spec[5:])
            return s
        host, port = self.spec.rsplit(":", 1)
        return socket.create_connection((host, int(port)), timeout=5)

    def wait_up(self, timeout=10):
        """wslockd opens the metrics socket just after its lock sockets."""
        def up():
            try:
                self.connect().close()
                return True
            except OSError:
                return False
        assert poll_until(up, timeout), f"no metrics on {self.spec}"

    def scrape(self):
        status, headers, body = http_get(self.connect)
        assert status == 200
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        samples, types = parse_strict(body)
        assert parse_reference(body) == samples
        return Scrape(samples, types, body)


class Scrape:
    def __init__(self, samples, types, text):
        self.samples, self.types, self.text = samples, types, text

    def __getitem__(self, name):
        return self.samples[(name, frozenset())]

    def sessions(self, state):
        return self.samples[("wslockd_sessions",
                             frozenset({("state", state)}))]

    def counters(self):
        return {n: self[n] for n in COUNTERS}


def moved(before, after):
    """The counters that changed between two scrapes, with their deltas."""
    b, a = before.counters(), after.counters()
    return {n: a[n] - b[n] for n in COUNTERS if a[n] != b[n]}


@pytest.fixture
def env(tmp_path):
    yield from lockdlib.owned_env(tmp_path, (WSLOCKD, WSCTL,
                                             lockdlib.LOCKCLIENT))


def start(env, tcp=True, **kw):
    """A wslockd with a metrics endpoint on 127.0.0.1 or on a Unix socket
    in the test's directory."""
    spec = (f"127.0.0.1:{free_port()}" if tcp else
            f"unix:{os.path.join(env.tmp, 'metrics.sock')}")
    extra = list(kw.pop("extra", ())) + ["--metrics", spec]
    srv = env.server(extra=extra, **kw)
    m = Metrics(spec)
    m.wait_up()
    # lockdlib probes the TCP port once; wait until wslockd saw it close.
    assert poll_until(lambda: m.scrape()["wslockd_connections"] == 0, 5)
    return srv, m


def raw_unix(srv):
    s = socket.socket(socket.AF_UNIX)
    s.connect(srv.sock)
    return s


def wait_closed(s, timeout=5):
    """Read until the server closes the connection."""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()


def test_exposition_format(env):
    srv, m = start(env)
    sc = m.scrape()
    for name, typ in REQUIRED.items():
        assert sc.types.get(name) == typ, name
        assert f"# HELP {name} " in sc.text
    assert all(n.startswith("wslockd_") for n, _ in sc.samples)
    assert sc.sessions("connected") == 0 and sc.sessions("disconnected") == 0
    for n in ("wslockd_connections", "wslockd_locks_held", "wslockd_waiters",
              "wslockd_grace_active"):
        assert sc[n] == 0, n
    assert all(v == 0 for v in sc.counters().values())
    assert sc["wslockd_epoch"] == 1		# a fresh state directory
    up = sc["wslockd_uptime_seconds"]
    time.sleep(0.3)
    assert m.scrape()["wslockd_uptime_seconds"] >= up + 0.25
    # "/" answers too; any other path is not found, and the loop survives.
    assert http_get(m.connect, "/")[0] == 200
    assert http_get(m.connect, "/nope")[0] == 404
    s = m.connect()		# a scraper that connects and says nothing
    s.close()
    assert m.scrape()["wslockd_connections"] == 0
    assert srv.alive()


def test_unix_endpoint_removed_at_stop(env):
    srv, m = start(env, tcp=False)
    path = m.spec[5:]
    assert m.scrape()["wslockd_epoch"] >= 1
    assert os.path.exists(path)
    assert srv.stop() == 0
    assert not os.path.exists(path)


def test_unix_endpoint_owner_only(env):
    """Created mode 0600 even by a wslockd started with umask 0."""
    old = os.umask(0)
    try:
        srv, m = start(env, tcp=False)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(m.spec[5:]).st_mode) == 0o600


# Keeps the metrics socket's backlog full of scrapes that never finish
# their request; blocking connects wait for room.
SLOW_SCRAPER = r"""
import collections, socket, sys
q = collections.deque()
while True:
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.send(b"GET /metr")
    q.append(s)
    if len(q) > 100:
        q.popleft().close()
"""


def one_frame(s, timeout=5):
    s.settimeout(timeout)
    data = b""
    while len(data) < HDR.size or len(data) < HDR.unpack_from(data)[0]:
        chunk = s.recv(65536)
        assert chunk, "connection closed"
        data += chunk
    return HDR.unpack_from(data)


def test_slow_scrapers_do_not_delay_renewals(env):
    """Half-sent scrapes, one after another, must not hold up the loop:
    RENEW round trips stay fast while they come. When the loop served
    scrapes itself, each waited up to 20 ms for its request: 100 round
    trips took about 4 s."""
    srv, m = start(env, tcp=False)
    s = raw_unix(srv)
    s.sendall(hello(client_id=4242))
    assert one_frame(s)[2] == 0x0104
    scraper = subprocess.Popen([sys.executable, "-c", SLOW_SCRAPER,
                                m.spec[5:]])
    try:
        # Its first half-sent requests are in before we measure.
        assert poll_until(lambda: len(os.listdir(f"/proc/{scraper.pid}/fd"))
                          > 20, 10)
        times = []
        for i in range(100):
            t0 = time.monotonic()
            s.sendall(frame(0x0105, rid=i + 1))
            _, _, t, rid = one_frame(s)
            times.append(time.monotonic() - t0)
            assert (t, rid) == (0x0301, i + 1)
        assert scraper.poll() is None
    finally:
        scraper.kill()
        scraper.wait()
    # Generous margins for a loaded machine; the old loop needed ~40 ms.
    assert max(times) < 0.2, max(times)
    assert sum(times) < 1.0, sum(times)
    s.close()
    # And the endpoint still answers.
    assert m.scrape()["wslockd_epoch"] >= 1


def test_grants_and_gauges(env):
    srv, m = start(env)
    s0 = m.scrape()
    r = subprocess.run([WSCTL, "lock", "--lockd", srv.unix, "job", "--",
                        "true"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    s1 = m.scrape()
    assert moved(s0, s1) == {"wslockd_grants_total": 1}
    # wsctl said goodbye: its session is gone, not waiting for a lease.
    assert s1.sessions("connected") == 0 and s1.sessions("disconnected") == 0

    a = env.client(srv)
    b = env.client(srv, tcp=False)
    assert a.lock_wait("a1", "k")[1] == 0
    assert a.lock_wait("a2", "other", mode="s")[1] == 0
    b.lock("b1", "k", flags="w")
    s2 = poll_until(lambda: (lambda s: s if s["wslockd_waiters"] == 1
                             else None)(m.scrape()), 5)
    assert s2, "the waiter never showed"
    assert s2["wslockd_locks_held"] == 2
    assert s2.sessions("connected") == 2
    assert s2["wslockd_connections"] == 2
    assert moved(s1, s2) == {"wslockd_grants_total": 2}
    a.unlock("k")
    assert b.result("b1")[1] == 0
    s3 = m.scrape()
    assert moved(s2, s3) == {"wslockd_grants_total": 1}	# after a wait
    assert s3["wslockd_waiters"] == 0
    assert s3["wslockd_locks_held"] == 2		# a: other, b: k
    # A test for a conflict (F_GETLK) that finds none grants nothing.
    assert b.test("free")[0] == 0
    s4 = m.scrape()
    assert moved(s3, s4) == {} and s4["wslockd_locks_held"] == 2


def test_revokes(env):
    srv, m = start(env)
    a, b = env.client(srv), env.client(srv)
    assert a.lock_wait("a1", "ws/w/1:2", flags="c")[1] == 0
    s0 = m.scrape()
    b.lock("b1", "ws/w/1:2", flags="w")
    assert a.wait(lambda: a.revokes, 5)
    s1 = m.scrape()
    assert moved(s0, s1) == {"wslockd_revokes_total": 1}
    assert s1["wslockd_waiters"] == 1
    a.unlock("ws/w/1:2")
    assert b.result("b1")[1] == 0
    s2 = m.scrape()
    assert moved(s1, s2) == {"wslockd_grants_total": 1}


def test_auth_failures(env, tmp_path):
    srv, m = start(env)
    s0 = m.scrape()
    bad = write_key(str(tmp_path / "bad.key"))
    r = subprocess.run([WSCTL, "lock", "--lockd", srv.tcp, "--key", bad,
                        "job", "--", "true"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 1 and "wrong cluster key" in r.stderr
    s1 = poll_until(lambda: (lambda s: s if moved(s0, s) else None)(
        m.scrape()), 5)
    assert s1 and moved(s0, s1) == {"wslockd_auth_failures_total": 1}
    assert s1["wslockd_connections"] == 0
    assert s1.sessions("connected") == 0


@pytest.mark.parametrize("kind", ["garbage", "before-hello", "truncated"])
def test_bad_frames(env, kind):
    srv, m = start(env)
    a = env.client(srv)
    assert a.lock_wait("a1", "precious")[1] == 0
    s = raw_unix(srv)
    s0 = poll_until(lambda: (lambda x: x if x["wslockd_connections"] == 2
                             else None)(m.scrape()), 5)
    assert s0, "the raw connection never showed"
    if kind == "garbage":
        s.sendall(b"\xde\xad\xbe\xef" * 64)
    elif kind == "before-hello":
        # A LOCK frame (type 0x0201) where only HELLO may come.
        s.sendall(bytes.fromhex("0000002d000202010000000000000000") +
                  b"\0" * 28 + b"k")
    else:
        s.sendall(bytes.fromhex("0000004000020101"))	# half a header
        s.shutdown(socket.SHUT_WR)
    wait_closed(s)
    s1 = poll_until(lambda: (lambda x: x if moved(s0, x) else None)(
        m.scrape()), 5)
    assert s1 and moved(s0, s1) == {"wslockd_bad_frames_total": 1}
    assert s1["wslockd_connections"] == 1
    assert s1["wslockd_locks_held"] == 1		# the good client's lock
    assert "closing connection" in srv.log()


def test_session_expiry(env):
    srv, m = start(env, lease_ms=1500)
    a = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    s0 = m.scrape()
    assert s0.sessions("connected") == 1 and s0["wslockd_locks_held"] == 1
    a.signal(signal.SIGKILL)
    # The connection drops at once; the session waits out its lease.
    s1 = poll_until(lambda: (lambda x: x if x.sessions("disconnected") == 1
                             else None)(m.scrape()), 5)
    assert s1, "the killed client's session never showed as disconnected"
    assert s1["wslockd_locks_held"] == 1 and s1["wslockd_connections"] == 0
    assert moved(s0, s1) == {}
    s2 = poll_until(lambda: (lambda x: x if moved(s0, x) else None)(
        m.scrape()), 10)
    assert s2 and moved(s0, s2) == {"wslockd_session_expiries_total": 1}
    assert s2.sessions("disconnected") == 0
    assert s2["wslockd_locks_held"] == 0
    assert "lease expired" in srv.log()


def test_epoch_and_grace(env):
    srv, m = start(env, lease_ms=10000, grace_ms=1500)
    a = env.client(srv)
    assert a.lock_wait("a1", "k")[1] == 0
    epoch = m.scrape()["wslockd_epoch"]
    a.kill()			# its session stays known across the restart
    assert srv.stop() == 0
    srv.start()
    m.wait_up()
    sc = m.scrape()
    assert sc["wslockd_epoch"] == epoch + 1
    assert sc["wslockd_grace_active"] == 1
    assert all(v == 0 for v in sc.counters().values())	# a new process
    assert poll_until(lambda: m.scrape()["wslockd_grace_active"] == 0, 10)


def test_bad_metrics_address(tmp_path):
    for bad in (["bogus"], ["host:"], [":"], ["[::1]"], ["unix:"],
                [":99999"], ["127.0.0.1:1", "--metrics", "127.0.0.1:2"]):
        r = subprocess.run([WSLOCKD, "-f", "--listen", "127.0.0.1:0",
                            "--metrics"] + bad, capture_output=True,
                           text=True, timeout=10)
        assert r.returncode == 2, (bad, r.stderr)
        assert r.stderr.startswith("wslockd: --metrics")
        assert "--help" in r.stderr
    r = subprocess.run([WSLOCKD, "-f", "--metrics", "bogus"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2
    assert "bad address 'bogus'" in r.stderr
    assert "--help" in r.stderr
    r = subprocess.run([WSLOCKD, "--help"], capture_output=True, text=True)
    assert "--metrics ADDR" in r.stdout


def test_metrics_address_in_use(env):
    """A port or socket that cannot be had stops the start with exit 1."""
    srv, m = start(env, tcp=False)
    st = str(os.path.join(env.tmp, "st2"))
    key = srv.key
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        for spec, why in ((f"127.0.0.1:{port}", "Address already in use"),
                          (m.spec, "another server is listening there"),
                          ("no-such-host.invalid:9100",
                           "cannot resolve the address")):
            r = subprocess.run([WSLOCKD, "-f", "--listen",
                                f"unix:{env.tmp}/l2.sock", "--key", key,
                                "--state-dir", st, "--metrics", spec],
                               capture_output=True, text=True, timeout=30)
            assert r.returncode == 1, (spec, r.stderr)
            assert "metrics" in r.stderr and why in r.stderr, r.stderr
    finally:
        busy.close()
    assert m.scrape()["wslockd_epoch"] >= 1		# the first one still serves

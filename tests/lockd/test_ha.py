"""wslockd replicas on a real etcd cluster (wslockd --etcd): failover on
kill -9, a paused active replica that wakes up and must grant nothing,
the loss of one etcd member and of the etcd quorum. Three etcd members
on loopback, two wslockd replicas, libwslock clients given both.

Every wait polls for an event with a deadline. With WSFS_HA_PAUSES=FILE
the failover pause of each run (kill to the first new grant on the
successor, as the client sees it) is appended to FILE."""
import os
import signal
import time

import pytest

import etcdlib
from etcdlib import Etcd, Replica, new_key, wait_active
from lockdlib import Client, poll_until, server_addr

EAGAIN, EBUSY = -11, -16
LEASE_MS = 10000


@pytest.fixture
def ha(env):
    if not os.access(etcdlib.ETCD, os.X_OK):
        pytest.skip("etcd not installed (etcd-server, see scripts/deps)")
    h = HA(env)
    failed = []
    try:
        yield h
    finally:
        for r in h.replicas:
            st = r.stop()
            if st not in (0, None):
                failed.append(f"replica {r.name} exited {st}:\n"
                              f"{r.log()[-3000:]}")
        h.etcd.stop()
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)


class HA:
    def __init__(self, env, n=2, ttl_s=2, lease_ms=LEASE_MS):
        self.env = env
        self.key = new_key(env.tmp)
        self.etcd = Etcd(env.tmp).start()
        self.replicas = [Replica(env.tmp, f"r{i}", self.etcd.endpoints,
                                 self.key, lease_ms, ttl_s).start()
                         for i in range(n)]

    def addrs(self, first=None):
        rs = list(self.replicas)
        if first is not None:
            rs.remove(first)
            rs.insert(0, first)
        return ",".join(r.tcp for r in rs)

    def client(self, name, addrs=None, wait=True):
        c = Client(addrs or self.addrs(), key=self.key, name=name)
        self.env.clients.append(c)
        return c.wait_ready(20) if wait else c

    def by_addr(self, addr):
        return next(r for r in self.replicas if r.tcp == addr)


def record_pause(seconds):
    path = os.environ.get("WSFS_HA_PAUSES")
    if path:
        with open(path, "a") as f:
            f.write(f"{seconds:.3f}\n")


def lock_until_granted(c, prefix, key, timeout):
    """Try-lock (no wait) every 50 ms until granted; (time, token)."""
    deadline = time.monotonic() + timeout
    i = 0
    while time.monotonic() < deadline:
        i += 1
        tag = f"{prefix}{i}"
        r = c.lock_wait(tag, key, flags="-", timeout=timeout)
        if r[1] == 0:
            return r[0], r[2]
        assert r[1] in (EAGAIN, EBUSY, -104, -110), r
        time.sleep(0.05)
    raise AssertionError(f"no grant of {key} in {timeout} s: {c.lines[-20:]}")


def test_kill_active_fails_over(ha):
    a = wait_active(ha.replicas)
    assert a is not None, [r.log() for r in ha.replicas]
    b = next(r for r in ha.replicas if r is not a)
    c = ha.client("holder", ha.addrs(first=b))	# b refuses, names a
    assert server_addr(c) == a.tcp
    _, st, tok = c.lock_wait("x", "obj", flags="c")
    assert st == 0
    assert int(ha.etcd.get("/wslockd/epoch")) == tok >> 32

    t_kill = time.monotonic()
    a.kill()					# SIGKILL
    assert wait_active(ha.replicas, 30, exclude=(a,)) is b, b.log()
    t_new, tok2 = lock_until_granted(c, "n", "obj2", 30)
    record_pause(t_new - t_kill)
    assert server_addr(c) == b.tcp
    # The lock was reclaimed, not lost, and tokens went on growing.
    assert c.lost == [], c.lost
    assert c.held("obj")[1:] == (1, tok)
    assert tok2 >> 32 > tok >> 32
    assert int(ha.etcd.get("/wslockd/epoch")) == tok2 >> 32
    assert "reclaiming" in b.log()
    # Nobody else gets obj.
    d = ha.client("other")
    assert d.lock_wait("y", "obj", flags="-")[1] == EAGAIN


def test_paused_active_grants_nothing_after_waking(ha):
    a = wait_active(ha.replicas)
    b = next(r for r in ha.replicas if r is not a)
    holder = ha.client("holder")
    _, st, tok = holder.lock_wait("x", "obj", flags="c")
    assert st == 0
    # A client that knows only a: it stays connected through the pause.
    only_a = ha.client("only-a", addrs=a.tcp)

    a.signal(signal.SIGSTOP)
    # A request that reaches a while it sleeps: a must never grant it.
    only_a.lock("late", "contested", flags="w")
    assert wait_active(ha.replicas, 30, exclude=(a,)) is b, b.log()
    # The holder moves on to b and reclaims there.
    assert poll_until(lambda: "reclaiming" in b.log(), 20), b.log()
    assert poll_until(lambda: server_addr(holder) == b.tcp, 20)
    other = ha.client("other", addrs=b.tcp)
    _, tok_b = lock_until_granted(other, "g", "contested", 30)
    assert tok_b >> 32 > tok >> 32

    a.signal(signal.SIGCONT)
    assert poll_until(lambda: a.stepdowns() >= 1, 20), a.log()
    # Whatever a did with the late request, no answer left it.
    time.sleep(0.5)
    assert "late" not in only_a.done, only_a.lines
    assert holder.lost == [], holder.lost
    assert holder.held("obj")[1:] == (1, tok)
    # a stands by; b keeps serving.
    assert b.active() and not a.active()
    assert other.lock_wait("h", "another", flags="-")[1] == 0


def test_one_etcd_member_down_service_goes_on(ha):
    a = wait_active(ha.replicas)
    c = ha.client("c")
    _, st, tok = c.lock_wait("x", "obj", flags="-")
    assert st == 0
    # Kill a follower of etcd (not its leader: an etcd election is a
    # pause of its own, tested with the quorum below).
    lead = ha.etcd.leader_index()
    victim = next(i for i in range(3) if i != lead)
    ha.etcd.kill(victim)
    # Three TTLs later the same replica still serves, without a break.
    deadline = time.monotonic() + 3 * 2 + 1
    n = 0
    while time.monotonic() < deadline:
        n += 1
        assert c.lock_wait(f"k{n}", f"key{n}", flags="-")[1] == 0
        time.sleep(0.1)
    assert a.active() and a.stepdowns() == 0, a.log()
    assert c.lost == []
    assert poll_until(ha.etcd.healthy, 10)


def test_quorum_lost_no_grants_then_resume(ha):
    wait_active(ha.replicas)
    c = ha.client("c")
    _, st, tok = c.lock_wait("x", "obj", flags="-")
    assert st == 0
    ha.etcd.kill(0)
    ha.etcd.kill(1)
    # The active replica cannot renew its etcd lease: it steps down, and
    # no replica serves while etcd has no quorum.
    assert poll_until(lambda: not any(r.active() for r in ha.replicas), 20), \
        [r.log()[-2000:] for r in ha.replicas]
    t_down = time.monotonic()
    c.lock("q", "obj3", flags="w")
    while time.monotonic() < t_down + 4:
        assert "q" not in c.done, c.lines
        assert not any(r.active() for r in ha.replicas)
        time.sleep(0.1)
    ha.etcd.restart(0)
    ha.etcd.restart(1)
    assert poll_until(ha.etcd.healthy, 60, 0.2)
    assert wait_active(ha.replicas, 60) is not None
    # The waiting request is sent again to the new active and granted.
    r = c.result("q", 60)
    assert r is not None and r[1] == 0, c.lines[-20:]
    assert r[2] >> 32 > tok >> 32


def scrape(port):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=5) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()
            out[name] = float(value)
    return out


def test_metrics_and_wsctl_show_the_active_replica(env):
    import subprocess
    from lockdlib import WSCTL, free_port
    if not os.access(etcdlib.ETCD, os.X_OK):
        pytest.skip("etcd not installed (etcd-server, see scripts/deps)")
    key = new_key(env.tmp)
    etcd = Etcd(env.tmp).start()
    ports = [free_port(), free_port()]
    rs = [Replica(env.tmp, f"r{i}", etcd.endpoints, key, LEASE_MS, 2,
                  extra=["--metrics", f"127.0.0.1:{ports[i]}"])
          for i in range(2)]
    try:
        for r in rs:
            r.start()
        a = wait_active(rs)
        ia = rs.index(a)
        ms = [scrape(p) for p in ports]
        assert ms[ia]["wslockd_active"] == 1 and ms[1 - ia]["wslockd_active"] == 0
        assert all(m["wslockd_replicated"] == 1 for m in ms)
        assert poll_until(lambda: all(scrape(p)["wslockd_etcd_healthy"] == 1
                                      for p in ports), 10)
        epoch = int(etcd.get("/wslockd/epoch"))
        assert ms[ia]["wslockd_epoch"] == epoch
        assert ms[ia]["wslockd_terms_total"] == 1
        lst = f"{rs[1 - ia].tcp},{a.tcp}"	# the standby first
        out = subprocess.run([WSCTL, "locks", "--lockd", lst, "--key", key],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(
            f"lock server {a.tcp}, epoch {epoch}\n"), out.stdout
        # The standby alone: refused (EREMCHG, the library's errno for a
        # standby's NOTACTIVE), not served, and wsctl says so.
        bad = subprocess.run([WSCTL, "locks", "--lockd", rs[1 - ia].tcp,
                              "--key", key], capture_output=True, text=True,
                             timeout=30)
        assert bad.returncode != 0, bad.stdout
        assert "only standby replicas answered" in bad.stderr, bad.stderr
    finally:
        for r in rs:
            r.stop()
        etcd.stop()


def make_certs(d):
    """A CA, a server certificate for 127.0.0.1 and a client certificate."""
    import subprocess

    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    ca, cakey = os.path.join(d, "ca.pem"), os.path.join(d, "ca.key")
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-subj", "/CN=test-ca", "-keyout", cakey, "-out", ca)
    out = {"ca": ca}
    # etcd's gateway dials its own gRPC server with the server
    # certificate, so that one needs clientAuth too.
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1\n"
                       "extendedKeyUsage=serverAuth,clientAuth"),
                      ("client", "extendedKeyUsage=clientAuth")):
        key, csr = os.path.join(d, f"{name}.key"), os.path.join(d, "x.csr")
        crt, extf = os.path.join(d, f"{name}.pem"), os.path.join(d, "x.ext")
        with open(extf, "w") as f:
            f.write(ext + "\n")
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", key, "-out", csr)
        run("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", cakey,
            "-CAcreateserial", "-days", "1", "-extfile", extf, "-out", crt)
        os.chmod(key, 0o600)
        out[name] = (crt, key)
    return out


def test_etcd_over_tls(env):
    import shutil
    import subprocess
    from lockdlib import free_port
    if not os.access(etcdlib.ETCD, os.X_OK) or not shutil.which("openssl"):
        pytest.skip("etcd or openssl not installed (see scripts/deps)")
    certs = make_certs(env.tmp)
    cport, pport = free_port(), free_port()
    url = f"https://127.0.0.1:{cport}"
    log = open(os.path.join(env.tmp, "etcd-tls.log"), "wb")
    etcd = subprocess.Popen(
        [etcdlib.ETCD, "--name", "t", "--data-dir",
         os.path.join(env.tmp, "etcd-tls"), "--listen-client-urls", url,
         "--advertise-client-urls", url, "--listen-peer-urls",
         f"http://127.0.0.1:{pport}", "--initial-advertise-peer-urls",
         f"http://127.0.0.1:{pport}", "--initial-cluster",
         f"t=http://127.0.0.1:{pport}", "--cert-file", certs["server"][0],
         "--key-file", certs["server"][1], "--client-cert-auth",
         "--trusted-ca-file", certs["ca"], "--logger", "zap",
         "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    key = new_key(env.tmp)
    tls = ["--etcd-ca", certs["ca"], "--etcd-cert", certs["client"][0],
           "--etcd-key", certs["client"][1]]
    good = Replica(env.tmp, "good", url, key, LEASE_MS, 2, extra=tls)
    # No client certificate: etcd refuses it, it never serves.
    nocert = Replica(env.tmp, "nocert", url, key, LEASE_MS, 2,
                     extra=["--etcd-ca", certs["ca"]])
    try:
        nocert.start()
        good.start()
        assert poll_until(good.active, 30), good.log()
        c = Client(good.tcp, key=key, name="c")
        env.clients.append(c)
        c.wait_ready(20)
        assert c.lock_wait("a", "k", flags="-")[1] == 0
        time.sleep(1)
        assert not nocert.active()
        assert f"etcd /v3/lease/grant: {url}: " in nocert.log(), \
            nocert.log()
    finally:
        good.stop()
        nocert.stop()
        etcd.kill()
        etcd.wait()
        log.close()


def test_usage_errors():
    import subprocess
    from lockdlib import WSLOCKD
    cases = [
        (["--etcd", "127.0.0.1:2379"], "not a list of http"),
        (["--etcd", "http://a:1,"], "not a list of http"),
        (["--etcd-ttl", "5"], "needs --etcd"),
        (["--etcd", "http://a:1", "--etcd-cert", "c"], "go together"),
        (["--etcd", "http://a:1", "--etcd-ttl", "1"], "2..600"),
        (["--etcd", "http://a:1", "--lease-ms", "10000", "--grace-ms",
          "10000"], "1.1 times"),
        (["--etcd", "http://a:1", "--listen", ":7420"], "--advertise"),
        (["--etcd", "http://a:1", "--advertise", "a"], "HOST:PORT"),
    ]
    for args, want in cases:
        p = subprocess.run([WSLOCKD, "-f", *args], capture_output=True,
                           text=True, timeout=10)
        assert p.returncode == 2 and want in p.stderr, (args, p.stderr)


HISTORY_SECONDS = float(os.environ.get("WSLOCKD_HA_HISTORY_SECONDS", "24"))


def test_history_across_failovers(env):
    """test_lockd_history.py's checker over a replicated set: clients take and
    release random locks through the list of both replicas while the
    active replica is killed (and started again as a standby) or paused
    past its etcd lease; no two clients may ever affirm conflicting locks
    at overlapping times, and tokens of conflicting grants only grow."""
    if not os.access(etcdlib.ETCD, os.X_OK):
        pytest.skip("etcd not installed (etcd-server, see scripts/deps)")
    h = HA(env, n=2, ttl_s=2, lease_ms=4000)
    try:
        run_history(h)
    finally:
        for r in h.replicas:
            r.kill()
        h.etcd.stop()


def run_history(h):
    import random
    import threading
    import test_lockd_history as th

    class Set:
        tcp = h.addrs()
        unix = h.addrs()
        key = h.key

    class HASlot(th.Slot):
        def spawn(self):
            c = Client(Set.tcp, key=Set.key, name=f"slot{self.n}")
            c.wait_ready(30)
            with self.cmu:
                self.client = c

    grants, glock, errors = [], threading.Lock(), []
    deadline = time.monotonic() + HISTORY_SECONDS
    slots = [HASlot(n, Set, deadline, grants, glock, errors)
             for n in range(4)]
    rng = random.Random()
    faults = {"kill": 0, "stop": 0}
    try:
        assert wait_active(h.replicas) is not None
        for sl in slots:
            sl.start()
        time.sleep(2)
        while time.monotonic() < deadline - 8:
            a = wait_active(h.replicas, 30)
            assert a is not None, [r.log()[-1500:] for r in h.replicas]
            kind = rng.choice(["kill", "stop"])
            if kind == "kill":
                a.kill()
                assert wait_active(h.replicas, 30, exclude=(a,))
                a.start()
            else:
                a.signal(signal.SIGSTOP)
                assert wait_active(h.replicas, 30, exclude=(a,))
                a.signal(signal.SIGCONT)
            faults[kind] += 1
            time.sleep(1 + rng.random() * 2)
    finally:
        for sl in slots:
            sl.join(HISTORY_SECONDS + 60)
        for r in h.replicas:
            r.signal(signal.SIGCONT)
    bad = th.check(grants)
    assert not bad, "\n".join(bad[:20])
    # No client is faulted here: a slot that had to start afresh means
    # a client stalled behind a failover.
    assert not errors, "\n".join(errors[:10])
    assert sum(faults.values()) >= 2, faults
    assert len(grants) >= 50, (len(grants), faults)
    print(f"ha history: {len(grants)} grants, "
          f"{sum(len(g.claims) for g in grants)} claims, faults {faults}")
    for r in h.replicas:
        assert r.stop() in (0, None), r.log()[-3000:]


def test_etcd_leader_killed_locks_kept(ha):
    """Killing etcd's own leader costs an etcd election, which may take
    longer than the active replica can go without a keepalive (0.9 TTL):
    it may then step down and be succeeded. Either way a client with a
    live lease keeps its lock, and grants resume with tokens that grow."""
    wait_active(ha.replicas)
    c = ha.client("c")
    _, st, tok = c.lock_wait("x", "obj", flags="c")
    assert st == 0
    lead = ha.etcd.leader_index()
    assert lead is not None
    t_kill = time.monotonic()
    ha.etcd.kill(lead)
    # Grants go on (after a failover, if there was one) for 3 TTLs.
    worst, last, n, tok2 = 0.0, t_kill, 0, tok
    while time.monotonic() < t_kill + 6:
        n += 1
        t_new, t2 = lock_until_granted(c, f"n{n}-", f"obj{n}", 30)
        worst = max(worst, t_new - last)
        last = t_new
        assert t2 > tok2
        tok2 = t2
        time.sleep(0.02)
    print(f"etcd leader killed: longest gap between grants {worst:.3f} s, "
          f"{n} grants, stepdowns {[r.stepdowns() for r in ha.replicas]}")
    assert c.lost == [], c.lost
    assert c.held("obj")[1:] == (1, tok)
    assert wait_active(ha.replicas, 30) is not None


def test_state_dir_with_etcd_is_said_unused(env):
    """The systemd unit passes --state-dir; with --etcd in WSLOCKD_OPTS
    the replica starts, says the directory is unused, and creates none."""
    if not os.access(etcdlib.ETCD, os.X_OK):
        pytest.skip("etcd not installed (etcd-server, see scripts/deps)")
    etcd = Etcd(env.tmp).start()
    sd = os.path.join(env.tmp, "unused-state")
    r = Replica(env.tmp, "r", etcd.endpoints, new_key(env.tmp), LEASE_MS, 2,
                extra=["--state-dir", sd])
    try:
        r.start()
        assert poll_until(r.active, 30), r.log()
        assert f"--state-dir {sd} is not used with --etcd" in r.log()
        assert not os.path.exists(sd)
    finally:
        r.stop()
        etcd.stop()


def test_active_cut_off_etcd_steps_down(env):
    """The active replica loses etcd (its links to every member cut) while
    its clients still reach it: it stops serving within its etcd lease,
    the other replica takes over, and the client moves there and keeps
    its lock. When the link heals the cut-off replica stands by."""
    if not os.access(etcdlib.ETCD, os.X_OK):
        pytest.skip("etcd not installed (etcd-server, see scripts/deps)")
    key = new_key(env.tmp)
    etcd = Etcd(env.tmp).start()
    proxies = [etcdlib.Proxy(int(m.client.rsplit(":", 1)[1]))
               for m in etcd.members]
    a = Replica(env.tmp, "cut", ",".join(p.url for p in proxies), key,
                LEASE_MS, 2)
    b = Replica(env.tmp, "other", etcd.endpoints, key, LEASE_MS, 2)
    try:
        a.start()
        assert poll_until(a.active, 30), a.log()
        b.start()
        c = Client(f"{a.tcp},{b.tcp}", key=key, name="c")
        env.clients.append(c)
        c.wait_ready(20)
        _, st, tok = c.lock_wait("x", "obj", flags="c")
        assert st == 0
        t_cut = time.monotonic()
        for p in proxies:
            p.cut()
        assert poll_until(lambda: a.stepdowns() >= 1, 10), a.log()
        t_down = time.monotonic()
        # 0.9 TTL from the last keepalive sent, which is at most TTL/3
        # before the cut: well within 2 s, plus the loaded machine.
        assert t_down - t_cut < 2 + 3, (t_down - t_cut, a.log())
        assert poll_until(b.active, 30), b.log()
        t_new, tok2 = lock_until_granted(c, "n", "obj2", 30)
        assert server_addr(c) == b.tcp
        # a had stopped before b granted anything.
        assert t_down < t_new
        assert c.lost == [], c.lost
        assert c.held("obj")[1:] == (1, tok)
        assert tok2 >> 32 > tok >> 32
        for p in proxies:
            p.heal()
        time.sleep(3)
        assert b.active() and not a.active(), (a.log()[-1500:],
                                              b.log()[-1500:])
        print(f"cut off etcd: stepped down after {t_down - t_cut:.3f} s, "
              f"next grant on the other after {t_new - t_cut:.3f} s")
    finally:
        a.stop()
        b.stop()
        for p in proxies:
            p.close()
        etcd.stop()


def test_known_clients_write_does_not_hold_the_loop(env):
    """The write of the known clients to etcd runs off the main loop: with
    etcd hung (its one member SIGSTOPped), a new client's session makes a
    write that cannot finish. Its WELCOME waits (no answer leaves before
    the record it depends on is in etcd), while the loop goes on: a
    scrape is answered and says the write is out. The write fails, the
    replica steps down; with etcd back it serves again and the client is
    welcomed then."""
    from lockdlib import free_port
    if not os.access(etcdlib.ETCD, os.X_OK):
        pytest.skip("etcd not installed (etcd-server, see scripts/deps)")
    key = new_key(env.tmp)
    etcd = Etcd(env.tmp, n=1).start()
    mport = free_port()
    # A long TTL: the term outlasts the write's timeout, so that what
    # ends it is the failed write, not the lease.
    r = Replica(env.tmp, "r0", etcd.endpoints, key, LEASE_MS, 10,
                extra=["--metrics", f"127.0.0.1:{mport}"])
    m = etcd.members[0]
    try:
        r.start()
        assert poll_until(r.active, 30), r.log()
        a = Client(r.tcp, key=key, name="a")
        env.clients.append(a)
        a.wait_ready(20)
        assert scrape(mport)["wslockd_etcd_write_pending"] == 0
        os.kill(m.proc.pid, signal.SIGSTOP)
        b = Client(r.tcp, key=key, name="b")
        env.clients.append(b)
        assert poll_until(lambda: scrape(mport)[
            "wslockd_etcd_write_pending"] == 1, 10, 0.02), r.log()
        assert b.ready is None, b.lines
        # The write times out, the replica steps down without a WELCOME.
        assert poll_until(lambda: r.stepdowns() >= 1, 30), r.log()
        assert "cannot write the known clients to etcd" in r.runlog()
        assert b.ready is None, b.lines
        os.kill(m.proc.pid, signal.SIGCONT)
        b.wait_ready(60)
        a.wait(lambda: a.ready is not None, 1)
        assert r.terms() >= 2, r.log()
    finally:
        if m.alive():
            os.kill(m.proc.pid, signal.SIGCONT)
        r.stop()
        etcd.stop()

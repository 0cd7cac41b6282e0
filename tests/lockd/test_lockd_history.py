"""A history checker for wslockd: N client processes take and release
random locks (keys, byte ranges, shared and exclusive) while faults are
injected: clients frozen with SIGSTOP past their lease, clients killed
with SIGKILL and replaced, and wslockd killed and restarted. Every client
records when it was granted a lock and every moment it affirmed, through
its library, that it still held it (wslock_held). The checker fails if two
clients ever affirmed conflicting locks at overlapping times, or if a
later conflicting grant carried a smaller fencing token.

A frozen client cannot act, so its claims stop when it is frozen; when it
wakes after its lease it must not claim the lock again (the server has
given it away): that is the lease-expiry case the checker covers.

Short by default; WSLOCKD_HISTORY_SECONDS=N (and WSLOCKD_HISTORY_CLIENTS)
make a long run."""
import os
import queue
import random
import signal
import threading
import time

from lockdlib import Client

SECONDS = float(os.environ.get("WSLOCKD_HISTORY_SECONDS", "8"))
CLIENTS = int(os.environ.get("WSLOCKD_HISTORY_CLIENTS", "5"))
LEASE_MS = 1000
KEYS = ["h0", "h1"]
RANGES = [(0, None), (0, 10), (5, 15), (10, 20)]
END = 2**64 - 1


class Grant:
    def __init__(self, slot, key, start, end, mode, t, token):
        self.slot, self.key, self.mode = slot, key, mode
        self.start, self.end = start, end
        self.t_grant, self.token = t, token
        self.claims = []

    @property
    def interval(self):
        return (self.t_grant, max(self.claims) if self.claims
                else self.t_grant)


def conflict(a, b):
    return (a.key == b.key and a.start < b.end and b.start < a.end and
            "x" in (a.mode, b.mode))


def check(grants):
    """Return a list of violations (empty when the history is safe)."""
    bad = []
    gs = sorted(grants, key=lambda g: g.t_grant)
    for i, a in enumerate(gs):
        for b in gs[i + 1:]:
            if a.slot == b.slot or not conflict(a, b):
                continue
            (a0, a1), (b0, b1) = a.interval, b.interval
            if a0 <= b1 and b0 <= a1:
                bad.append(f"overlap: slot {a.slot} {a.key} [{a.start},"
                           f"{a.end}) {a.mode} held {a0:.3f}..{a1:.3f} and "
                           f"slot {b.slot} {b.mode} held {b0:.3f}..{b1:.3f}")
            elif b.token <= a.token:
                bad.append(f"token did not grow: {a.key} {a.token:#x} then "
                           f"{b.token:#x}")
    return bad


def test_checker_catches_overlap():
    """The checker itself must be able to fail."""
    a = Grant(0, "k", 0, END, "x", 1.0, 10)
    a.claims = [1.5]
    b = Grant(1, "k", 5, 6, "s", 1.4, 11)
    assert check([a, b])
    b.t_grant = 1.6
    assert not check([a, b])
    b.token = 9
    assert check([a, b])
    c = Grant(2, "k", 0, END, "s", 1.0, 12)
    c.claims = [2.0]
    d = Grant(3, "k", 0, END, "s", 1.1, 13)
    assert not check([c, d])		# shared locks may overlap


class Slot(threading.Thread):
    def __init__(self, n, srv, deadline, grants, lock, errors):
        super().__init__(daemon=True)
        self.n, self.srv, self.deadline = n, srv, deadline
        self.grants, self.glock, self.errors = grants, lock, errors
        self.rng = random.Random(n * 7919 + int(time.time()))
        self.client = None
        self.cmu = threading.Lock()
        self.seq = 0
        self.noise = []

    def spawn(self):
        tcp = self.n % 2 == 0
        c = Client(self.srv.tcp if tcp else self.srv.unix,
                   key=self.srv.key if tcp else None, name=f"slot{self.n}")
        c.wait_ready(15)
        with self.cmu:
            self.client = c

    def one_round(self, c):
        key = self.rng.choice(KEYS)
        start, end = self.rng.choice(RANGES)
        end_s = "-" if end is None else str(end)
        end = END if end is None else end
        mode = self.rng.choice("sxx")
        wait = self.rng.random() < 0.8
        self.seq += 1
        tag = f"r{self.seq}"
        rid = c.lock(tag, key, mode, "w" if wait else "-", 1, start, end_s)
        r = c.result(tag, timeout=2.5)
        if r is None:
            c.cancel(rid)
            r = c.result(tag, timeout=10)
            if r is None:
                raise RuntimeError("no answer after cancel")
        t, st, token = r
        if st != 0:
            return
        g = Grant(self.n, key, start, end, mode, t, token)
        with self.glock:
            self.grants.append(g)
        for _ in range(self.rng.randint(1, 3)):
            time.sleep(self.rng.random() * 0.05)
            tc, held, _ = c.held(key, mode, 1, start, end_s)
            if not held:
                break
            g.claims.append(tc)
        c.unlock(key, 1, start, end_s)

    def run(self):
        while time.monotonic() < self.deadline:
            try:
                if self.client is None or self.client.proc.poll() is not None:
                    if self.client is not None:
                        self.client.kill()
                    self.spawn()
                self.one_round(self.client)
            except (queue.Empty, AssertionError, RuntimeError, OSError,
                    ValueError) as e:
                # Killed by the fault injector, or stuck: start afresh.
                if self.client is not None and \
                        self.client.proc.poll() is None:
                    # A live client that misbehaved is a real error.
                    if not getattr(self.client, "faulted", False):
                        self.errors.append(f"slot {self.n}: {e!r}; "
                                           f"{self.client.lines[-10:]}")
                    self.client.kill()
                    self.noise += self.client.noise
                self.client = None
        if self.client is not None:
            self.client.close()
            self.noise += self.client.noise


def test_history_random_faults(env):
    srv = env.server(lease_ms=LEASE_MS, grace_ms=2 * LEASE_MS)
    grants, glock, errors = [], threading.Lock(), []
    deadline = time.monotonic() + SECONDS
    slots = [Slot(n, srv, deadline, grants, glock, errors)
             for n in range(CLIENTS)]
    for s in slots:
        s.start()
    rng = random.Random()
    faults = {"stop": 0, "kill": 0, "restart": 0}
    restarted = False
    try:
        time.sleep(1.0)
        while time.monotonic() < deadline - 2.0:
            s = rng.choice(slots)
            with s.cmu:
                c = s.client
            kind = rng.choice(["stop", "stop", "kill"] +
                              ([] if restarted and SECONDS < 30
                               else ["restart"]))
            if kind == "restart":
                srv.kill()
                time.sleep(rng.random() * 0.3)
                srv.start()
                restarted = True
            elif c is None or c.proc.poll() is not None:
                continue
            elif kind == "stop":
                c.faulted = True
                c.signal(signal.SIGSTOP)
                time.sleep(LEASE_MS / 1000 * 1.6)
                c.signal(signal.SIGCONT)
            else:
                c.faulted = True
                c.signal(signal.SIGKILL)
            faults[kind] += 1
            time.sleep(rng.random() * 1.0)
    finally:
        for s in slots:
            s.join(SECONDS + 30)
    noise = [n for s in slots for n in s.noise]
    assert not [n for n in noise if "Sanitizer" in n or
                "runtime error" in n], "\n".join(noise[:60])
    bad = check(grants)
    assert not bad, "\n".join(bad[:20])
    assert not errors, "\n".join(errors[:10])
    # The run must have done real work under real faults.
    assert len(grants) >= 10 * CLIENTS * SECONDS / 8, (len(grants), faults)
    assert sum(faults.values()) >= 2, faults
    print(f"history: {len(grants)} grants, "
          f"{sum(len(g.claims) for g in grants)} claims, faults {faults}")

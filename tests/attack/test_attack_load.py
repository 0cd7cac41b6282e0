"""Attack class 11: more simultaneous blocking clients than wsfs has worker
threads (max_threads defaults to 16) must not hang the mount.

The blocking clients: 80 opens of FIFOs on the mount waiting for a writer
(on FUSE a FIFO is a kernel pipe, so these wait in the kernel; the check
is that wsfs never makes a worker wait with them), 64 readers of a large
file, 64 waiters for an OFD byte-range lock and 64 for flock held by
another client (lock waits that a FUSE daemon may serve by blocking a
thread). While they all wait, stat, readdir, read and create on the mount
must each answer within a few seconds.
"""
import fcntl
import os
import struct
import time

import attacklib as A
from attacklib import STATS
from test_attack_nodes import blocked_fifo_round, start_blocker, \
    stop_blocker, timed
from test_attack_races import assert_clean

LIMIT = 5.0


def test_class11_many_blocking_clients(layout, amount):
    L = layout
    st = STATS[11]
    ws = L.ws_src()
    for i in range(4):
        os.mkfifo(os.path.join(ws, f"fifo{i}"))
    with open(os.path.join(ws, "plain"), "w") as f:
        f.write("workspace data\n")
    with open(os.path.join(ws, "big"), "wb") as f:
        f.write(os.urandom(1 << 20) * 8)
    with open(os.path.join(ws, "lockfile"), "wb") as f:
        f.write(b"x" * 4096)
    total = A.iterations(11)
    worst = 0.0
    with A.Watchdog(L.mnt, 120 + total * 60, st, "class 11"):
        for i in range(total):
            found = []
            # Hold both locks through the mount, then queue waiters.
            hold = os.open(L.ws_mnt("lockfile"), os.O_RDWR)
            fcntl.fcntl(hold, fcntl.F_OFD_SETLK,
                        struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
            hold2 = os.open(L.ws_mnt("lockfile"), os.O_RDWR)
            fcntl.flock(hold2, fcntl.LOCK_EX)
            procs = []
            try:
                procs.append(start_blocker("read", L.ws_mnt("big"), 64, 8.0))
                procs.append(start_blocker("ofdlock", L.ws_mnt("lockfile"),
                                           64))
                procs.append(start_blocker("flock", L.ws_mnt("lockfile"),
                                           64))
                time.sleep(0.5)
                # 4 FIFOs x 20 openers = 80 blocked opens, with the readers
                # and lock waiters still queued.
                worst = max(worst, blocked_fifo_round(
                    L, st, found, 20, [f"fifo{k}" for k in range(4)],
                    limit=LIMIT))
                for what, fn in [
                        ("stat", lambda: os.stat(L.ws_mnt("plain"))),
                        ("readdir", lambda: os.listdir(L.ws_mnt())),
                        ("read", lambda: open(L.ws_mnt("plain"),
                                              "rb").read()),
                        ("mkdir+rmdir", lambda: os.rmdir(
                            _mkdir(L.ws_mnt(L.atk("d")))))]:
                    worst = max(worst, timed(fn, LIMIT, what, st, found))
                for p in procs[1:]:
                    if p.poll() is not None:
                        st.fail("lock waiters returned while the lock was "
                                "held")
            finally:
                os.close(hold)
                os.close(hold2)
                outs = [stop_blocker(p, timeout=20) for p in procs]
            for p, out in zip(procs, outs):
                if p.returncode != 0:
                    st.fail(f"blocker {p.args[2]} did not finish after "
                            f"release (killed): {out!r}")
            st.iterations += 1
            A.check_round(L, st, "blocking clients round", found)
            A.sweep_atk(ws, L)
    st.notes.append(f"slowest answer while blocked: {worst:.2f}s")
    assert_clean(11)


def _mkdir(p):
    os.mkdir(p)
    return p

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
import shutil
import struct
import time

import pytest

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
            hold2 = os.open(L.ws_mnt("lockfile"), os.O_RDWR)
            procs = []
            try:
                fcntl.fcntl(hold, fcntl.F_OFD_SETLK,
                            struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
                fcntl.flock(hold2, fcntl.LOCK_EX)
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
                    limit=LIMIT, daemon=amount.pid))
                for what, fn in [
                        ("stat", lambda: os.stat(L.ws_mnt("plain"))),
                        ("readdir", lambda: os.listdir(L.ws_mnt())),
                        ("read", lambda: open(L.ws_mnt("plain"),
                                              "rb").read()),
                        ("mkdir+rmdir", lambda: os.rmdir(
                            _mkdir(L.ws_mnt(L.atk("d")))))]:
                    worst = max(worst, timed(fn, LIMIT, what, st, found,
                                             amount.pid))
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


BLKIO = "/sys/fs/cgroup/blkio"


def whole_disk(dev):
    """major:minor of the disk that holds device dev (throttling rules
    apply to whole disks, not partitions)."""
    mm = f"{os.major(dev)}:{os.minor(dev)}"
    sys_dev = f"/sys/dev/block/{mm}"
    if os.path.exists(os.path.join(sys_dev, "partition")):
        with open(os.path.join(os.path.realpath(sys_dev), "..", "dev")) as f:
            mm = f.read().strip()
    return mm


class SlowBacking:
    """Throttle the reads of one process (the daemon) from the disk under
    SOURCE with a cgroup v1 blkio rule, so backing I/O is really slow."""

    def __init__(self, pid, path, bps):
        self.pid = pid
        self.cg = os.path.join(BLKIO, f"wsfs-attack-{os.getpid()}-{pid}")
        self.dev = whole_disk(os.stat(path).st_dev)
        self.bps = bps

    @staticmethod
    def unavailable(path):
        if not os.path.exists(os.path.join(
                BLKIO, "blkio.throttle.read_bps_device")):
            return "no cgroup v1 blkio controller with throttling"
        mm = whole_disk(os.stat(path).st_dev)
        if not os.path.exists(f"/sys/dev/block/{mm}"):
            return f"SOURCE is not on a block device ({mm})"
        return None

    def __enter__(self):
        os.mkdir(self.cg)
        with open(os.path.join(self.cg, "blkio.throttle.read_bps_device"),
                  "w") as f:
            f.write(f"{self.dev} {self.bps}")
        with open(os.path.join(self.cg, "cgroup.procs"), "w") as f:
            f.write(str(self.pid))
        return self

    def __exit__(self, *a):
        # Lift the limit first: bios already queued in the throttled group
        # would otherwise drain at the slow rate and hold up the daemon.
        try:
            with open(os.path.join(
                    self.cg, "blkio.throttle.read_bps_device"), "w") as f:
                f.write(f"{self.dev} 0")
        except OSError:
            pass
        try:
            with open(os.path.join(BLKIO, "cgroup.procs"), "w") as f:
                f.write(str(self.pid))
        except OSError:
            pass
        for _ in range(50):
            try:
                os.rmdir(self.cg)
                break
            except OSError:
                time.sleep(0.1)
        return False


def test_class11_slow_backing_reads(layout, amount_factory):
    """64 clients reading 64 different files whose backing reads are
    throttled to 256 KiB/s for the daemon (blkio cgroup), that is, slow
    storage: far more in-flight slow I/O than worker threads. stat and a
    read of a cached file, which need no storage I/O, must each answer
    within a few seconds meanwhile; so must readdir and mkdir, unless the
    kernel dropped the page cache during the round: then they must read
    directory blocks and bitmaps from the throttled disk, behind the slow
    readers' reads, as they would on any filesystem on that storage (the
    watchdog still fails the test if they never answer). Every other round
    drops the page cache itself once the readers are waiting, so that the
    daemon meets cold inodes (atime updates, evictions, reopens) there.
    The mount serves data itself (passthrough=off): with the kernel's
    passthrough the readers would read the backing files in their own
    context, out of the daemon's throttled cgroup, and no request would
    wait in the daemon."""
    amount = amount_factory({"passthrough": "off"})
    L = layout
    st = STATS[11]
    why = SlowBacking.unavailable(L.src)
    if why:
        pytest.skip(f"cannot make the backing store slow: {why}")
    ws = L.ws_src()
    with open(os.path.join(ws, "plain"), "w") as f:
        f.write("workspace data\n")
    rounds = max(2, A.iterations(11) // 2)
    worst = 0.0
    sentinel = A.CacheSentinel()

    def dropped():
        return ("the kernel dropped the page cache during the round, so "
                "this waited for the throttled disk" if sentinel.dropped()
                else None)
    # "Cached" must stay true: the host may drop the page cache at any
    # time, so keep plain's pages mapped, through the mount and behind it.
    with A.CachePin([L.ws_mnt("plain"), os.path.join(ws, "plain")]):
        for r in range(rounds):
            slow = os.path.join(ws, f"slow{r}")
            os.mkdir(slow)
            for i in range(64):
                with open(os.path.join(slow, f"f{i}"), "wb") as f:
                    f.write(os.urandom(256 << 10))
                    f.flush()
                    os.fsync(f.fileno())
                    # Out of the page cache: the daemon's read hits the disk.
                    os.posix_fadvise(f.fileno(), 0, 0,
                                     os.POSIX_FADV_DONTNEED)
            found = []
            sentinel.fill()
            with SlowBacking(amount.pid, L.src, 256 << 10), \
                    A.Watchdog(L.mnt, 120, st, "class 11 slow backing"):
                p = start_blocker("readmany", L.ws_mnt(f"slow{r}/f"), 64,
                                  120)
                try:
                    time.sleep(1.0)
                    if r % 2:
                        # Every other round cold: inodes and directory
                        # blocks must come from the throttled disk now.
                        A.drop_caches()
                    for what, fn, excuse in [
                            ("stat", lambda: os.stat(L.ws_mnt("plain")),
                             None),
                            ("readdir", lambda: os.listdir(L.ws_mnt()),
                             dropped),
                            ("read cached", lambda: open(
                                L.ws_mnt("plain"), "rb").read(), None),
                            ("mkdir+rmdir", lambda: os.rmdir(
                                _mkdir(L.ws_mnt(L.atk("d")))), dropped)]:
                        worst = max(worst, timed(fn, LIMIT, what, st, found,
                                                 amount.pid, excuse))
                    if p.poll() is not None:
                        st.notes.append("slow readers finished before the "
                                        "checks: the throttle did not bite")
                finally:
                    p.kill()
                    p.wait()
            shutil.rmtree(slow)
            st.iterations += 1
            A.check_round(L, st, "slow backing round", found)
    sentinel.close()
    st.notes.append(f"slowest answer with slow backing reads: {worst:.2f}s")
    assert_clean(11)

"""FUSE over io_uring (fs/uring.c, at its end): once the fuse module's
enable_uring is on, the kernel hands requests to ring entries of the
caller's CPU, served by wsfs threads pinned to it, and /dev/fuse carries
only FORGET and INTERRUPT. tests/run turns enable_uring on for the run, so
every mount takes requests that way (the cluster suite's under a lock
server too); the tests here check the channel itself, and that
fuse_uring=off or an enable_uring left off keep requests on /dev/fuse."""
import concurrent.futures
import mmap
import os
import subprocess
import threading

import pytest

import wsfstest
from wsfstest import WSCTL, status

PARAM = "/sys/module/fuse/parameters/enable_uring"
SYSCTL = "/proc/sys/kernel/io_uring_disabled"
MiB = 1 << 20


def set_param(value):
    with open(PARAM, "w") as f:
        f.write(value)


@pytest.fixture
def enable_uring(fuse_env):
    """enable_uring on for the test, restored after it."""
    if not os.path.exists(PARAM):
        pytest.skip(f"this kernel has no FUSE over io_uring (no {PARAM})")
    try:
        with open(SYSCTL) as f:
            if f.read().strip() != "0":
                pytest.skip("io_uring is disabled on this machine "
                            f"({SYSCTL})")
    except FileNotFoundError:
        pass
    with open(PARAM) as f:
        old = f.read().strip()
    set_param("Y")
    try:
        yield
    finally:
        set_param(old)


@pytest.fixture
def ring(enable_uring, mount_factory):
    def make(**opts):
        m = mount_factory(workspaces=("ws1",), opts=opts or None)
        s = status(m)
        assert s["channel"] == "io_uring", s.get("channel_why")
        return m
    return make


def test_requests_come_through_the_rings(ring):
    m = ring()
    before = status(m)
    assert before["ring_queues"] == len(possible_cpus())
    d = m.path("ws1", "d")
    os.mkdir(d)
    for i in range(300):
        with open(os.path.join(d, f"f{i}"), "w") as f:
            f.write(str(i))
    assert sorted(os.listdir(d)) == sorted(f"f{i}" for i in range(300))
    for i in range(300):
        with open(os.path.join(d, f"f{i}")) as f:
            assert f.read() == str(i)
        os.unlink(os.path.join(d, f"f{i}"))
    os.rmdir(d)
    after = status(m)
    # 300 creates alone are 1,200 requests (lookup, create, getattr,
    # release); FORGETs and INTERRUPTs are the only ones left to /dev/fuse.
    assert after["ring_requests"] - before["ring_requests"] >= 2000, after
    text = subprocess.run([WSCTL, "status", m.mnt], check=True, text=True,
                          capture_output=True, timeout=20).stdout
    assert "requests:    through FUSE over io_uring" in text, text


def possible_cpus():
    with open("/sys/devices/system/cpu/possible") as f:
        spec = f.read().strip()
    cpus = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def test_every_cpu_is_answered(ring):
    """A caller on each CPU it may run on, one after the other: each
    queue's thread answers (a queue nobody serves would hang its CPU's
    callers, which the watchdog of the fixture would report)."""
    m = ring()
    for cpu in sorted(os.sched_getaffinity(0)):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.sched_setaffinity(0, {cpu})
                p = m.path("ws1", f"cpu{cpu}")
                with open(p, "w") as f:
                    f.write("x" * cpu)
                os.stat(p)
                code = 0 if open(p).read() == "x" * cpu else 2
            finally:
                os._exit(code)
        _, st = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(st) == 0, f"CPU {cpu}"


def test_data_through_the_rings(ring):
    """Without passthrough, reads and writes are requests, up to the
    largest the kernel sends (max_pages): answered from the data ring's
    completion thread, which parks their entries meanwhile."""
    m = ring(passthrough="off")
    p = m.path("ws1", "big")
    want = os.urandom(16 * MiB + 12345)
    with open(p, "wb") as f:
        for i in range(0, len(want), 3 * MiB + 7):
            f.write(want[i:i + 3 * MiB + 7])
    with open(m.src("ws1", "big"), "rb") as f:
        assert f.read() == want
    with open(p, "rb") as f:
        assert f.read() == want
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, 4 * MiB)
        got = bytearray()
        off = 0
        while True:
            n = os.preadv(fd, [buf], off)
            if n == 0:
                break
            got += buf[:n]
            off += n
        assert bytes(got) == want
    finally:
        os.close(fd)
    with open(p, "rb") as f:
        with mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as mm:
            assert mm[len(want) - 4096:] == want[len(want) - 4096:]
    ops = status(m)["operations"]
    assert ops["write"]["count"] > 0 and ops["read"]["count"] > 0, ops


def test_many_callers_at_once(ring):
    """32 threads writing and reading their own files while parked
    answers (data through wsfs) and quick ones (metadata) mix on every
    queue: each gets its own bytes back."""
    m = ring(passthrough="off")
    blobs = {n: os.urandom(256 * 1024 + n) for n in range(32)}
    errors = []

    def worker(n):
        p = m.path("ws1", f"w{n}")
        for rnd in range(5):
            with open(p, "wb") as f:
                f.write(blobs[n])
                os.fsync(f.fileno())
            os.stat(p)
            with open(p, "rb") as f:
                if f.read() != blobs[n]:
                    errors.append(f"w{n} round {rnd}: data differs")
            os.listdir(m.path("ws1"))
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        for r in [ex.submit(worker, n) for n in blobs]:
            r.result(timeout=300)
    assert errors == []
    s = status(m)
    assert s["ring_threads"] >= s["ring_queues"], s


def test_unmount_with_callers_waiting(ring):
    """Unmounting while callers keep the rings busy ends the daemon
    cleanly: its threads leave when the kernel takes the entries back."""
    m = ring()
    stop = threading.Event()

    def busy():
        i = 0
        while not stop.is_set():
            try:
                os.stat(m.path("ws1", f"n{i % 50}"))
            except OSError:
                pass
            i += 1
    ts = [threading.Thread(target=busy) for _ in range(4)]
    for t in ts:
        t.start()
    try:
        assert wsfstest.unmount(m.mnt)
        assert m.proc.wait(timeout=60) == 0, m.log()
    finally:
        stop.set()
        for t in ts:
            t.join(60)
    assert not any(t.is_alive() for t in ts)


def test_off_by_option(enable_uring, mount_factory):
    m = mount_factory(workspaces=("ws1",), opts={"fuse_uring": "off"})
    with open(m.path("ws1", "f"), "w") as f:
        f.write("x")
    s = status(m)
    assert s["channel"] == "/dev/fuse", s
    assert s["channel_why"] == "fuse_uring=off", s


def test_off_in_the_kernel(fuse_env, mount_factory):
    """With enable_uring off the kernel offers no rings: /dev/fuse, and
    status says where to turn it on."""
    if not os.path.exists(PARAM):
        pytest.skip(f"this kernel has no FUSE over io_uring (no {PARAM})")
    with open(PARAM) as f:
        old = f.read().strip()
    set_param("N")
    try:
        m = mount_factory(workspaces=("ws1",))
        with open(m.path("ws1", "f"), "w") as f:
            f.write("x")
        s = status(m)
    finally:
        set_param(old)
    assert s["channel"] == "/dev/fuse", s
    assert "enable_uring" in s["channel_why"], s

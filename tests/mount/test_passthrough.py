"""Kernel passthrough (fs/passthrough.c): without a lock service the kernel
reads and writes an open regular file on its backing file itself, and no
READ or WRITE request reaches wsfs. A file with set-id bits when it is
opened is served through wsfs instead, and the kernel takes no mix of the
two on one inode: every open below must succeed, whatever came before
it."""
import mmap
import os
import shutil
import stat
import subprocess
import time

import pytest

import wsfstest
from wsfstest import (USER_GID, USER_UID, call_as, op_count, same_on_both,
                      status)

U, G = USER_UID, USER_GID
MiB = 1 << 20


def data_ops(m):
    ops = status(m)["operations"]
    return sum(ops.get(k, {"count": 0})["count"] for k in ("read", "write"))


def wait_unbound(m):
    """Wait until every backing id is given back: close(2) returns before
    the kernel's RELEASE reaches the daemon."""
    end = time.monotonic() + 30
    while status(m)["backing_bound"] != 0:
        assert time.monotonic() < end, "a backing id outlived its opens"
        time.sleep(0.05)


@pytest.fixture
def pt(mount_factory):
    """A mount whose files the kernel binds. Whether it can is known
    after the first open: the kernel offers passthrough at INIT, but
    refuses files on a stacked filesystem (a temp dir on overlayfs)."""
    m = mount_factory(workspaces=("ws1",))
    probe = m.path("ws1", ".probe")
    os.close(os.open(probe, os.O_CREAT | os.O_WRONLY, 0o644))
    os.unlink(probe)
    s = status(m)
    if s["data"] != "passthrough":
        pytest.skip(f"no FUSE passthrough on this machine ({s['data']})")
    wait_unbound(m)
    return m


def test_reads_and_writes_reach_no_daemon(pt):
    p = pt.path("ws1", "f")
    want = os.urandom(4 * MiB)
    before = status(pt)
    with open(p, "wb") as f:
        for i in range(0, len(want), 64 * 1024):
            f.write(want[i:i + 64 * 1024])
        f.flush()
        os.fsync(f.fileno())
    with open(p, "rb") as f:
        assert f.read() == want
        assert os.pread(f.fileno(), 100, 3 * MiB + 7) == \
            want[3 * MiB + 7:3 * MiB + 107]
    with open(pt.src("ws1", "f"), "rb") as f:
        assert f.read() == want
    after = status(pt)
    assert after["passthrough_opens"] >= before["passthrough_opens"] + 2
    assert data_ops(pt) == sum(
        before["operations"].get(k, {"count": 0})["count"]
        for k in ("read", "write"))
    assert os.stat(p).st_size == len(want)
    wait_unbound(pt)


def test_appends_land_at_the_backing_end(pt):
    """O_APPEND writes go to the backing file's end, also after a writer
    behind the mount grew it."""
    p, b = pt.path("ws1", "log"), pt.src("ws1", "log")
    with open(b, "wb") as f:
        f.write(b"a" * 10)
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"B")
        with open(b, "ab") as f:
            f.write(b"c" * 5)
        os.write(fd, b"D")
    finally:
        os.close(fd)
    with open(b, "rb") as f:
        assert f.read() == b"a" * 10 + b"B" + b"c" * 5 + b"D"


def test_setid_file_is_served_through_wsfs(pt):
    """A set-id file is opened cached; while it is, so is every other open
    of it, even after the bits are gone; once all are closed the next
    open passes through. No open fails on the way (the kernel answers
    EIO to a mix)."""
    p, b = pt.path("ws1", "s"), pt.src("ws1", "s")
    with open(b, "wb") as f:
        f.write(b"x" * 100000)
    os.chmod(b, 0o4755)
    s0 = status(pt)
    fd1 = os.open(p, os.O_RDONLY)
    try:
        assert len(os.read(fd1, 200000)) == 100000
        os.chmod(p, 0o755)
        fd2 = os.open(p, os.O_RDWR)
        try:
            os.pwrite(fd2, b"y", 0)
            fd3 = os.open(p, os.O_RDONLY | os.O_DIRECT)
            os.close(fd3)
        finally:
            os.close(fd2)
        s1 = status(pt)
        assert s1["cached_opens"] == s0["cached_opens"] + 2
        assert s1["passthrough_opens"] == s0["passthrough_opens"]
        assert data_ops(pt) > 0
    finally:
        os.close(fd1)
    end = time.monotonic() + 30
    while True:
        fd = os.open(p, os.O_RDWR)
        try:
            st = status(pt)
            if st["passthrough_opens"] > s0["passthrough_opens"]:
                break
        finally:
            os.close(fd)
        assert time.monotonic() < end, "the inode stayed cached"
        time.sleep(0.05)
    wait_unbound(pt)


def test_direct_and_mapped_opens_beside_passthrough(pt):
    """O_DIRECT and mmap opens of a file already open through the kernel
    work and see the same bytes."""
    p = pt.path("ws1", "m")
    with open(p, "wb") as f:
        f.write(b"\0" * (64 * 1024))
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"hello", 4096)
        with mmap.mmap(fd, 64 * 1024) as mm:
            assert mm[4096:4101] == b"hello"
            mm[8192:8197] = b"world"
            mm.flush()
        dfd = os.open(p, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, 8192)
            assert os.preadv(dfd, [buf], 4096) == 8192
            assert buf[0:5] == b"hello" and buf[4096:4101] == b"world"
        finally:
            os.close(dfd)
    finally:
        os.close(fd)
    wait_unbound(pt)


def test_many_opens_leave_nothing_bound(pt):
    d = pt.path("ws1", "many")
    os.mkdir(d)
    fds = [os.open(os.path.join(d, f"f{i}"), os.O_CREAT | os.O_RDWR, 0o644)
           for i in range(200)]
    assert status(pt)["backing_bound"] == 200
    dup = os.open(os.path.join(d, "f0"), os.O_RDONLY)
    assert status(pt)["backing_bound"] == 200
    for fd in fds + [dup]:
        os.close(fd)
    wait_unbound(pt)


def _chmod_then_write(p, mode, fchmod):
    fd = os.open(p, os.O_RDWR)
    try:
        if fchmod:
            os.fchmod(fd, mode)
        os.pwrite(fd, b"z", 0)
    finally:
        os.close(fd)
    return stat.S_IMODE(os.stat(p).st_mode)


@pytest.mark.parametrize("mode", [0o4755, 0o6775, 0o2755])
def test_owner_setting_setid_on_an_open_file_loses_it_on_write(pair, mode):
    """The owner sets set-id bits on a file it has open (through the
    kernel's passthrough here) and writes: the bits go as natively
    (setgid only with group execute)."""
    def sc(d):
        p = os.path.join(d, "f")
        with open(p, "wb") as f:
            f.write(b"0123")
        os.chown(p, U, G)
        os.chmod(p, 0o644)
        return call_as(U, G, _chmod_then_write, p, mode, True)
    same_on_both(pair, sc)


def test_passthrough_off_serves_data_through_wsfs(mount_factory):
    m = mount_factory(workspaces=("ws1",), opts={"passthrough": "off"})
    assert status(m)["data"] == "wsfs (passthrough=off)"
    with open(m.path("ws1", "f"), "wb") as f:
        f.write(b"x" * 5000)
    with open(m.path("ws1", "f"), "rb") as f:
        assert f.read() == b"x" * 5000
    assert op_count(m, "write") >= 1
    assert status(m)["passthrough_opens"] == 0


def test_stacked_source_falls_back_to_wsfs(mount_factory):
    """A SOURCE on overlayfs is stacked already: the kernel will not bind
    its files (ELOOP), so every open is served through wsfs, data stays
    whole and status says why."""
    base = wsfstest.make_base()
    lower, upper, work, src = (os.path.join(base, d)
                               for d in ("lower", "upper", "work", "ovl"))
    for d in (lower, upper, work, src):
        os.mkdir(d)
    os.mkdir(os.path.join(lower, "ws1"))
    os.chmod(os.path.join(lower, "ws1"), 0o755)
    r = subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={lower},upperdir={upper},workdir={work}",
                        src], capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(base)
        pytest.skip(f"cannot mount overlayfs here: {r.stderr.strip()}")
    m = None
    try:
        m = mount_factory(workspaces=("ws1",), source=src)
        if status(m)["data"] == "wsfs (the kernel offers no passthrough)":
            pytest.skip("this kernel offers no FUSE passthrough")
        want = os.urandom(300000)
        for i in range(3):
            with open(m.path("ws1", f"f{i}"), "wb") as f:
                f.write(want)
            with open(m.path("ws1", f"f{i}"), "rb") as f:
                assert f.read() == want
        fd = os.open(m.path("ws1", "f0"), os.O_RDONLY | os.O_DIRECT)
        os.close(fd)
        s = status(m)
        assert s["data"].startswith("wsfs (no backing file could be "
                                    "passed through"), s["data"]
        assert s["passthrough_opens"] == 0 and s["cached_opens"] >= 6
        assert op_count(m, "write") >= 3
    finally:
        if m is not None:
            m.stop()	# before the overlay it serves
        subprocess.run(["umount", src])
        shutil.rmtree(base, ignore_errors=True)

"""A file read through wsfs is cached once: at the release of a handle
that read at least 1 MiB and wrote nothing, the backing store's copy of
its pages is dropped (fs/ops.c, ops_drop_backing_pages); a handle that
wrote keeps them, and so does a small read. That is the data path under a
lock service and for set-id files; with kernel passthrough there is only
the backing store's copy (tests/mount/test_passthrough.py), so these
mounts have it off."""
import os
import subprocess
import time

import pytest

import wsfstest

MiB = 1 << 20


def cached(path):
    """Bytes of path in the page cache (util-linux fincore)."""
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--raw",
                          "-o", "RES", path], check=True,
                         capture_output=True, text=True).stdout
    return int(out.split()[0])


def releases(mount):
    return wsfstest.op_count(mount, "release")


def closed(mount, before, n):
    """Wait until the daemon has seen n more releases: close(2) returns
    before the kernel's RELEASE reaches it."""
    end = time.monotonic() + 30
    while releases(mount) < before + n:
        assert time.monotonic() < end, "RELEASE never reached the daemon"
        time.sleep(0.05)


@pytest.fixture
def mount(mount_factory):
    return mount_factory(opts={"passthrough": "off"})


def backing(mount, name, size):
    p = mount.src("ws1", "t", name)
    with open(p, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    with open(p, "rb") as f:
        f.read()
    assert cached(p) == size
    return p


def test_big_read_drops_backing_copy(mount, ws):
    p = backing(mount, "big", 8 * MiB)
    n = releases(mount)
    with open(os.path.join(ws, "big"), "rb") as f:
        assert len(f.read()) == 8 * MiB
    closed(mount, n, 1)
    assert cached(p) == 0
    # the mount's copy serves the next read
    with open(os.path.join(ws, "big"), "rb") as f:
        assert len(f.read()) == 8 * MiB


def test_writer_and_small_reader_keep_backing_copy(mount, ws):
    p = backing(mount, "written", 4 * MiB)
    s = backing(mount, "small", 256 * 1024)
    n = releases(mount)
    with open(os.path.join(ws, "written"), "r+b") as f:
        assert len(f.read()) == 4 * MiB
        f.seek(0)
        f.write(b"x" * 4096)
    with open(os.path.join(ws, "small"), "rb") as f:
        f.read()
    closed(mount, n, 2)
    assert cached(p) == 4 * MiB
    assert cached(s) == 256 * 1024


@pytest.mark.parametrize("prefix", ["wsfs-test-", "wsfs test\\dir "])
def test_kernel_reads_ahead_as_far_as_asked(mount_factory, prefix):
    """The kernel reads ahead as far as wsfs asks at INIT (1 MiB), not the
    128 KiB at most that a new FUSE mount's read_ahead_kb allows (fs/main.c,
    set_readahead): a cold sequential read then takes 1 MiB requests. The
    mount is found in mountinfo, which escapes a space and a backslash in
    its path."""
    m = mount_factory(base=wsfstest.make_base(prefix=prefix))
    st = os.stat(m.mnt)
    bdi = f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    with open(os.path.join(bdi, "read_ahead_kb")) as f:
        assert int(f.read()) == 1024, m.log()

"""Giving a cluster lock back never opens what an agent planted (issue 12,
finding 3). A node that changed an object makes it durable before it gives
the lock back; that fsync opens the object by handle with the daemon's
privileges. A device node or FIFO put on the backing store and touched
through the mount must not be opened then: opening a device has effects
of its own, and a FIFO would block.

inotify on the backing store sees every real open (IN_OPEN); the handle's
O_PATH open that tells the type is not one."""
import ctypes
import os
import select
import stat
import struct

import pytest

IN_OPEN = 0x20
IN_NONBLOCK = os.O_NONBLOCK

_libc = ctypes.CDLL(None, use_errno=True)


def _watch(path):
    fd = _libc.inotify_init1(IN_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1")
    if _libc.inotify_add_watch(fd, path.encode(), IN_OPEN) < 0:
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, f"inotify_add_watch {path}")
    return fd


def _opens(fd):
    """The number of IN_OPEN events queued on fd."""
    n = 0
    while select.select([fd], [], [], 0)[0]:
        try:
            buf = os.read(fd, 65536)
        except BlockingIOError:
            break
        off = 0
        while off + 16 <= len(buf):
            _, mask, _, namelen = struct.unpack_from("iIII", buf, off)
            if mask & IN_OPEN:
                n += 1
            off += 16 + namelen
    return n


@pytest.mark.parametrize("kind", ["chr", "fifo"])
def test_lock_release_opens_no_device(cluster_factory, kind):
    c = cluster_factory(nodes=2)
    d = c.src("ws", "planted")
    os.makedirs(d)
    node = os.path.join(d, "obj")
    if kind == "chr":
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        os.mkfifo(node, 0o666)
    wd = _watch(node)
    try:
        for n in (1, 2, 1):
            # touch: a change under the object's exclusive lock, so the
            # node that made it must make it durable before giving it
            # to the next one.
            p = c.run(n, ["touch", "-c", c.path(n, "ws", "planted", "obj")])
            assert p.returncode == 0, p.stderr
        # node 1 gave its lock to node 2 and took it back: two releases
        # so far, one by each node.
        assert _opens(wd) == 0, "the daemon opened the planted " + kind
    finally:
        os.close(wd)

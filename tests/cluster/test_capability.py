"""The kernel asks for security.capability before every write; with a
lock service too the daemon answers "none" from memory once it knows a
file has none (fs/ops.c, ops_no_cap): no node can set a capability
through wsfs, so only a writer that bypasses wsfs can plant one, and a
write through any node still removes it, as on a local filesystem."""
import errno
import os

import pytest

CAP = "security.capability"
# VFS_CAP_REVISION_2 with CAP_NET_BIND_SERVICE permitted (20 bytes).
VALUE = b"\x00\x00\x00\x02" + b"\x00\x04\x00\x00" + b"\x00" * 12


def cap_errno(path):
    try:
        os.getxattr(path, CAP)
    except OSError as e:
        return e.errno
    return 0


# GlusterFS's FUSE client refuses security.capability (EOPNOTSUPP): no
# capability can be planted on that storage, so the test runs on a local
# directory in both passes.
@pytest.mark.storage("local")
def test_capability_planted_behind_the_nodes_goes(cluster_factory):
    c = cluster_factory(nodes=2, lease_ms=20000)
    back = c.src("ws", "f")
    data = b""
    for rnd in range(3):
        for n in (1, 2):
            # the node learns "none" (it made the file, or asked once)
            with open(c.path(n, "ws", "f"), "ab") as f:
                f.write(b"a%d%d" % (rnd, n))
                f.flush()
                # planted on the store behind both nodes
                os.setxattr(back, CAP, VALUE)
                f.write(b"b%d%d" % (rnd, n))
            data += b"a%d%db%d%d" % (rnd, n, rnd, n)
            assert cap_errno(back) == errno.ENODATA, \
                f"round {rnd}: a capability survived node{n}'s write"
    with open(back, "rb") as f:
        assert f.read() == data
    # no node sets one through wsfs
    for n in (1, 2):
        try:
            os.setxattr(c.path(n, "ws", "f"), CAP, VALUE)
            assert False, f"node{n} set a capability"
        except OSError as e:
            assert e.errno == errno.EPERM
    assert cap_errno(back) == errno.ENODATA

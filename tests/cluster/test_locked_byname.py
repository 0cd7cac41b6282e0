"""Files entered by their name under cluster locks (fs/inode.c,
inode_by_name_ok): over a local SOURCE a lookup enters a regular file
after one stat, without an fd and without a file handle. A release
fsyncs a written file through its handle (fs/glock.c), so such a file
takes its handle with its first fd, and its lock copies it then."""
import json
import os

import pytest

import clusterlib


def locks(c, n):
    p = c.run(n, [clusterlib.WSCTL, "status", "--json", c.mnt(n)],
              check=True)
    return json.loads(p.stdout)["locks"]


# GlusterFS tells no birth times: nothing is entered by name there.
@pytest.mark.storage("local")
def test_write_to_a_file_entered_by_name_is_synced_at_release(
        cluster_factory):
    c = cluster_factory(nodes=2, lease_ms=20000)
    os.makedirs(c.src("ws", "d"))
    # Made behind the nodes: no node's lock or inode knows it yet, so
    # node1's lookup enters it by its name and makes its lock there.
    with open(c.src("ws", "d", "f"), "wb") as f:
        f.write(b"from the store\n")
    one, two = c.path(1, "ws", "d", "f"), c.path(2, "ws", "d", "f")
    assert os.stat(one).st_size == len(b"from the store\n")
    with open(one, "r+b") as f:
        f.write(b"node1")
    before = locks(c, 1)
    # node2's write needs the file's lock: node1 gives it back, and
    # syncs what it wrote first.
    with open(two, "r+b") as f:
        assert f.read() == b"node1the store\n"
        f.write(b"node2\n")
    after = locks(c, 1)
    assert after["releases"] > before["releases"], after
    assert after["syncs"] > before["syncs"], after
    with open(one, "rb") as f:
        assert f.read() == b"node1the store\nnode2\n"


@pytest.mark.storage("local")
def test_file_replaced_by_another_node(cluster_factory):
    """node1 looked f up by name; node2 moves it away and makes another
    f: node1 reaches each object by the name it has now."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    os.makedirs(c.src("ws", "d"))
    with open(c.src("ws", "d", "f"), "wb") as f:
        f.write(b"old\n")
    d1, d2 = c.path(1, "ws", "d"), c.path(2, "ws", "d")
    assert os.stat(os.path.join(d1, "f")).st_size == 4
    os.rename(os.path.join(d2, "f"), os.path.join(d2, "g"))
    with open(os.path.join(d2, "f"), "wb") as f:
        f.write(b"new, longer\n")
    with open(os.path.join(d1, "f"), "rb") as f:
        assert f.read() == b"new, longer\n"
    with open(os.path.join(d1, "g"), "rb") as f:
        assert f.read() == b"old\n"
    assert sorted(os.listdir(d1)) == ["f", "g"]

"""A look at an object in a directory the node holds exclusively asks
quietly for the object's exclusive lock (issue 13, item 2). A change of a
file the node did not make itself (rm -rf or a checkout of an older tree)
then finds that lock held or on its way, instead of a shared lock that
must be upgraded with a second lock-server request. Another node still
gets the file, and sees the change at once."""
import json
import os
import time

import pytest

import clusterlib


def mode_of(held, c, path):
    """The mode node holds path's lock in, None if it holds none."""
    k = f"g/{os.stat(c.src()).st_ino}/{os.stat(path).st_ino}"
    for h, m in held.items():
        if h == k or h.startswith(k + "/"):
            return m
    return None


def wait_modes(c, node, paths, want, timeout=20.0):
    """Wait until node holds each of paths in mode want; the modes seen."""
    deadline = time.monotonic() + timeout
    while True:
        held = c.held(node)
        got = [mode_of(held, c, p) for p in paths]
        if all(m == want for m in got) or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


@pytest.mark.storage("local")
def test_look_in_a_held_directory_asks_exclusive(cluster_factory):
    c = cluster_factory(nodes=2, lease_ms=20000)
    two, one = c.path(2, "ws", "e"), c.path(1, "ws", "e")
    os.mkdir(two)
    for i in range(10):
        with open(os.path.join(two, f"f{i}"), "wb") as f:
            f.write(b"node2 %d\n" % i)
    # Made by node2: on node1 they are nobody's cover.
    srcs = [os.path.join(c.src(), "ws", "e", f"f{i}") for i in range(10)]

    # A file of its own there makes node1 take the directory exclusively
    # (node2 gives it back, and its files' covers with it).
    open(os.path.join(one, "mine"), "wb").close()
    for i in range(5):
        os.stat(os.path.join(one, f"f{i}"))
    got = wait_modes(c, "node1", srcs[:5], "exclusive")
    assert got == ["exclusive"] * 5, got

    # Elsewhere a look asks for a shared lock: here in a directory made
    # on the backing store, whose lock nobody holds exclusively.
    sub = os.path.join(c.src(), "ws", "e", "sub")
    os.mkdir(sub)
    with open(os.path.join(sub, "g"), "wb") as f:
        f.write(b"g\n")
    os.stat(os.path.join(one, "sub", "g"))
    got = wait_modes(c, "node1", [os.path.join(sub, "g")], "shared")
    assert got == ["shared"], got

    # The change needs no other request; node2 sees it and reads the rest.
    os.unlink(os.path.join(one, "f3"))
    assert not os.path.exists(os.path.join(two, "f3"))
    with open(os.path.join(two, "f4"), "rb") as f:
        assert f.read() == b"node2 4\n"
    with open(os.path.join(two, "f4"), "ab") as f:
        f.write(b"more\n")
    with open(os.path.join(one, "f4"), "rb") as f:
        assert f.read() == b"node2 4\nmore\n"
    st = json.loads(c.run(1, [clusterlib.WSCTL, "status", "--json",
                              c.mnt(1)], check=True).stdout)["locks"]
    assert st["service"] != "down", st

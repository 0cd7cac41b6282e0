"""Objects made under a directory's lock (issue 13, item 2): a node that
holds a directory exclusively makes files there without a lock-server
request per file, and another node still never sees them unlocked: its
requests name the directory, wslockd holds them off until the directory
is given back, and giving it back makes the files durable and drops the
first node's caches of them (README, "Cluster locking")."""
import json
import os

import pytest

import clusterlib


def status(c, n):
    p = c.run(n, [clusterlib.WSCTL, "status", "--json", c.mnt(n)],
              check=True)
    return json.loads(p.stdout)["locks"]


def held_keys(c, node):
    """Keys wslockd lists as held by node."""
    return set(c.held(node))


def key(c, path):
    """The lock key of path without its birth time (lockd/lockkey.h)."""
    return f"g/{os.stat(c.src()).st_ino}/{os.stat(path).st_ino}"


def locked(keys, k):
    """Is object key k (without birth time) among keys?"""
    return any(h == k or h.startswith(k + "/") for h in keys)


# A local directory tells birth times (statx), so new files are covered
# there; GlusterFS's client does not (test_no_cover_without_birth_times).
@pytest.mark.storage("local")
def test_files_made_under_a_held_directory(cluster_factory):
    """200 files made, written, renamed and removed in a directory node1
    holds cost no lock of their own at wslockd; node2 then reads what
    node1 wrote, and node1 sees node2's change at once although the
    kernel was allowed to cache the files' attributes."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    one, two = c.path(1, "ws", "d"), c.path(2, "ws", "d")
    os.mkdir(one)
    before = status(c, 1)["covered_total"]
    for i in range(200):
        with open(os.path.join(one, f"f{i}"), "wb") as f:
            f.write(b"node1 %d\n" % i)
    os.rename(os.path.join(one, "f0"), os.path.join(one, "g0"))
    os.chmod(os.path.join(one, "f1"), 0o600)
    for i in range(150, 200):
        os.unlink(os.path.join(one, f"f{i}"))
    st = status(c, 1)
    assert st["covered_total"] - before == 200, st
    # d itself is covered too (made under the workspace root's lock).
    assert st["covered"] == 151, st
    keys = held_keys(c, "node1")
    files = [os.path.join(c.src("ws", "d"), n)
             for n in os.listdir(c.src("ws", "d"))]
    assert len(files) == 150
    mine = [key(c, p) for p in files if locked(keys, key(c, p))]
    assert not mine, f"files with locks of their own: {mine}"
    # node1's kernel may cache the new files' sizes: an open file's
    # fstat is answered from that cache (no lookup refreshes it).
    fd = os.open(os.path.join(one, "f7"), os.O_RDONLY)
    assert os.pread(fd, 100, 0) == b"node1 7\n"
    # A read marks the atime stale in the kernel, so the first fstat
    # after it asks the daemon; the second is answered from the cache.
    for _ in range(2):
        assert os.fstat(fd).st_size == len(b"node1 7\n")

    # node2's change needs f7's lock, under d: node1 gives d back first,
    # and drops what its kernel cached of f7. Looked at before node1
    # does anything else (a listing of d would refresh f7's attributes).
    with open(os.path.join(two, "f7"), "ab") as f:
        f.write(b"node2\n")
    want = b"node1 7\nnode2\n"
    try:
        assert os.fstat(fd).st_size == len(want), \
            "node1 kept the size it cached under the directory's lock"
        assert os.pread(fd, 100, 0) == want
    finally:
        os.close(fd)
    with open(os.path.join(two, "g0"), "rb") as f:
        assert f.read() == b"node1 0\n"
    assert os.stat(os.path.join(two, "f1")).st_mode & 0o777 == 0o600
    assert sorted(os.listdir(two)) == sorted(os.listdir(one))
    with open(os.path.join(one, "f7"), "rb") as f:
        assert f.read() == want
    st = status(c, 1)
    assert st["covered"] == 0 and st["revokes"] >= 1, st


TREE = """
import os, sys
top, depth, files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = top
for i in range(depth):
    d = os.path.join(d, f"l{i}")
    os.mkdir(d)
    for j in range(files):
        with open(os.path.join(d, f"f{j}"), "wb") as f:
            f.write(f"{d} {j}\\n".encode())
print("made")
"""


def tree_files(top, depth, files):
    """(path, what TREE wrote in it) of every file TREE made in top."""
    d, out = top, []
    for i in range(depth):
        d = os.path.join(d, f"l{i}")
        out += [(os.path.join(d, f"f{j}"), f"{d} {j}\n".encode())
                for j in range(files)]
    return out


def check_tree(c, depth, files, top1, top2):
    """node2 reads every file of node1's tree under top."""
    for (path2, _), (_, want) in zip(tree_files(top2, depth, files),
                                     tree_files(top1, depth, files)):
        with open(path2, "rb") as f:
            got = f.read()
        assert got.startswith(want), f"{path2}: {got!r}, not {want!r}"


@pytest.mark.storage("local")
def test_directories_made_under_a_held_directory(cluster_factory):
    """A tree made under a held directory (an untar) is covered
    directories deep: node1 asks wslockd for none of its directories or
    files. node2's change of the deepest file waits until node1 gives the
    held directory back, and node2 then sees every byte and name node1
    made; node1 then sees node2's changes."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    depth, files = 5, 4
    top1, top2 = c.path(1, "ws", "t"), c.path(2, "ws", "t")
    os.mkdir(top1)
    before = status(c, 1)
    p = c.run(1, [clusterlib.PYTHON, "-c", TREE, top1, str(depth),
                  str(files)], check=True)
    assert p.stdout.strip() == "made"
    st = status(c, 1)
    made = depth * (files + 1)
    assert st["covered_total"] - before["covered_total"] == made, st
    keys = held_keys(c, "node1")
    d, mine = c.src("ws", "t"), []
    for i in range(depth):
        d = os.path.join(d, f"l{i}")
        # Four below the workspace root, t/l0/l1/l2 also asks for its
        # own lock, without waiting (the test of the bound below).
        if i != 2:
            mine += [key(c, d)] if locked(keys, key(c, d)) else []
        mine += [key(c, os.path.join(d, n)) for n in os.listdir(d)
                 if os.path.isfile(os.path.join(d, n)) and
                 locked(keys, key(c, os.path.join(d, n)))]
    assert not mine, f"objects with locks of their own: {mine}"

    # node2's request names l4, l3, ... and t, which node1 covers, and
    # the workspace root, which node1 holds.
    deep2, deep1 = (tree_files(top, depth, files)[-1][0]
                    for top in (top2, top1))
    with open(deep2, "ab") as f:
        f.write(b"node2\n")
    # And the first: what the workspace root covers goes back too.
    first2, first1 = (tree_files(top, depth, files)[0][0]
                      for top in (top2, top1))
    with open(first2, "ab") as f:
        f.write(b"node2\n")
    st = status(c, 1)
    assert st["covered"] == 0 and st["revokes"] > before["revokes"], st
    check_tree(c, depth, files, top1, top2)
    for path in (deep1, first1):
        with open(path, "rb") as f:
            assert f.read().endswith(b"\nnode2\n"), path
    # node2 makes a directory in the middle; node1 sees it.
    os.mkdir(os.path.join(top2, "l0", "l1", "l2", "new"))
    assert "new" in os.listdir(os.path.join(top1, "l0", "l1", "l2"))


@pytest.mark.storage("local")
def test_cover_chain_is_bounded(cluster_factory):
    """A request names at most eight directories, so no directory is
    covered more than seven below a lock node1 holds: deeper in a tree,
    directories take locks of their own (asked for without waiting, from
    four deep) and cover what is made in them. node2 then changes every
    file, each time taking what node1 holds above it."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    depth = 12
    top1, top2 = c.path(1, "ws", "b"), c.path(2, "ws", "b")
    os.mkdir(top1)
    p = c.run(1, [clusterlib.PYTHON, "-c", TREE, top1, str(depth), "1"],
              check=True)
    assert p.stdout.strip() == "made"
    keys = held_keys(c, "node1")
    assert locked(keys, key(c, c.src("ws")))
    d, run, own = c.src("ws", "b"), 1, []
    assert not locked(keys, key(c, d))
    for i in range(depth):
        d = os.path.join(d, f"l{i}")
        if locked(keys, key(c, d)):
            own.append(i)
            run = 0
        else:
            run += 1
            assert run <= 7, f"l{i}: covered {run} below a held lock"
    assert own, "a tree twelve deep, all covered"
    assert status(c, 1)["covered"] == 2 * depth + 1 - len(own), \
        (status(c, 1), own)
    # Deepest first: each change takes the nearest lock node1 holds.
    for path2, _ in reversed(tree_files(top2, depth, 1)):
        with open(path2, "ab") as f:
            f.write(b"node2\n")
    assert status(c, 1)["covered"] == 0, status(c, 1)
    check_tree(c, depth, 1, top1, top2)
    for path1, want in tree_files(top1, depth, 1):
        with open(path1, "rb") as f:
            assert f.read() == want + b"node2\n", path1


@pytest.mark.storage("local")
def test_covered_directory_moved_out(cluster_factory):
    """A directory made under a held one and renamed elsewhere first takes
    a lock of its own; what was made in it stays covered by that lock, so
    node2 reaching it through the new place waits for node1."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    ws1, ws2 = c.path(1, "ws"), c.path(2, "ws")
    os.mkdir(os.path.join(ws1, "src"))
    os.mkdir(os.path.join(ws1, "dst"))
    os.mkdir(os.path.join(ws1, "src", "d"))
    with open(os.path.join(ws1, "src", "d", "a"), "wb") as f:
        f.write(b"one\n")
    keys = held_keys(c, "node1")
    assert not locked(keys, key(c, c.src("ws", "src", "d")))
    os.rename(os.path.join(ws1, "src", "d"), os.path.join(ws1, "dst", "d"))
    keys = held_keys(c, "node1")
    assert locked(keys, key(c, c.src("ws", "dst", "d")))
    assert not locked(keys, key(c, c.src("ws", "dst", "d", "a")))
    with open(os.path.join(ws1, "dst", "d", "a"), "ab") as f:
        f.write(b"two\n")
    with open(os.path.join(ws2, "dst", "d", "a"), "ab") as f:
        f.write(b"three\n")
    with open(os.path.join(ws1, "dst", "d", "a"), "rb") as f:
        assert f.read() == b"one\ntwo\nthree\n"


@pytest.mark.storage("local")
def test_covered_file_moved_out_takes_its_own_lock(cluster_factory):
    """A file made under d1's lock and renamed into d2 first takes a lock
    of its own, so that another node reaching it through d2 cannot get it
    while node1 still relies on it."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    ws1, ws2 = c.path(1, "ws"), c.path(2, "ws")
    os.mkdir(os.path.join(ws1, "d1"))
    os.mkdir(os.path.join(ws1, "d2"))
    with open(os.path.join(ws1, "d1", "a"), "wb") as f:
        f.write(b"one\n")
    assert not locked(held_keys(c, "node1"), key(c, c.src("ws", "d1", "a")))
    os.rename(os.path.join(ws1, "d1", "a"), os.path.join(ws1, "d2", "a"))
    assert locked(held_keys(c, "node1"), key(c, c.src("ws", "d2", "a")))
    with open(os.path.join(ws1, "d2", "a"), "ab") as f:
        f.write(b"two\n")
    with open(os.path.join(ws2, "d2", "a"), "ab") as f:
        f.write(b"three\n")
    with open(os.path.join(ws1, "d2", "a"), "rb") as f:
        assert f.read() == b"one\ntwo\nthree\n"
    # A hard link is a name elsewhere too.
    with open(os.path.join(ws1, "d1", "b"), "wb") as f:
        f.write(b"b\n")
    os.link(os.path.join(ws1, "d1", "b"), os.path.join(ws1, "d2", "b"))
    assert locked(held_keys(c, "node1"), key(c, c.src("ws", "d1", "b")))


# Each node makes and removes names of its own in one directory as fast
# as it can: the directory's lock goes back and forth, and every unlink
# finds its file covered by the other side's last hold or its own.
CHURN = """
import os, sys
d, me, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    p = os.path.join(d, f"n{me}-{i}")
    os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    os.unlink(p)
print("done", n)
"""


@pytest.mark.storage("local")
def test_two_nodes_churn_one_directory(cluster_factory):
    """An unlink uses its covered file, which pins the directory's lock,
    and then takes the directory itself: if the directory was revoked
    meanwhile, it could go back only when the unlink was done, and the
    unlink waited for it to come back (found by scripts/bench's contended
    run: EIO after lock_timeout). Both nodes must finish, without EIO."""
    c = cluster_factory(nodes=2, lock_timeout=10, lease_ms=20000)
    d1, d2 = c.path(1, "ws", "churn"), c.path(2, "ws", "churn")
    # Locks are taken in inode order; the deadlock needs files numbered
    # below their directory: free some numbers below it first.
    pre = c.path(1, "ws", "pre")
    os.mkdir(pre)
    for i in range(500):
        open(os.path.join(pre, f"p{i}"), "w").close()
    os.mkdir(d1)
    for i in range(500):
        os.unlink(os.path.join(pre, f"p{i}"))
    os.listdir(d2)
    procs = [c.popen(n, [clusterlib.PYTHON, "-c", CHURN, d, str(n), "400"])
             for n, d in ((1, d1), (2, d2))]
    for n, p in zip((1, 2), procs):
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.strip() == "done 400", \
            f"node{n}: exit {p.returncode}: {out}{err}"
    assert os.listdir(d1) == [] and os.listdir(d2) == []
    revokes = status(c, 1)["revokes"] + status(c, 2)["revokes"]
    assert revokes > 0, "the directory never changed hands: no contention"

@pytest.mark.storage("gluster")
def test_no_cover_without_birth_times(cluster_factory):
    """GlusterFS's client gives no birth time, so a key could not tell a
    new file from a removed one of the same number: nothing is covered,
    every new file takes a lock of its own, and the handover still shows
    the other node what was written."""
    c = cluster_factory(nodes=2, lease_ms=20000)
    one, two = c.path(1, "ws", "d"), c.path(2, "ws", "d")
    os.mkdir(one)
    for i in range(20):
        with open(os.path.join(one, f"f{i}"), "wb") as f:
            f.write(b"node1 %d\n" % i)
    st = status(c, 1)
    assert st["covered_total"] == 0 and st["covered"] == 0, st
    keys = held_keys(c, "node1")
    for i in range(20):
        k = key(c, c.src("ws", "d", f"f{i}"))
        assert k in keys, f"f{i} ({k}) has no lock of its own: {keys}"
    for i in range(20):
        with open(os.path.join(two, f"f{i}"), "rb") as f:
            assert f.read() == b"node1 %d\n" % i

"""Hard links: every name of a file shows fresh link count, mode, owner and
ctime right after link, chmod and chown (no stale cached attributes on the
other names), and inode numbers are stable across rename."""
import os
import stat
import time

from wsfstest import call_as, stat_summary


def j(*a):
    return os.path.join(*a)


def views(names):
    return [os.lstat(n) for n in names]


def assert_same(names, backing):
    """All names agree with each other and with the backing store."""
    sts = views(names)
    ref = os.lstat(backing)
    for n, st in zip(names, sts):
        assert stat_summary(st) == stat_summary(ref), n
        assert st.st_ctime_ns == ref.st_ctime_ns, n
        assert st.st_ino == sts[0].st_ino, n


def test_every_name_fresh(mount, ws):
    os.makedirs(j(ws, "d1", "d2"))
    a = j(ws, "a")
    with open(a, "wb") as f:
        f.write(b"x")
    back = mount.src("ws1", "t", "a")
    names = [a]
    # warm every name's attributes in the kernel cache before each change
    for i, target in enumerate([j(ws, "b"), j(ws, "d1", "c"),
                                j(ws, "d1", "d2", "e")]):
        views(names)
        c0 = os.lstat(a).st_ctime_ns
        time.sleep(0.01)
        os.link(names[-1], target)
        names.append(target)
        assert_same(names, back)
        assert os.lstat(names[0]).st_nlink == i + 2
        assert os.lstat(names[0]).st_ctime_ns > c0
    for mode in (0o600, 0o4751, 0o640):
        views(names)
        os.chmod(names[1], mode)
        assert_same(names, back)
        assert all(stat.S_IMODE(st.st_mode) == mode for st in views(names))
    for ug in ((1000, 1000), (1234, 4321), (0, 0)):
        views(names)
        os.chown(names[2], *ug)
        assert_same(names, back)
        assert all((st.st_uid, st.st_gid) == ug for st in views(names))
    os.utime(names[3], ns=(10**9, 2 * 10**9))
    assert all(st.st_mtime_ns == 2 * 10**9 for st in views(names))
    # writes through one name: size and mtime on every name
    with open(names[1], "ab") as f:
        f.write(b"more")
    assert all(st.st_size == 5 for st in views(names))
    views(names)
    os.unlink(names[0])
    assert_same(names[1:], mount.src("ws1", "t", "b"))
    assert os.lstat(names[1]).st_nlink == 3
    views(names[1:])
    os.rename(names[1], j(ws, "d1", "renamed"))
    names[1] = j(ws, "d1", "renamed")
    assert_same(names[1:], mount.src("ws1", "t", "d1", "renamed"))


def test_fresh_after_change_made_as_user(mount, ws):
    """chmod/chown by the (non-root) owner through one name."""
    os.chmod(ws, 0o777)
    a, b = j(ws, "a"), j(ws, "b")

    def make():
        with open(a, "w") as f:
            f.write("x")
        os.link(a, b)
    call_as(1000, 1000, make)
    views([a, b])
    call_as(1000, 1000, os.chmod, b, 0o604)
    assert stat.S_IMODE(os.lstat(a).st_mode) == 0o604
    views([a, b])
    call_as(1000, 1000, os.chown, a, -1, 2222, groups=(2222,))
    assert os.lstat(b).st_gid == 2222
    assert_same([a, b], mount.src("ws1", "t", "a"))


def test_link_made_on_backing_is_seen(mount, ws):
    a = j(ws, "a")
    with open(a, "wb") as f:
        f.write(b"x")
    os.lstat(a)
    os.link(mount.src("ws1", "t", "a"), mount.src("ws1", "t", "z"))
    z = j(ws, "z")
    assert os.lstat(z).st_ino == os.lstat(a).st_ino
    time.sleep(1.1)     # the attribute timeout lets the nlink change in
    assert os.lstat(a).st_nlink == 2 and os.lstat(z).st_nlink == 2


def test_inode_stable_across_rename(mount, ws):
    os.makedirs(j(ws, "d", "e"))
    with open(j(ws, "d", "e", "f"), "wb") as f:
        f.write(b"x")
    os.symlink("f", j(ws, "d", "e", "l"))
    inos = {p: os.lstat(j(ws, p)).st_ino for p in ("d", "d/e", "d/e/f")}
    os.rename(j(ws, "d", "e", "f"), j(ws, "f2"))
    os.rename(j(ws, "d"), j(ws, "D"))
    os.rename(j(ws, "D", "e"), j(ws, "E"))
    assert os.lstat(j(ws, "D")).st_ino == inos["d"]
    assert os.lstat(j(ws, "E")).st_ino == inos["d/e"]
    assert os.lstat(j(ws, "f2")).st_ino == inos["d/e/f"]
    # across workspaces the inode numbers are distinct
    assert len({os.lstat(mount.path(w)).st_ino for w in ("ws1", "ws2")}) == 2
    # the same numbers on every later lookup, also after many other files
    for i in range(2000):
        open(j(ws, f"n{i}"), "w").close()
    assert os.lstat(j(ws, "f2")).st_ino == inos["d/e/f"]
    assert os.lstat(j(ws, "E")).st_ino == inos["d/e"]


def test_inode_numbers_unique(mount, ws):
    for i in range(300):
        open(j(ws, f"f{i}"), "w").close()
        os.mkdir(j(ws, f"d{i}"))
    inos = [e.inode() for e in os.scandir(ws)]
    assert len(set(inos)) == len(inos) == 600
    st = [os.lstat(j(ws, n)).st_ino for n in sorted(os.listdir(ws))]
    assert len(set(st)) == 600

"""Every operation of the POSIX surface through a wsfs mount, success and
error cases. Where the expected result is "what a local filesystem does",
the same scenario runs on a native directory of the backing filesystem and
the two outcomes (results and errnos) must be equal."""
import ctypes
import errno
import mmap
import os
import signal
import socket
import stat
import subprocess
import threading
import time

import pytest

import wsfstest
from wsfstest import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE,
                      FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE, RENAME_NOREPLACE,
                      UTIME_NOW, UTIME_OMIT, fallocate, outcome, renameat2,
                      same_on_both, stat_summary, tree, utimensat)


def write(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def j(*a):
    return os.path.join(*a)


# --- lookup / getattr ---------------------------------------------------------

def test_lookup_errors(pair):
    def sc(d):
        write(j(d, "f"), b"x")
        return [outcome(os.stat, j(d, "missing")),
                outcome(os.stat, j(d, "f", "x")),
                outcome(os.stat, j(d, "missing", "x")),
                outcome(os.lstat, j(d, "f", "")),
                outcome(os.stat, j(d, "f", "."))]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "ENOENT") and r[1] == ("err", "ENOTDIR")


def test_getattr_matches_backing(mount, ws):
    write(j(ws, "f"), b"hello" * 1000)
    os.mkdir(j(ws, "d"), 0o750)
    os.symlink("f", j(ws, "l"))
    for name in ("f", "d", "l"):
        m = os.lstat(j(ws, name))
        b = os.lstat(mount.src("ws1", "t", name))
        assert stat_summary(m, times=True) == stat_summary(b, times=True), name
        assert m.st_atime_ns == b.st_atime_ns
        assert m.st_blocks == b.st_blocks
    assert os.stat(j(ws, "f")).st_size == 5000


@pytest.mark.parametrize("op", ["create", "mkdir", "stat", "symlink",
                                "rename", "link", "mknod"])
def test_name_too_long(pair, op):
    """A 256-byte name fails with ENAMETOOLONG as on the backing store; a
    255-byte name works."""
    def sc(d):
        res = []
        for n in (255, 256):
            write(j(d, "f"), b"")
            name = j(d, "n" * n)
            fn = {
                "create": lambda: os.close(os.open(name, os.O_CREAT |
                                                   os.O_WRONLY, 0o644)),
                "mkdir": lambda: os.mkdir(name),
                "stat": lambda: os.stat(name) and None,
                "symlink": lambda: os.symlink("f", name),
                "rename": lambda: os.rename(j(d, "f"), name),
                "link": lambda: os.link(j(d, "f"), name),
                "mknod": lambda: os.mknod(name, stat.S_IFIFO | 0o644),
            }[op]
            res.append(outcome(fn))
        return res
    r = same_on_both(pair, sc)
    assert r[1] == ("err", "ENAMETOOLONG")


# --- setattr ------------------------------------------------------------------

def test_chmod(pair, mount):
    def sc(d):
        write(j(d, "f"), b"")
        out = []
        for mode in (0o000, 0o644, 0o4755, 0o2755, 0o1777, 0o7777):
            os.chmod(j(d, "f"), mode)
            out.append(stat.S_IMODE(os.stat(j(d, "f")).st_mode))
        os.mkdir(j(d, "d"))
        os.chmod(j(d, "d"), 0o3775)
        out.append(stat.S_IMODE(os.stat(j(d, "d")).st_mode))
        out.append(outcome(os.chmod, j(d, "missing"), 0o644))
        return out
    same_on_both(pair, sc)
    assert stat.S_IMODE(os.stat(mount.src("ws1", "t", "f")).st_mode) == 0o7777


def test_chmod_updates_ctime(ws):
    write(j(ws, "f"), b"")
    c0 = os.stat(j(ws, "f")).st_ctime_ns
    time.sleep(0.02)
    os.chmod(j(ws, "f"), 0o600)
    assert os.stat(j(ws, "f")).st_ctime_ns > c0


def test_chown_root(mount, ws):
    write(j(ws, "f"), b"")
    os.mkdir(j(ws, "d"))
    os.symlink("f", j(ws, "l"))
    os.chown(j(ws, "f"), 1234, 5678)
    os.chown(j(ws, "d"), 4321, -1)
    os.chown(j(ws, "l"), 77, 88, follow_symlinks=False)
    for name, ug in (("f", (1234, 5678)), ("d", (4321, 0)), ("l", (77, 88))):
        for p in (j(ws, name), mount.src("ws1", "t", name)):
            st = os.lstat(p)
            assert (st.st_uid, st.st_gid) == ug, p
    # the symlink's target was not touched
    assert os.stat(j(ws, "l")).st_uid == 1234


def test_truncate(pair, mount):
    def sc(d):
        p = j(d, "f")
        write(p, b"abcdefgh")
        os.truncate(p, 3)
        a = read(p)
        os.truncate(p, 10)
        b = read(p)
        fd = os.open(p, os.O_RDWR)
        os.ftruncate(fd, 1 << 20)
        os.ftruncate(fd, 5)
        os.close(fd)
        c = read(p)
        fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
        os.close(fd)
        return [a, b, c, os.stat(p).st_size,
                outcome(os.truncate, j(d, "missing"), 1),
                outcome(os.truncate, d, 1),
                outcome(os.truncate, p, -1)]
    r = same_on_both(pair, sc)
    assert r[:4] == [b"abc", b"abc" + b"\0" * 7, b"abc\0\0", 0]
    assert os.stat(mount.src("ws1", "t", "f")).st_size == 0


def test_utimes(pair):
    def sc(d):
        p = j(d, "f")
        write(p, b"x")
        out = []
        os.utime(p, ns=(1_000_000_001, 2_000_000_002))
        st = os.stat(p)
        out.append((st.st_atime_ns, st.st_mtime_ns))
        # UTIME_OMIT on atime, explicit mtime
        utimensat(p, UTIME_OMIT, 3_000_000_003)
        st = os.stat(p)
        out.append((st.st_atime_ns, st.st_mtime_ns))
        # UTIME_NOW on atime, UTIME_OMIT on mtime
        t0 = time.time_ns()
        utimensat(p, UTIME_NOW, UTIME_OMIT)
        st = os.stat(p)
        out.append(st.st_mtime_ns)
        out.append(t0 - 20_000_000 <= st.st_atime_ns <= time.time_ns()
                   + 20_000_000)
        # both OMIT: nothing changes
        utimensat(p, UTIME_OMIT, UTIME_OMIT)
        out.append(os.stat(p).st_mtime_ns)
        # times=None: both now
        t0 = time.time_ns()
        os.utime(p, times=None)
        st = os.stat(p)
        out.append(t0 - 20_000_000 <= st.st_mtime_ns <= time.time_ns()
                   + 20_000_000)
        out.append(t0 - 20_000_000 <= st.st_atime_ns <= time.time_ns()
                   + 20_000_000)
        # on a symlink itself
        os.symlink("f", j(d, "l"))
        os.utime(j(d, "l"), ns=(5_000_000_005, 6_000_000_006),
                 follow_symlinks=False)
        out.append(os.lstat(j(d, "l")).st_mtime_ns)
        out.append(os.stat(p).st_mtime_ns != 6_000_000_006)
        out.append(outcome(os.utime, j(d, "missing"), None))
        return out
    r = same_on_both(pair, sc)
    assert r[0] == (1_000_000_001, 2_000_000_002)
    assert r[1] == (1_000_000_001, 3_000_000_003)
    assert r[2] == 3_000_000_003 and r[3] is True and r[4] == 3_000_000_003
    assert r[5] is True and r[6] is True


def test_utimes_as_non_owner(pair):
    """touch (times=None) needs write access only; explicit times need
    ownership: EPERM otherwise. Same as native."""
    from wsfstest import call_as
    def sc(d):
        p = j(d, "f")
        write(p, b"x")
        os.chmod(p, 0o666)
        q = j(d, "g")
        write(q, b"x")
        os.chmod(q, 0o644)
        return [outcome(call_as, 1000, 1000, os.utime, p, None),
                outcome(call_as, 1000, 1000, os.utime, p, ns=(1, 2)),
                outcome(call_as, 1000, 1000, os.utime, q, None),
                outcome(call_as, 1000, 1000, utimensat, p, UTIME_NOW,
                        UTIME_NOW),
                outcome(call_as, 1000, 1000, utimensat, p, UTIME_OMIT,
                        UTIME_OMIT)]
    r = same_on_both(pair, sc)
    assert r[0] == ("ok", None)
    assert r[1] == ("err", "EPERM")
    assert r[2] == ("err", "EACCES")


# --- readlink / symlink -------------------------------------------------------

def test_symlink_and_readlink(pair):
    def sc(d):
        write(j(d, "f"), b"data")
        os.symlink("f", j(d, "l"))
        os.symlink("sub/dir/../../f", j(d, "l2"))
        os.symlink("dangling", j(d, "l3"))
        os.mkdir(j(d, "sub"))
        os.mkdir(j(d, "sub", "dir"))
        return [os.readlink(j(d, "l")), read(j(d, "l")),
                stat.S_ISLNK(os.lstat(j(d, "l")).st_mode),
                os.lstat(j(d, "l")).st_size,
                read(j(d, "l2")),
                os.readlink(j(d, "l3")),
                outcome(os.stat, j(d, "l3")),
                outcome(os.symlink, "x", j(d, "l")),
                outcome(os.readlink, j(d, "f")),
                outcome(os.readlink, j(d, "missing")),
                outcome(os.symlink, "x", j(d, "missing", "l"))]
    r = same_on_both(pair, sc)
    assert r[0] == "f" and r[1] == b"data"
    assert r[7] == ("err", "EEXIST") and r[8] == ("err", "EINVAL")


def test_symlink_long_target(pair):
    def sc(d):
        t = "/".join(["x" * 200] * 20)[:4000]
        os.symlink(t, j(d, "l"))
        return [os.readlink(j(d, "l")) == t, os.lstat(j(d, "l")).st_size,
                outcome(os.symlink, "y" * 4096, j(d, "l2"))]
    same_on_both(pair, sc)


def test_open_nofollow_symlink(pair):
    def sc(d):
        write(j(d, "f"), b"x")
        os.symlink("f", j(d, "l"))
        return [outcome(os.open, j(d, "l"), os.O_RDONLY | os.O_NOFOLLOW),
                outcome(lambda: os.close(os.open(
                    j(d, "l"), os.O_PATH | os.O_NOFOLLOW)))]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "ELOOP")


def test_create_through_dangling_symlink(pair):
    def sc(d):
        os.symlink("newfile", j(d, "l"))
        write(j(d, "l"), b"via link")
        return [read(j(d, "newfile")), sorted(os.listdir(d)),
                outcome(os.open, j(d, "l"), os.O_CREAT | os.O_EXCL |
                        os.O_WRONLY)]
    same_on_both(pair, sc)


# --- mknod ----------------------------------------------------------------------

def test_mknod_regular_fifo_socket(pair, mount):
    def sc(d):
        os.mknod(j(d, "r"), stat.S_IFREG | 0o640)
        os.mknod(j(d, "p"), stat.S_IFIFO | 0o600)
        os.mkfifo(j(d, "p2"), 0o644)
        os.mknod(j(d, "s"), stat.S_IFSOCK | 0o755)
        out = [stat_summary(os.lstat(j(d, n))) for n in ("r", "p", "p2", "s")]
        out.append(outcome(os.mknod, j(d, "r"), stat.S_IFIFO | 0o600))
        out.append(outcome(os.mknod, j(d, "missing", "x"), stat.S_IFIFO))
        return out
    r = same_on_both(pair, sc)
    assert r[1]["type"] == stat.S_IFIFO and r[3]["type"] == stat.S_IFSOCK
    assert stat.S_ISFIFO(os.lstat(mount.src("ws1", "t", "p")).st_mode)
    assert stat.S_ISSOCK(os.lstat(mount.src("ws1", "t", "s")).st_mode)


@pytest.mark.parametrize("kind", [stat.S_IFCHR, stat.S_IFBLK])
def test_mknod_device_eperm(mount, ws, kind):
    """Device nodes cannot be created, not even by root."""
    with pytest.raises(OSError) as ei:
        os.mknod(j(ws, "dev"), kind | 0o666, os.makedev(1, 3))
    assert ei.value.errno == errno.EPERM
    assert not os.path.lexists(mount.src("ws1", "t", "dev"))
    assert not os.path.lexists(j(ws, "dev"))


def test_device_on_backing_cannot_be_opened(mount, ws):
    """nodev: a char device planted on the backing store is not usable."""
    os.mknod(mount.src("ws1", "t", "null"), stat.S_IFCHR | 0o666,
             os.makedev(1, 3))
    assert stat.S_ISCHR(os.lstat(j(ws, "null")).st_mode)
    for flags in (os.O_RDONLY, os.O_WRONLY):
        r = outcome(os.open, j(ws, "null"), flags)
        if r[0] == "ok":
            os.close(r[1])
        assert r == ("err", "EACCES")


def test_fifo_data_passes(ws):
    p = j(ws, "fifo")
    os.mkfifo(p)
    r = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    w = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
    os.write(w, b"through the fifo")
    assert os.read(r, 100) == b"through the fifo"
    os.close(w)
    os.close(r)


def test_blocked_fifo_opens_do_not_block_workers(mount, ws):
    """Many readers blocked opening a FIFO with no writer: the mount still
    answers other requests, and the readers complete once a writer comes."""
    p = j(ws, "fifo")
    os.mkfifo(p)
    write(j(ws, "f"), b"x")
    procs = [subprocess.Popen(["cat", p], stdout=subprocess.PIPE)
             for _ in range(40)]
    try:
        time.sleep(0.3)
        assert all(pr.poll() is None for pr in procs)
        t0 = time.monotonic()
        names = set()
        for i in range(50):
            write(j(ws, f"g{i}"), b"y")
            names.update(os.listdir(ws))
            assert read(j(ws, "f")) == b"x"
        assert time.monotonic() - t0 < 10
        assert "g49" in names
        w = os.open(p, os.O_WRONLY)
        os.write(w, b"z")
        os.close(w)
        for pr in procs:
            pr.wait(timeout=10)
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()


def test_unix_socket_bind_connect(pair):
    def sc(d):
        path = j(d, "sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(1)
        cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        cli.connect(path)
        conn, _ = srv.accept()
        cli.sendall(b"ping")
        got = conn.recv(10)
        for s in (conn, cli, srv):
            s.close()
        return [got, stat.S_ISSOCK(os.lstat(path).st_mode)]
    assert same_on_both(pair, sc) == [b"ping", True]


# --- mkdir / unlink / rmdir ---------------------------------------------------------

def test_mkdir(pair):
    def sc(d):
        os.mkdir(j(d, "a"))
        os.mkdir(j(d, "b"), 0o700)
        os.mkdir(j(d, "c"), 0o7777)
        write(j(d, "f"), b"")
        return [stat_summary(os.stat(j(d, n))) for n in "abc"] + [
            os.stat(j(d, "a")).st_nlink, os.stat(d).st_nlink,
            outcome(os.mkdir, j(d, "a")),
            outcome(os.mkdir, j(d, "f")),
            outcome(os.mkdir, j(d, "missing", "x")),
            outcome(os.mkdir, j(d, "f", "x"))]
    r = same_on_both(pair, sc)
    assert r[-4:] == [("err", "EEXIST"), ("err", "EEXIST"),
                      ("err", "ENOENT"), ("err", "ENOTDIR")]


def test_unlink(pair, mount):
    def sc(d):
        write(j(d, "f"), b"x")
        os.mkdir(j(d, "d"))
        os.symlink("f", j(d, "l"))
        return [outcome(os.unlink, j(d, "l")), os.path.exists(j(d, "f")),
                outcome(os.unlink, j(d, "f")),
                outcome(os.unlink, j(d, "f")),
                outcome(os.unlink, j(d, "d")),
                outcome(os.unlink, j(d, "missing", "x")),
                sorted(os.listdir(d))]
    r = same_on_both(pair, sc)
    assert r[2] == ("ok", None) and r[3] == ("err", "ENOENT")
    assert r[4] == ("err", "EISDIR")
    assert sorted(os.listdir(mount.src("ws1", "t"))) == ["d"]


def test_unlink_open_file(ws):
    p = j(ws, "f")
    write(p, b"still here")
    fd = os.open(p, os.O_RDWR)
    os.unlink(p)
    assert not os.path.exists(p)
    os.pwrite(fd, b"STILL", 0)
    assert os.pread(fd, 100, 0) == b"STILL here"
    assert os.fstat(fd).st_nlink == 0
    os.close(fd)


def test_rmdir(pair, mount):
    def sc(d):
        os.mkdir(j(d, "e"))
        os.mkdir(j(d, "ne"))
        write(j(d, "ne", "f"), b"")
        write(j(d, "f"), b"")
        return [outcome(os.rmdir, j(d, "ne")),
                outcome(os.rmdir, j(d, "f")),
                outcome(os.rmdir, j(d, "missing")),
                outcome(os.rmdir, j(d, "e", ".")),
                outcome(os.rmdir, j(d, "e")),
                sorted(os.listdir(d))]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "ENOTEMPTY") and r[1] == ("err", "ENOTDIR")
    assert r[4] == ("ok", None)
    assert not os.path.exists(mount.src("ws1", "t", "e"))


# --- rename ---------------------------------------------------------------------

def test_rename(pair):
    def sc(d):
        for n in ("a", "b", "c"):
            write(j(d, n), n.encode())
        for n in ("d1", "d2", "full", "full/x"):
            os.mkdir(j(d, n))
        out = [outcome(os.rename, j(d, "a"), j(d, "a2")),
               outcome(os.rename, j(d, "a2"), j(d, "b")),       # replace
               read(j(d, "b")),
               outcome(os.rename, j(d, "b"), j(d, "d1")),       # file->dir
               outcome(os.rename, j(d, "d1"), j(d, "c")),       # dir->file
               outcome(os.rename, j(d, "d1"), j(d, "full")),    # ENOTEMPTY
               outcome(os.rename, j(d, "d1"), j(d, "d2")),      # empty dir ok
               outcome(os.rename, j(d, "d2"), j(d, "d2", "in")),  # EINVAL
               outcome(os.rename, j(d, "missing"), j(d, "x")),
               outcome(os.rename, j(d, "c"), j(d, "missing", "x")),
               outcome(os.rename, j(d, "c"), j(d, "c")),
               outcome(os.rename, j(d, "full"), j(d, "full2")),
               sorted(os.listdir(d)),
               sorted(os.listdir(j(d, "full2")))]
        return out
    r = same_on_both(pair, sc)
    assert r[3] == ("err", "EISDIR") and r[4] == ("err", "ENOTDIR")
    assert r[5][1] in ("ENOTEMPTY", "EEXIST") and r[7] == ("err", "EINVAL")


def test_rename_noreplace(pair):
    def sc(d):
        write(j(d, "a"), b"a")
        write(j(d, "b"), b"b")
        return [outcome(renameat2, j(d, "a"), j(d, "b"), RENAME_NOREPLACE),
                read(j(d, "a")), read(j(d, "b")),
                outcome(renameat2, j(d, "a"), j(d, "c"), RENAME_NOREPLACE),
                sorted(os.listdir(d)),
                outcome(renameat2, j(d, "b"), j(d, "c"),
                        RENAME_NOREPLACE | RENAME_EXCHANGE)]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "EEXIST") and r[3] == ("ok", 0)
    assert r[5] == ("err", "EINVAL")


def test_rename_exchange(pair, mount):
    def sc(d):
        write(j(d, "a"), b"AAA")
        os.mkdir(j(d, "dir"))
        write(j(d, "dir", "inner"), b"I")
        ino_a = os.stat(j(d, "a")).st_ino
        ino_dir = os.stat(j(d, "dir")).st_ino
        out = [outcome(renameat2, j(d, "a"), j(d, "dir"), RENAME_EXCHANGE)]
        if out[0][0] == "err":
            return out
        out += [stat.S_ISDIR(os.stat(j(d, "a")).st_mode),
                read(j(d, "dir")), os.listdir(j(d, "a")),
                os.stat(j(d, "dir")).st_ino == ino_a,
                os.stat(j(d, "a")).st_ino == ino_dir,
                outcome(renameat2, j(d, "dir"), j(d, "missing"),
                        RENAME_EXCHANGE)]
        return out
    r = same_on_both(pair, sc)
    assert r[0] == ("ok", 0) and r[1] is True and r[2] == b"AAA"
    assert r[6] == ("err", "ENOENT")
    assert read(mount.src("ws1", "t", "dir")) == b"AAA"


def test_rename_keeps_inode_and_open_fd(ws):
    write(j(ws, "f"), b"content")
    os.mkdir(j(ws, "d"))
    os.mkdir(j(ws, "e"))
    ino = os.stat(j(ws, "f")).st_ino
    dino = os.stat(j(ws, "d")).st_ino
    fd = os.open(j(ws, "f"), os.O_RDWR)
    os.rename(j(ws, "f"), j(ws, "d", "g"))
    os.rename(j(ws, "d"), j(ws, "e", "d2"))
    assert os.stat(j(ws, "e", "d2", "g")).st_ino == ino
    assert os.stat(j(ws, "e", "d2")).st_ino == dino
    os.pwrite(fd, b"C", 0)
    os.close(fd)
    assert read(j(ws, "e", "d2", "g")) == b"Content"
    assert not os.path.exists(j(ws, "f"))


# --- link -------------------------------------------------------------------------

def test_link(pair):
    def sc(d):
        write(j(d, "f"), b"x")
        os.mkdir(j(d, "d"))
        os.symlink("f", j(d, "l"))
        return [outcome(os.link, j(d, "f"), j(d, "g")),
                os.stat(j(d, "f")).st_nlink, os.stat(j(d, "g")).st_nlink,
                os.stat(j(d, "f")).st_ino == os.stat(j(d, "g")).st_ino,
                outcome(os.link, j(d, "f"), j(d, "g")),
                outcome(os.link, j(d, "d"), j(d, "d2")),
                outcome(os.link, j(d, "missing"), j(d, "m2")),
                outcome(os.link, j(d, "l"), j(d, "l2"),
                        follow_symlinks=False),
                stat.S_ISLNK(os.lstat(j(d, "l2")).st_mode),
                os.lstat(j(d, "l")).st_nlink]
    r = same_on_both(pair, sc)
    assert r[:4] == [("ok", None), 2, 2, True]
    assert r[4] == ("err", "EEXIST") and r[5] == ("err", "EPERM")


# --- open / create / read / write ----------------------------------------------------

def test_open_errors(pair):
    def sc(d):
        write(j(d, "f"), b"x")
        os.mkdir(j(d, "d"))
        return [outcome(os.open, j(d, "f"), os.O_CREAT | os.O_EXCL |
                        os.O_WRONLY),
                outcome(os.open, j(d, "d"), os.O_WRONLY),
                outcome(os.open, j(d, "d"), os.O_RDWR),
                outcome(os.open, j(d, "missing"), os.O_RDONLY),
                outcome(os.open, j(d, "f"), os.O_RDONLY | os.O_DIRECTORY),
                outcome(os.open, j(d, "f", "x"), os.O_RDONLY),
                outcome(os.open, j(d, "d"), os.O_CREAT | os.O_WRONLY)]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "EEXIST") and r[1] == ("err", "EISDIR")
    assert r[3] == ("err", "ENOENT") and r[4] == ("err", "ENOTDIR")


def test_create_modes_and_umask(pair):
    def sc(d):
        out = []
        old = os.umask(0o027)
        try:
            for i, mode in enumerate((0o666, 0o777, 0o600, 0o4777)):
                fd = os.open(j(d, f"f{i}"), os.O_CREAT | os.O_WRONLY, mode)
                os.close(fd)
                out.append(stat.S_IMODE(os.stat(j(d, f"f{i}")).st_mode))
            os.mkdir(j(d, "dd"), 0o777)
            out.append(stat.S_IMODE(os.stat(j(d, "dd")).st_mode))
        finally:
            os.umask(old)
        return out
    assert same_on_both(pair, sc)[:3] == [0o640, 0o750, 0o600]


def test_read_write_basic(pair, mount):
    data = os.urandom(3 << 20)

    def sc(d):
        p = j(d, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        n = os.write(fd, data)
        os.pwrite(fd, b"MID", 1 << 20)
        os.pwrite(fd, b"END", (8 << 20))                 # sparse extension
        out = [n, os.fstat(fd).st_size,
               os.pread(fd, 3, 1 << 20), os.pread(fd, 10, 8 << 20),
               os.pread(fd, 10, 100 << 20),
               os.pread(fd, 16, (4 << 20)) == b"\0" * 16]
        os.lseek(fd, 0, os.SEEK_SET)
        out.append(os.read(fd, 4) == data[:4])
        os.close(fd)
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        os.write(fd, b"APPENDED")
        os.close(fd)
        whole = read(p)
        out += [len(whole), whole.endswith(b"ENDAPPENDED")]
        return out
    r = same_on_both(pair, sc)
    assert r[0] == 3 << 20 and r[2] == b"MID" and r[3] == b"END"
    b = read(mount.src("ws1", "t", "f"))
    assert b[:1 << 20] == data[:1 << 20] and b.endswith(b"ENDAPPENDED")


def test_write_on_readonly_fd_and_read_on_writeonly(pair):
    def sc(d):
        write(j(d, "f"), b"x")
        r = os.open(j(d, "f"), os.O_RDONLY)
        w = os.open(j(d, "f"), os.O_WRONLY)
        out = [outcome(os.write, r, b"y"), outcome(os.read, w, 1)]
        os.close(r)
        os.close(w)
        return out
    assert same_on_both(pair, sc) == [("err", "EBADF"), ("err", "EBADF")]


def test_close_makes_data_visible_on_backing(mount, ws):
    fd = os.open(j(ws, "f"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written before close")
    os.close(fd)                 # flush + release
    assert read(mount.src("ws1", "t", "f")) == b"written before close"


def test_concurrent_readers_writers(ws):
    """Several processes write disjoint regions of one file at once."""
    p = j(ws, "f")
    write(p, b"")
    code = ("import os,sys\n"
            "i=int(sys.argv[1]); p=sys.argv[2]\n"
            "fd=os.open(p, os.O_WRONLY)\n"
            "for k in range(64):\n"
            "    os.pwrite(fd, bytes([65+i])*4096, (k*8+i)*4096)\n"
            "os.close(fd)\n")
    procs = [subprocess.Popen(["/usr/bin/python3", "-c", code, str(i), p])
             for i in range(8)]
    for pr in procs:
        assert pr.wait(timeout=60) == 0
    data = read(p)
    assert len(data) == 64 * 8 * 4096
    for k in range(64 * 8):
        assert data[k * 4096:(k + 1) * 4096] == bytes([65 + k % 8]) * 4096


def test_fsync_fdatasync_fsyncdir(mount, ws):
    fd = os.open(j(ws, "f"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"durable")
    os.fsync(fd)
    os.fdatasync(fd)
    assert read(mount.src("ws1", "t", "f")) == b"durable"
    os.close(fd)
    dfd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(dfd)
    os.fdatasync(dfd)
    os.close(dfd)
    # sync_file_range and syncfs must not fail either
    r = subprocess.run(["sync", "-f", j(ws, "f")])
    assert r.returncode == 0


# --- readdir ----------------------------------------------------------------------

def test_readdir_types_and_inodes(mount, ws):
    write(j(ws, "f"), b"")
    os.mkdir(j(ws, "d"))
    os.symlink("f", j(ws, "l"))
    os.mkfifo(j(ws, "p"))
    os.mknod(j(ws, "s"), stat.S_IFSOCK | 0o600)
    ents = {e.name: e for e in os.scandir(ws)}
    assert sorted(ents) == ["d", "f", "l", "p", "s"]
    assert ents["d"].is_dir(follow_symlinks=False)
    assert ents["f"].is_file(follow_symlinks=False)
    assert ents["l"].is_symlink()
    for name, e in ents.items():
        assert e.inode() == os.lstat(j(ws, name)).st_ino, name
        assert stat.S_IFMT(e.stat(follow_symlinks=False).st_mode) == \
            stat.S_IFMT(os.lstat(mount.src("ws1", "t", name)).st_mode)
    # "." and ".." are listed, as on a local filesystem
    out = subprocess.run(["ls", "-a", ws], capture_output=True, text=True)
    assert out.stdout.split()[:2] == [".", ".."]


def test_readdir_large(mount, ws):
    n = 20000
    names = {f"entry-{i:06d}-{'x' * (i % 40)}" for i in range(n)}
    d = mount.src("ws1", "t")
    for name in names:
        os.close(os.open(j(d, name), os.O_CREAT | os.O_WRONLY, 0o644))
    listed = os.listdir(ws)
    assert len(listed) == n and set(listed) == names
    # deleting while listing (rm -rf pattern) removes everything
    with os.scandir(ws) as it:
        for e in it:
            os.unlink(e.path)
    assert os.listdir(ws) == []
    assert os.listdir(d) == []


def test_readdir_sees_changes(ws):
    write(j(ws, "a"), b"")
    assert os.listdir(ws) == ["a"]
    write(j(ws, "b"), b"")
    os.unlink(j(ws, "a"))
    assert os.listdir(ws) == ["b"]


def test_readdir_of_backing_changes(mount, ws):
    """Entries made directly on the backing store (another node) show up."""
    os.listdir(ws)
    write(mount.src("ws1", "t", "from-backing"), b"B")
    assert "from-backing" in os.listdir(ws)
    assert read(j(ws, "from-backing")) == b"B"


# --- statfs ---------------------------------------------------------------------------

def test_statfs(mount):
    m = os.statvfs(mount.path("ws1"))
    b = os.statvfs(mount.src("ws1"))
    assert m.f_bsize == b.f_bsize and m.f_frsize == b.f_frsize
    assert m.f_blocks == b.f_blocks and m.f_files == b.f_files
    assert abs(m.f_bfree - b.f_bfree) < b.f_blocks // 100 + 1000
    assert m.f_namemax == b.f_namemax == 255
    r = os.statvfs(mount.mnt)
    assert r.f_blocks == b.f_blocks


# --- xattrs ----------------------------------------------------------------------------

def test_xattrs(pair, mount):
    def sc(d):
        p = j(d, "f")
        write(p, b"")
        os.mkdir(j(d, "d"))
        os.symlink("f", j(d, "l"))
        big = os.urandom(4000)
        out = [outcome(os.setxattr, p, "user.a", b"1"),
               outcome(os.setxattr, p, "user.big", big),
               os.getxattr(p, "user.big") == big,
               sorted(os.listxattr(p)),
               outcome(os.getxattr, p, "user.none"),
               outcome(os.setxattr, p, "user.a", b"2", os.XATTR_CREATE),
               outcome(os.setxattr, p, "user.new", b"2", os.XATTR_REPLACE),
               outcome(os.setxattr, p, "user.a", b"3", os.XATTR_REPLACE),
               os.getxattr(p, "user.a"),
               outcome(os.setxattr, p, "user.empty", b""),
               os.getxattr(p, "user.empty"),
               outcome(os.removexattr, p, "user.a"),
               outcome(os.removexattr, p, "user.a"),
               sorted(os.listxattr(p)),
               outcome(os.setxattr, j(d, "d"), "user.dir", b"dv"),
               os.getxattr(j(d, "d"), "user.dir"),
               outcome(os.setxattr, j(d, "l"), "user.x", b"1",
                       follow_symlinks=False),
               outcome(os.listxattr, j(d, "l"), follow_symlinks=False),
               outcome(os.setxattr, p, "user." + "n" * 250, b"v"),
               outcome(os.setxattr, p, "user." + "n" * 260, b"v"),
               outcome(os.setxattr, p, "bogus.x", b"v"),
               outcome(os.getxattr, j(d, "missing"), "user.a")]
        return out
    r = same_on_both(pair, sc)
    assert r[4] == ("err", "ENODATA") and r[5] == ("err", "EEXIST")
    assert r[6] == ("err", "ENODATA") and r[8] == b"3"
    assert os.getxattr(mount.src("ws1", "t", "f"), "user.empty") == b""


def test_xattr_size_probe(mount, ws):
    """getxattr/listxattr with a zero-size buffer report the size, and a
    too-small buffer fails with ERANGE (getfattr relies on both)."""
    p = j(ws, "f")
    write(p, b"")
    os.setxattr(p, "user.k", b"value-of-some-length")
    r = subprocess.run(["getfattr", "-n", "user.k", "--only-values", p],
                       capture_output=True)
    assert r.returncode == 0 and r.stdout == b"value-of-some-length"
    r = subprocess.run(["getfattr", "-d", p], capture_output=True, text=True)
    assert 'user.k="value-of-some-length"' in r.stdout
    import ctypes
    from wsfstest import libc
    buf = ctypes.create_string_buffer(4)
    libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                              ctypes.c_void_p, ctypes.c_size_t]
    n = libc.getxattr(p.encode(), b"user.k", None, 0)
    assert n == len(b"value-of-some-length")
    assert libc.getxattr(p.encode(), b"user.k", buf, 4) == -1
    assert ctypes.get_errno() == errno.ERANGE


# --- fallocate / lseek / copy_file_range -------------------------------------------------

def test_fallocate(pair):
    def sc(d):
        p = j(d, "f")
        write(p, b"A" * 65536)
        fd = os.open(p, os.O_RDWR)
        out = []
        out.append(outcome(fallocate, fd, 0, 0, 1 << 20))
        out.append(os.fstat(fd).st_size)
        out.append(outcome(fallocate, fd, FALLOC_FL_KEEP_SIZE, 1 << 20,
                           1 << 20))
        out.append(os.fstat(fd).st_size)
        out.append(os.fstat(fd).st_blocks >= (2 << 20) // 512)
        out.append(outcome(fallocate, fd, FALLOC_FL_PUNCH_HOLE |
                           FALLOC_FL_KEEP_SIZE, 4096, 8192))
        out.append(os.pread(fd, 4096 * 4, 0) == b"A" * 4096 + b"\0" * 8192
                   + b"A" * 4096)
        out.append(outcome(fallocate, fd, FALLOC_FL_PUNCH_HOLE, 0, 4096))
        out.append(outcome(fallocate, fd, FALLOC_FL_ZERO_RANGE, 16384, 4096))
        out.append(os.pread(fd, 4096, 16384) == b"\0" * 4096)
        out.append(outcome(fallocate, fd, 0, 0, 0))
        out.append(outcome(fallocate, fd, 0, -1, 10))
        out.append(os.fstat(fd).st_size)
        os.close(fd)
        rfd = os.open(p, os.O_RDONLY)
        out.append(outcome(fallocate, rfd, 0, 0, 4096))
        os.close(rfd)
        wfd = os.open(p, os.O_RDWR)
        out.append(outcome(os.posix_fallocate, wfd, 0, 3 << 20))
        os.close(wfd)
        out.append(os.stat(p).st_size)
        return out
    r = same_on_both(pair, sc)
    assert r[0] == ("ok", 0) and r[1] == 1 << 20 and r[3] == 1 << 20
    assert r[5] == ("ok", 0) and r[6] is True


def test_seek_data_hole(pair):
    def sc(d):
        p = j(d, "f")
        fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
        os.pwrite(fd, b"D" * 4096, 0)
        os.pwrite(fd, b"D" * 4096, 1 << 20)
        os.ftruncate(fd, 4 << 20)
        os.fsync(fd)
        out = [outcome(os.lseek, fd, 0, os.SEEK_DATA),
               outcome(os.lseek, fd, 0, os.SEEK_HOLE),
               outcome(os.lseek, fd, 4096, os.SEEK_DATA),
               outcome(os.lseek, fd, (1 << 20) + 10, os.SEEK_HOLE),
               outcome(os.lseek, fd, (1 << 20) + 4096, os.SEEK_DATA),
               outcome(os.lseek, fd, 4 << 20, os.SEEK_HOLE),
               outcome(os.lseek, fd, 5 << 20, os.SEEK_DATA),
               outcome(os.lseek, fd, 5 << 20, os.SEEK_HOLE),
               outcome(os.lseek, fd, 100, os.SEEK_SET),
               outcome(os.lseek, fd, 10, os.SEEK_CUR),
               outcome(os.lseek, fd, -1, os.SEEK_END),
               outcome(os.lseek, fd, -1, os.SEEK_SET)]
        os.close(fd)
        return out
    r = same_on_both(pair, sc)
    assert r[0] == ("ok", 0) and r[1] == ("ok", 4096)
    assert r[2] == ("ok", 1 << 20) and r[6] == ("err", "ENXIO")


def test_copy_file_range(pair, mount):
    data = os.urandom(1 << 20)

    def sc(d):
        write(j(d, "src"), data)
        write(j(d, "dst"), b"x" * 100)
        s = os.open(j(d, "src"), os.O_RDONLY)
        t = os.open(j(d, "dst"), os.O_RDWR)
        out = [os.copy_file_range(s, t, 1 << 20, 0, 4096),
               os.copy_file_range(s, t, 100, (1 << 20) - 50, 0),
               os.copy_file_range(s, t, 100, 2 << 20, 0)]
        os.close(t)
        out.append(read(j(d, "dst")))
        # within one file, non-overlapping; overlapping is EINVAL
        u = os.open(j(d, "src"), os.O_RDWR)
        out.append(os.copy_file_range(u, u, 4096, 0, 2 << 20))
        out.append(outcome(os.copy_file_range, u, u, 8192, 0, 4096))
        os.close(u)
        out.append(os.stat(j(d, "src")).st_size)
        out.append(outcome(os.copy_file_range, s, s, 10, 0, 0))
        os.close(s)
        return out
    r = same_on_both(pair, sc)
    assert r[0] == 1 << 20 and r[1] == 50 and r[2] == 0
    assert r[3] == data[-50:] + b"x" * 50 + b"\0" * (4096 - 100) + data
    assert read(mount.src("ws1", "t", "dst")) == r[3]


def test_copy_file_range_across_workspaces(mount):
    data = os.urandom(100000)
    write(mount.path("ws1", "a"), data)
    s = os.open(mount.path("ws1", "a"), os.O_RDONLY)
    t = os.open(mount.path("ws2", "b"), os.O_WRONLY | os.O_CREAT, 0o644)
    n = 0
    while n < len(data):
        c = os.copy_file_range(s, t, len(data) - n)
        assert c > 0
        n += c
    os.close(s)
    os.close(t)
    assert read(mount.src("ws2", "b")) == data


# --- mmap / O_DIRECT -----------------------------------------------------------------

def test_mmap_shared_write_and_read(mount, ws):
    p = j(ws, "f")
    size = 3 * mmap.PAGESIZE + 100
    write(p, b"\0" * size)
    fd = os.open(p, os.O_RDWR)
    m = mmap.mmap(fd, size, mmap.MAP_SHARED)
    m[0:5] = b"HELLO"
    m[size - 5:size] = b"WORLD"
    m[mmap.PAGESIZE:mmap.PAGESIZE + 4] = b"PAGE"
    m.flush()                          # msync(MS_SYNC)
    assert os.pread(fd, 5, 0) == b"HELLO"
    with open(mount.src("ws1", "t", "f"), "rb") as f:
        b = f.read()
    assert b[:5] == b"HELLO" and b[-5:] == b"WORLD"
    assert b[mmap.PAGESIZE:mmap.PAGESIZE + 4] == b"PAGE"
    # a write() shows in the mapping
    os.pwrite(fd, b"w", 1)
    assert m[0:2] == b"Hw"
    m.close()
    os.close(fd)
    # MAP_PRIVATE changes stay private
    fd = os.open(p, os.O_RDWR)
    m = mmap.mmap(fd, size, mmap.MAP_PRIVATE)
    m[0:5] = b"PRIVA"
    m.close()
    os.close(fd)
    assert read(p)[:5] == b"HwLLO"


def test_mmap_read_only_and_beyond_eof(ws):
    p = j(ws, "f")
    data = os.urandom(10000)
    write(p, data)
    with open(p, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        assert m[:] == data
        m.close()


def test_mmap_exec_of_binary(mount, ws):
    """Running a program from the mount maps it PROT_EXEC."""
    import shutil
    shutil.copy2("/bin/true", j(ws, "true"))
    assert subprocess.run([j(ws, "true")]).returncode == 0


def test_o_direct(mount, ws):
    p = j(ws, "f")
    fd = os.open(p, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    buf = mmap.mmap(-1, 8192)          # page aligned
    buf[:] = os.urandom(8192)
    assert os.pwrite(fd, buf, 0) == 8192
    assert os.pwrite(fd, memoryview(buf)[:4096], 8192) == 4096
    rbuf = mmap.mmap(-1, 16384)
    n = os.preadv(fd, [rbuf], 0)
    assert n == 12288
    assert rbuf[:8192] == buf[:] and rbuf[8192:12288] == buf[:4096]
    os.close(fd)
    assert read(mount.src("ws1", "t", "f")) == buf[:] + buf[:4096]
    fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
    os.close(fd)


# --- long paths -----------------------------------------------------------------------

def _deep_chain(root):
    """mkdir a chain of 16 dirs of 254-byte names below root, one level at
    a time (each call short), and return the 4095-byte relative path of a
    file at its bottom."""
    comps = [("%02d" % i) + "d" * 252 for i in range(16)]
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for c in comps:
            os.mkdir(c, dir_fd=fd)
            nfd = os.open(c, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)
    rel = "/".join(comps) + "/"
    rel += "f" * (4095 - len(rel))
    assert len(rel) == 4095
    return rel


DEEP_CODE = r"""
import os, sys
rel = sys.argv[1]
fd = os.open(rel, os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"deep")
os.close(fd)
st = os.stat(rel)
with open(rel, "rb") as f:
    data = f.read()
os.rename(rel, rel[:-1] + "g")
os.rename(rel[:-1] + "g", rel)
print(st.st_size, data.decode(), len(os.path.dirname(rel)))
try:
    os.stat(rel + "x")
except OSError as e:
    print("long", e.errno)
"""


def test_4095_byte_relative_path(pair, mount):
    """A relative path of 4095 bytes from a cwd inside the mount works, as
    it does natively, although SOURCE + path is longer than PATH_MAX."""
    def sc(d):
        rel = _deep_chain(d)
        r = subprocess.run(["/usr/bin/python3", "-c", DEEP_CODE, rel],
                           cwd=d, capture_output=True, text=True)
        return (r.returncode, r.stdout, r.stderr[-2000:])
    r = same_on_both(pair, sc)
    assert r[0] == 0 and r[1].startswith("4 deep")
    assert f"long {errno.ENAMETOOLONG}" in r[1]
    # the file is really at the bottom of the chain on the backing store
    fd = os.open(mount.src("ws1", "t"), os.O_RDONLY)
    rel = "/".join(("%02d" % i) + "d" * 252 for i in range(16))
    names = []
    for c in rel.split("/"):
        nfd = os.open(c, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    names = os.listdir(fd)
    os.close(fd)
    assert names == ["f" * (4095 - len(rel) - 1)]


def test_deep_tree_walk_and_remove(ws, mount):
    """Directories deeper than PATH_MAX from SOURCE are listed, stat'ed and
    removed (rm -rf uses fd-relative calls)."""
    _deep_chain(ws)
    _deep_chain(j(ws, "00" + "d" * 252))
    r = subprocess.run(["find", ".", "-type", "d"], cwd=ws,
                       capture_output=True, text=True)
    assert r.returncode == 0 and len(r.stdout.split()) == 33
    r = subprocess.run(["rm", "-rf", "00" + "d" * 252], cwd=ws,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.listdir(ws) == []
    assert os.listdir(mount.src("ws1", "t")) == []


# --- whole tree equals backing ------------------------------------------------------

def test_tree_through_mount_equals_backing(mount, ws):
    os.makedirs(j(ws, "a", "b", "c"))
    write(j(ws, "a", "f"), b"1")
    write(j(ws, "a", "b", "g"), b"22")
    os.link(j(ws, "a", "f"), j(ws, "a", "b", "c", "h"))
    os.symlink("../f", j(ws, "a", "b", "sl"))
    os.chmod(j(ws, "a", "b"), 0o711)
    assert tree(ws) == tree(mount.src("ws1", "t"))


def _signal_thread(pid, signo, main):
    """Send signo to the main thread of pid, or to another thread of it
    that does not block signo (the request threads block all signals):
    then the main thread, waiting for the loop's end, learns of the stop
    only through loop_wake."""
    tid = pid
    if not main:
        tids = []
        for t in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{t}/status") as f:
                blk = [int(ln.split()[1], 16) for ln in f
                       if ln.startswith("SigBlk:")][0]
            if int(t) != pid and not blk & (1 << (signo - 1)):
                tids.append(int(t))
        assert tids, f"no thread of wsfs {pid} takes signal {signo}"
        tid = tids[0]
    if wsfstest.libc.tgkill(pid, tid, signo) != 0:	# glibc 2.30 and later
        raise OSError(ctypes.get_errno(), "tgkill")


@pytest.mark.parametrize("sig,main,clients", [
    ("SIGTERM", True, 4), ("SIGINT", True, 4), ("SIGHUP", True, 4),
    ("SIGTERM", False, 4), ("SIGTERM", False, 0)])
def test_stop_signal(mount, sig, main, clients):
    """A stop signal ends wsfs cleanly, exit 0 and unmounted, idle or
    while clients keep it busy: its request threads stop in read(), in a
    request or parked (fs/loop.c), whichever thread takes the signal."""
    ws = mount.path("ws1")
    stop = threading.Event()
    done = []

    def busy(i):
        p = os.path.join(ws, f"busy{i}")
        n = 0
        while not stop.is_set():
            try:
                with open(p, "wb") as f:
                    f.write(b"x" * 4096)
                os.stat(p)
                n += 1
            except OSError:
                break
        done.append(n)
    threads = [threading.Thread(target=busy, args=(i,))
               for i in range(clients)]
    for t in threads:
        t.start()
    # Let every client make a round, so that threads were started.
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(ws, f"busy{i}"))
                  for i in range(clients)) and time.monotonic() < deadline:
        time.sleep(0.01)
    _signal_thread(mount.proc.pid, getattr(signal, sig), main)
    status = mount.proc.wait(timeout=60)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert status == 0, mount.log()
    assert wsfstest.mountinfo(mount.mnt) is None, mount.log()
    assert len(done) == clients

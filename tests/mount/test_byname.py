"""Regular files entered by their name alone. On one node over a local
filesystem a lookup of a regular file is one stat: the daemon opens the
file only on its first use, by the name the kernel was given, below its
directory and following nothing, and keeps what it opened only if number,
type and birth time are the file's (fs/inode.c, inode_by_name_ok). Whatever
the backing store put under that name in between (a symlink to a canary,
a bind mount, another file) is never reached through the old inode; a
rename or a second name made through the mount is followed."""
import errno
import os
import subprocess

import pytest

from wsfstest import CANARY_OUTSIDE, CANARY_WS2


def j(*a):
    return os.path.join(*a)


def read_or_errno(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        return e.errno


def write_or_errno(path, data):
    try:
        with open(path, "r+b") as f:
            f.write(data)
        return 0
    except OSError as e:
        return e.errno


def backing_file(mount, name, data):
    p = mount.src("ws1", "t", name)
    with open(p, "wb") as f:
        f.write(data)
    return p


def test_looked_up_file_opens_by_its_name(mount, ws):
    """A file made on the backing store, stat'ed through the mount (the
    daemon holds no fd for it), is read and written by its name."""
    back = backing_file(mount, "f", b"one")
    st = os.stat(j(ws, "f"))
    assert st.st_size == 3
    assert read_or_errno(j(ws, "f")) == b"one"
    with open(j(ws, "f"), "ab") as f:
        f.write(b"two")
    with open(back, "rb") as f:
        assert f.read() == b"onetwo"
    assert os.stat(j(ws, "f")).st_ino == st.st_ino


def test_swapped_for_symlink_never_followed(mount, ws):
    """Stat'ed, then swapped on the backing store for a symlink to a canary
    outside SOURCE (and to one in another workspace): opening, reading and
    writing through the kernel's name never reach either canary."""
    for i, target in enumerate((mount.canary_outside, "../../ws2/canary")):
        name = "f%d" % i
        back = backing_file(mount, name, b"mine")
        os.stat(j(ws, name))
        os.unlink(back)
        os.symlink(target, back)
        got = read_or_errno(j(ws, name))
        assert got not in (CANARY_OUTSIDE, CANARY_WS2), target
        write_or_errno(j(ws, name), b"X")
    with open(mount.canary_outside, "rb") as f:
        assert f.read() == CANARY_OUTSIDE
    with open(mount.canary_ws2_src, "rb") as f:
        assert f.read() == CANARY_WS2


def test_replaced_by_another_file(mount, ws):
    """Stat'ed, then replaced on the backing store by another file: an open
    through the kernel's name reaches the new file (the kernel looks the
    name up again), never an error that says it is missing. (A file the
    daemon has opened once keeps its fd, and is reached by it while the
    kernel holds the old name: each round has a name of its own.)"""
    for i in range(20):
        name = "f%d" % i
        back = backing_file(mount, name, b"old %d" % i)
        os.stat(j(ws, name))
        tmp = backing_file(mount, name + ".new", b"new %d" % i)
        os.rename(tmp, back)
        assert read_or_errno(j(ws, name)) == b"new %d" % i


def test_removed_on_backing_store(mount, ws):
    """Stat'ed, then removed on the backing store: ENOENT, as on a local
    filesystem, and a file made under the name again is found."""
    back = backing_file(mount, "f", b"x")
    os.stat(j(ws, "f"))
    os.unlink(back)
    assert read_or_errno(j(ws, "f")) == errno.ENOENT
    backing_file(mount, "f", b"again")
    assert read_or_errno(j(ws, "f")) == b"again"


def test_renamed_and_linked_through_the_mount(mount, ws):
    """Names given through the mount follow the file: stat'ed, renamed,
    linked and its first name removed, all before its first open."""
    backing_file(mount, "a", b"data")
    st = os.stat(j(ws, "a"))
    os.mkdir(j(ws, "d"))
    os.rename(j(ws, "a"), j(ws, "d", "b"))
    os.link(j(ws, "d", "b"), j(ws, "c"))
    os.unlink(j(ws, "d", "b"))
    assert os.stat(j(ws, "c")).st_ino == st.st_ino
    assert read_or_errno(j(ws, "c")) == b"data"
    # stat'ed under two names, then both opened
    backing_file(mount, "e", b"two names")
    os.link(mount.src("ws1", "t", "e"), mount.src("ws1", "t", "d", "e2"))
    assert os.stat(j(ws, "e")).st_ino == os.stat(j(ws, "d", "e2")).st_ino
    os.unlink(mount.src("ws1", "t", "e"))
    assert read_or_errno(j(ws, "d", "e2")) == b"two names"


def bind(src, dst):
    subprocess.run(["mount", "--bind", src, dst], check=True)


def unbind(dst):
    subprocess.run(["umount", dst], check=True)


def test_bind_mounted_file_not_crossed(mount, ws):
    """A file bind-mounted over a name on the backing store (before the
    lookup, and after the file was stat'ed through the mount) is refused:
    neither its content nor its attributes show through the mount."""
    canary = mount.canary_outside
    cst = os.stat(canary)
    before = backing_file(mount, "before", b"under")
    bind(canary, before)
    try:
        with pytest.raises(OSError) as e:
            os.stat(j(ws, "before"))
        assert e.value.errno == errno.EACCES
        assert read_or_errno(j(ws, "before")) == errno.EACCES
    finally:
        unbind(before)
    after = backing_file(mount, "after", b"under")
    os.stat(j(ws, "after"))
    bind(canary, after)
    try:
        got = read_or_errno(j(ws, "after"))
        assert got != CANARY_OUTSIDE
        write_or_errno(j(ws, "after"), b"X")
        try:
            st = os.stat(j(ws, "after"))
            assert st.st_ino != cst.st_ino
        except OSError as e:
            assert e.errno in (errno.EACCES, errno.ENOENT, errno.ESTALE)
    finally:
        unbind(after)
    with open(canary, "rb") as f:
        assert f.read() == CANARY_OUTSIDE

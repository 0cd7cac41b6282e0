"""Permissions and ownership as an unprivileged user: files belong to their
creator, setgid directories pass their group on, chown to a supplementary
group works, setuid/setgid bits are cleared on write, truncate and chown as
the kernel does on a local filesystem, and EACCES/EPERM come where a local
filesystem gives them. Each scenario runs on a native directory too."""
import os
import stat

import pytest

from wsfstest import (USER_GID, USER_UID, call_as, outcome, same_on_both,
                      stat_summary)

U, G = USER_UID, USER_GID
OTHER_UID, OTHER_GID = 1001, 1001
SUPP = 2345          # a supplementary group of the test user
FOREIGN = 3456       # a group the test user is not in


def j(*a):
    return os.path.join(*a)


def as_u(fn, *a, groups=(), **kw):
    return call_as(U, G, fn, *a, groups=groups, **kw)


def userdir(d, uid=U, gid=G, mode=0o755):
    p = j(d, "u")
    os.mkdir(p)
    os.chown(p, uid, gid)
    os.chmod(p, mode)
    return p


def owner(p):
    st = os.lstat(p)
    return (st.st_uid, st.st_gid)


def test_created_objects_belong_to_caller(mount, ws):
    u = userdir(ws)

    def create(d):
        with open(j(d, "file"), "w") as f:
            f.write("x")
        os.mkdir(j(d, "dir"))
        os.mkfifo(j(d, "fifo"))
        os.mknod(j(d, "sock"), stat.S_IFSOCK | 0o600)
        os.symlink("file", j(d, "link"))
        os.link(j(d, "file"), j(d, "hard"))
        os.rename(j(d, "file"), j(d, "moved"))
    as_u(create, u)
    for name in ("moved", "dir", "fifo", "sock", "link", "hard"):
        assert owner(j(u, name)) == (U, G), name
        assert owner(mount.src("ws1", "t", "u", name)) == (U, G), name


def test_created_with_supplementary_groups_uses_primary(pair):
    def sc(d):
        u = userdir(d)
        as_u(lambda: open(j(u, "f"), "w").close(), groups=(SUPP,))
        return owner(j(u, "f"))
    assert same_on_both(pair, sc) == (U, G)


def test_setgid_directory_honoured(pair, mount):
    def sc(d):
        sg = userdir(d, U, FOREIGN, 0o2775)
        def create():
            with open(j(sg, "f"), "w"):
                pass
            os.mkdir(j(sg, "sub"))
            os.mkfifo(j(sg, "p"))
            os.symlink("f", j(sg, "l"))
        as_u(create)
        return {n: (owner(j(sg, n)), stat.S_IMODE(os.lstat(j(sg, n)).st_mode))
                for n in ("f", "sub", "p")} | {"l": owner(j(sg, "l"))}
    r = same_on_both(pair, sc)
    assert r["f"][0] == (U, FOREIGN)
    assert r["sub"] == ((U, FOREIGN), 0o2755)
    st = os.stat(mount.src("ws1", "t", "u", "sub"))
    assert st.st_gid == FOREIGN and st.st_mode & stat.S_ISGID


def test_setgid_dir_file_from_non_member_loses_sgid(pair):
    """A file created with mode 02755 in a setgid dir whose group the
    creator is not in loses S_ISGID (inode_init_owner)."""
    def sc(d):
        sg = userdir(d, U, FOREIGN, 0o2777)
        def create():
            os.close(os.open(j(sg, "f"), os.O_CREAT | os.O_WRONLY, 0o2755))
        as_u(create)
        return stat.S_IMODE(os.stat(j(sg, "f")).st_mode)
    same_on_both(pair, sc)


def test_chown_to_supplementary_group(pair, mount):
    def sc(d):
        u = userdir(d)
        as_u(lambda: open(j(u, "f"), "w").close())
        out = [outcome(as_u, os.chown, j(u, "f"), -1, SUPP, groups=(SUPP,)),
               owner(j(u, "f")),
               outcome(as_u, os.chown, j(u, "f"), -1, FOREIGN,
                       groups=(SUPP,)),
               outcome(as_u, os.chown, j(u, "f"), OTHER_UID, -1,
                       groups=(SUPP,)),
               outcome(as_u, os.chown, j(u, "f"), U, G, groups=(SUPP,)),
               owner(j(u, "f"))]
        # not the owner: cannot change the group even to one's own
        os.chown(j(u, "f"), OTHER_UID, OTHER_GID)
        out.append(outcome(as_u, os.chown, j(u, "f"), -1, SUPP,
                           groups=(SUPP,)))
        return out
    r = same_on_both(pair, sc)
    assert r[0] == ("ok", None) and r[1] == (U, SUPP)
    assert r[2] == ("err", "EPERM") and r[3] == ("err", "EPERM")
    assert r[6] == ("err", "EPERM")


def test_chmod_by_non_owner_eperm(pair):
    def sc(d):
        open(j(d, "f"), "w").close()
        os.chmod(j(d, "f"), 0o666)
        return [outcome(as_u, os.chmod, j(d, "f"), 0o600),
                stat.S_IMODE(os.stat(j(d, "f")).st_mode)]
    assert same_on_both(pair, sc) == [("err", "EPERM"), 0o666]


def test_chmod_sgid_dropped_for_non_member(pair):
    """chmod g+s by an owner not in the file's group drops S_ISGID."""
    def sc(d):
        u = userdir(d)
        as_u(lambda: open(j(u, "f"), "w").close())
        os.chown(j(u, "f"), U, FOREIGN)
        as_u(os.chmod, j(u, "f"), 0o2755)
        return stat.S_IMODE(os.stat(j(u, "f")).st_mode)
    assert same_on_both(pair, sc) == 0o755


def test_eacces_as_non_root(pair):
    def sc(d):
        open(j(d, "secret"), "w").close()
        os.chmod(j(d, "secret"), 0o600)
        os.mkdir(j(d, "closed"), 0o700)
        open(j(d, "closed", "f"), "w").close()
        os.mkdir(j(d, "ro"), 0o755)
        open(j(d, "ro", "f"), "w").close()
        os.mkdir(j(d, "noexec"), 0o666)
        open(j(d, "noexec", "f"), "w").close()
        return [outcome(as_u, os.open, j(d, "secret"), os.O_RDONLY),
                outcome(as_u, os.open, j(d, "secret"), os.O_WRONLY),
                outcome(as_u, os.listdir, j(d, "closed")),
                outcome(as_u, os.stat, j(d, "closed", "f")),
                outcome(as_u, os.mkdir, j(d, "ro", "x")),
                outcome(as_u, os.unlink, j(d, "ro", "f")),
                outcome(as_u, os.rename, j(d, "ro", "f"), j(d, "ro", "g")),
                outcome(as_u, os.symlink, "f", j(d, "ro", "l")),
                outcome(as_u, os.link, j(d, "ro", "f"), j(d, "ro", "h")),
                outcome(as_u, os.mkfifo, j(d, "ro", "p")),
                outcome(as_u, os.stat, j(d, "noexec", "f")),
                outcome(as_u, os.truncate, j(d, "ro", "f"), 0),
                outcome(as_u, os.setxattr, j(d, "ro", "f"), "user.x", b"1"),
                outcome(as_u, lambda: sorted(os.listdir(j(d, "noexec"))))]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "EACCES") and r[4] == ("err", "EACCES")
    assert r[10] == ("err", "EACCES")


def test_sticky_directory(pair):
    def sc(d):
        t = userdir(d, 0, 0, 0o1777)
        as_u(lambda: open(j(t, "mine"), "w").close())
        call_as(OTHER_UID, OTHER_GID, lambda: open(j(t, "theirs"), "w")
                .close())
        return [outcome(as_u, os.unlink, j(t, "theirs")),
                outcome(as_u, os.rename, j(t, "theirs"), j(t, "x")),
                outcome(as_u, os.unlink, j(t, "mine")),
                sorted(os.listdir(t))]
    r = same_on_both(pair, sc)
    assert r[0] == ("err", "EPERM") and r[2] == ("ok", None)


# --- setuid/setgid clearing ----------------------------------------------------------

def _priv_file(d, mode, uid=0, gid=0):
    p = j(d, "f")
    with open(p, "wb") as f:
        f.write(b"0123456789")
    with open(p + ".src", "wb") as f:     # what copy_file_range copies
        f.write(b"abcdef")
    os.chmod(p + ".src", 0o644)
    os.chown(p, uid, gid)
    os.chmod(p, mode)
    return p


def _write(p):
    fd = os.open(p, os.O_WRONLY)
    os.write(fd, b"x")
    os.close(fd)


def _pwrite_end(p):
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"appended")
    os.close(fd)


def _ftruncate(p):
    fd = os.open(p, os.O_WRONLY)
    os.ftruncate(fd, 3)
    os.close(fd)


def _otrunc(p):
    os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))


def _fallocate(p):
    fd = os.open(p, os.O_WRONLY)
    try:
        os.posix_fallocate(fd, 0, 8192)
    finally:
        os.close(fd)


def _copy_into(p):
    src = p + ".src"
    fd = os.open(p, os.O_WRONLY)
    try:
        with open(src, "rb") as f:
            os.copy_file_range(f.fileno(), fd, 4, 0, 2)
    finally:
        os.close(fd)


KILLPRIV_OPS = {
    "write": _write,
    "append": _pwrite_end,
    "truncate": lambda p: os.truncate(p, 4),
    "ftruncate": _ftruncate,
    "o_trunc": _otrunc,
    "fallocate": _fallocate,
    "copy_file_range": _copy_into,
}


def _mode_after(pair, mode, op, owner=(0, 0), as_user=True):
    """The mode of a file made with mode and owner after op on it, by
    the test user or by root: the same on the mount and natively."""
    def sc(d):
        p = _priv_file(d, mode, *owner)
        if as_user:
            as_u(op, p)
        else:
            op(p)
        return stat.S_IMODE(os.stat(p).st_mode)
    return same_on_both(pair, sc)


@pytest.mark.parametrize("mode", [0o6777, 0o6757, 0o4777, 0o2777, 0o2767])
@pytest.mark.parametrize("op", sorted(KILLPRIV_OPS))
def test_killpriv_by_non_owner(pair, mount, op, mode):
    """A non-owner writing or truncating a setuid/setgid file clears the
    bits exactly as on the native filesystem (S_ISGID only when group
    execute is set)."""
    r = _mode_after(pair, mode, KILLPRIV_OPS[op])
    assert not r & stat.S_ISUID
    # the backing file agrees
    assert stat.S_IMODE(os.stat(mount.src("ws1", "t", "f")).st_mode) == r


@pytest.mark.parametrize("op", sorted(KILLPRIV_OPS))
def test_killpriv_by_owner(pair, op):
    _mode_after(pair, 0o6775, KILLPRIV_OPS[op], owner=(U, G))


@pytest.mark.parametrize("op", ["write", "truncate"])
def test_root_write_keeps_setuid(pair, op):
    """root (CAP_FSETID) keeps the bits, as on a local filesystem."""
    _mode_after(pair, 0o6755, KILLPRIV_OPS[op], owner=(U, G), as_user=False)


@pytest.mark.parametrize("who", ["root", "owner"])
def test_chown_clears_setuid(pair, who):
    def sc(d):
        p = _priv_file(d, 0o6755, U, G)
        if who == "root":
            os.chown(p, OTHER_UID, OTHER_GID)
        else:
            as_u(os.chown, p, -1, SUPP, groups=(SUPP,))
        r = [stat.S_IMODE(os.stat(p).st_mode)]
        # a chown by the owner to the same owner and group
        os.mkdir(j(d, "sub"))
        q = _priv_file(j(d, "sub"), 0o6755, U, G)
        as_u(os.chown, q, U, G)
        r.append(stat.S_IMODE(os.stat(q).st_mode))
        return r
    r = same_on_both(pair, sc)
    assert not r[0] & stat.S_ISUID


def test_stat_summary_of_user_files(pair):
    """Everything about files a user made matches native."""
    def sc(d):
        u = userdir(d)
        def make():
            os.umask(0o002)
            with open(j(u, "f"), "w") as f:
                f.write("abc")
            os.mkdir(j(u, "d"))
            os.symlink("f", j(u, "l"))
        as_u(make)
        return {n: stat_summary(os.lstat(j(u, n))) for n in ("f", "d", "l")}
    same_on_both(pair, sc)

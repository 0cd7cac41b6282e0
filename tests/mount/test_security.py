"""Security findings of issue 12, each attacked the way it was found:

1. An O_CREAT open that finds the name taken (it appeared on the backing
   store after the kernel's lookup) opens what is there only if the caller
   may, and never a FIFO or device.
2. Writes the kernel hands to the daemon whole (O_DIRECT, O_APPEND with a
   lock service) clear setuid and setgid as a local filesystem would.
4. One uid cannot use up the node's locks on the lock server: its
   application locks and waits are capped, and other users' locks and every
   write go on.
8. A new directory, FIFO, symlink or file is given to its creator only, even
   while its name is swapped on the backing store, and never shows set-id
   bits while it still belongs to root.
9. The top level of the mount (the list of workspaces) is changed through
   the mount only by the configured admin_uid, and a refused change leaves
   nothing behind in SOURCE.

Races run a root racer directly on the backing store against an
unprivileged user (uid 1000) working through the mount; each stops at the
first breach and otherwise runs a fixed number of rounds, so a pass never
depends on timing.
"""
import errno
import fcntl
import json
import os
import select
import signal
import stat
import subprocess
import time

import pytest

import wsfstest
from wsfstest import (RENAME_EXCHANGE, WSCTL, WSLOCKD, USER_GID, USER_UID,
                      TOP_LEVEL_CHANGES, call_as, reap, renameat2, wait_for)
from wsfstest import errno_of as outcome_errno

U, G = USER_UID, USER_GID
SECRET = b"ROOT-ONLY-SECRET\n"


def j(*a):
    return os.path.join(*a)


def userdir(path, uid=U, gid=G, mode=0o755):
    """A directory on the backing store that uid may write to."""
    os.makedirs(path, exist_ok=True)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    return path


class Racer:
    """fn() called in a loop in a forked root process until stop() (which
    sends SIGTERM); fn may return a string, which ends the loop and is
    reported as a breach (and creates the file flag, if given, so that the
    other side can stop early)."""

    def __init__(self, fn, flag=None):
        self.fn = fn
        r, w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(r)
            code = 0
            try:
                while True:
                    msg = fn()
                    if msg:
                        os.write(w, msg.encode()[:4000])
                        if flag:
                            open(flag, "w").close()
                        break
            except BaseException as e:  # report, never hang the parent
                os.write(w, f"racer error: {e!r}".encode())
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        self.r = r

    def breach(self):
        """What the racer reported so far, or None (does not block)."""
        if select.select([self.r], [], [], 0)[0]:
            data = os.read(self.r, 4000)
            return data.decode(errors="replace") or None
        return None

    def stop(self):
        try:
            os.kill(self.pid, 15)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        msg = self.breach()
        os.close(self.r)
        return msg


class Lockd:
    """A wslockd on a Unix socket in d, for mounts with lockd=."""

    def __init__(self, d, extra=()):
        self.sock = os.path.join(d, "lockd.sock")
        self.logpath = os.path.join(d, "lockd.log")
        self.log = open(self.logpath, "w+")
        self.proc = subprocess.Popen(
            [WSLOCKD, "-f", "-v", "--listen", f"unix:{self.sock}",
             "--state-dir", os.path.join(d, "state")] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not os.path.exists(self.sock):
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, "wslockd did not start"
            time.sleep(0.02)

    @property
    def addr(self):
        return f"unix:{self.sock}"

    def text(self):
        with open(self.logpath) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        reap(self.proc)
        self.log.close()


@pytest.fixture
def lockd_factory(tmp_path):
    """lockd_factory(extra=[...]) starts a wslockd; stopped after the test.
    Ask for it before mount_factory, so that mounts go first."""
    if not os.access(WSLOCKD, os.X_OK):
        pytest.skip(f"{WSLOCKD} is not built")
    made = []

    def make(extra=()):
        d = tmp_path / f"lockd{len(made)}"
        d.mkdir()
        made.append(Lockd(str(d), extra))
        return made[-1]
    yield make
    bad = []
    for lk in made:
        lk.stop()
        if any(m in lk.text() for m in ("ERROR: AddressSanitizer",
                                        "ERROR: LeakSanitizer",
                                        "runtime error:")):
            bad.append(lk.text())
    if bad:
        pytest.fail("sanitizer report in the wslockd log:\n" +
                    "\n".join(bad), pytrace=False)


def user_loop(rounds, once, flag=None):
    """In a child as uid 1000: call once() up to rounds times; stop at the
    first string it returns and give it back with the round number, or
    when the file flag appears."""
    def loop():
        for i in range(rounds):
            msg = once()
            if msg:
                return f"round {i}: {msg}"
            if flag and i % 16 == 0 and os.path.exists(flag):
                return None
        return None
    return loop


# Rounds of each user loop: on the old code the race of finding 1 was won
# within the first few hundred, that of finding 8 within a thousand.
ROUNDS = 1000
NOCACHE = {"entry_timeout": 0, "attr_timeout": 0}


# --- 1. O_CREAT on a name that appeared after the lookup --------------------

CREATE_CASES = {
    # flags of the user's open, kind and mode of root's object
    "read-0600": (os.O_RDONLY | os.O_CREAT, "file", 0o600),
    "write-0644": (os.O_WRONLY | os.O_CREAT, "file", 0o644),
    "trunc-0644": (os.O_RDONLY | os.O_CREAT | os.O_TRUNC, "file", 0o644),
    # O_NONBLOCK: a FIFO the kernel found is opened by the kernel itself,
    # which must not block the loop; the daemon must not open it at all.
    "fifo": (os.O_RDONLY | os.O_CREAT | os.O_NONBLOCK, "fifo", 0o666),
    "dir": (os.O_RDONLY | os.O_CREAT, "dir", 0o755),
}


@pytest.mark.parametrize("case", sorted(CREATE_CASES))
def test_create_over_appearing_name_checks_rights(mount_factory, case):
    """Root's object (a hard link of one kept outside SOURCE; a directory
    is moved in) appears and vanishes at a name while uid 1000 opens that
    name with O_CREAT, without O_EXCL, through the mount. When the kernel's
    lookup found nothing it takes the daemon's answer as a fresh create and
    checks nothing: the daemon must refuse what the user may not open
    (EACCES, or EISDIR for a directory, as a local filesystem does), and
    never open a FIFO, which without O_NONBLOCK would hold a worker until
    a writer came. The old code opened root's file for the user, and opened
    the FIFO or directory before it answered EIO."""
    flags, kind, mode = CREATE_CASES[case]
    # No caching of names, so that every open looks the name up again.
    mount = mount_factory(workspaces=("ws1",), opts=NOCACHE)
    d = userdir(mount.src("ws1", "d"))
    keep = j(mount.base, "rootobj")
    if kind == "fifo":
        os.mkfifo(keep, mode)
    elif kind == "dir":
        os.mkdir(keep, mode)
        with open(j(keep, "inside"), "wb") as f:
            f.write(SECRET)
    else:
        with open(keep, "wb") as f:
            f.write(SECRET)
    os.chmod(keep, mode)
    name = j(d, "f")
    tmp = j(d, ".racer")
    mnt_name = mount.path("ws1", "d", "f")

    def appear():
        try:
            if kind == "dir":
                os.rename(keep, name)
            else:
                os.link(keep, tmp)
                os.rename(tmp, name)
        except OSError:
            return None
        for _ in range(50):
            pass
        try:
            if kind == "dir":
                os.rename(name, keep)
            else:
                os.unlink(name)
        except OSError:
            pass
        for _ in range(200):
            pass
        return None

    ok = {errno.EACCES, errno.ENOENT, errno.EEXIST, errno.EISDIR}

    def once():
        try:
            fd = os.open(mnt_name, flags, 0o600)
        except OSError as e:
            if e.errno in ok:
                return None
            return f"unexpected {errno.errorcode.get(e.errno, e.errno)}"
        try:
            st = os.fstat(fd)
            if st.st_uid != U and not stat.S_ISFIFO(st.st_mode):
                data = b""
                if (flags & os.O_ACCMODE) != os.O_WRONLY:
                    data = os.pread(fd, 100, 0)
                return (f"opened root's {stat.filemode(st.st_mode)} object, "
                        f"read {data!r}")
        finally:
            os.close(fd)
        try:
            os.unlink(mnt_name)
        except OSError:
            pass
        return None

    racer = Racer(appear)
    try:
        res = call_as(U, G, user_loop(ROUNDS, once))
    finally:
        rmsg = racer.stop()
        if kind == "dir" and not os.path.exists(keep):
            os.rename(name, keep)
    assert not rmsg, rmsg
    assert not res, res
    with open(j(keep, "inside") if kind == "dir" else keep, "rb",
              opener=lambda p, f: os.open(p, f | os.O_NONBLOCK)) as f:
        if kind != "fifo":
            assert f.read() == SECRET, "root's file was changed"


# --- 2. direct writes clear setuid and setgid --------------------------------

SUPP = 2345          # a supplementary group of the writer in some cases

KILL_CASES = [
    # owner uid, owner gid, mode, writer uid, writer's groups
    (0, 0, 0o4777, U, ()),
    (0, 0, 0o2777, U, ()),
    (0, 0, 0o6777, U, ()),
    (0, 0, 0o2767, U, ()),              # setgid, no group exec, not a member
    (0, SUPP, 0o2767, U, (SUPP,)),      # ... a member keeps it
    (0, SUPP, 0o6777, U, (SUPP,)),
    (U, G, 0o4755, U, ()),              # the owner's own write
    (U, G, 0o2755, U, ()),
    (U, G, 0o2745, U, ()),
    (0, 0, 0o6777, 0, ()),              # root keeps both (CAP_FSETID)
]


def kill_modes(d, flags):
    """Write one byte to a file of each case in d as its writer, opened
    with flags; return the modes after the writes."""
    out = []
    for i, (uid, gid, mode, wuid, groups) in enumerate(KILL_CASES):
        p = j(d, f"f{i}")
        with open(p, "wb") as f:
            f.write(b"0123456789")
        os.chown(p, uid, gid)
        os.chmod(p, mode)

        def write(p=p):
            fd = os.open(p, os.O_WRONLY | flags)
            try:
                os.write(fd, b"x")
            finally:
                os.close(fd)
        if wuid == 0:
            write()
        else:
            call_as(wuid, G, write, groups=groups)
        out.append(oct(stat.S_IMODE(os.stat(p).st_mode)))
    return out


def test_direct_write_clears_setid_like_native(pair):
    """O_DIRECT: the kernel sends the write as is and leaves clearing the
    set-id bits to the server (FUSE_WRITE_KILL_SUIDGID), and the daemon
    keeps CAP_FSETID. Native (a plain write: the kernel's rule is the same
    for every write) is the reference; the old code kept 04777 etc."""
    native, d = pair
    want = kill_modes(native, 0)
    assert kill_modes(d, os.O_DIRECT) == want
    assert want[0] == "0o777" and want[4] == "0o2767"


def test_append_write_with_lockd_clears_setid_like_native(lockd_factory,
                                                           mount_factory,
                                                           native):
    """With a lock service, O_APPEND writes go to the daemon whole (direct
    I/O), and so must clear the set-id bits there."""
    lk = lockd_factory()
    m = mount_factory(workspaces=("ws1",), opts={"lockd": lk.addr})
    d = m.path("ws1", "t")
    os.mkdir(d)
    want = kill_modes(native, os.O_APPEND)
    assert kill_modes(d, os.O_APPEND) == want


# A VFS_CAP_REVISION_2 file capability: effective, CAP_NET_RAW permitted.
CAP_NET_RAW_BLOB = ((0x02000000 | 1).to_bytes(4, "little") +
                    (1 << 13).to_bytes(4, "little") + bytes(12))


def test_capability_set_behind_the_mount_goes_with_the_next_write(
        mount_factory):
    """The daemon answers the kernel's per-write security.capability query
    from memory once it knows a file has none. A capability set on the
    backing file afterwards, behind wsfs's back, must still not survive a
    write through the mount, as on a local filesystem."""
    m = mount_factory(workspaces=("ws1",))
    mp, bp = m.path("ws1", "f"), m.src("ws1", "f")
    fd = os.open(mp, os.O_WRONLY | os.O_CREAT, 0o755)
    try:
        os.write(fd, b"first")			# learnt: no capability
        os.setxattr(bp, "security.capability", CAP_NET_RAW_BLOB)
        os.write(fd, b"second")
    finally:
        os.close(fd)
    assert outcome_errno(os.getxattr, bp, "security.capability") == \
        errno.ENODATA, "a capability survived a write through the mount"
    with open(bp, "rb") as f:
        assert f.read() == b"firstsecond"


@pytest.mark.parametrize("passthrough", ["on", "off"])
def test_setuid_set_behind_the_mount_goes_with_the_next_write(
        mount_factory, passthrough):
    """Once a write found a file without set-id bits, the kernel stops
    looking (S_NOSEC) and, with FUSE_HANDLE_KILLPRIV_V2, leaves the
    clearing to wsfs. A setuid bit set on the backing file afterwards,
    behind wsfs's back, must still go with the next write by a user who
    does not own it, as on a local filesystem. With kernel passthrough
    the write reaches no daemon: the backing write runs without
    CAP_FSETID (fs/passthrough.c), so the backing filesystem clears it."""
    m = mount_factory(workspaces=("ws1",), opts={"passthrough": passthrough})
    mp, bp = m.path("ws1", "f"), m.src("ws1", "f")
    with open(bp, "wb") as f:
        f.write(b"0123456789")
    os.chmod(bp, 0o777)
    r, w = os.pipe()
    go_r, go_w = os.pipe()

    def writer():
        fd = os.open(mp, os.O_WRONLY)
        try:
            os.pwrite(fd, b"a", 0)	# found without set-id bits
            os.write(w, b"1")
            os.read(go_r, 1)		# root sets setuid behind wsfs
            os.pwrite(fd, b"b", 1)
        finally:
            os.close(fd)

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.close(go_w)
            call_as(U, G, writer)
            code = 0
        finally:
            os._exit(code)
    # Each side keeps only its own ends: if the other stops early, a
    # read sees the end of the pipe instead of waiting for ever.
    os.close(w)
    os.close(go_r)
    try:
        first = os.read(r, 1)
        if first == b"1":
            os.chmod(bp, 0o4777)
            os.write(go_w, b"1")
    finally:
        os.close(go_w)
        os.close(r)
        _, status = os.waitpid(pid, 0)
    assert first == b"1", "the writer stopped before its first write"
    assert os.waitstatus_to_exitcode(status) == 0
    mode = stat.S_IMODE(os.stat(bp).st_mode)
    assert not mode & stat.S_ISUID, f"setuid survived the write: {oct(mode)}"
    with open(bp, "rb") as f:
        assert f.read() == b"ab23456789"


def test_writes_ask_for_no_capability_each(mount_factory):
    """wsfs takes over clearing set-id bits and capabilities on write
    (FUSE_HANDLE_KILLPRIV_V2, fs/loop.c), so the kernel stops asking for
    security.capability before every write once it has found the inode
    without any: 200 writes make at most a couple of xattr requests, not
    200 (a round trip each)."""
    release = tuple(int(x) for x in
                    os.uname().release.split("-")[0].split(".")[:2])
    if release < (5, 11):
        pytest.skip(f"kernel {os.uname().release} has no "
                    "FUSE_HANDLE_KILLPRIV_V2 (5.11)")
    m = mount_factory(workspaces=("ws1",))
    assert wsfstest.status(m)["setid_clearing"] == "wsfs"
    out = subprocess.run([WSCTL, "status", m.mnt], check=True,
                         capture_output=True, text=True, timeout=20).stdout
    assert "set-id bits: cleared by wsfs on write" in out, out
    fd = os.open(m.path("ws1", "f"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"0")
        before = wsfstest.op_count(m, "xattr")
        for i in range(200):
            os.pwrite(fd, b"x", i)
        asked = wsfstest.op_count(m, "xattr") - before
    finally:
        os.close(fd)
    assert asked <= 2, f"{asked} xattr requests for 200 writes"


@pytest.mark.parametrize("who", ["root", "user"])
def test_write_removes_a_capability_the_kernel_knows_of(mount_factory, who):
    """A file whose capability the kernel learns of (set on the backing
    store before the first lookup) is written through the mount by root,
    or by a user who may write it but does not own it: the write succeeds
    and the capability is gone, as on a local filesystem. The kernel's own
    removal before the write reached a daemon without CAP_SETFCAP, which
    answered EPERM, and the write failed. Setting a capability through the
    mount stays refused; an explicit removal by root works."""
    m = mount_factory(workspaces=("ws1",))
    mp, bp = m.path("ws1", "f"), m.src("ws1", "f")
    with open(bp, "wb") as f:
        f.write(b"first")
    os.chmod(bp, 0o666)
    os.setxattr(bp, "security.capability", CAP_NET_RAW_BLOB)
    assert os.getxattr(mp, "security.capability") == CAP_NET_RAW_BLOB

    def append():
        with open(mp, "ab") as f:
            f.write(b"second")

    if who == "root":
        append()
    else:
        call_as(U, G, append)
    assert outcome_errno(os.getxattr, bp, "security.capability") == \
        errno.ENODATA, "the capability survived the write"
    with open(bp, "rb") as f:
        assert f.read() == b"firstsecond"
    assert outcome_errno(os.setxattr, mp, "security.capability",
                         CAP_NET_RAW_BLOB) == errno.EPERM
    os.setxattr(bp, "security.capability", CAP_NET_RAW_BLOB)
    os.removexattr(mp, "security.capability")
    assert outcome_errno(os.getxattr, bp, "security.capability") == \
        errno.ENODATA


# --- 8. new objects go to their creator, and only they ---------------------

MAKE_CASES = {
    "dir": (lambda p: os.mkdir(p, 0o755), os.rmdir),
    "fifo": (lambda p: os.mkfifo(p, 0o644), os.unlink),
    "symlink": (lambda p: os.symlink("target", p), os.unlink),
    "file": (lambda p: os.mknod(p, stat.S_IFREG | 0o644), os.unlink),
}


def make_victim(base, kind):
    """Root's object of the kind, at base/park; for all but a directory a
    second link base/keep holds the inode whatever happens to park."""
    park = j(base, "park")
    if kind == "dir":
        os.mkdir(park, 0o700)
        with open(j(park, "secret"), "wb") as f:
            f.write(SECRET)
    elif kind == "fifo":
        os.mkfifo(park, 0o600)
    elif kind == "symlink":
        os.symlink("/root/secret", park)
    else:
        with open(park, "wb") as f:
            f.write(SECRET)
        os.chmod(park, 0o600)
    keep = park
    if kind != "dir":
        keep = j(base, "keep")
        os.link(park, keep, follow_symlinks=False)
    return park, keep


def spoil_stage(m):
    """Make SOURCE/.wsfs-new unusable (someone else's, writable by all),
    so that wsfs must make new objects in a stage of their own inside the
    parent directory, as for a parent it cannot reach by rename."""
    os.mkdir(m.src(".wsfs-new"), 0o777)
    os.chmod(m.src(".wsfs-new"), 0o777)
    os.chown(m.src(".wsfs-new"), U, G)


@pytest.mark.parametrize("kind,stage", [(k, "global") for k in
                                        sorted(MAKE_CASES)] +
                         [("dir", "local")])
def test_new_object_owned_by_creator_only(mount_factory, kind, stage):
    """uid 1000 makes and removes an object through the mount while a root
    racer exchanges its name on the backing store with root's object of the
    same type and back. The old code made the object, then opened it by
    name to give it to the caller, and so gave root's object to uid 1000."""
    make, remove = MAKE_CASES[kind]
    m = mount_factory(workspaces=("ws1",), opts=NOCACHE)
    if stage == "local":
        spoil_stage(m)
    d = userdir(m.src("ws1", "d"))
    park, keep = make_victim(m.base, kind)
    # Root's object wherever it is moved: what the test checks.
    vfd = os.open(park, os.O_PATH | os.O_NOFOLLOW)
    victim = os.fstat(vfd)
    name = j(d, "new")
    mnt_name = m.path("ws1", "d", "new")

    def swap():
        try:
            renameat2(name, park, RENAME_EXCHANGE)
        except OSError:
            return None
        for _ in range(500):
            pass
        # Put root's object back at park, wherever the user's went.
        for p in (name, park):
            try:
                if os.lstat(p).st_ino == victim.st_ino and p == name:
                    renameat2(name, park, RENAME_EXCHANGE)
            except OSError:
                pass
        st = os.fstat(vfd)
        if (st.st_uid, st.st_gid, st.st_mode) != \
                (victim.st_uid, victim.st_gid, victim.st_mode):
            return (f"root's {kind} now uid {st.st_uid} gid {st.st_gid} "
                    f"mode {stat.filemode(st.st_mode)}")
        if kind != "dir":
            try:
                if os.lstat(park).st_ino != victim.st_ino:
                    os.unlink(park)
            except FileNotFoundError:
                pass
            try:
                os.link(keep, park, follow_symlinks=False)
            except FileExistsError:
                pass
        return None

    # EACCES: a lookup that saw the name moved out of the workspace while
    # it walked (openat2's EXDEV) refuses it.
    ok = {errno.EEXIST, errno.ENOENT, errno.ENOTEMPTY, errno.ENOTDIR,
          errno.EISDIR, errno.EACCES, errno.EXDEV}

    def once():
        for fn in (make, remove):
            try:
                fn(mnt_name)
            except OSError as e:
                if e.errno not in ok:
                    return f"{fn.__name__}: " + \
                        errno.errorcode.get(e.errno, str(e.errno))
        return None

    flag = j(m.base, "breach")
    racer = Racer(swap, flag)
    try:
        res = call_as(U, G, user_loop(3 * ROUNDS, once, flag))
    finally:
        rmsg = racer.stop()
    st = os.fstat(vfd)
    os.close(vfd)
    assert not rmsg, rmsg
    assert not res, res
    assert (st.st_uid, st.st_gid) == (0, 0)
    if stage == "global":
        st = os.lstat(m.src(".wsfs-new"))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o700)
        assert os.listdir(m.src(".wsfs-new")) == []
    assert [n for n in os.listdir(d) if n.startswith(".wsfs")] == []


SETID_MAKERS = {
    "mknod": lambda p: os.mknod(p, stat.S_IFREG | 0o6755),
    "create": lambda p: os.close(os.open(p, os.O_CREAT | os.O_EXCL |
                                         os.O_WRONLY, 0o6755)),
}


@pytest.mark.parametrize("how", sorted(SETID_MAKERS))
def test_new_setid_file_never_root_owned(mount_factory, how):
    """A file made with setuid and setgid through the mount shows them only
    once it belongs to its creator: a root racer on the backing store
    watching the name never sees a root-owned set-id file (which another
    node's agent could hard-link away before the chown). The old code made
    it with the bits, as root, and gave it away after."""
    make = SETID_MAKERS[how]
    m = mount_factory(workspaces=("ws1",), opts=NOCACHE)
    d = userdir(m.src("ws1", "d"))
    name = j(d, "new")
    mnt_name = m.path("ws1", "d", "new")

    def watch():
        try:
            st = os.lstat(name)
        except OSError:
            return None
        if st.st_uid == 0 and st.st_mode & (stat.S_ISUID | stat.S_ISGID):
            return f"root-owned {stat.filemode(st.st_mode)} at the name"
        return None

    def once():
        make(mnt_name)
        st = os.lstat(mnt_name)
        os.unlink(mnt_name)
        if (st.st_uid, stat.S_IMODE(st.st_mode)) != (U, 0o6755):
            return f"made uid {st.st_uid} mode {oct(st.st_mode)}"
        return None

    flag = j(m.base, "breach")
    racer = Racer(watch, flag)
    try:
        res = call_as(U, G, user_loop(ROUNDS, once, flag))
    finally:
        rmsg = racer.stop()
    assert not rmsg, rmsg
    assert not res, res


def test_unusable_stage_refused(mount_factory):
    """A SOURCE/.wsfs-new that others may write to is never used: objects
    are then staged inside their own directory, come out right, and leave
    nothing behind there."""
    m = mount_factory(workspaces=("ws1",))
    spoil_stage(m)
    d = userdir(m.src("ws1", "d"))
    sg = userdir(m.src("ws1", "d", "sg"), gid=SUPP, mode=0o2775)
    md = m.path("ws1", "d")

    def work():
        os.mkdir(j(md, "dir"), 0o750)
        os.mkfifo(j(md, "fifo"), 0o640)
        os.symlink("dir", j(md, "link"))
        os.mknod(j(md, "file"), stat.S_IFREG | 0o4750)
        os.mkdir(j(md, "sg", "sub"), 0o755)
    call_as(U, G, work, groups=(SUPP,))
    got = {n: (os.lstat(j(d, n)).st_uid, os.lstat(j(d, n)).st_gid,
               oct(stat.S_IMODE(os.lstat(j(d, n)).st_mode)))
           for n in ("dir", "fifo", "link", "file")}
    assert got == {"dir": (U, G, "0o750"), "fifo": (U, G, "0o640"),
                   "link": (U, G, "0o777"), "file": (U, G, "0o4750")}
    st = os.lstat(j(sg, "sub"))
    assert (st.st_uid, st.st_gid, oct(stat.S_IMODE(st.st_mode))) == \
        (U, SUPP, "0o2755")
    assert sorted(os.listdir(d)) == ["dir", "fifo", "file", "link", "sg"]
    assert sorted(os.listdir(sg)) == ["sub"]
    assert os.listdir(m.src(".wsfs-new")) == []
    assert "staged in their own directory" in m.log()


# --- 9. the top level is the admin's ----------------------------------------

def top_state(m):
    """What a change at the top level would touch: SOURCE's entries, its
    mode, owner, times and xattrs."""
    st = os.stat(m.source)
    return (sorted(os.listdir(m.source)), oct(st.st_mode), st.st_uid,
            st.st_mtime_ns, st.st_ctime_ns, sorted(os.listxattr(m.source)))


TOP_CHANGES = TOP_LEVEL_CHANGES
# Only directories are workspaces: not even the admin makes anything else.
NOT_WORKSPACES = ("create", "mknod", "symlink")


def top_mount(mount_factory, **opts):
    m = mount_factory(workspaces=("ws1", "ws2"), opts=opts)
    os.setxattr(m.source, "user.old", b"1")
    return m


@pytest.mark.parametrize("op", sorted(TOP_CHANGES))
def test_top_level_refused_to_root(mount_factory, op):
    """Without admin_uid nobody changes the top level through the mount,
    root (a container's root reaching the mount) included: workspaces are
    made and removed with wsctl on SOURCE. The old code let root rename and
    remove other workspaces, and left a refused symlink, FIFO or file
    behind in SOURCE."""
    m = top_mount(mount_factory)
    before = top_state(m)
    with pytest.raises(OSError) as ei:
        TOP_CHANGES[op](m)
    assert ei.value.errno == errno.EPERM, ei.value
    assert top_state(m) == before
    assert sorted(os.listdir(m.mnt)) == ["ws1", "ws2"]


@pytest.mark.parametrize("op", sorted(TOP_CHANGES))
def test_top_level_changed_by_admin_uid(mount_factory, op):
    """With admin_uid=0, root changes the top level; still only with
    directories, and a refused one leaves nothing in SOURCE."""
    m = top_mount(mount_factory, admin_uid=0)
    before = top_state(m)
    if op in NOT_WORKSPACES:
        with pytest.raises(OSError) as ei:
            TOP_CHANGES[op](m)
        assert ei.value.errno == errno.EPERM, ei.value
        assert top_state(m) == before
        return
    TOP_CHANGES[op](m)
    assert top_state(m) != before


def test_top_level_admin_uid_is_that_uid_only(mount_factory):
    """admin_uid names one uid: another root-free user is refused by the
    kernel (SOURCE is root's 0755), and a SOURCE made group-writable for
    the admin's group lets the admin in, no one else."""
    m = top_mount(mount_factory, admin_uid=U)
    os.chown(m.source, 0, SUPP)
    os.chmod(m.source, 0o775)
    assert call_as(U + 1, G, lambda: outcome_errno(os.mkdir, m.path("x")),
                   groups=(SUPP,)) == errno.EPERM
    assert call_as(0, 0, lambda: outcome_errno(os.mkdir, m.path("y"))) == \
        errno.EPERM
    assert call_as(U, G, lambda: outcome_errno(os.mkdir, m.path("z")),
                   groups=(SUPP,)) == 0
    assert "z" in os.listdir(m.source) and "x" not in os.listdir(m.source)


# --- 4. one uid cannot use up the node's locks ------------------------------

OTHER = 1001         # a second user of the mount
PLOCK_MAX_PER_UID = 4096          # the defaults of wsfs.conf(5)
PLOCK_MAX_WAITERS_PER_UID = 256


def lockd_items(lk, kind):
    """The holders or waiters (kind) wslockd lists, all sessions."""
    r = subprocess.run([WSCTL, "locks", "--lockd", lk.addr, "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [i for i in json.loads(r.stdout) if i["type"] == kind]


def own_file(m, uid, name):
    d = userdir(m.src("ws1", f"u{uid}"), uid=uid, gid=uid)
    p = j(d, name)
    with open(p, "wb") as f:
        f.write(b"x" * 100)
    os.chown(p, uid, uid)
    return m.path("ws1", f"u{uid}", name)


def others_lock_and_write(m):
    """uid OTHER writes a new file and takes a lock through the mount."""
    p = own_file(m, OTHER, "lockme")

    def work():
        q = j(os.path.dirname(p), "written")
        with open(q, "wb") as f:
            f.write(b"still writable\n")
        with open(p, "r+b") as f:
            fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            fcntl.lockf(f, fcntl.LOCK_UN, 1, 0)
        with open(q, "rb") as f:
            return f.read()
    return call_as(OTHER, OTHER, work)


class Holder:
    """fn(*args) run as uid in a forked child that then stays, keeping what
    it took (locks, waits), until release(). result() is what fn returned
    (JSON-able), or an OSError's errno name."""

    def __init__(self, uid, fn, *args):
        r, w = os.pipe()
        cr, cw = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(r)
            os.close(cw)
            try:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                res = fn(*args)
            except OSError as e:
                res = errno.errorcode.get(e.errno, str(e.errno))
            except BaseException as e:
                res = repr(e)
            os.write(w, json.dumps(res).encode())
            os.close(w)
            os.read(cr, 1)
            os._exit(0)
        os.close(w)
        os.close(cr)
        self.r, self.cw = r, cw

    def result(self):
        data = b""
        while True:
            chunk = os.read(self.r, 65536)
            if not chunk:
                break
            data += chunk
        return json.loads(data.decode())

    def release(self):
        os.close(self.cw)
        os.close(self.r)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)


def take_locks(p, n):
    """Take up to n one-byte locks on p, every other byte (so that no two
    merge), F_SETLK; return how many and the errno that stopped it. The
    file stays open, so the locks stay held."""
    global held_file
    held_file = open(p, "r+b")
    for i in range(n):
        try:
            fcntl.lockf(held_file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 2 * i)
        except OSError as e:
            return [i, errno.errorcode.get(e.errno, str(e.errno))]
    return [n, None]


def test_plock_cap_per_uid_keeps_locks_for_others(lockd_factory,
                                                    mount_factory):
    """uid 1000 takes byte-range locks, one range each, until refused. The
    lock server gives the node's session a little more than the per-uid
    cap (plock_max_per_uid, default 4096): uid 1000 is refused (ENOLCK) at
    its cap, and uid 1001 still locks and writes. Without the cap uid 1000
    used up the whole session, and every other lock and write of the node
    failed."""
    lk = lockd_factory(["--max-locks", str(PLOCK_MAX_PER_UID + 200)])
    m = mount_factory(workspaces=("ws1",), opts={"lockd": lk.addr})
    p = own_file(m, U, "many")
    h = Holder(U, take_locks, p, PLOCK_MAX_PER_UID + 400)
    try:
        taken, err = h.result()
        assert err == "ENOLCK", (taken, err)
        assert others_lock_and_write(m) == b"still writable\n"
        assert PLOCK_MAX_PER_UID - PQ_GROWTH <= taken <= PLOCK_MAX_PER_UID
    finally:
        h.release()
    # Closing gave them all back: uid 1000 may lock again.
    assert wait_for(lambda: len(lockd_items(lk, "holder")) < 10, 30)
    h = Holder(U, take_locks, p, 10)
    try:
        assert h.result() == [10, None]
    finally:
        h.release()


PQ_GROWTH = 2        # what a lock request reserves until its answer


def hold_whole(*paths):
    """Lock each file whole, exclusively; keep the files open."""
    global held_files
    held_files = [open(p, "r+b") for p in paths]
    for f in held_files:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return "held"


def wait_in_threads(p, n, log):
    """Start n threads that each wait (F_SETLKW) for a whole-file lock on
    p; each appends its outcome to the file log when it ends."""
    import threading

    global waiting_file
    waiting_file = open(p, "r+b")

    def one():
        try:
            fcntl.lockf(waiting_file, fcntl.LOCK_EX)
            res = "ok"
        except OSError as e:
            res = errno.errorcode.get(e.errno, str(e.errno))
        with open(log, "a") as f:
            f.write(res + "\n")
    for _ in range(n):
        threading.Thread(target=one, daemon=True).start()
    return "started"


def outcomes(log):
    try:
        with open(log) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


def test_plock_waiters_capped_per_uid(lockd_factory, mount_factory):
    """uid 1000 queues blocking lock requests (F_SETLKW) on a file root
    holds, more than plock_max_waiters_per_uid (default 256) and more than
    the lock server lets the node's session wait for: past its cap each is
    refused with ENOLCK at once, and uid 1001 can still wait for a lock and
    gets it. Without the cap uid 1000 took every waiting slot of the
    session, and uid 1001's wait failed."""
    cap = PLOCK_MAX_WAITERS_PER_UID
    lk = lockd_factory(["--max-waiters", str(cap + 4)])
    m = mount_factory(workspaces=("ws1",), opts={"lockd": lk.addr})
    f = own_file(m, U, "contended")
    g = own_file(m, OTHER, "later")
    for p in (m.src("ws1", f"u{U}", "contended"),
              m.src("ws1", f"u{OTHER}", "later")):
        os.chmod(p, 0o666)
    alog, blog = j(m.base, "a.log"), j(m.base, "b.log")
    for log in (alog, blog):
        open(log, "w").close()
        os.chmod(log, 0o666)
    root = Holder(0, hold_whole, f, g)
    a = b = None
    try:
        assert root.result() == "held"
        n = cap + 14
        a = Holder(U, wait_in_threads, f, n, alog)
        assert a.result() == "started"
        # Every request of uid 1000 is either waiting on the server or
        # refused.
        assert wait_for(lambda: len(lockd_items(lk, "waiter")) +
                        len(outcomes(alog)) == n, 120), \
            (len(lockd_items(lk, "waiter")), outcomes(alog))
        waiting = len(lockd_items(lk, "waiter"))
        b = Holder(OTHER, wait_in_threads, g, 1, blog)
        assert b.result() == "started"
        assert wait_for(lambda: outcomes(blog) or
                        len(lockd_items(lk, "waiter")) == waiting + 1, 60)
        assert outcomes(blog) == [], "uid 1001 could not wait for a lock"
        assert outcomes(alog) == ["ENOLCK"] * (n - cap)
        root.release()
        root = None
        assert wait_for(lambda: outcomes(blog), 60) == ["ok"]
    finally:
        for h in (b, a, root):
            if h is not None:
                h.release()


def split_by_unlocks(p, n):
    """Lock p whole, then unlock every other byte, each unlock splitting
    a range in two, up to n times; return how many and what stopped it."""
    global split_file
    split_file = open(p, "r+b")
    fcntl.lockf(split_file, fcntl.LOCK_EX | fcntl.LOCK_NB, 0, 0)
    for i in range(n):
        try:
            fcntl.lockf(split_file, fcntl.LOCK_UN, 1, 2 * i + 1)
        except OSError as e:
            return [i, errno.errorcode.get(e.errno, str(e.errno))]
    return [n, None]


def take_adjacent(p, n):
    """Take n one-byte locks side by side, all exclusive: the server merges
    them into one range, so no cap is reached. Return how many."""
    global adjacent_file
    adjacent_file = open(p, "r+b")
    for i in range(n):
        try:
            fcntl.lockf(adjacent_file, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, i)
        except OSError as e:
            return [i, errno.errorcode.get(e.errno, str(e.errno))]
    return [n, None]


def test_plock_caps_configured(lockd_factory, mount_factory):
    """plock_max_per_uid and plock_max_total as set: a uid stops at its cap,
    all uids together at the node's, an unlock that would split a range
    past the cap is refused too, and a closed file gives its locks back."""
    lk = lockd_factory()
    m = mount_factory(workspaces=("ws1",), opts={
        "lockd": lk.addr, "plock_max_per_uid": 10, "plock_max_total": 16})
    pa, pb = own_file(m, U, "a"), own_file(m, OTHER, "b")
    a = Holder(U, take_locks, pa, 100)
    b = None
    try:
        ta, ea = a.result()
        assert ea == "ENOLCK" and 10 - PQ_GROWTH <= ta <= 10, (ta, ea)
        b = Holder(OTHER, take_locks, pb, 100)
        tb, eb = b.result()
        assert eb == "ENOLCK" and ta + tb <= 16, (ta, tb, eb)
        b.release()
        b = Holder(OTHER, split_by_unlocks, pb, 100)
        # 16 - ta may split one lock into at most that many ranges.
        ts, es = b.result()
        assert es == "ENOLCK" and ta + ts + 1 <= 16, (ta, ts, es)
    finally:
        for h in (a, b):
            if h is not None:
                h.release()
    a = Holder(U, take_locks, pa, 5)
    try:
        assert a.result() == [5, None]
    finally:
        a.release()
    # Ranges that merge count once, as on the server.
    a = Holder(U, take_adjacent, pa, 100)
    try:
        assert a.result() == [100, None]
        assert len([i for i in lockd_items(lk, "holder")
                    if i["owner"] != 1]) == 1
    finally:
        a.release()

"""Attack classes 6, 7 and 8: what the backing store contains rather than
how paths change: hard links to inodes outside SOURCE, FIFOs, sockets and
device nodes, and setuid/setgid files.
"""
import errno
import os
import select
import socket
import stat
import subprocess
import threading
import time

import attacklib as A
import wsfstest
from attacklib import STATS
from test_attack_races import assert_clean

BLOCKER = os.path.join(A.HERE, "blocker.py")


# --- class 6 ----------------------------------------------------------------

def hardlink_ops(path):
    def read():
        with open(path, "rb") as f:
            return f.read()

    def write():
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"attack")
        finally:
            os.close(fd)

    return [("read", read), ("write", write),
            ("chmod", lambda: os.chmod(path, 0o666)),
            ("chown", lambda: os.chown(path, 4321, 4321)),
            ("truncate", lambda: os.truncate(path, 0)),
            ("utimens", lambda: os.utime(path, (12345, 12345))),
            ("setxattr", lambda: os.setxattr(path, "user.atk", b"1"))]


def only_linked(targets):
    """Residual predicate of class 6 as root: what changed is exactly the
    inodes hard-linked into the workspace, nothing beside them."""
    def pred(bad):
        for b in bad:
            if b.startswith("canary content read via"):
                continue
            p, sep, _ = b.partition(": ")
            if p not in targets:
                return False
        return True
    return pred


def hardlink_attack(L, as_uid):
    """Hard-link canary files outside SOURCE (beside SOURCE, and in the
    sibling workspace) into the workspace on the backing store, then
    attack them through the mount as uid as_uid (None: root)."""
    st6 = STATS[6]
    targets = [os.path.join(L.base, L.TOP),
               os.path.join(L.src, L.SIB, L.CF)]
    links = []

    def plant():
        # Fresh names each time: a rebuilt canary is a new inode, and the
        # mount may still cache the old name.
        for ln in links:
            os.unlink(ln)
        links[:] = [L.ws_src(L.atk(f"hl{i}-")) for i in range(len(targets))]
        for t, ln in zip(targets, links):
            os.link(t, ln)
        L.baseline()
    plant()
    total = A.iterations(6)
    outcomes = {}
    with A.Watchdog(L.mnt, 60 + total * 2, st6, "class 6"):
        for i in range(total):
            k = i % len(targets)
            for j in range(len(hardlink_ops(""))):
                # the current name: plant() renames after each rebuild
                mp = L.ws_mnt(os.path.basename(links[k]))
                name, fn = hardlink_ops(mp)[j]
                found = []
                try:
                    if as_uid is None:
                        r = fn()
                    else:
                        r = wsfstest.call_as(as_uid, as_uid, fn)
                    outcomes.setdefault(name, set()).add("ok")
                    st6.errnos["ok"] += 1
                    L.scan(r, f"{name} via hard link", found)
                except OSError as e:
                    outcomes.setdefault(name, set()).add(A.errname(e.errno))
                    st6.errnos[A.errname(e.errno)] += 1
                st6.iterations += 1
                who = "root" if as_uid is None else f"uid {as_uid}"
                if not A.check_round(
                        L, st6, f"{name} as {who} via hard link to "
                        f"{targets[k]}", found,
                        residual=only_linked(targets) if as_uid is None
                        else None):
                    plant()
    return outcomes


def test_class6_hardlink_unprivileged(layout, amount):
    """Hard links on the backing store to canaries outside SOURCE (same
    filesystem), attacked through the mount by an unprivileged user who
    owns nothing: read, write, chmod, chown, truncate, utimens, setxattr
    must all be refused by the permissions of the inode itself."""
    out = hardlink_attack(layout, A.USER_UID)
    STATS[6].notes.append(f"unprivileged: {sorted(out.items())}")
    assert_clean(6)


def test_class6_hardlink_root(layout, amount):
    """The same as root. wsfs cannot tell a hard link planted on the
    backing store from any other name of the inode, so root reaches the
    linked inode through it, with root's own rights, as it would through
    the backing store (planting the link needed write access there). That
    is a documented residual (README, Security; counted in the class's
    "residual" column); an escape is anything else changing: another
    canary, a name created beside one, the link reaching a different
    inode."""
    out = hardlink_attack(layout, None)
    STATS[6].notes.append(f"root: {sorted(out.items())}")
    assert_clean(6)


# --- class 7 ----------------------------------------------------------------

def start_blocker(mode, path, n, duration=30.0):
    p = subprocess.Popen([A.PYTHON, BLOCKER, mode, path, str(n),
                          str(duration)], stdout=subprocess.PIPE, text=True)
    r, _, _ = select.select([p.stdout], [], [], 30)
    line = p.stdout.readline() if r else ""
    if not line.startswith("started"):
        p.kill()
        p.wait()
        raise RuntimeError(f"blocker {mode} did not start: {line!r}")
    return p


def stop_blocker(p, timeout=5):
    if p.poll() is None:
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
    return p.stdout.read() if p.stdout else ""


def timed(fn, limit, what, st, found, daemon=None, excuse=None):
    """Run fn, which must finish within limit seconds (the watchdog
    around the whole test aborts the mount if it never does). A slow
    answer's failure says where the caller waited (and, with the daemon's
    pid, how many daemon threads were free). excuse(), if given, may name
    a cause outside wsfs for a slow answer: that is noted, not failed.
    So is, with the daemon's pid, a disk that stalled: at the limit some
    daemon thread waited for the disk while others still waited for
    requests (wsfs kept serving; a native call would have waited too)."""
    box = {}
    stall = ([], 0)

    def run():
        box["tid"] = threading.get_native_id()
        try:
            fn()
        except OSError as e:
            box["err"] = e
    t0 = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit)
    where = A.wait_point(box.get("tid"), daemon) if th.is_alive() else ""
    if th.is_alive() and daemon:
        stall = A.disk_waits(daemon)
    th.join()
    dt = time.monotonic() - t0
    if "err" in box:
        st.errnos[f"{what} {A.errname(box['err'].errno)}"] += 1
    if dt > limit:
        why = excuse() if excuse else None
        if not why and stall[0] and stall[1] > 0:
            why = ("the disk stalled: daemon threads waited in " +
                   ", ".join(sorted(set(stall[0]))))
        if why:
            st.notes.append(f"{what} took {dt:.1f}s: {why} ({where})")
        else:
            st.fail(f"{what} took {dt:.1f}s (limit {limit}s): {where}")
    return dt


def test_class7_special_files(layout, amount):
    """FIFOs, a listening Unix socket and device nodes (char 1:3 like
    /dev/null, 1:1 like /dev/mem, block 7:0) planted on the backing
    store. Through the mount (nodev): device opens fail with
    EACCES/EPERM/ENXIO; mknod of devices fails with EPERM; connect never
    reaches the backing socket; 32 threads blocked opening the FIFO do not
    stop the mount from answering within 3 s, and wsfs never opens the
    backing FIFO itself (a writer on it finds no reader)."""
    L = layout
    st7 = STATS[7]
    ws = L.ws_src()
    os.mkfifo(os.path.join(ws, "fifo"))
    os.mknod(os.path.join(ws, "null"), stat.S_IFCHR | 0o666,
             os.makedev(1, 3))
    os.mknod(os.path.join(ws, "mem"), stat.S_IFCHR | 0o666,
             os.makedev(1, 1))
    os.mknod(os.path.join(ws, "blk"), stat.S_IFBLK | 0o666,
             os.makedev(7, 0))
    with open(os.path.join(ws, "plain"), "w") as f:
        f.write("workspace data\n")
    lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lsock.bind(os.path.join(ws, "sock"))
    lsock.listen(64)
    lsock.setblocking(False)
    os.mkfifo(L.ws_mnt("fifo2"))
    total = A.iterations(7)

    def accepted():
        try:
            c, _ = lsock.accept()
            c.close()
            return True
        except BlockingIOError:
            return False

    def backing_fifo_has_reader(name):
        try:
            fd = os.open(os.path.join(ws, name),
                         os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            return e.errno != errno.ENXIO
        os.close(fd)
        return True

    try:
        with A.Watchdog(L.mnt, 120 + total * 0.5, st7, "class 7"):
            for i in range(total):
                found = []
                op = i % 10
                what = f"op {op}"
                try:
                    if op in (0, 1, 2):
                        name = ("null", "mem", "blk")[op]
                        for fl in (os.O_RDONLY, os.O_WRONLY):
                            what = f"open {name} flags {fl}"
                            try:
                                fd = os.open(L.ws_mnt(name), fl)
                            except OSError as e:
                                st7.errnos[f"open {name} "
                                           f"{A.errname(e.errno)}"] += 1
                                if e.errno not in (errno.EACCES, errno.EPERM,
                                                   errno.ENXIO):
                                    st7.fail(f"{what}: {A.errname(e.errno)}")
                                continue
                            os.close(fd)
                            found.append(f"opened device node {name} "
                                         "through the mount")
                    elif op == 3:
                        for kind, dev in ((stat.S_IFCHR, (1, 1)),
                                          (stat.S_IFBLK, (7, 0))):
                            n = L.atk("dev")
                            try:
                                os.mknod(L.ws_mnt(n), kind | 0o666,
                                         os.makedev(*dev))
                                st7.fail(f"mknod {kind:o} through the mount "
                                         "succeeded (want EPERM)")
                            except OSError as e:
                                st7.errnos[f"mknod {A.errname(e.errno)}"] += 1
                                if e.errno != errno.EPERM:
                                    st7.fail(f"mknod: {A.errname(e.errno)}, "
                                             "want EPERM")
                            if os.path.lexists(L.ws_src(n)):
                                s = os.lstat(L.ws_src(n))
                                if stat.S_ISCHR(s.st_mode) or \
                                        stat.S_ISBLK(s.st_mode):
                                    found.append("device node created on "
                                                 "the backing store")
                        A.sweep_atk(ws, L)
                    elif op == 4:
                        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        c.settimeout(2)
                        try:
                            c.connect(L.ws_mnt("sock"))
                            st7.errnos["connect ok"] += 1
                        except OSError as e:
                            st7.errnos[f"connect {A.errname(e.errno)}"] += 1
                        finally:
                            c.close()
                        if accepted():
                            found.append("connect through the mount reached "
                                         "the backing socket")
                    elif op in (5, 6):
                        name = ("fifo", "fifo2")[op - 5]
                        fd = os.open(L.ws_mnt(name),
                                     os.O_RDONLY | os.O_NONBLOCK)
                        os.close(fd)
                        try:
                            fd = os.open(L.ws_mnt(name),
                                         os.O_WRONLY | os.O_NONBLOCK)
                            os.close(fd)
                            st7.errnos["fifo writer without reader ok"] += 1
                        except OSError as e:
                            st7.errnos[f"fifo write-open "
                                       f"{A.errname(e.errno)}"] += 1
                    elif op == 7:
                        with os.scandir(L.ws_mnt()) as it:
                            for e in it:
                                e.stat(follow_symlinks=False)
                    elif op == 8:
                        for name in ("fifo", "sock", "null", "mem", "blk"):
                            os.lstat(L.ws_mnt(name))
                            os.stat(L.ws_mnt(name))
                    else:
                        blocked_fifo_round(L, st7, found, 32, ["fifo"],
                                           daemon=amount.pid)
                    st7.errnos["ok"] += 1
                except OSError as e:
                    st7.errnos[f"{what} {A.errname(e.errno)}"] += 1
                if backing_fifo_has_reader("fifo") or \
                        backing_fifo_has_reader("fifo2"):
                    st7.fail(f"after {what}: the backing FIFO has a reader "
                             "(wsfs opened it; a worker could block)")
                st7.iterations += 1
                A.check_round(L, st7, what, found)
    finally:
        lsock.close()
    assert_clean(7)


def blocked_fifo_round(L, st, found, n, fifos, limit=3.0, daemon=None):
    """n threads (per FIFO) blocked in open(O_RDONLY) on FIFOs of the
    mount; meanwhile stat, readdir, read and create on the mount must each
    answer within limit seconds. Then a writer releases them."""
    procs = [start_blocker("fifo", L.ws_mnt(f), n) for f in fifos]
    try:
        time.sleep(0.3)
        lat = [timed(lambda: os.stat(L.ws_mnt("plain")), limit, "stat",
                     st, found, daemon),
               timed(lambda: os.listdir(L.ws_mnt()), limit, "readdir", st,
                     found, daemon),
               timed(lambda: open(L.ws_mnt("plain"), "rb").read(), limit,
                     "read", st, found, daemon),
               timed(lambda: os.close(os.open(
                   L.ws_mnt(L.atk("c")), os.O_CREAT | os.O_WRONLY, 0o644)),
                   limit, "create", st, found, daemon)]
        for p in procs:
            if p.poll() is not None:
                st.fail("blocked FIFO openers returned without a writer")
        # Release: one writer per FIFO wakes all its readers.
        for f in fifos:
            fd = os.open(L.ws_mnt(f), os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        for p in procs:
            out = stop_blocker(p)
            if f"done {n}" not in out:
                st.fail(f"FIFO openers not all released: {out!r}")
        return max(lat)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# --- class 8 ----------------------------------------------------------------

OWNER = 1000


def _append(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, b"x")
    finally:
        os.close(fd)


SUID_CASES = [
    # (name, mode, who, operation)
    ("write by other uid", 0o6777, A.USER_UID, _append),
    ("write by owner", 0o6777, OWNER, _append),
    ("write by root", 0o6777, None, _append),
    ("truncate by other uid", 0o6777, A.USER_UID,
     lambda p: os.truncate(p, 1)),
    ("write, sgid without g+x", 0o2767, A.USER_UID, _append),
    ("write, suid only", 0o4777, A.USER_UID, _append),
    ("chown by root", 0o6777, None,
     lambda p: os.chown(p, OWNER, OWNER)),
    ("write via O_TRUNC by other", 0o6777, A.USER_UID,
     lambda p: os.close(os.open(p, os.O_WRONLY | os.O_TRUNC))),
]


def test_class8_setuid_cleared(layout, amount):
    """setuid/setgid files (owner uid 1000) written, truncated or chowned
    through the mount end with the same mode as the same operation on a
    native file: a write by a non-root user clears the bits. A bit that
    survives where the native file lost it counts as an escape
    (privilege kept)."""
    L = layout
    st8 = STATS[8]
    native = os.path.join(L.base, f"native-{L.m}")
    os.mkdir(native)
    os.chmod(native, 0o755)
    total = A.iterations(8)
    with A.Watchdog(L.mnt, 60 + total * 2, st8, "class 8"):
        for i in range(total):
            name, mode, who, op = SUID_CASES[i % len(SUID_CASES)]
            res = {}
            for side, path, backing in (("native", os.path.join(native, "s"),
                                         os.path.join(native, "s")),
                                        ("mount", L.ws_mnt("s"),
                                         L.ws_src("s"))):
                # Set up through the mount, as a local user would, so the
                # kernel's cached mode (which decides whether FUSE asks to
                # clear the bits) is the real one.
                with open(path, "wb") as f:
                    f.write(b"data")
                os.chown(path, OWNER, OWNER)
                os.chmod(path, mode)
                try:
                    if who is None:
                        op(path)
                    else:
                        wsfstest.call_as(who, who, op, path)
                    r = "ok"
                except OSError as e:
                    r = A.errname(e.errno)
                # stat on the backing store: what the next user of the file
                # (through any mount) gets.
                res[side] = (r, stat.S_IMODE(os.stat(backing).st_mode))
            st8.iterations += 1
            st8.errnos[res["mount"][0]] += 1
            if res["mount"] != res["native"]:
                kept = res["mount"][1] & ~res["native"][1] & 0o6000
                what = (f"{name} (mode {mode:o}): mount gave "
                        f"{res['mount'][0]} mode {res['mount'][1]:o}, native "
                        f"{res['native'][0]} mode {res['native'][1]:o}")
                if kept:
                    st8.escape(what)
                else:
                    st8.fail(what)
    assert_clean(8)

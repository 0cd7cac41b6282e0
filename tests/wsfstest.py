"""Test harness shared by the pytest suites of wsfs.

Starts real wsfs mounts as child processes, waits for the kernel to show
them, and takes them down again (also when a test fails), so that a test
only says what it checks. Also runs code as another user (permission tests
must not run as root) and compares an operation on the mount with the same
operation on a native directory, which is the reference for "behaves like a
local filesystem".

Environment: WSFS_BUILDDIR (build tree, binaries below it) and WSFS_SRCDIR
(source tree); both default to the tree this file lives in.
"""
import ctypes
import ctypes.util
import errno
import json
import os
import pickle
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

SRCDIR = os.environ.get("WSFS_SRCDIR") or os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))
BUILDDIR = os.environ.get("WSFS_BUILDDIR") or SRCDIR
WSFS = os.path.join(BUILDDIR, "fs", "wsfs")
WSLOCKD = os.path.join(BUILDDIR, "lockd", "wslockd")
WSCTL = os.path.join(BUILDDIR, "tools", "wsctl")
PYTHON = "/usr/bin/python3"
# What the default mount fixture (tests/conftest.py) puts outside SOURCE
# and in ws2, for tests to check that no view reaches them.
CANARY_OUTSIDE = b"CANARY-OUTSIDE-SOURCE\n"
CANARY_WS2 = b"CANARY-IN-WS2\n"

# An unprivileged user for permission tests. Root bypasses most checks, so
# those tests run as this uid; it need not exist in /etc/passwd.
USER_UID = 1000
USER_GID = 1000

MOUNT_TIMEOUT = 15.0


class MountError(Exception):
    pass


def mountinfo(path):
    """The /proc/self/mountinfo entry of mount point path, as a dict with
    fstype, source, mount options and super options; None if path is not a
    mount point. The last entry wins (mounts stack)."""
    path = os.path.realpath(path)
    found = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            mnt = fields[4].encode().decode("unicode_escape")
            if mnt != path:
                continue
            rfields = right.split()
            found = {
                "mountpoint": mnt,
                "opts": set(fields[5].split(",")),
                "fstype": rfields[0],
                "source": rfields[1],
                "superopts": set(rfields[2].split(",")) if len(rfields) > 2
                else set(),
            }
    return found


def is_wsfs_mount(path):
    mi = mountinfo(path)
    return mi is not None and mi["fstype"] == "fuse.wsfs"


def _abort_connection(mnt):
    """Abort the FUSE connection of mnt through fusectl, if mounted: the
    last resort for a daemon that no longer answers."""
    try:
        dev = os.stat(mnt).st_dev
    except OSError:
        return
    p = f"/sys/fs/fuse/connections/{os.minor(dev)}/abort"
    try:
        with open(p, "w") as f:
            f.write("1")
    except OSError:
        pass


def unmount(mnt, timeout=10.0, report=None):
    """Unmount mnt: fusermount3 -u, then umount, then umount -l as the last
    resort. Returns True if nothing is mounted on mnt afterwards. If report
    is a list, what each attempt said is appended to it."""
    if mountinfo(mnt) is None:
        return True
    for cmd in (["fusermount3", "-u", mnt], ["umount", mnt],
                ["umount", "-l", mnt]):
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=timeout)
            said = f"{' '.join(cmd[:-1])}: exit {r.returncode} " \
                f"{r.stdout.strip()}"
        except subprocess.TimeoutExpired:
            said = f"{' '.join(cmd[:-1])}: timed out"
            _abort_connection(mnt)
        if report is not None:
            report.append(said)
        if mountinfo(mnt) is None:
            return True
    return mountinfo(mnt) is None


def _threads(pid):
    """State, wait channel and kernel stack of each thread of pid (to say
    where a daemon hangs)."""
    out = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError as e:
        return f"(no /proc/{pid}: {e.strerror})"
    for tid in tids:
        t = f"/proc/{pid}/task/{tid}"
        info = []
        for name in ("comm", "wchan", "stat", "stack"):
            try:
                with open(os.path.join(t, name)) as f:
                    v = f.read().strip()
            except OSError as e:
                v = f"({e.strerror})"
            if name == "stat":
                v = "state " + v.rsplit(")", 1)[-1].split()[0]
            info.append(v)
        out.append(f"  tid {tid} {info[0]} {info[2]} wchan={info[1]}\n    " +
                   info[3].replace("\n", "\n    "))
    if shutil.which("gdb"):
        try:
            r = subprocess.run(["gdb", "-q", "-batch", "-p", str(pid), "-ex",
                                "thread apply all bt"], capture_output=True,
                               text=True, timeout=60)
            out.append(r.stdout[-12000:])
        except subprocess.TimeoutExpired:
            out.append("(gdb timed out)")
    return "\n".join(out)


def mount_holders(mnt):
    """Processes in other mount namespaces that still have mnt mounted
    (copied into a namespace made by unshare -m, ip netns exec, ...): they
    keep the FUSE connection alive after our umount, so the daemon rightly
    keeps serving. Returns [(pid, cmdline)]."""
    me = os.readlink("/proc/self/ns/mnt")
    seen = set()
    out = []
    needle = f" {os.path.realpath(mnt)} "
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{d}/ns/mnt")
            if ns == me or ns in seen:
                continue
            with open(f"/proc/{d}/mountinfo") as f:
                if needle not in f.read():
                    continue
            seen.add(ns)
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            out.append((int(d), cmd.strip()))
        except OSError:
            continue
    return out


def _busy(mnt):
    """Which processes still use mnt (for the error message)."""
    try:
        r = subprocess.run(["fuser", "-vm", mnt], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(fuser: {e})"
    return (r.stdout + r.stderr).strip() or "no user found"


def wait_mounted(mnt, proc, log, timeout=MOUNT_TIMEOUT):
    """Wait until mnt is a fuse.wsfs mount. Fails fast, with the daemon's
    log, if the process exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if is_wsfs_mount(mnt):
            return
        if proc is not None and proc.poll() is not None:
            raise MountError(
                f"wsfs exited with status {proc.returncode} before "
                f"mounting {mnt}; log:\n{read_log(log)}")
        time.sleep(0.02)
    raise MountError(f"{mnt} not mounted after {timeout}s; "
                     f"mountinfo: {mountinfo(mnt)}; log:\n{read_log(log)}")


def read_log(path, limit=20000):
    try:
        with open(path, errors="replace") as f:
            data = f.read()
    except OSError as e:
        return f"(no log: {e})"
    if len(data) > limit:
        data = "...\n" + data[-limit:]
    return data


def make_base(prefix="wsfs-test-"):
    """A temp dir reachable by the unprivileged test user."""
    base = tempfile.mkdtemp(prefix=prefix)
    os.chmod(base, 0o755)
    return base


class Mount:
    """A wsfs mount for one test.

        with Mount(workspaces=("ws1", "ws2"), opts={"uring": "off"}) as m:
            open(m.path("ws1", "f"), "w")     # through the mount
            os.lstat(m.src("ws1", "f"))       # on the backing store

    SOURCE is created in a fresh temp dir (base) with the given workspaces
    (mode 0755, owned by root); the mount point is base/mnt. A config file
    (base/wsfs.conf, empty unless config= is given) is always passed so
    that the host's /etc/wsfs/wsfs.conf cannot change the test. wrapper is
    a command prefix (e.g. ["prlimit", "--nofile=4096:4096"]). stderr of
    the daemon goes to base/wsfs.log.
    """

    def __init__(self, workspaces=("ws1", "ws2"), opts=None, config=None,
                 wrapper=None, extra_args=None, source=None, debug=False,
                 timeout=MOUNT_TIMEOUT, base=None, keep_base=False):
        self.workspaces = tuple(workspaces)
        self.opts = dict(opts or {})
        self.config_text = config
        self.wrapper = list(wrapper or [])
        self.extra_args = list(extra_args or [])
        self.timeout = timeout
        self.debug = debug
        self.proc = None
        self.base = base
        self.own_base = base is None
        self.keep_base = keep_base
        self._source = source
        self.logf = None

    # paths
    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def src(self, *parts):
        return os.path.join(self.source, *parts)

    def log(self):
        return read_log(self.logpath)

    def argv(self):
        opts = dict(self.opts)
        opts.setdefault("config", self.confpath)
        o = ",".join(k if v is None else f"{k}={v}" for k, v in opts.items())
        argv = self.wrapper + [WSFS, "-f"]
        if self.debug:
            argv.append("-d")
        argv += self.extra_args + ["-o", o, self.source, self.mnt]
        return argv

    def start(self):
        if not os.access(WSFS, os.X_OK):
            raise MountError(f"{WSFS} not built (WSFS_BUILDDIR={BUILDDIR})")
        if self.base is None:
            self.base = make_base()
        self.source = self._source or os.path.join(self.base, "src")
        self.mnt = os.path.join(self.base, "mnt")
        self.logpath = os.path.join(self.base, "wsfs.log")
        self.confpath = os.path.join(self.base, "wsfs.conf")
        os.makedirs(self.source, exist_ok=True)
        os.chmod(self.source, 0o755)
        os.makedirs(self.mnt, exist_ok=True)
        for ws in self.workspaces:
            os.makedirs(self.src(ws), exist_ok=True)
            os.chmod(self.src(ws), 0o755)
        with open(self.confpath, "w") as f:
            f.write(self.config_text or "")
        self.logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen(
            self.argv(), stdin=subprocess.DEVNULL, stdout=self.logf,
            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_mounted(self.mnt, self.proc, self.logpath, self.timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self):
        """Unmount, reap the daemon, remove the temp dirs. Returns the
        daemon's exit status (None if it had to be killed)."""
        status = None
        errors = []
        said = []
        if self.mnt and not unmount(self.mnt, report=said):
            errors.append(f"could not unmount {self.mnt}: " +
                          _busy(self.mnt))
        if self.proc is not None:
            try:
                status = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                holders = mount_holders(self.mnt)
                if holders:
                    # Another mount namespace still has the mount, so the
                    # kernel keeps the connection open: not the daemon's
                    # fault. Stop it as an admin would.
                    sys.stderr.write(
                        f"wsfstest: {self.mnt} is still mounted in other "
                        f"mount namespaces {holders}; stopping wsfs pid "
                        f"{self.proc.pid} with SIGTERM\n")
                    os.kill(self.proc.pid, signal.SIGTERM)
                    try:
                        status = self.proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        pass
            if self.proc.poll() is None:
                errors.append(f"wsfs pid {self.proc.pid} did not exit "
                              f"after unmount ({'; '.join(said)}); killed; "
                              "its threads:\n" + _threads(self.proc.pid))
                for sig in (signal.SIGTERM, signal.SIGKILL):
                    try:
                        os.kill(self.proc.pid, sig)
                    except ProcessLookupError:
                        break
                    try:
                        self.proc.wait(timeout=5)
                        break
                    except subprocess.TimeoutExpired:
                        continue
                unmount(self.mnt)
        if self.logf:
            self.logf.close()
            self.logf = None
        if errors:
            errors.append("log:\n" + self.log())
        if self.own_base and self.base and not self.keep_base:
            # Never remove anything while a mount is still on the tree:
            # rmtree would walk into it.
            if self.mnt and mountinfo(self.mnt) is None:
                shutil.rmtree(self.base, ignore_errors=True)
            else:
                errors.append(f"left {self.base} in place (still mounted)")
        self.proc = None
        if errors:
            raise MountError("; ".join(errors))
        return status

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        try:
            self.stop()
        except MountError:
            if et is None:
                raise
        return False


def run_wsfs(args, timeout=15, **kw):
    """Run wsfs to completion (for option errors): CompletedProcess with
    stdout+stderr in .stdout."""
    return subprocess.run([WSFS] + list(args), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, **kw)


# --- running as another user -------------------------------------------

def setpriv_argv(uid, gid, groups=None):
    argv = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    if groups:
        argv.append("--groups=" + ",".join(str(g) for g in groups))
    else:
        argv.append("--clear-groups")
    return argv


def as_user(uid, gid, cmd, groups=None, check=False, timeout=120, **kw):
    """Run cmd (argv list) as uid/gid with the given supplementary groups
    (none by default). Returns a CompletedProcess with text output."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(setpriv_argv(uid, gid, groups) + list(cmd),
                          text=True, check=check, timeout=timeout, **kw)


def run_py_as(uid, gid, code, groups=None, cwd=None, timeout=120):
    """Run a python snippet as uid/gid in a fresh interpreter."""
    return as_user(uid, gid, [PYTHON, "-c", code], groups=groups, cwd=cwd,
                   timeout=timeout)


def status(mount):
    """`wsctl status --json` of a mount (a Mount), as a dict."""
    r = subprocess.run([WSCTL, "status", mount.mnt, "--json"], check=True,
                       capture_output=True, text=True, timeout=20)
    return json.loads(r.stdout)


def op_count(mount, op):
    """How many requests of kind op ("lookup", "xattr", ...) the mount's
    daemon has answered, from its status."""
    return status(mount)["operations"].get(op, {"count": 0})["count"]


def call_as(uid, gid, fn, *args, groups=(), umask=None, **kwargs):
    """Call fn(*args, **kwargs) in a forked child running as uid/gid with
    supplementary groups; return its (picklable) result. An OSError in the
    child is raised here with the same errno, so pytest.raises and errno
    comparisons work as if the call had been made here."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            try:
                if umask is not None:
                    os.umask(umask)
                os.setgroups(list(groups))
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
                res = ("ok", fn(*args, **kwargs))
            except OSError as e:
                res = ("oserror", e.errno, str(e))
            except BaseException as e:
                res = ("exc", repr(e))
            try:
                data = pickle.dumps(res)
            except Exception as e:
                data = pickle.dumps(("exc", f"unpicklable result: {e!r}"))
            with os.fdopen(w, "wb") as f:
                f.write(data)
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    res = pickle.loads(data)
    if res[0] == "ok":
        return res[1]
    if res[0] == "oserror":
        raise OSError(res[1], res[2])
    raise RuntimeError(f"call_as child failed: {res[1]}")


# --- outcomes and comparison with a native directory --------------------

def outcome(fn, *args, **kwargs):
    """('ok', result) or ('err', 'ENAME') for fn(*args)."""
    try:
        return ("ok", fn(*args, **kwargs))
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, str(e.errno)))


def processes_naming(path):
    """(pid, program) of every live process whose command line names
    path: the daemons a test started there and anything they left."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{p}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if path.encode() in cmd and state != "Z":
            found.append((int(p), cmd.split(b"\0")[0].decode()))
    return found


def wsfs_pid(mnt):
    """The pid of the wsfs process serving mnt (its argv names mnt, which
    is a unique temp path), or None."""
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0]) == b"wsfs" and mnt.encode() in argv:
            return int(p)
    return None


def where(pid):
    """What a stuck process is doing, from /proc."""
    out = []
    for f in ("wchan", "syscall", "stack"):
        try:
            with open(f"/proc/{pid}/{f}") as fp:
                out.append(f"{f}: {fp.read().strip()}")
        except OSError as e:
            out.append(f"{f}: {e.strerror}")
    return "; ".join(out)


def reap(proc, timeout=30):
    """Wait for proc to end; kill it if it has not within timeout.
    Returns its exit status."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def errno_of(fn, *args):
    """The errno fn(*args) failed with, 0 if it did not fail."""
    try:
        fn(*args)
    except OSError as e:
        return e.errno
    return 0


def errname(e):
    """The symbolic name of errno value e ("ENOENT")."""
    return errno.errorcode.get(e, str(e))


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(connect, path="/metrics", timeout=5.0):
    """One HTTP/1.0 GET on the socket that connect() returns, closed after:
    (status, {header: value}, body bytes). Raises OSError if the server
    cannot be reached or times out, ValueError or IndexError if what it
    sent is no HTTP answer."""
    s = connect()
    try:
        s.settimeout(timeout)
        s.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(ln.split(": ", 1) for ln in lines[1:])
    return status, headers, body


# --- canaries: what must never change --------------------------------------

_DIRFLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def snapshot(path):
    """Everything observable about one entry, read without changing it:
    the lstat fields with atime (read with O_NOATIME, so only someone
    else's read moves it), a file's content, a directory's names, a
    link's target, the xattrs. None if path does not exist."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    s = {"type": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode),
         "uid": st.st_uid, "gid": st.st_gid, "ino": st.st_ino,
         "nlink": st.st_nlink, "size": st.st_size,
         "atime": st.st_atime_ns, "mtime": st.st_mtime_ns,
         "ctime": st.st_ctime_ns}
    if stat.S_ISREG(st.st_mode):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NOATIME)
        try:
            s["data"] = os.read(fd, 1 << 20)
        finally:
            os.close(fd)
    elif stat.S_ISDIR(st.st_mode):
        fd = os.open(path, _DIRFLAGS | os.O_NOATIME)
        try:
            s["names"] = sorted(os.listdir(fd))
        finally:
            os.close(fd)
    elif stat.S_ISLNK(st.st_mode):
        s["target"] = os.readlink(path)
    if not stat.S_ISLNK(st.st_mode):
        try:
            s["xattrs"] = {k: os.getxattr(path, k, follow_symlinks=False)
                           for k in sorted(os.listxattr(
                               path, follow_symlinks=False))}
        except OSError as e:
            s["xattrs"] = errname(e.errno)
    return s


def snapshot_tree(root):
    """snapshot() of every entry below root, keyed by its path relative
    to root; symlinks are recorded, never followed."""
    out = {}
    todo = [""]
    while todo:
        rel = todo.pop()
        snap = snapshot(os.path.join(root, rel) if rel else root)
        if rel:
            out[rel] = snap
        if snap is not None and "names" in snap:
            todo += [os.path.join(rel, n) for n in snap["names"]]
    return out


def stat_summary(st, times=False):
    """The fields of a stat result that must match between two views of the
    same file."""
    d = {
        "type": stat.S_IFMT(st.st_mode),
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "nlink": st.st_nlink,
    }
    if not stat.S_ISDIR(st.st_mode):
        d["size"] = st.st_size
    if times:
        d["mtime_ns"] = st.st_mtime_ns
        d["ctime_ns"] = st.st_ctime_ns
    return d


def tree(root, contents=True):
    """Everything observable about the tree under root, as a dict keyed by
    relative path: type, mode, owner, size, nlink, link target, contents,
    and which names are hard links of one another (by inode)."""
    out = {}
    inodes = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            e = stat_summary(st)
            if stat.S_ISLNK(st.st_mode):
                e["target"] = os.readlink(p)
                e.pop("size", None)
            elif stat.S_ISREG(st.st_mode) and contents:
                with open(p, "rb") as f:
                    e["data"] = f.read()
            if not stat.S_ISDIR(st.st_mode):
                inodes.setdefault(st.st_ino, []).append(rel)
            out[rel] = e
    # Hard-link classes, named by their first member, so that two trees
    # with different inode numbers still compare.
    for names in inodes.values():
        for n in names:
            out[n]["links"] = tuple(sorted(names))
    return out


# --- syscalls python does not wrap ------------------------------------------

libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
RENAME_WHITEOUT = 4

FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_COLLAPSE_RANGE = 0x08
FALLOC_FL_ZERO_RANGE = 0x10
FALLOC_FL_INSERT_RANGE = 0x20

UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p,
                           ctypes.POINTER(Timespec), ctypes.c_int]
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                           ctypes.c_char_p, ctypes.c_uint]
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                           ctypes.c_int64]


def _check(ret, what):
    if ret < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")
    return ret


def renameat2(old, new, flags=0):
    return _check(libc.renameat2(AT_FDCWD, os.fsencode(old), AT_FDCWD,
                                 os.fsencode(new), flags), "renameat2")


# Every change of the mount's top level (m: a Mount with workspaces ws1 and
# ws2, and a user.old xattr on its SOURCE for removexattr): refused to all
# but admin_uid, which may still only make and remove directories.
TOP_LEVEL_CHANGES = {
    "mkdir": lambda m: os.mkdir(m.path("new")),
    "create": lambda m: os.close(os.open(m.path("new"), os.O_CREAT |
                                         os.O_WRONLY, 0o644)),
    "mknod": lambda m: os.mkfifo(m.path("new")),
    "symlink": lambda m: os.symlink("ws1", m.path("new")),
    "rename": lambda m: os.rename(m.path("ws1"), m.path("new")),
    "exchange": lambda m: renameat2(m.path("ws1"), m.path("ws2"),
                                    RENAME_EXCHANGE),
    "rmdir": lambda m: os.rmdir(m.path("ws2")),
    "chmod-root": lambda m: os.chmod(m.mnt, 0o777),
    "chown-root": lambda m: os.chown(m.mnt, USER_UID, -1),
    "utime-root": lambda m: os.utime(m.mnt, (0, 0)),
    "setxattr-root": lambda m: os.setxattr(m.mnt, "user.new", b"1"),
    "removexattr-root": lambda m: os.removexattr(m.mnt, "user.old"),
}


def utimensat(path, atime, mtime, follow=True):
    """utimensat with each time an int of nanoseconds, UTIME_NOW or
    UTIME_OMIT (os.utime cannot express UTIME_OMIT)."""
    def ts(t):
        if t in (UTIME_NOW, UTIME_OMIT):
            return Timespec(0, t)
        return Timespec(t // 10**9, t % 10**9)
    arr = (Timespec * 2)(ts(atime), ts(mtime))
    flags = 0 if follow else 0x100  # AT_SYMLINK_NOFOLLOW
    return _check(libc.utimensat(AT_FDCWD, os.fsencode(path), arr, flags),
                  "utimensat")


def same_on_both(pair, scenario):
    """Run scenario(root) on the native dir and on the mount; assert the
    results (use outcome() inside for errnos) are equal; return them."""
    n, m = pair
    rn = scenario(n)
    rm = scenario(m)
    assert rm == rn, f"mount gave {rm!r}, native gave {rn!r}"
    return rm


def fallocate(fd, mode, offset, length):
    return _check(libc.fallocate(fd, mode, offset, length), "fallocate")


def wait_for(cond, timeout=10.0, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(interval)
    return cond()


def is_root():
    return os.geteuid() == 0


def require_built(*programs):
    """Fail the test, never skip it, when a program of this build is
    missing: a broken build is not something the machine lacks."""
    import pytest
    missing = [p for p in programs if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(f"{', '.join(missing)} not built "
                    f"(WSFS_BUILDDIR={BUILDDIR}; run make)", pytrace=False)


def fuse_available():
    """None if mount tests can run here, else the reason they cannot."""
    if not is_root():
        return "mount tests need root (they mount FUSE and switch users)"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    try:
        fd = os.open("/dev/fuse", os.O_RDWR)
        os.close(fd)
    except OSError as e:
        return f"cannot open /dev/fuse: {e.strerror}"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (install fuse3)"
    return None


if __name__ == "__main__":
    sys.exit("wsfstest is a library for the pytest suites")

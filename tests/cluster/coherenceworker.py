#!/usr/bin/python3
"""What one node of the coherence checker (test_coherence.py) runs: a
long-lived process that takes its turn under a cluster flock, performs
the steps the driver sends and reports what it saw.

  coherenceworker.py WORKSPACE LOCKFILE

WORKSPACE is the workspace's directory on this node's mount; step paths
are relative to it. LOCKFILE is the file whose flock hands the turn over
(forwarded to wslockd by wsfs). The process keeps, per file of the model,
one descriptor and one shared read-only mapping for as long as the file
lives, so that reads through a descriptor opened (and pages mapped) in an
earlier turn are part of what is checked.

One JSON object a line on stdin, one a line on stdout:

  {"cmd": "go"}       take the flock (blocking; retried after an error
                      such as EIO while the lock server restarts), then
                      print {"ev": "locked", "t": MONOTONIC, "tries": N}
  {"cmd": "run", "steps": [...], "pause": I, "pace": S}
                      do the steps in order, print {"ev": "step", "i": I,
                      "r": RESULT} after each, {"ev": "ran"} at the end;
                      with "pause", after step I print {"ev": "paused"}
                      and wait for {"cmd": "resume"} (or a kill); with
                      "pace", sleep S seconds before each step. A
                      mutation whose outcome is not its "expect" errno
                      ends the run at once ({"ev": "stopped", "i": I}):
                      what would follow was planned on another state.
  {"cmd": "release"}  print {"ev": "released", "t0": T, "t1": T} around
                      the flock(LOCK_UN)
  {"cmd": "quit"}

Mappings are read through /proc/self/mem: a page beyond the end of the
file (as the kernel sees it) then reads as EIO instead of killing the
process with SIGBUS, and the read faults the pages in through the same
page cache and page tables as a load instruction would.
"""
import base64
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import random
import stat
import sys
import time

MAPLEN = 1 << 17        # every mapping; files stay below it
PAGE = os.sysconf("SC_PAGE_SIZE")
PROT_READ, MAP_SHARED = 1, 1

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value

MUTATIONS = ("write", "append", "truncate", "create", "unlink", "rename",
             "link", "chmod", "mkdir", "rmdir", "fsync")


def data_of(seed, n):
    """The bytes a write of the driver puts: the same on both sides."""
    return random.Random(seed).randbytes(n)


def whole(n, data, what):
    """The answer to a write of data that wrote n bytes."""
    if n != len(data):
        return {"err": f"short {what} {n} of {len(data)}"}
    return {}


def errname(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def digest(b):
    return hashlib.sha256(b).hexdigest()


def say(**kw):
    sys.stdout.write(json.dumps(kw, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class Worker:
    def __init__(self, ws, lockfile):
        self.ws = ws
        self.lockfile = lockfile
        self.lockfd = os.open(lockfile, os.O_RDWR)
        self.mem = os.open("/proc/self/mem", os.O_RDONLY)
        self.files = {}         # model file id -> (fd, mapping address)

    def p(self, rel):
        return os.path.join(self.ws, rel)

    # The long-lived descriptor and mapping of a file, made on first use.
    def handle(self, fid, path):
        h = self.files.get(fid)
        if h is None:
            fd = os.open(self.p(path), os.O_RDWR)
            addr = libc.mmap(None, MAPLEN, PROT_READ, MAP_SHARED, fd, 0)
            if addr is None or addr == MAP_FAILED:
                err = ctypes.get_errno()
                os.close(fd)
                raise OSError(err, os.strerror(err))
            h = self.files[fid] = (fd, addr)
        return h

    def forget(self, live):
        live = set(live)
        for fid in [f for f in self.files if f not in live]:
            fd, addr = self.files.pop(fid)
            libc.munmap(addr, MAPLEN)
            os.close(fd)

    # Observations.
    def do_stat(self, s):
        st = os.lstat(self.p(s["path"]))
        t = "d" if stat.S_ISDIR(st.st_mode) else \
            "f" if stat.S_ISREG(st.st_mode) else "o"
        return {"type": t, "size": st.st_size,
                "mode": stat.S_IMODE(st.st_mode), "nlink": st.st_nlink,
                "ino": st.st_ino, "mtime": st.st_mtime_ns}

    def do_list(self, s):
        with os.scandir(self.p(s["path"])) as it:
            return {"names": sorted(
                [e.name, "d" if e.is_dir(follow_symlinks=False) else
                 "f" if e.is_file(follow_symlinks=False) else "o"]
                for e in it)}

    def content(self, data, want):
        r = {"len": len(data), "sha": digest(data)}
        if r["sha"] != want:
            r["data"] = base64.b64encode(data).decode()
        return r

    def do_read(self, s):
        how = s["how"]
        if how == "open":
            fd = os.open(self.p(s["path"]), os.O_RDONLY)
            try:
                data = read_all(fd)
            finally:
                os.close(fd)
            return self.content(data, s["sha"])
        fd, addr = self.handle(s["id"], s["path"])
        if how == "fd":
            return self.content(read_all(fd), s["sha"])
        # mmap: the expected size, rounded up to whole pages; the tail of
        # the last page must read as zeros, the next page not at all.
        size = s["size"]
        want = (size + PAGE - 1) // PAGE * PAGE
        got = self.mem_read(addr, want)
        r = self.content(got[:size], s["sha"])
        r["tail_zero"] = got[size:] == bytes(len(got) - size) \
            if len(got) > size else True
        r["beyond"] = want < MAPLEN and len(self.mem_read(addr + want,
                                                          1)) > 0
        return r

    def mem_read(self, addr, n):
        out = b""
        while len(out) < n:
            try:
                b = os.pread(self.mem, n - len(out), addr + len(out))
            except OSError as e:
                if e.errno in (errno.EIO, errno.EFAULT):
                    break
                raise
            if not b:
                break
            out += b
        return out

    def on_path(self, path, flags, fn, mode=0o777):
        """fn(fd) on path opened with flags (and mode), closed after."""
        fd = os.open(self.p(path), flags, mode)
        try:
            return fn(fd)
        finally:
            os.close(fd)

    # Mutations.
    def do_write(self, s):
        data = data_of(s["seed"], s["len"])
        if s["via"] == "fd":
            fd = self.handle(s["id"], s["path"])[0]
            n = os.pwrite(fd, data, s["off"])
        else:
            n = self.on_path(s["path"], os.O_WRONLY,
                             lambda fd: os.pwrite(fd, data, s["off"]))
        return whole(n, data, "write")

    def do_append(self, s):
        data = data_of(s["seed"], s["len"])
        n = self.on_path(s["path"], os.O_WRONLY | os.O_APPEND,
                         lambda fd: os.write(fd, data))
        return whole(n, data, "append")

    def do_truncate(self, s):
        if s["via"] == "fd":
            os.ftruncate(self.handle(s["id"], s["path"])[0], s["size"])
        else:
            os.truncate(self.p(s["path"]), s["size"])
        return {}

    def do_create(self, s):
        return {"ino": self.on_path(
            s["path"], os.O_WRONLY | os.O_CREAT | os.O_EXCL,
            lambda fd: os.fstat(fd).st_ino, s["mode"])}

    def do_unlink(self, s):
        os.unlink(self.p(s["path"]))
        return {}

    def do_rename(self, s):
        os.rename(self.p(s["path"]), self.p(s["dst"]))
        return {}

    def do_link(self, s):
        os.link(self.p(s["path"]), self.p(s["dst"]))
        return {}

    def do_chmod(self, s):
        os.chmod(self.p(s["path"]), s["mode"])
        return {}

    def do_mkdir(self, s):
        os.mkdir(self.p(s["path"]), s["mode"])
        return {"ino": os.lstat(self.p(s["path"])).st_ino}

    def do_rmdir(self, s):
        os.rmdir(self.p(s["path"]))
        return {}

    def do_fsync(self, s):
        os.fsync(self.handle(s["id"], s["path"])[0])
        return {}

    def step(self, s):
        k = s["k"]
        if k == "forget":
            self.forget(s["live"])
            return {}
        try:
            return getattr(self, "do_" + k)(s)
        except OSError as e:
            return {"err": errname(e)}

    # Commands.
    def cmd_go(self, c):
        tries = 0
        while True:
            tries += 1
            try:
                fcntl.flock(self.lockfd, fcntl.LOCK_EX)
                break
            except OSError as e:
                if e.errno in (errno.ENOTCONN, errno.ENODEV) or tries > 200:
                    say(ev="lockerr", err=errname(e), tries=tries)
                    return
                # The lock service restarting: ask again (not a timing
                # assumption; every try waits in the filesystem).
                time.sleep(0.1)
        say(ev="locked", t=time.monotonic(), tries=tries)

    def cmd_run(self, c):
        pause = c.get("pause")
        pace = c.get("pace", 0)
        for i, s in enumerate(c["steps"]):
            if pace:
                # Spread the steps out so that a kill lands among them.
                time.sleep(pace)
            r = self.step(s)
            r["t"] = time.monotonic()
            say(ev="step", i=i, r=r)
            if s["k"] in MUTATIONS and r.get("err") != s.get("expect"):
                say(ev="stopped", i=i)
                return
            if pause == i:
                say(ev="paused", i=i)
                line = sys.stdin.readline()
                if not line:
                    return
        say(ev="ran")

    def cmd_release(self, c):
        t0 = time.monotonic()
        err = None
        try:
            fcntl.flock(self.lockfd, fcntl.LOCK_UN)
        except OSError as e:
            # The last close of the open file gives the lock back too.
            err = errname(e)
            os.close(self.lockfd)
            self.lockfd = os.open(self.lockfile, os.O_RDWR)
        say(ev="released", t0=t0, t1=time.monotonic(), err=err)

    def loop(self):
        say(ev="ready", pid=os.getpid())
        for line in sys.stdin:
            c = json.loads(line)
            if c["cmd"] == "quit":
                break
            getattr(self, "cmd_" + c["cmd"])(c)
        say(ev="bye")


def read_all(fd):
    out = b""
    while True:
        b = os.pread(fd, MAPLEN, len(out))
        if not b:
            return out
        out += b


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    os.umask(0)
    Worker(sys.argv[1], sys.argv[2]).loop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Run one mount of wsfs through mount(8) in a private mount namespace and
report, as JSON on stdout, what happened.

mount(8) runs helpers with a fixed PATH, so mount.fuse3 finds `wsfs` only in
the standard directories. Rather than install into the host's
/usr/local/sbin, this process makes its own mount namespace, bind-mounts a
directory holding a link to the built wsfs over /usr/local/sbin, and mounts
there; the host never sees either mount. It is also a child subreaper, so
the daemon that wsfs forks off (fuse_daemonize) is reparented to it and its
exit status can be collected after SIGTERM.

Usage: mountns.py WSFS_BINARY MOUNTPOINT [--write RELPATH] [--probe CMD]
                   -- MOUNT_ARGS...
--write makes a file at MOUNTPOINT/RELPATH through the mount before the
SIGTERM (a change, so a kind=shared mount takes cluster locks); --probe
then runs the shell command CMD and reports its output, still mounted.
tests/ must be on PYTHONPATH (for wsfstest), as test_mount.py puts it.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import wsfstest  # tests/, on PYTHONPATH (test_mount.py)

CLONE_NEWNS = 0x00020000
PR_SET_CHILD_SUBREAPER = 36


def mounted(mnt):
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if fields[1] == mnt:
                return fields
    return None


def main():
    wsfs, mnt = sys.argv[1], sys.argv[2]
    rest = sys.argv[3:]
    write = probe = None
    while rest[0] != "--":
        if rest[0] == "--write":
            write = rest[1]
        elif rest[0] == "--probe":
            probe = rest[1]
        else:
            raise SystemExit(f"unknown option {rest[0]}")
        rest = rest[2:]
    assert rest[0] == "--"
    margs = rest[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl")
    if libc.unshare(CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    bindir = os.path.join(os.path.dirname(mnt), "sbin")
    os.makedirs(bindir, exist_ok=True)
    link = os.path.join(bindir, "wsfs")
    if not os.path.lexists(link):
        os.symlink(wsfs, link)
    subprocess.run(["mount", "--bind", bindir, "/usr/local/sbin"],
                   check=True)
    out = {}
    p = subprocess.run(["mount", *margs], capture_output=True, text=True,
                       timeout=60)
    out["mount_status"] = p.returncode
    out["mount_stderr"] = p.stderr
    out["mounted"] = mounted(mnt)
    if out["mounted"] is None:
        print(json.dumps(out))
        return
    pid = wsfstest.wsfs_pid(mnt)
    out["daemon"] = pid
    reaped = False
    try:
        work(out, mnt, write, probe)
        if pid is None:
            return
        with open(f"/proc/{pid}/status") as f:
            out["daemon_ppid"] = int(next(line.split()[1] for line in f
                                          if line.startswith("PPid:")))
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r, status = os.waitpid(pid, os.WNOHANG)
            if r == pid:
                reaped = True
                out["exit"] = (os.WEXITSTATUS(status)
                               if os.WIFEXITED(status) else
                               f"signal {os.WTERMSIG(status)}")
                break
            time.sleep(0.05)
        else:
            out["exit"] = "timeout"
        out["mounted_after"] = mounted(mnt)
    except Exception as e:
        out["error"] = repr(e)
    finally:
        # Whatever went wrong, leave no daemon and no mount behind.
        if pid is not None and not reaped:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        if mounted(mnt) is not None:
            subprocess.run(["umount", "-l", mnt])
        print(json.dumps(out))


def work(out, mnt, write, probe):
    """What the test asked to do through the mount before the SIGTERM."""
    out["listing"] = sorted(os.listdir(mnt))
    if write is not None:
        try:
            with open(os.path.join(mnt, write), "w") as f:
                f.write("written through the mount\n")
            out["write"] = "ok"
        except OSError as e:
            out["write"] = str(e)
    if probe is not None:
        p = subprocess.run(probe, shell=True, capture_output=True,
                           text=True, timeout=60)
        out["probe"] = p.stdout

if __name__ == "__main__":
    main()

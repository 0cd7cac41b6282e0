"""Helpers for the scratch workspace and sweeper tests: run wsctl, build
trees (deep ones through directory fds, since their paths outgrow PATH_MAX),
and age a workspace. Canary trees are compared with
wsfstest.snapshot_tree."""
import os
import re
import subprocess
import time

import wsfstest

WSCTL = wsfstest.WSCTL
WSFS = wsfstest.WSFS
PYTHON = wsfstest.PYTHON
LONG = os.environ.get("WSFS_LONG_TESTS") == "1"

ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                   r"[0-9a-f]{12}$")


def wsctl(*args, rc=0, timeout=600, **kw):
    """Run wsctl; check its exit status unless rc is None."""
    p = subprocess.run([WSCTL] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, **kw)
    if rc is not None and p.returncode != rc:
        raise AssertionError(
            f"wsctl {' '.join(map(str, args))}: exit {p.returncode}, "
            f"wanted {rc}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def create(base, lifetime="task", owner=None, label=None):
    """wsctl scratch create; returns (id, printed path)."""
    args = ["scratch", "create", "--base", base, "--lifetime", lifetime]
    if owner is not None:
        args += ["--owner", owner]
    if label is not None:
        args += ["--label", label]
    out = wsctl(*args).stdout
    assert out.endswith("\n") and out.count("\n") == 1, out
    wid, path = out.rstrip("\n").split(" ", 1)
    assert ID_RE.match(wid), out
    return wid, path


def sweep(base, *extra, rc=0, **kw):
    p = wsctl("sweep", "--base", base, *extra, rc=rc, **kw)
    if rc == 0:
        assert re.search(r"^removed \d+$", p.stdout.splitlines()[-1]), \
            p.stdout
    return p


def removed_count(p):
    return int(p.stdout.splitlines()[-1].split()[1])


def meta_path(base, wid, suffix="meta"):
    return os.path.join(base, ".wsfs", f"{wid}.{suffix}")


def read_meta(base, wid):
    with open(meta_path(base, wid)) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f)


def age(base, wid, seconds):
    """Make a workspace look created and last used `seconds` ago."""
    m = read_meta(base, wid)
    t = int(time.time() - seconds)
    m["created"] = str(t)
    order = ["version", "id", "lifetime", "owner", "label", "created",
             "ended"]
    tmp = meta_path(base, wid) + ".test"
    with open(tmp, "w") as f:
        for k in order:
            if k in m:
                f.write(f"{k}={m[k]}\n")
    os.rename(tmp, meta_path(base, wid))
    os.utime(meta_path(base, wid, "used"), (t, t))


def build_wide(root, files, per_dir=1000):
    """`files` empty files under root in directories of per_dir."""
    made = d = 0
    while made < files:
        sub = os.path.join(root, f"d{d:04d}", "s")
        os.makedirs(sub)
        fd = os.open(sub, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for i in range(min(per_dir, files - made)):
                os.close(os.open(f"f{i}", os.O_WRONLY | os.O_CREAT, 0o644,
                                 dir_fd=fd))
        finally:
            os.close(fd)
        made += min(per_dir, files - made)
        d += 1


def build_deep(root, depth, name="d", every=1000):
    """A chain of `depth` directories below root, a file every `every`
    levels; built through directory fds since the path outgrows PATH_MAX."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            os.mkdir(name, 0o755, dir_fd=fd)
            if i % every == 0:
                os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o644,
                                 dir_fd=fd))
            nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nfd
    finally:
        os.close(fd)


def make_canary(root, dirs=3, files=5):
    """A canary tree: files and nested directories with known contents."""
    os.makedirs(root, exist_ok=True)
    for d in range(dirs):
        sub = os.path.join(root, f"c{d}", "inner")
        os.makedirs(sub, exist_ok=True)
        for i in range(files):
            for p in (os.path.join(root, f"c{d}", f"f{i}"),
                      os.path.join(sub, f"f{i}")):
                with open(p, "w") as f:
                    f.write(f"canary {p}\n")
    with open(os.path.join(root, "top"), "w") as f:
        f.write("canary top\n")


def mounts_under(path):
    """Mount points at or below path, deepest first."""
    path = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].encode().decode("unicode_escape")
            if mnt == path or mnt.startswith(path + "/"):
                found.append(mnt)
    return sorted(found, key=len, reverse=True)


def umount_all(path):
    for m in mounts_under(path):
        subprocess.run(["umount", "-l", m], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


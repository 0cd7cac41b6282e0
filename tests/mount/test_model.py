"""The mount model: the root lists only workspaces and is read-only to
non-root users; the mount is nosuid,nodev with allow_other and
default_permissions; options come from a config file overridden by -o, and
bad ones stop wsfs with a message naming the key; fstab mounting through
mount.fuse3 works; workspaces are kept apart (EXDEV)."""
import errno
import os
import shutil
import subprocess
import time

import pytest

import wsfstest
from wsfstest import (RENAME_EXCHANGE, TOP_LEVEL_CHANGES, USER_GID, USER_UID,
                      call_as, mountinfo, outcome, renameat2, run_wsfs)


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# --- the root -------------------------------------------------------------------

def test_root_lists_only_workspaces(mount_factory):
    m = mount_factory(workspaces=("alpha", "beta"))
    write(m.src("topfile"), b"not a workspace")
    os.mkdir(m.src(".hidden"))
    os.mkdir(m.src(".wsfs"))
    os.symlink("alpha", m.src("linktows"))
    os.symlink("/", m.src("linktoroot"))
    os.mkfifo(m.src("fifo"))
    assert sorted(os.listdir(m.mnt)) == ["alpha", "beta"]
    for name in ("topfile", ".hidden", ".wsfs", "linktows", "linktoroot",
                 "fifo"):
        with pytest.raises(FileNotFoundError):
            os.lstat(m.path(name))
    # a workspace added on the backing store appears
    os.mkdir(m.src("gamma"))
    assert sorted(os.listdir(m.mnt)) == ["alpha", "beta", "gamma"]


def test_root_dotdot_stays_at_root(mount):
    assert os.stat(mount.path("ws1", "..")).st_ino == os.stat(mount.mnt).st_ino
    assert sorted(os.listdir(mount.path("ws1", ".."))) == ["ws1", "ws2"]
    fd = os.open(mount.path("ws1"), os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert sorted(os.listdir(os.path.join(f"/proc/self/fd/{fd}", ".."))) \
            == ["ws1", "ws2"]
    finally:
        os.close(fd)


# A workspace's own mode is its owner's (root's here) to change too.
ROOT_WRITES = dict(TOP_LEVEL_CHANGES,
                   chmod=lambda m: os.chmod(m.path("ws1"), 0o777))


@pytest.mark.parametrize("op", sorted(ROOT_WRITES))
def test_root_read_only_to_non_root(mount, op):
    with pytest.raises(OSError) as ei:
        call_as(USER_UID, USER_GID, ROOT_WRITES[op], mount)
    assert ei.value.errno in (errno.EACCES, errno.EPERM), ei.value
    assert sorted(os.listdir(mount.mnt)) == ["ws1", "ws2"]
    assert sorted(os.listdir(mount.source)) == ["ws1", "ws2"]


def test_root_readable_by_non_root(mount):
    assert sorted(call_as(USER_UID, USER_GID, os.listdir, mount.mnt)) == \
        ["ws1", "ws2"]
    st = call_as(USER_UID, USER_GID, os.stat, mount.path("ws1"))
    assert st.st_ino == os.stat(mount.path("ws1")).st_ino


def test_workspace_usable_by_its_owner(mount):
    """Read-only applies to the top level only: a workspace owned by a user
    is fully writable by that user."""
    os.chown(mount.src("ws1"), USER_UID, USER_GID)

    def work(p):
        os.mkdir(os.path.join(p, "d"))
        with open(os.path.join(p, "d", "f"), "w") as f:
            f.write("mine")
        os.rename(os.path.join(p, "d", "f"), os.path.join(p, "g"))
        os.rmdir(os.path.join(p, "d"))
        return sorted(os.listdir(p))
    assert call_as(USER_UID, USER_GID, work, mount.path("ws1")) == ["g"]
    st = os.stat(mount.src("ws1", "g"))
    assert (st.st_uid, st.st_gid) == (USER_UID, USER_GID)


# --- cross-workspace ----------------------------------------------------------------

def test_cross_workspace_rename_and_link_exdev(mount):
    write(mount.path("ws1", "f"), b"mine")
    os.mkdir(mount.path("ws1", "d"))
    write(mount.path("ws2", "g"), b"theirs")
    cases = [
        (os.rename, mount.path("ws1", "f"), mount.path("ws2", "f")),
        (os.rename, mount.path("ws1", "f"), mount.path("ws2", "g")),
        (os.rename, mount.path("ws1", "d"), mount.path("ws2", "d")),
        (os.link, mount.path("ws1", "f"), mount.path("ws2", "f")),
        (os.link, mount.canary_ws2, mount.path("ws1", "stolen")),
        (os.rename, mount.canary_ws2, mount.path("ws1", "stolen")),
        (renameat2, mount.path("ws1", "f"), mount.path("ws2", "g"),
         RENAME_EXCHANGE),
    ]
    for fn, *args in cases:
        assert outcome(fn, *args) == ("err", "EXDEV"), (fn, args)
    assert sorted(os.listdir(mount.src("ws1"))) == ["d", "f"]
    assert sorted(os.listdir(mount.src("ws2"))) == ["canary", "g"]
    # mv falls back to copy + unlink, which is allowed
    r = subprocess.run(["mv", mount.path("ws1", "f"), mount.path("ws2", "f")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(mount.src("ws2", "f"), "rb") as f:
        assert f.read() == b"mine"


def test_workspace_root_rename_exdev_or_denied(mount):
    """A workspace cannot be moved into another one."""
    r = outcome(os.rename, mount.path("ws1"), mount.path("ws2", "ws1"))
    assert r[0] == "err" and r[1] in ("EXDEV", "EACCES", "EPERM", "EBUSY")
    assert os.path.isdir(mount.src("ws1"))


# --- mount flags ------------------------------------------------------------------------

def test_mount_flags(mount):
    mi = mountinfo(mount.mnt)
    assert mi["fstype"] == "fuse.wsfs"
    assert {"nosuid", "nodev"} <= mi["opts"], mi
    assert {"allow_other", "default_permissions"} <= mi["superopts"], mi


def test_nosuid_enforced(mount):
    """A setuid-root program on the mount runs without privilege."""
    p = mount.path("ws1", "id")
    shutil.copy2("/usr/bin/id", p)
    os.chown(p, 0, 0)
    os.chmod(p, 0o4755)
    assert os.stat(p).st_mode & 0o4000
    r = wsfstest.as_user(USER_UID, USER_GID, [p, "-u"])
    assert r.returncode == 0 and r.stdout.strip() == str(USER_UID)


def test_suid_and_dev_cannot_be_turned_on(mount_factory):
    for opt in ("suid", "dev"):
        base = wsfstest.make_base()
        try:
            os.makedirs(os.path.join(base, "src", "w"))
            os.mkdir(os.path.join(base, "mnt"))
            conf = os.path.join(base, "c")
            write(conf, b"")
            p = subprocess.Popen(
                [wsfstest.WSFS, "-f", "-o", f"config={conf},{opt}",
                 os.path.join(base, "src"), os.path.join(base, "mnt")],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and p.poll() is None:
                mi = mountinfo(os.path.join(base, "mnt"))
                if mi:
                    break
                time.sleep(0.05)
            mi = mountinfo(os.path.join(base, "mnt"))
            if mi is not None:
                wsfstest.unmount(os.path.join(base, "mnt"))
                assert {"nosuid", "nodev"} <= mi["opts"], (opt, mi)
            else:
                # refused: then with a message naming the option
                out = p.communicate(timeout=10)[0].decode()
                assert p.returncode != 0 and opt in out, out
            p.wait(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            if mountinfo(os.path.join(base, "mnt")) is None:
                shutil.rmtree(base)


def test_allow_other(mount):
    """Another user can use the mount (allow_other on by default)."""
    write(mount.path("ws1", "pub"), b"public")
    os.chmod(mount.path("ws1", "pub"), 0o644)
    def rd(p):
        with open(p, "rb") as f:
            return f.read()
    assert call_as(USER_UID, USER_GID, rd, mount.path("ws1", "pub")) == \
        b"public"


# --- options and config file --------------------------------------------------------

def _refused(args, key):
    """Run wsfs -f with args; it must exit non-zero without mounting and
    name key in its message."""
    base = wsfstest.make_base()
    mnt = os.path.join(base, "mnt")
    p = None
    try:
        os.makedirs(os.path.join(base, "src", "w"))
        os.mkdir(mnt)
        conf = os.path.join(base, "c")
        write(conf, b"")
        args = [a.replace("@CONF@", conf) for a in args]
        p = subprocess.Popen([wsfstest.WSFS, "-f"] + args +
                             [os.path.join(base, "src"), mnt],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        ended = wsfstest.wait_for(lambda: p.poll() is not None or
                                  mountinfo(mnt) is not None, timeout=10)
        mounted = mountinfo(mnt)
        if mounted:
            wsfstest.unmount(mnt)
        out = p.communicate(timeout=10)[0]
        assert ended and mounted is None, f"{args}: mounted; output: {out}"
        assert p.returncode != 0, f"{args}: exit 0; output: {out}"
        assert key in out, f"{args}: message does not name {key!r}: {out!r}"
        return out
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
        if mountinfo(mnt) is None:
            shutil.rmtree(base)


@pytest.mark.parametrize("opt,key", [
    ("bogus_key=1", "bogus_key"),
    ("frobnicate", "frobnicate"),
    ("kind=weird", "kind"),
    ("max_threads=0", "max_threads"),
    ("max_threads=abc", "max_threads"),
    ("attr_timeout=-1", "attr_timeout"),
    ("entry_timeout=1e9", "entry_timeout"),
    ("uring=maybe", "uring"),
    ("allow_other=perhaps", "allow_other"),
    ("max_fds=-5", "max_fds"),
])
def test_bad_option_refused(fuse_env, opt, key):
    _refused(["-o", f"config=@CONF@,{opt}"], key)


def test_bad_config_file_refused(fuse_env):
    base = wsfstest.make_base()
    try:
        conf = os.path.join(base, "bad.conf")
        write(conf, b"# comment\nkind = shared\nno_such_key = 3\n")
        _refused(["-o", f"config={conf}"], "no_such_key")
        write(conf, b"max_threads = lots\n")
        _refused(["-o", f"config={conf}"], "max_threads")
        _refused(["-o", f"config={base}/missing.conf"], "missing.conf")
    finally:
        shutil.rmtree(base)


def test_usage_errors(fuse_env):
    r = run_wsfs([])
    # Wrong usage: exit 2, a one-line reason and a pointer to --help.
    assert r.returncode == 2 and "--help" in r.stdout, r.stdout
    base = wsfstest.make_base()
    try:
        r = run_wsfs(["-f", os.path.join(base, "nosrc"),
                      os.path.join(base, "nomnt")])
        assert r.returncode != 0 and "nosrc" in r.stdout, r.stdout
    finally:
        shutil.rmtree(base)


def test_config_file_and_override(mount_factory):
    """Settings come from config=FILE; -o wins over the file."""
    m = mount_factory(config="default_permissions = false\n"
                             "allow_other = false\n")
    mi = mountinfo(m.mnt)
    assert "default_permissions" not in mi["superopts"]
    assert "allow_other" not in mi["superopts"]
    # without allow_other another user cannot even stat the mount
    r = outcome(call_as, USER_UID, USER_GID, os.stat, m.path("ws1"))
    assert r == ("err", "EACCES")

    m2 = mount_factory(config="default_permissions = false\n"
                              "allow_other = false\n",
                       opts={"allow_other": "true",
                             "default_permissions": "true"})
    mi = mountinfo(m2.mnt)
    assert {"allow_other", "default_permissions"} <= mi["superopts"]
    assert sorted(call_as(USER_UID, USER_GID, os.listdir, m2.mnt)) == \
        ["ws1", "ws2"]


def test_kind_accepted(mount_factory):
    for kind in ("shared", "scratch"):
        m = mount_factory(opts={"kind": kind})
        assert sorted(os.listdir(m.mnt)) == ["ws1", "ws2"]


def test_fstab_mount_through_mount_fuse3(fuse_env):
    """An fstab entry of type fuse.wsfs is mounted by mount(8) through
    mount.fuse3, which runs `wsfs SOURCE MNT -o OPTS` through the shell
    (adding dev,suid, which wsfs must not honour) and lets it daemonize;
    umount stops it. mount(8) resets PATH for its helper, so the helper is
    called here as mount(8) calls it, with the build tree on PATH."""
    base = wsfstest.make_base()
    src = os.path.join(base, "src")
    mnt = os.path.join(base, "mnt")
    os.makedirs(os.path.join(src, "w"))
    os.mkdir(mnt)
    conf = os.path.join(base, "c")
    write(conf, b"")
    env = dict(os.environ, PATH=os.path.dirname(wsfstest.WSFS) + ":" +
               os.environ.get("PATH", "/usr/bin:/bin"))
    pid = None
    try:
        r = subprocess.run(["/sbin/mount.fuse3", src, mnt, "-o",
                            f"rw,config={conf},kind=shared", "-t",
                            "fuse.wsfs"], env=env, capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        mi = mountinfo(mnt)
        assert mi and mi["fstype"] == "fuse.wsfs"
        assert {"nosuid", "nodev"} <= mi["opts"], mi
        assert os.listdir(mnt) == ["w"]
        write(os.path.join(mnt, "w", "f"), b"via fstab")
        with open(os.path.join(src, "w", "f"), "rb") as f:
            assert f.read() == b"via fstab"
        pid = wsfstest.wsfs_pid(mnt)
        assert pid, "no wsfs process serving the mount"
        r = subprocess.run(["umount", mnt], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 0, r.stderr
        assert wsfstest.wait_for(lambda: not os.path.exists(
            f"/proc/{pid}"), timeout=10), "daemon still running"
    finally:
        if mountinfo(mnt):
            wsfstest.unmount(mnt)
        if pid and os.path.exists(f"/proc/{pid}"):
            os.kill(pid, 9)
        if mountinfo(mnt) is None:
            shutil.rmtree(base)

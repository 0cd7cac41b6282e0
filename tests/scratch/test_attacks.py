"""The sweeper under attack, directly on the backing base: symlink swaps
and renames racing the removal, mounts inside an expiring workspace, a
SIGKILL half-way, special files, and trees too deep or wide for a naive
walker. Canary trees outside the base must never change."""
import os
import signal
import socket
import stat
import subprocess
import time

from scratchlib import (LONG, PYTHON, WSCTL, age, build_deep, build_wide,
                        create, mounts_under, removed_count, sweep,
                        umount_all)
from wsfstest import snapshot_tree

HERE = os.path.dirname(os.path.abspath(__file__))
TRASH = ".wsfs-trash"


def trash_entries(base):
    try:
        return os.listdir(os.path.join(base, TRASH))
    except FileNotFoundError:
        return []


def populate(path, dirs=30, depth=3, files=20):
    for d in range(dirs):
        p = path
        for lvl in range(depth):
            p = os.path.join(p, f"d{d}" if lvl == 0 else f"l{lvl}")
            os.makedirs(p, exist_ok=True)
            for i in range(files):
                open(os.path.join(p, f"f{i}"), "w").close()


def test_racer_swaps_symlinks_and_renames(env):
    """Directories swapped for symlinks into the canary, subtrees moved up
    and out of the base, in a loop while the sweep runs: the canary never
    changes and the workspace is gone in the end."""
    before = snapshot_tree(env.canary)
    rounds = 20 if LONG else 3
    for r in range(rounds):
        wid, path = create(env.base, "conversation")
        populate(path, dirs=40, depth=4, files=15)
        age(env.base, wid, 3600)
        racer = subprocess.Popen([PYTHON, os.path.join(HERE, "racer.py"),
                                  env.base, wid, env.canary, env.out],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert racer.stdout.readline() == "ready\n"
            p = sweep(env.base, "--ttl-hours", "0.5")
            assert f"removed {wid}" in p.stdout
        finally:
            racer.kill()
            racer.wait()
        assert not os.path.lexists(path)
        # Whatever the racer left in the trash is finished now.
        sweep(env.base, "--ttl-hours", "0.5")
        assert trash_entries(env.base) == []
        assert snapshot_tree(env.canary) == before, f"canary changed, round {r}"


def _mount(*args):
    subprocess.run(["mount", *args], check=True)


def test_mounts_inside_not_crossed(env):
    wid, path = create(env.base, "conversation")
    a = os.path.join(path, "a")
    os.makedirs(os.path.join(a, "tmp"))
    os.makedirs(os.path.join(a, "bind"))
    open(os.path.join(a, "bindfile"), "w").close()
    open(os.path.join(a, "plain"), "w").close()
    try:
        _mount("-t", "tmpfs", "-o", "size=1m", "tmpfs", os.path.join(a, "tmp"))
        with open(os.path.join(a, "tmp", "in-tmpfs"), "w") as f:
            f.write("tmpfs canary\n")
        _mount("--bind", env.canary, os.path.join(a, "bind"))
        _mount("--bind", os.path.join(env.canary, "top"),
               os.path.join(a, "bindfile"))
        before = snapshot_tree(env.canary)
        p = sweep(env.base, "--ttl-hours", "0")
        assert removed_count(p) == 1
        skipped = [line for line in p.stdout.splitlines()
                   if line.startswith("skipped ")]
        assert len(skipped) == 3, p.stdout
        for name in ("a/tmp", "a/bind", "a/bindfile"):
            assert any(f"mount point {name} skipped" in line
                       for line in skipped), p.stdout
        assert "incomplete" in p.stdout
        assert snapshot_tree(env.canary) == before
        # The workspace is gone from the base; its mounts wait in the
        # trash, untouched, and later sweeps do not cross them either.
        assert not os.path.lexists(path)
        (entry,) = trash_entries(env.base)
        moved = os.path.join(env.base, TRASH, entry)
        assert len(mounts_under(moved)) == 3
        with open(os.path.join(moved, "a", "tmp", "in-tmpfs")) as f:
            assert f.read() == "tmpfs canary\n"
        assert not os.path.exists(os.path.join(moved, "a", "plain"))
        p = sweep(env.base, "--ttl-hours", "0")
        assert removed_count(p) == 0 and "skipped" in p.stdout
        assert snapshot_tree(env.canary) == before
    finally:
        umount_all(env.base)
    assert mounts_under(env.base) == []
    p = sweep(env.base, "--ttl-hours", "0")
    assert "trash " in p.stdout and "finished" in p.stdout
    assert trash_entries(env.base) == []
    assert snapshot_tree(env.canary) == before


def test_workspace_that_is_a_mount_point_is_kept(env):
    wid, path = create(env.base, "conversation")
    try:
        _mount("--bind", env.canary, path)
        before = snapshot_tree(env.canary)
        p = sweep(env.base, "--ttl-hours", "0")
        assert removed_count(p) == 0
        assert f"error {wid}: cannot move to the trash" in p.stdout
        assert snapshot_tree(env.canary) == before
    finally:
        umount_all(env.base)


def test_sigkill_midway_next_sweep_finishes(env):
    files = 100000
    wid, path = create(env.base, "conversation")
    build_wide(path, files)
    age(env.base, wid, 7200)
    other, opath = create(env.base, "conversation")
    populate(opath, dirs=5)
    other_before = snapshot_tree(opath)
    canary_before = snapshot_tree(env.canary)
    p = subprocess.Popen([WSCTL, "sweep", "--base", env.base,
                          "--ttl-hours", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not trash_entries(env.base) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.3)
        assert p.poll() is None, "the sweep finished before it was killed"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # Killed half-way: nothing half-deleted is left looking like a
    # workspace; the rest waits in the trash.
    assert not os.path.lexists(path)
    (entry,) = trash_entries(env.base)
    left = sum(len(f) for _, _, f in os.walk(os.path.join(env.base, TRASH,
                                                          entry)))
    assert 0 < left < files
    q = sweep(env.base, "--ttl-hours", "1")
    assert f"trash {entry}: finished" in q.stdout
    assert removed_count(q) == 0
    assert trash_entries(env.base) == []
    assert snapshot_tree(opath) == other_before
    assert snapshot_tree(env.canary) == canary_before


def test_special_files_removed_unopened(env):
    wid, path = create(env.base, "conversation")
    os.mkfifo(os.path.join(path, "fifo"))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.path.join(path, "sock"))
    s.listen(1)
    os.mknod(os.path.join(path, "null"), 0o666 | stat.S_IFCHR,
             os.makedev(1, 3))
    os.mknod(os.path.join(path, "blk"), 0o600 | stat.S_IFBLK,
             os.makedev(7, 0))
    os.symlink("/dev/null", os.path.join(path, "devlink"))
    os.makedirs(os.path.join(path, "noaccess"), mode=0)
    try:
        # A FIFO opened for reading would block the sweep forever.
        p = sweep(env.base, "--ttl-hours", "0", timeout=30)
        assert f"removed {wid}: idle past the ttl, idle" in p.stdout
        assert "5 files, 2 directories" in p.stdout
        assert not os.path.lexists(path)
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    finally:
        s.close()


def test_deep_tree_bounded_fds(env):
    depth = 100000 if LONG else 10000
    wid, path = create(env.base, "conversation")
    build_deep(path, depth)
    # 64 descriptors for a tree thousands of levels deep.
    p = subprocess.run(["prlimit", "--nofile=64:64", WSCTL, "sweep",
                        "--base", env.base, "--ttl-hours", "0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert f"{depth // 1000} files, {depth + 1} directories" in p.stdout
    assert p.stdout.splitlines()[-1] == "removed 1"
    assert not os.path.lexists(path)


def test_deep_tree_left_by_a_crash(env):
    """A deep tree already in the trash (a crash) is finished too."""
    wid, path = create(env.base, "conversation")
    build_deep(path, 5000)
    os.makedirs(os.path.join(env.base, TRASH), mode=0o700, exist_ok=True)
    os.rename(path, os.path.join(env.base, TRASH, f"{wid}.0000000000000001"))
    p = sweep(env.base, "--ttl-hours", "100")
    assert f"trash {wid}.0000000000000001: finished" in p.stdout
    assert trash_entries(env.base) == []


def test_wide_tree(env):
    files = 200000 if LONG else 20000
    wid, path = create(env.base, "task")
    build_wide(path, files)
    p = subprocess.run([WSCTL, "scratch", "end", "--base", env.base, wid],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"removed {wid} ({files} files, ")
    assert not os.path.lexists(path)

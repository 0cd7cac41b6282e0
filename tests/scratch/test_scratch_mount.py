"""Scratch workspaces through a wsfs kind=scratch mount: wsctl finds the
mount, activity through it counts as use (persisted, so it survives a
remount), open files keep a workspace in use, and wsfs sweeps on its own
timer."""
import os
import subprocess
import time

import pytest

import wsfstest
from scratchlib import (age, create, meta_path, removed_count, sweep,
                        wsctl)


@pytest.fixture
def smount(env, fuse_env):
    """A kind=scratch mount of env.base at env.top/mnt; returns a starter
    so a test can pass options and remount."""
    # Make the base, and leave it empty.
    wid, _ = create(env.base, "task")
    wsctl("scratch", "end", "--base", env.base, wid)
    mounts = []

    def start(**opts):
        o = {"kind": "scratch"}
        o.update(opts)
        m = wsfstest.Mount(workspaces=(), source=env.base, base=env.top,
                           opts=o)
        m.start()
        mounts.append(m)
        return m

    yield start
    errors = []
    for m in mounts:
        try:
            status = m.stop()
            if status not in (0, None):
                errors.append(f"wsfs exited {status}:\n{m.log()}")
        except wsfstest.MountError as e:
            errors.append(str(e))
    if errors:
        pytest.fail("\n".join(errors), pytrace=False)


def test_create_prints_path_under_mount(env, smount):
    m = smount()
    wid, path = create(env.base, "task")
    assert path == os.path.join(m.mnt, wid)
    assert os.path.isdir(path)
    with open(os.path.join(path, "f"), "w") as f:
        f.write("through the mount\n")
    assert os.path.isfile(os.path.join(env.base, wid, "f"))
    # Metadata and trash are not workspaces: the mount does not show them.
    assert sorted(os.listdir(m.mnt)) == sorted(
        n for n in os.listdir(env.base) if not n.startswith("."))


def test_open_file_through_mount_is_in_use(env, smount):
    m = smount()
    wid, path = create(env.base, "conversation")
    age(env.base, wid, 10 * 365 * 86400)
    f = open(os.path.join(m.mnt, wid, "busy"), "w")
    try:
        f.write("working\n")
        f.flush()
        for _ in range(2):
            p = sweep(env.base, "--ttl-hours", "0")
            assert f"kept {wid}: in use" in p.stdout
        assert os.path.isdir(os.path.join(env.base, wid))
    finally:
        f.close()
    # Released: the workspace is free (and was just used).
    assert wsfstest.wait_for(lambda: removed_count(
        sweep(env.base, "--ttl-hours", "0")) == 1, timeout=10)


def test_activity_is_last_use_and_survives_remount(env, smount):
    m = smount(scratch_ttl_hours="0.5")
    wid, _ = create(env.base, "conversation")
    age(env.base, wid, 7200)
    used = meta_path(env.base, wid, "used")
    old = os.stat(used).st_mtime
    os.listdir(os.path.join(m.mnt, wid))
    os.stat(os.path.join(m.mnt, wid))
    assert wsfstest.wait_for(lambda: os.stat(used).st_mtime > old + 3600,
                             timeout=10)
    m.stop()
    # Recorded on disk: a new mount (and the sweeper) still see it.
    assert removed_count(sweep(env.base, "--ttl-hours", "1")) == 0
    m2 = smount(scratch_ttl_hours="0.5")
    assert os.path.isdir(os.path.join(m2.mnt, wid))
    assert removed_count(sweep(env.base, "--ttl-hours", "1")) == 0


def test_steady_activity_outlives_short_ttl(env, smount):
    """With a ttl of 1.8 s, a workspace used through the mount every 0.3 s
    (stat and readdir, no file left open) is never idle long enough; left
    alone, it goes."""
    m = smount(scratch_ttl_hours="0.0005")
    wid, _ = create(env.base, "conversation")
    end = time.monotonic() + 5
    while time.monotonic() < end:
        os.stat(os.path.join(m.mnt, wid))
        os.listdir(os.path.join(m.mnt, wid))
        p = sweep(env.base, "--ttl-hours", "0.0005")
        assert removed_count(p) == 0, p.stdout
        time.sleep(0.3)
    # Once left alone it goes (late releases from the kernel may count
    # as one more use, so allow a few ttls).
    assert wsfstest.wait_for(lambda: removed_count(
        sweep(env.base, "--ttl-hours", "0.0005")) == 1, timeout=15)


def test_wsfs_sweeps_on_its_timer(env, smount):
    m = smount(scratch_ttl_hours="0.0003", sweep_interval_minutes="0.01")
    # Another user's workspace with a directory nobody may enter: the
    # daemon's sweeper needs the capabilities it kept to remove it.
    idle, _ = create(env.base, "conversation", owner="nobody")
    locked = os.path.join(env.base, idle, "locked")
    os.makedirs(os.path.join(locked, "sub"))
    open(os.path.join(locked, "sub", "f"), "w").close()
    os.chmod(locked, 0)
    busy, _ = create(env.base, "conversation")
    f = open(os.path.join(m.mnt, busy, "open"), "w")
    try:
        assert wsfstest.wait_for(
            lambda: not os.path.exists(os.path.join(env.base, idle)),
            timeout=20), m.log()
        assert os.path.isdir(os.path.join(env.base, busy))
        # Logged once the removal is over, after the rename.
        assert wsfstest.wait_for(lambda: f"{idle}: removed" in m.log(),
                                 timeout=10), m.log()
    finally:
        f.close()
    assert wsfstest.wait_for(
        lambda: not os.path.exists(os.path.join(env.base, busy)),
        timeout=20), m.log()
    # wsctl sweep still works beside the daemon's sweeper.
    p = subprocess.run([wsfstest.WSCTL, "sweep", "--base", env.base],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode in (0, 1), p.stderr

"""Scratch workspace life cycle through wsctl, directly on a backing base:
create, hold, end, list, and what the sweeper removes and keeps."""
import fcntl
import json
import os
import pwd
import signal
import stat
import subprocess
import time

import pytest

from scratchlib import (ID_RE, PYTHON, WSCTL, age, create, meta_path,
                        read_meta, removed_count, sweep, wsctl)
from wsfstest import snapshot_tree


def test_create_layout(env):
    wid, path = create(env.base, "conversation", owner="nobody",
                       label="nightly build #7")
    nobody = pwd.getpwnam("nobody")
    assert path == os.path.join(env.base, wid)
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    m = read_meta(env.base, wid)
    assert m["id"] == wid and m["version"] == "1"
    assert m["lifetime"] == "conversation"
    assert m["owner"] == str(nobody.pw_uid)
    assert m["label"] == "nightly build #7"
    assert abs(int(m["created"]) - time.time()) < 60
    assert m["ended"] == "0"
    for suffix in ("lock", "used"):
        assert os.path.isfile(meta_path(env.base, wid, suffix))
    # A numeric uid without an account is accepted as it is.
    wid2, _ = create(env.base, owner="54321")
    st = os.lstat(os.path.join(env.base, wid2))
    assert (st.st_uid, st.st_gid) == (54321, 54321)
    # Each create is a new workspace.
    assert wid2 != wid


@pytest.mark.parametrize("args,msg", [
    (["--lifetime", "forever"], "--lifetime must be task or conversation"),
    (["--owner", "no-such-user-xyz"], "no such user"),
    (["--owner", "4294967295"], "not a valid uid"),
    (["--label", "tab\there"], "--label must be"),
    (["--label", "x" * 201], "--label must be"),
    (["--bogus"], "unknown option '--bogus'"),
    (["extra"], "unexpected argument"),
])
def test_create_usage_errors(env, args, msg):
    p = wsctl("scratch", "create", "--base", env.base, *args, rc=2)
    assert msg in p.stderr
    assert not os.path.exists(env.base) or not [
        n for n in os.listdir(env.base) if not n.startswith(".")]


def test_usage_errors(env):
    create(env.base)
    assert "not a workspace id" in wsctl("scratch", "end", "--base",
                                         env.base, "../etc", rc=2).stderr
    assert "missing workspace id" in wsctl("scratch", "hold", "--base",
                                           env.base, rc=2).stderr
    p = wsctl("scratch", "end", "--base", env.base,
              "00000000-0000-4000-8000-000000000000", rc=1)
    assert "no scratch workspace" in p.stderr
    p = wsctl("sweep", "--base", env.base, "--ttl-hours", "1e3", rc=2)
    assert "--ttl-hours must be a decimal number" in p.stderr
    p = wsctl("sweep", "--base", os.path.join(env.top, "nope"), rc=1)
    assert "no such directory" in p.stderr
    # The io_uring batch path is gone, and says so.
    p = wsctl("sweep", "--base", env.base, "--uring", rc=2)
    assert "--uring is gone" in p.stderr, p.stderr
    assert "missing subcommand" in wsctl("scratch", rc=2).stderr


def test_unsafe_base_refused(env):
    os.makedirs(env.base)
    os.chmod(env.base, 0o777)
    p = wsctl("scratch", "create", "--base", env.base, rc=1)
    assert "Operation not permitted" in p.stderr
    assert os.listdir(env.base) == []


def test_symlinked_parent_of_base_refused(env):
    """No symlink above the base is followed, whatever the subcommand
    (issue 12, finding 10): it would move the base somewhere else."""
    real = os.path.join(env.top, "real")
    os.mkdir(real)
    os.symlink(real, os.path.join(env.top, "plink"))
    via = os.path.join(env.top, "plink", "scratch")
    p = wsctl("scratch", "create", "--base", via, rc=1)
    assert "symlink" in p.stderr and "real path" in p.stderr, p.stderr
    assert os.listdir(real) == []
    wid, _ = create(os.path.join(real, "scratch"), "conversation")
    for args in (["scratch", "list", "--base", via, "--json"],
                 ["scratch", "end", "--base", via, wid],
                 ["scratch", "hold", "--base", via, wid, "--", "true"],
                 ["sweep", "--base", via, "--ttl-hours", "0"]):
        p = wsctl(*args, rc=1)
        assert "symlink" in p.stderr, (args, p.stderr)
    assert os.path.isdir(os.path.join(real, "scratch", wid))


def test_list(env):
    a, _ = create(env.base, "task", label="alpha")
    b, _ = create(env.base, "conversation", owner="nobody", label="b\"q")
    with open(os.path.join(env.base, a, "data"), "wb") as f:
        f.write(b"x" * 100000)
    os.mkdir(os.path.join(env.base, "stray"))
    out = wsctl("scratch", "list", "--base", env.base).stdout
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "OWNER", "LIFETIME"]
    assert len(lines) == 3
    assert any(a in line and "alpha" in line and "task" in line
               for line in lines)
    got = json.loads(wsctl("scratch", "list", "--base", env.base,
                           "--json").stdout)
    byid = {w["id"]: w for w in got}
    assert set(byid) == {a, b}
    assert byid[a]["lifetime"] == "task" and byid[a]["owner"] == "root"
    assert byid[b]["label"] == "b\"q" and byid[b]["owner"] == "nobody"
    assert byid[a]["size"] >= 100000 > byid[b]["size"]
    assert byid[a]["in_use"] is False
    assert byid[a]["last_use"] >= byid[a]["created"]
    # In use while held.
    p = subprocess.Popen([WSCTL, "scratch", "hold", "--base", env.base, b,
                          "--", "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = json.loads(wsctl("scratch", "list", "--base", env.base,
                                   "--json").stdout)
            if {w["id"]: w for w in got}[b]["in_use"]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("held workspace never listed as in use")
    finally:
        p.kill()
        p.wait()
    assert json.loads(wsctl("scratch", "list", "--base", env.base,
                            "--json").stdout) and True
    empty = os.path.join(env.top, "empty")
    wsctl("scratch", "create", "--base", empty)
    for n in os.listdir(empty):
        if ID_RE.match(n):
            wsctl("scratch", "end", "--base", empty, n)
    assert json.loads(wsctl("scratch", "list", "--base", empty,
                            "--json").stdout) == []


def test_hold_runs_command_with_lock(env):
    wid, path = create(env.base, "task")
    p = wsctl("scratch", "hold", "--base", env.base, wid, "--", "sh", "-c",
              'echo "$WSFS_SCRATCH_ID $WSFS_SCRATCH_DIR"; '
              f'{WSCTL} sweep --base {env.base} --ttl-hours 0; exit 7',
              rc=7)
    lines = p.stdout.splitlines()
    assert lines[0] == f"{wid} {path}"
    assert f"kept {wid}: in use" in lines
    assert lines[-1] == "removed 0"
    assert os.path.isdir(path)
    # Missing "--" or command, and a command that does not exist.
    assert "expected ID -- COMMAND" in wsctl(
        "scratch", "hold", "--base", env.base, wid, "true", rc=2).stderr
    assert "expected ID -- COMMAND" in wsctl(
        "scratch", "hold", "--base", env.base, wid, "--", rc=2).stderr
    wsctl("scratch", "hold", "--base", env.base, wid, "--",
          "/nonexistent/cmd", rc=127)
    # Once the holder is gone, the workspace is free again.
    assert removed_count(sweep(env.base, "--ttl-hours", "0")) == 1
    assert not os.path.exists(path)
    assert "no scratch workspace" in wsctl(
        "scratch", "hold", "--base", env.base, wid, "--", "true",
        rc=1).stderr


def test_hold_refuses_other_users(env):
    wid, _ = create(env.base, "task", owner="root")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                        "--clear-groups", WSCTL, "scratch", "hold",
                        "--base", env.base, wid, "--", "true"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert p.returncode == 1, p.stderr
    assert "not to you" in p.stderr
    # The owner may hold it without being root.
    wid2, _ = create(env.base, "task", owner="nobody")
    p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534",
                        "--clear-groups", WSCTL, "scratch", "hold",
                        "--base", env.base, wid2, "--", "sh", "-c",
                        "exit 5"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert p.returncode == 5, p.stderr


def test_end_task_removes_now(env):
    wid, path = create(env.base, "task")
    os.makedirs(os.path.join(path, "a", "b"))
    for i in range(50):
        open(os.path.join(path, "a", "b", f"f{i}"), "w").close()
    os.symlink(env.canary, os.path.join(path, "canary-link"))
    before = snapshot_tree(env.canary)
    p = wsctl("scratch", "end", "--base", env.base, wid)
    assert p.stdout == f"removed {wid} (51 files, 3 directories)\n"
    assert not os.path.lexists(path)
    for suffix in ("meta", "lock", "used"):
        assert not os.path.exists(meta_path(env.base, wid, suffix))
    assert os.listdir(os.path.join(env.base, ".wsfs-trash")) == []
    assert snapshot_tree(env.canary) == before


def test_end_conversation_kept_until_idle(env):
    wid, path = create(env.base, "conversation")
    p = wsctl("scratch", "end", "--base", env.base, wid)
    assert "kept until the sweeper finds it idle" in p.stdout
    assert int(read_meta(env.base, wid)["ended"]) > 0
    assert os.path.isdir(path)
    assert removed_count(sweep(env.base, "--ttl-hours", "1")) == 0
    assert os.path.isdir(path)
    age(env.base, wid, 7200)
    p = sweep(env.base, "--ttl-hours", "1")
    assert removed_count(p) == 1
    assert f"removed {wid}: idle past the ttl" in p.stdout
    assert not os.path.lexists(path)


def test_end_while_held_left_for_sweeper(env):
    wid, path = create(env.base, "task")
    holder = subprocess.Popen([WSCTL, "scratch", "hold", "--base", env.base,
                               wid, "--", "sleep", "60"])
    try:
        time.sleep(0.3)
        p = wsctl("scratch", "end", "--base", env.base, wid)
        assert "still in use" in p.stdout
        assert os.path.isdir(path)
        assert removed_count(sweep(env.base, "--ttl-hours", "100")) == 0
    finally:
        holder.kill()
        holder.wait()
    # Ended: removed at the next sweep however fresh.
    p = sweep(env.base, "--ttl-hours", "100")
    assert f"removed {wid}: task ended" in p.stdout
    assert not os.path.lexists(path)


def test_ttl_expiry_decimal(env):
    wid, path = create(env.base, "conversation")
    # 0.0005 h = 1.8 s.
    p = sweep(env.base, "--ttl-hours", "0.0005")
    assert removed_count(p) == 0 and f"kept {wid}: idle" in p.stdout
    time.sleep(2.2)
    p = sweep(env.base, "--ttl-hours", "0.0005", "--dry-run")
    assert f"would remove {wid}: idle past the ttl" in p.stdout
    assert p.stdout.splitlines()[-2:] == ["would remove 1", "removed 0"]
    assert os.path.isdir(path)
    p = sweep(env.base, "--ttl-hours", "0.0005")
    assert removed_count(p) == 1
    assert not os.path.lexists(path)


def test_last_use_counts_and_future_is_now(env):
    wid, path = create(env.base, "conversation")
    age(env.base, wid, 10 * 3600)
    used = meta_path(env.base, wid, "used")
    now = time.time()
    os.utime(used, (now, now))
    # Created long ago but used just now: kept.
    assert removed_count(sweep(env.base, "--ttl-hours", "1")) == 0
    # A last use a year ahead (the clock was stepped back) counts as now,
    # and the sweeper pulls it back to now so it cannot pin the workspace.
    future = now + 365 * 86400
    os.utime(used, (future, future))
    assert removed_count(sweep(env.base, "--ttl-hours", "0.0003")) == 0
    assert os.stat(used).st_mtime < now + 60
    time.sleep(1.5)
    assert removed_count(sweep(env.base, "--ttl-hours", "0.0003")) == 1


def test_held_never_swept_however_old(env):
    wid, path = create(env.base, "task")
    age(env.base, wid, 10 * 365 * 86400)
    held = subprocess.Popen([WSCTL, "scratch", "hold", "--base", env.base,
                             wid, "--", "sleep", "60"])
    try:
        time.sleep(0.3)
        for _ in range(3):
            p = sweep(env.base, "--ttl-hours", "0")
            assert f"kept {wid}: in use" in p.stdout
            assert removed_count(p) == 0
        assert os.path.isdir(path)
        # A lock taken by some other task runner counts the same.
        held.kill()
        held.wait()
        fd = os.open(meta_path(env.base, wid, "lock"), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            assert removed_count(sweep(env.base, "--ttl-hours", "0")) == 0
        finally:
            os.close(fd)
    finally:
        if held.poll() is None:
            held.kill()
            held.wait()
    assert removed_count(sweep(env.base, "--ttl-hours", "0")) == 1


def test_one_sweeper_at_a_time(env):
    create(env.base, "task")
    fd = os.open(os.path.join(env.base, ".wsfs", "sweep.lock"),
                 os.O_RDONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        p = wsctl("sweep", "--base", env.base, "--ttl-hours", "0", rc=1)
        assert "another sweep" in p.stderr
    finally:
        os.close(fd)
    assert removed_count(sweep(env.base, "--ttl-hours", "0")) == 1


def test_unmanaged_entries_left_alone(env):
    wid, _ = create(env.base, "task")
    stray = os.path.join(env.base, "stray")
    os.mkdir(stray)
    open(os.path.join(stray, "f"), "w").close()
    os.symlink(env.canary, os.path.join(env.base,
                                        "11111111-2222-4333-8444-555555555555"))
    # A workspace-named directory without metadata, and metadata that does
    # not parse: both kept, never guessed at.
    nometa = os.path.join(env.base, "22222222-2222-4333-8444-555555555555")
    os.mkdir(nometa)
    bad, _ = create(env.base, "task")
    with open(meta_path(env.base, bad), "w") as f:
        f.write("version=1\nid=" + bad + "\nlifetime=task\n")
    before = snapshot_tree(env.canary)
    p = sweep(env.base, "--ttl-hours", "0")
    assert removed_count(p) == 1 and f"removed {wid}" in p.stdout
    assert "kept stray: not created by wsctl scratch" in p.stdout
    assert f"kept {bad}: unreadable metadata" in p.stdout
    assert os.path.isfile(os.path.join(stray, "f"))
    assert os.path.isdir(nometa) and os.path.isdir(os.path.join(env.base,
                                                                bad))
    assert snapshot_tree(env.canary) == before


def test_orphan_metadata_dropped(env):
    wid, path = create(env.base, "task")
    os.rmdir(path)
    sweep(env.base, "--ttl-hours", "100")
    for suffix in ("meta", "lock", "used"):
        assert not os.path.exists(meta_path(env.base, wid, suffix))


def test_hold_survives_wsctl_exec(env):
    """The lock belongs to COMMAND: killing it frees the workspace."""
    wid, path = create(env.base, "task")
    p = subprocess.Popen([WSCTL, "scratch", "hold", "--base", env.base, wid,
                          "--", PYTHON, "-c",
                          "import time; print('up', flush=True); "
                          "time.sleep(60)"], stdout=subprocess.PIPE,
                         text=True)
    try:
        assert p.stdout.readline() == "up\n"
        assert removed_count(sweep(env.base, "--ttl-hours", "0")) == 0
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert p.returncode == -signal.SIGKILL
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert removed_count(sweep(env.base, "--ttl-hours", "0")) == 1

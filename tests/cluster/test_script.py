"""scripts/cluster itself: the namespaces, links and daemons it makes,
cut/heal/kill/start, and that 'down' leaves nothing behind, also after an
'up' that failed halfway. These need only wslockd and a wsfs that mounts,
not the wsfs side of cluster locking."""
import os
import subprocess
import time

import pytest

import clusterlib
from clusterlib import Cluster, SCRIPT
import wsfstest


def our_processes(c):
    """Pids of processes whose command line mentions the cluster's
    directory: its daemons and anything else it left running."""
    return [pid for pid, _ in wsfstest.processes_naming(c.dir)]


def namespaces(c):
    return sorted(n for n in os.listdir("/run/netns")
                  if n.startswith(c.name + "-")) \
        if os.path.isdir("/run/netns") else []


def reach(c, n, host):
    """Can node n talk to wslockd at host (authenticated, over TCP)?"""
    p = c.run(n, [clusterlib.WSCTL, "locks", "--lockd", f"{host}:7420",
                  "--key", c.keyfile], timeout=60)
    return p.returncode == 0, p.stderr


CONNECT = ("import socket, sys\n"
           "try:\n"
           "    socket.create_connection((sys.argv[1], 7420), timeout=3)\n"
           "except OSError as e:\n"
           "    sys.exit(str(e))\n")


def connects(c, n, host):
    """Does a plain TCP connect from node n to host:7420 succeed? (Quicker
    than wsctl, which retries an unreachable server for seconds.)"""
    p = c.run(n, [clusterlib.PYTHON, "-c", CONNECT, host], timeout=60)
    return p.returncode == 0


@pytest.mark.storage("local")    # gluster's: test_storage.py
def test_up_status_down(cluster_factory):
    c = cluster_factory(locking=False)
    assert namespaces(c) == sorted([f"{c.name}-lockd", f"{c.name}-node1",
                                    f"{c.name}-node2", f"{c.name}-node3"])
    st = c.script("status")
    for n in (1, 2, 3):
        assert f"node{n}  wsfs pid" in st.stdout
        assert f"{c.mnt(n)} mounted, link up" in st.stdout
        assert wsfstest.is_wsfs_mount(c.mnt(n))
        assert os.listdir(c.mnt(n)) == ["ws"]
    assert os.stat(c.keyfile).st_mode & 0o777 == 0o600
    assert os.path.getsize(c.keyfile) >= 32

    # Each node reaches the lock server over its own link only.
    for n in (1, 2, 3):
        ok, err = reach(c, n, f"10.213.{n}.1")
        assert ok, f"node{n} cannot reach wslockd: {err}"
    assert not connects(c, 1, "10.213.2.1"), \
        "node1 reaches the lock server over node2's link"
    assert not connects(c, 2, "10.213.1.1")
    # exec runs in the node's namespace, in its mount.
    p = c.run(2, ["sh", "-c", "pwd; ip -o -4 addr show dev lockd"],
              check=True)
    assert p.stdout.splitlines()[0] == c.mnt(2)
    assert "10.213.2.2/30" in p.stdout

    # One SOURCE under all mounts.
    with open(c.path(1, "ws", "hello"), "w") as f:
        f.write("from node1\n")
    with open(c.path(3, "ws", "hello")) as f:
        assert f.read() == "from node1\n"

    daemons = our_processes(c)
    assert len(daemons) == 4, f"expected wslockd and 3 wsfs: {daemons}"
    assert c.down() is None
    assert namespaces(c) == []
    for n in (1, 2, 3):
        assert wsfstest.mountinfo(c.mnt(n)) is None
    assert our_processes(c) == []
    # SOURCE survives 'down'; a second 'down' is harmless.
    assert os.path.exists(c.src("ws", "hello"))
    assert c.script("down", check=False).returncode == 0
    assert c.script("status", check=False).returncode == 3


@pytest.mark.parametrize("args", [
    [], ["bogus"], ["up", "extra"], ["exec", "node1"], ["cut"],
    ["cut", "node0"], ["cut", "nodeX"], ["kill", "node1", "node2"],
    ["kill", "4"], ["storage-up", "extra"], ["storage-down", "extra"],
])
def test_usage_errors(cluster_env, args):
    c = Cluster()
    try:
        p = c.script(*args, check=False)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.strip(), "no message for a usage error"
        assert namespaces(c) == []
    finally:
        c.cleanup()


def test_bad_environment(cluster_env):
    c = Cluster()
    try:
        for var, val in (("CLUSTER_NODES", "abc"), ("CLUSTER_NODES", "0"),
                         ("LOCK_TIMEOUT", "soon"), ("CLUSTER_DIR", "rel"),
                         ("CLUSTER_DIR", "/tmp/a,b"),
                         ("CLUSTER_NAME", "a/b"), ("STORAGE_FROM", "rel")):
            env = dict(c.env, **{var: val})
            p = subprocess.run([SCRIPT, "up"], env=env, capture_output=True,
                               text=True, timeout=60)
            assert p.returncode == 2, (var, val, p.stderr)
            assert var in p.stderr
        assert namespaces(c) == []
    finally:
        c.cleanup()


def test_help(cluster_env):
    p = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for word in ("up", "down", "status", "exec", "cut", "heal", "kill",
                 "start", "restart-lockd", "kill-lockd", "CLUSTER_DIR",
                 "CLUSTER_NODES", "SOURCE", "BUILDDIR"):
        assert word in p.stdout


def test_up_refuses_twice_and_down_cluster(cluster_factory):
    c = cluster_factory(locking=False, nodes=2)
    p = c.script("up", check=False)
    assert p.returncode == 1 and "already up" in p.stderr
    # The same namespace names from another CLUSTER_DIR are refused too.
    other = Cluster(nodes=1)
    try:
        other.env["CLUSTER_NAME"] = c.name
        p = other.script("up", check=False)
        assert p.returncode == 1 and "exists" in p.stderr, p.stderr
        # Commands on a cluster that is not up say so.
        p = other.script("cut", "node1", check=False)
        assert p.returncode == 1 and "not up" in p.stderr
    finally:
        other.cleanup()
    assert c.script("status").returncode == 0


def test_cut_heal(cluster_factory):
    c = cluster_factory(locking=False, nodes=2)
    c.cut(1)
    assert "link cut" in [ln for ln in c.script("status").stdout
                          .splitlines() if ln.startswith("node1")][0]
    assert not connects(c, 1, "10.213.1.1"), \
        "node1 still reaches wslockd after cut"
    ok, err = reach(c, 2, "10.213.2.1")
    assert ok, f"cutting node1 cut node2 too: {err}"
    # The node's mount still answers locally.
    assert os.listdir(c.mnt(1)) == ["ws"]
    c.heal(1)
    ok, err = reach(c, 1, "10.213.1.1")
    assert ok, f"node1 does not reach wslockd after heal: {err}"


def test_kill_start(cluster_factory):
    c = cluster_factory(locking=False, nodes=2)
    with open(os.path.join(c.dir, "pids", "node2")) as f:
        pid = int(f.read().split()[0])
    c.kill(2)
    assert not os.path.exists(f"/proc/{pid}") or \
        open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    assert wsfstest.mountinfo(c.mnt(2)) is None
    assert "node2  wsfs not running" in c.script("status", check=False).stdout
    assert wsfstest.is_wsfs_mount(c.mnt(1))
    p = c.script("start", "node1", check=False)
    assert p.returncode == 1 and "running" in p.stderr
    c.start(2)
    assert wsfstest.is_wsfs_mount(c.mnt(2))
    assert os.listdir(c.mnt(2)) == ["ws"]


def test_kill_restart_lockd(cluster_factory):
    c = cluster_factory(locking=False, nodes=1)
    c.kill_lockd()
    st = c.script("status", check=False)
    assert st.returncode == 1 and "wslockd not running" in st.stdout
    assert not connects(c, 1, "10.213.1.1")
    c.restart_lockd()
    ok, err = reach(c, 1, "10.213.1.1")
    assert ok, err
    log = wsfstest.read_log(os.path.join(c.dir, "logs", "lockd.log"))
    assert log.count("start wslockd") == 2


def test_failed_up_leaves_nothing(cluster_env, tmp_path):
    """A wsfs that cannot mount makes 'up' fail after the namespaces and
    wslockd exist; all of it must be gone again."""
    build = tmp_path / "build"
    for d in ("fs", "lockd", "tools"):
        (build / d).mkdir(parents=True)
    (build / "lockd" / "wslockd").symlink_to(clusterlib.WSLOCKD)
    (build / "tools" / "wsctl").symlink_to(clusterlib.WSCTL)
    fake = build / "fs" / "wsfs"
    fake.write_text("#!/bin/sh\necho 'wsfs: refusing to start' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    c = Cluster(nodes=2)
    c.env["BUILDDIR"] = str(build)
    try:
        p = c.script("up", check=False)
        assert p.returncode == 1
        assert "refusing to start" in p.stderr
        assert namespaces(c) == []
        assert our_processes(c) == []
        assert not os.path.exists(os.path.join(c.dir, "up"))
        assert c.script("down", check=False).returncode == 0
    finally:
        c.is_up = True
        c.down()
        c.cleanup()


def test_wsctl_lock_key_serializes_nodes(cluster_factory, tmp_path):
    """wsctl lock KEY from three nodes, each over its own link: the
    critical sections never overlap."""
    c = cluster_factory(locking=False)
    out = tmp_path / "sections"
    out.touch()
    body = (f"echo start $N >> {out}; sleep 0.1; echo end $N >> {out}")
    procs = []
    for n in (1, 2, 3):
        for i in range(4):
            procs.append(c.popen(n, [
                "env", f"N={n}.{i}", clusterlib.WSCTL, "lock", "--lockd",
                f"10.213.{n}.1", "--key", c.keyfile, "cluster-test",
                "--", "sh", "-c", body]))
    for p in procs:
        clusterlib.finish(p, timeout=120)
    got = out.read_text().split("\n")[:-1]
    assert len(got) == 24
    for i in range(0, len(got), 2):
        a, b = got[i].split(), got[i + 1].split()
        assert a[0] == "start" and b == ["end", a[1]], \
            f"sections overlap at line {i}: {got}"


def test_lease_passed_to_lockd(cluster_factory):
    """LEASE_MS reaches wslockd: a session's lease never exceeds it."""
    c = cluster_factory(locking=False, nodes=1, lease_ms=4000)
    p = c.popen(1, [clusterlib.WSCTL, "lock", "--lockd", "10.213.1.1",
                    "--key", c.keyfile, "k", "--", "sleep", "3"])
    deadline = time.monotonic() + 10
    rows = []
    while time.monotonic() < deadline:
        rows = c.locks()
        if any(r["type"] == "holder" and r["key"] == "k" for r in rows):
            break
        time.sleep(0.05)
    sess = [r for r in rows if r["type"] == "session"]
    assert sess and all(0 < r["lease_left_ms"] <= 4000 for r in sess), rows
    clusterlib.finish(p)

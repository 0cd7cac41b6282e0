"""wsfs nodes over replicated lock servers (issue 17): scripts/cluster
with LOCKD_REPLICAS=2 runs two wslockd --etcd replicas on a three-member
etcd cluster, and every node's lockd= lists both. When the active replica
is killed the standby takes over; the nodes, whose leases did not run
out, reclaim their locks there and go on writing: no error, nothing
acknowledged lost, no record torn.

Lease 10 s, etcd TTL 2 s: a node reaches the successor well before 90 %
of its lease (see lockd/PROTOCOL.md, Replicas on etcd)."""
import glob
import os
import shutil
import time

import pytest

import clusterlib
from clusterlib import Reader
from test_faults import check_file, oks
import wsfstest

LEASE_MS = 10000


def ha_environment(monkeypatch, replicas=2, ttl_s=2):
    """Make the clusters of this test run replicas wslockd --etcd on a
    three-member etcd cluster (scripts/cluster LOCKD_REPLICAS)."""
    if shutil.which("etcd") is None or shutil.which("curl") is None:
        pytest.skip("etcd or curl not installed (etcd-server, curl)")
    monkeypatch.setenv("LOCKD_REPLICAS", str(replicas))
    monkeypatch.setenv("ETCD_TTL", str(ttl_s))
    # wsctl locks asks the replicas over their Unix sockets.
    monkeypatch.setattr(clusterlib.Cluster, "lockd_unix", property(
        lambda self: ",".join(f"unix:{self.dir}/lockd-r{i}.sock"
                              for i in range(1, replicas + 1))))


@pytest.fixture
def ha_cluster(cluster_factory, monkeypatch):
    ha_environment(monkeypatch)
    return cluster_factory(lock_timeout=30, lease_ms=LEASE_MS)


def replica_logs(c):
    return {p: wsfstest.read_log(p, 10**6)
            for p in sorted(glob.glob(os.path.join(c.dir, "logs",
                                                   "lockd-r*.log")))}


def test_active_replica_killed_during_writes(ha_cluster):
    c = ha_cluster
    ws = {n: Reader(c.worker(n, "append", f"ws/r{n}", f"node{n}",
                             "--duration", 60, "--interval", 0.005))
          for n in (1, 2, 3)}
    for w in ws.values():
        w.wait("ok", count=20)
    st = c.script("status").stdout
    assert "active" in st and "standby" in st, st
    t_kill = time.monotonic()
    c.kill_lockd()			# the active replica
    # Writes resume on every node, within the etcd TTL and the grace.
    for n, w in ws.items():
        w.wait("ok", after=t_kill + 0.5, count=20,
               timeout=LEASE_MS / 1000 * 2.5 + 10)
    # The standby took over with the next epoch; the nodes are there.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        st_after = c.script("status", check=False).stdout
        if "epoch 2" in st_after and st_after.count("connected") == 0 and \
                st_after.count(" yes ") >= 3:
            break
        time.sleep(0.2)
    assert "epoch 2" in st_after and st_after.count(" yes ") >= 3, st_after
    for n, w in ws.items():
        assert w.stop() == 0, f"node{n} writer failed: {w.get()[-3:]}"
        assert w.get("err") == []
    for n, w in ws.items():
        check_file(c, f"ws/r{n}", oks(w, f"node{n}"))
    c.wait_sessions(20)
    logs = replica_logs(c)
    assert any("reclaiming" in t for t in logs.values()), logs
    # No node lost a lock: a failover is a restart to them (cluster.c
    # logs "node N lost lock KEY" otherwise).
    for n in (1, 2, 3):
        log = wsfstest.read_log(os.path.join(c.dir, "logs", f"node{n}.log"),
                                10**6)
        assert " lost lock " not in log, log[-3000:]
    print(f"status before the kill:\n{st}")

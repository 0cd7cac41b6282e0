"""Fixtures of the cluster tests: clusters of wsfs nodes in network
namespaces around one wslockd (scripts/cluster), always taken down again,
also when the test fails."""
import os
import shutil

import pytest

import clusterlib


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "storage(kind): this test's clusters run on that "
        "storage (local or gluster) whatever WSFS_STORAGE says")


@pytest.fixture(scope="session")
def cluster_env():
    """Skip, with the reason, where a cluster cannot run; run the session
    on copies of the programs. A program missing from the build fails."""
    clusterlib.wsfstest.require_built(*(
        os.path.join(clusterlib.wsfstest.BUILDDIR, p)
        for p in clusterlib.PROGRAMS))
    reason = clusterlib.environment_problem()
    if reason:
        pytest.skip(reason)
    d = clusterlib.snapshot_binaries()
    try:
        yield
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cluster_factory(cluster_env, request):
    """c = cluster_factory(nodes=3, lock_timeout=10, lease_ms=4000): a
    cluster that is up. All are taken down after the test; the test fails
    if one cannot be taken down or a daemon logged a sanitizer report.
    SOURCE is the storage=... asked for, else the test's storage marker,
    else WSFS_STORAGE (local by default)."""
    made = []
    mark = request.node.get_closest_marker("storage")

    def make(locking=True, **kw):
        if mark and not kw.get("storage"):
            kw["storage"] = mark.args[0]
        if (kw.get("storage") or clusterlib.STORAGE) == "gluster":
            reason = clusterlib.gluster_problem()
            if reason:
                pytest.skip(reason)
        c = clusterlib.Cluster(**kw)
        made.append(c)
        c.up()
        if locking:
            require_locking(c)
        return c

    yield make
    problems = []
    for c in made:
        try:
            # Shown by pytest only for a failed test.
            print(f"=== cluster {c.name} logs\n{c.logs()}")
            err = c.down()
            if err:
                problems.append(err)
            bad = c.sanitizer_reports()
            if bad:
                problems.append(f"sanitizer reports in {bad}:\n{c.logs()}")
        finally:
            c.cleanup()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def require_locking(c):
    """Cluster locking is on: every node must hold a session."""
    c.wait_sessions()


@pytest.fixture
def cluster(cluster_factory):
    """Three nodes with cluster locking, lock_timeout 10 s, lease 4 s."""
    return cluster_factory()

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


class SharedStorage:
    """The session's GlusterFS volume, started when a test first wants
    it and stopped at the end of the session."""

    def __init__(self):
        self.storage = None
        self.error = None

    def get(self):
        if self.error:
            pytest.fail(f"the session's GlusterFS storage did not come "
                        f"up:\n{self.error}", pytrace=False)
        if self.storage is None:
            s = clusterlib.Storage()
            self.storage = s
            try:
                s.up()
            except (clusterlib.ClusterError, OSError) as e:
                self.error = str(e)
                raise
        return self.storage

    def close(self):
        s = self.storage
        if s is None:
            return None
        try:
            return s.down()
        finally:
            s.cleanup()


@pytest.fixture(scope="session")
def shared_storage(cluster_env):
    """One GlusterFS volume for every cluster of the session that runs
    on gluster storage without asking for its own; the session fails if
    it cannot be stopped."""
    shared = SharedStorage()
    yield shared
    err = shared.close()
    if err:
        pytest.fail(err, pytrace=False)


@pytest.fixture
def cluster_factory(cluster_env, request):
    """c = cluster_factory(nodes=3, lock_timeout=10, lease_ms=4000): a
    cluster that is up. All are taken down after the test; the test fails
    if one cannot be taken down or a daemon logged a sanitizer report.
    SOURCE is the storage=... asked for, else the test's storage marker,
    else WSFS_STORAGE (local by default). On gluster the cluster uses the
    session's volume (its own directory there), unless own_storage=True
    asks for a volume of its own (a test that kills bricks or looks at
    the storage's namespaces)."""
    made = []
    mark = request.node.get_closest_marker("storage")

    def make(locking=True, own_storage=False, **kw):
        if mark and not kw.get("storage"):
            kw["storage"] = mark.args[0]
        if (kw.get("storage") or clusterlib.STORAGE) == "gluster":
            reason = clusterlib.gluster_problem()
            if reason:
                pytest.skip(reason)
            if not own_storage:
                kw["shared"] = request.getfixturevalue(
                    "shared_storage").get()
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

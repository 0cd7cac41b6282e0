"""pytest fixtures shared by every suite: wsfs mounts, a native directory on
the same filesystem as SOURCE to compare against, and the environment check
that skips mount tests, with the reason, where FUSE cannot run."""
import os
import shutil
import sys

import pytest

# The one sys.path edit of the suites: tests/ holds wsfstest.py. A suite's
# own helper (scratchlib, clusterlib, ...) sits beside its tests, where
# pytest's default import mode finds it.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wsfstest  # noqa: E402
from wsfstest import CANARY_OUTSIDE, CANARY_WS2  # noqa: E402


@pytest.fixture(scope="session")
def fuse_env():
    """Skip (with the reason) when FUSE mounts cannot run here."""
    reason = wsfstest.fuse_available()
    if reason:
        pytest.skip(reason)


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                   "runtime error:", "ThreadSanitizer")


def _daemon_problem(m, status):
    """Why the daemon's end is a failure, or None: a non-zero exit (a crash,
    or a sanitizer abort) or a sanitizer report in its log."""
    log = m.log() if os.path.exists(m.logpath) else ""
    if status not in (0, None):
        return f"wsfs exited with status {status} after unmount; log:\n{log}"
    if any(s in log for s in SANITIZER_MARKS):
        return f"sanitizer report in the wsfs log:\n{log}"
    return None


def _finish(m, request):
    """Stop a mount and fail the test if the daemon did not end cleanly."""
    problem = _daemon_problem(m, m.stop())
    if problem:
        pytest.fail(problem, pytrace=False)


class _Factory:
    def __init__(self):
        self.mounts = []

    def __call__(self, **kw):
        m = wsfstest.Mount(keep_base=True, **kw)
        self.mounts.append(m)
        m.start()
        return m


@pytest.fixture
def mount_factory(fuse_env, request):
    """Start extra mounts with options: m = mount_factory(opts={...}).
    All are unmounted and their temp dirs removed after the test."""
    f = _Factory()
    yield f
    failures = []
    for m in reversed(f.mounts):
        try:
            problem = _daemon_problem(m, m.stop())
            if problem:
                failures.append(problem)
        except wsfstest.MountError as e:
            failures.append(str(e))
        finally:
            if m.base and wsfstest.mountinfo(m.mnt) is None:
                shutil.rmtree(m.base, ignore_errors=True)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)


@pytest.fixture
def mount(fuse_env, request):
    """The default mount: SOURCE with workspaces ws1 and ws2, a canary file
    outside SOURCE (m.canary_outside) and one in ws2 (m.canary_ws2)."""
    m = wsfstest.Mount(workspaces=("ws1", "ws2"), keep_base=True)
    base = wsfstest.make_base()
    m.base = base
    outside = os.path.join(base, "outside")
    os.mkdir(outside)
    m.canary_outside = os.path.join(outside, "canary")
    with open(m.canary_outside, "wb") as f:
        f.write(CANARY_OUTSIDE)
    src = os.path.join(base, "src")
    os.makedirs(os.path.join(src, "ws2"))
    m.canary_ws2_src = os.path.join(src, "ws2", "canary")
    with open(m.canary_ws2_src, "wb") as f:
        f.write(CANARY_WS2)
    try:
        m.start()
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    m.canary_ws2 = m.path("ws2", "canary")
    try:
        yield m
    finally:
        try:
            _finish(m, request)
        finally:
            if wsfstest.mountinfo(m.mnt) is None:
                # The canaries must have survived whatever the test did.
                with open(m.canary_outside, "rb") as f:
                    assert f.read() == CANARY_OUTSIDE, "outside canary changed"
                shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def native(tmp_path_factory):
    """A native directory on the filesystem that backs the mounts (SOURCE
    lives in a temp dir too), readable by the unprivileged test user."""
    base = wsfstest.make_base("wsfs-native-")
    d = os.path.join(base, "n")
    os.mkdir(d)
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def ws(mount):
    """A fresh directory inside workspace ws1, through the mount."""
    d = mount.path("ws1", "t")
    os.mkdir(d)
    return d


@pytest.fixture
def pair(mount, native):
    """(native_dir, mount_dir): run the same scenario on both and compare."""
    d = mount.path("ws1", "t")
    os.mkdir(d)
    return native, d

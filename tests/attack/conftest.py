"""Fixtures of the attack suite: a canary tree (attacklib.Layout) with the
filesystem under test mounted over its SOURCE, and the per-class summary
printed at the end of the run and written to last-run.txt.

The filesystem under test is wsfs (through tests/wsfstest.py). Setting
ATTACK_FS=bindfs runs the same attacks against bindfs instead: bindfs
resolves paths as strings on the backing store, so the suite must find
escapes there; that is how we know the attacks can fail.
"""
import os
import subprocess
import time

import pytest

import attacklib
import wsfstest

HERE = os.path.dirname(os.path.abspath(__file__))

FS = os.environ.get("ATTACK_FS", "wsfs")


class BindfsMount:
    """bindfs over SOURCE: the negative control (ATTACK_FS=bindfs)."""

    def __init__(self, source, mnt, base):
        self.source, self.mnt, self.base = source, mnt, base
        self.logpath = os.path.join(base, "bindfs.log")
        self.proc = None

    def start(self):
        self.logf = open(self.logpath, "ab")
        self.proc = subprocess.Popen(
            ["bindfs", "-f", "-o", "allow_other,dev,suid",
             self.source, self.mnt], stdout=self.logf,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not attacklib.is_mountpoint(self.mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("bindfs did not mount: "
                                   + wsfstest.read_log(self.logpath))
            time.sleep(0.02)
        return self

    def stop(self):
        wsfstest.unmount(self.mnt)
        wsfstest.reap(self.proc, 10)
        self.logf.close()
        return 0

    def log(self):
        return wsfstest.read_log(self.logpath)


class AttackMount:
    """The mount under attack: .mnt, .source, .pid of the daemon."""

    def __init__(self, layout, opts=None):
        self.layout = layout
        self.mnt = layout.mnt
        self.source = layout.src
        cwd = os.getcwd()
        # The daemon's cwd is the canary tree's base, so that a magic
        # link to /proc/PID/cwd would land next to canaries (class 4).
        os.chdir(layout.base)
        try:
            if FS == "bindfs":
                self.m = BindfsMount(layout.src, layout.mnt, layout.base)
            else:
                self.m = wsfstest.Mount(workspaces=(), opts=opts,
                                        base=layout.base, source=layout.src,
                                        keep_base=True)
            self.m.start()
        finally:
            os.chdir(cwd)
        self.pid = self.m.proc.pid
        self.dev = os.stat(self.mnt).st_dev

    def log(self):
        return self.m.log()

    def stop(self):
        return self.m.stop()


@pytest.fixture(scope="session")
def attack_env():
    reason = wsfstest.fuse_available()
    if reason:
        pytest.skip(reason)
    if FS == "bindfs" and not os.path.exists("/usr/bin/bindfs"):
        pytest.skip("ATTACK_FS=bindfs but bindfs is not installed")
    attacklib.ensure_fusectl()


@pytest.fixture
def layout(attack_env):
    L = attacklib.Layout()
    try:
        yield L
    finally:
        L.cleanup()


def _start(layout, opts=None):
    m = AttackMount(layout, opts)
    layout.baseline()
    return m


def _leaked_fds(dev):
    """fds of this process still open on the mount: a leak keeps the FUSE
    connection alive after the unmount (the daemon then cannot exit), so
    the suite closes them and says so."""
    out = []
    for n in os.listdir("/proc/self/fd"):
        try:
            if os.fstat(int(n)).st_dev == dev:
                out.append((int(n), os.readlink(f"/proc/self/fd/{n}")))
        except OSError:
            pass
    return out


def _finish(m):
    status = None
    leaked = _leaked_fds(m.dev)
    for fd, _ in leaked:
        os.close(fd)
    if leaked:
        try:
            m.stop()
        finally:
            pytest.fail(f"the test leaked fds on the mount: {leaked}",
                        pytrace=False)
    try:
        status = m.stop()
    except wsfstest.MountError as e:
        pytest.fail(f"unmount failed: {e}; log:\n{m.log()[-4000:]}",
                    pytrace=False)
    if status not in (0, None):
        pytest.fail(f"{FS} exited with status {status}; log:\n{m.log()}",
                    pytrace=False)


@pytest.fixture
def amount(layout):
    """The filesystem under test mounted over layout.src at layout.mnt,
    with the workspace "ws" and the sibling workspace in place and the
    canary baseline taken."""
    m = _start(layout)
    try:
        yield m
    finally:
        _finish(m)


@pytest.fixture
def amount_factory(layout):
    """For tests that must prepare the backing store before mounting:
    m = amount_factory(opts)."""
    started = []

    def start(opts=None):
        m = _start(layout, opts)
        started.append(m)
        return m
    yield start
    for m in started:
        _finish(m)


def pytest_terminal_summary(terminalreporter):
    if not any(s.iterations for s in attacklib.STATS.values()):
        return
    table = attacklib.summary_table()
    if FS != "wsfs":
        table = f"(filesystem under test: {FS})\n" + table
    terminalreporter.write_sep("=", "attack summary")
    terminalreporter.write_line(table)
    out = os.environ.get("ATTACK_REPORT") or os.path.join(
        os.environ.get("WSFS_BUILDDIR") or os.path.dirname(
            os.path.dirname(HERE)), "tests", "attack", "last-run.txt")
    try:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            f.write(table + "\n")
    except OSError as e:
        terminalreporter.write_line(f"cannot write {out}: {e}")

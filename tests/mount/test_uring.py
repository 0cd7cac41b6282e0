"""The io_uring data path and its fallback: with io_uring disabled by the
kernel.io_uring_disabled sysctl, wsfs says so in exactly one log line and
serves reads, writes and fsync with plain syscalls; -o uring=off does the
same by configuration."""
import concurrent.futures
import mmap
import os
import re
import subprocess

import pytest

import wsfstest

SYSCTL = "/proc/sys/kernel/io_uring_disabled"


def exercise(m):
    """read, write, fsync and a larger transfer through the mount."""
    p = m.path("ws1", "f")
    data = os.urandom(5 << 20)
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        assert os.write(fd, data) == len(data)
        os.fsync(fd)
        os.fdatasync(fd)
        assert os.pread(fd, len(data), 0) == data
        os.pwrite(fd, b"tail", len(data))
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(m.src("ws1", "f"), "rb") as f:
        assert f.read() == data + b"tail"
    with open(p, "rb") as f:
        assert f.read() == data + b"tail"


def uring_lines(log):
    return [line for line in log.splitlines()
            if re.search(r"io_uring", line, re.I)]


@pytest.fixture
def uring_disabled(fuse_env):
    """kernel.io_uring_disabled=2 for the test; the old value is restored
    even when the test fails."""
    try:
        with open(SYSCTL) as f:
            old = f.read().strip()
    except OSError as e:
        pytest.skip(f"no {SYSCTL}: {e.strerror}")
    try:
        with open(SYSCTL, "w") as f:
            f.write("2")
    except OSError as e:
        pytest.skip(f"cannot write {SYSCTL}: {e.strerror}")
    try:
        yield
    finally:
        with open(SYSCTL, "w") as f:
            f.write(old)


def test_fallback_when_io_uring_disabled(uring_disabled, mount_factory):
    m = mount_factory()
    exercise(m)
    lines = uring_lines(m.log())
    assert len(lines) == 1, lines
    assert re.search(r"unavailable|disabled|not available", lines[0], re.I)
    assert re.search(r"fall", lines[0], re.I), lines[0]


def test_uring_off_by_option(mount_factory):
    m = mount_factory(opts={"uring": "off"})
    exercise(m)
    lines = uring_lines(m.log())
    assert len(lines) <= 1, lines
    assert not any(re.search(r"unavailable|fall", x, re.I) for x in lines)


def test_uring_on_by_default(mount_factory):
    """With io_uring allowed no fallback is logged, and data flows."""
    try:
        with open(SYSCTL) as f:
            if f.read().strip() != "0":
                pytest.skip("io_uring is disabled on this machine")
    except OSError:
        pass
    m = mount_factory()
    exercise(m)
    assert not any(re.search(r"unavailable|fall", x, re.I)
                   for x in uring_lines(m.log())), m.log()


def test_submit_refused(fuse_env, tmp_path):
    """io_uring_submit fails now and then without taking the queued
    requests (the kernel's -EAGAIN): every request is still answered once,
    with the right data, and the daemon lives. An LD_PRELOAD shim
    (uring_refuse.c) refuses every third submit."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "uring_refuse.c")
    so = str(tmp_path / "uring_refuse.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", so, src, "-ldl"],
                   check=True)
    wrapper = ["env", f"LD_PRELOAD={so}", "WSFS_URING_REFUSE=3",
               "ASAN_OPTIONS=verify_asan_link_order=0:"
               + os.environ.get("ASAN_OPTIONS", "")]
    with wsfstest.Mount(wrapper=wrapper) as m:
        exercise(m)
        chunk = 64 << 10
        files = {}
        for n in range(4):
            files[n] = os.urandom(64 * chunk)

        def worker(n):
            p = m.path("ws1", f"w{n}")
            with open(p, "wb") as f:
                for off in range(0, len(files[n]), chunk):
                    f.write(files[n][off:off + chunk])
                f.flush()
                os.fsync(f.fileno())
            fd = os.open(p, os.O_RDONLY | os.O_DIRECT)
            try:
                got = bytearray()
                buf = mmap.mmap(-1, chunk)
                for off in range(0, len(files[n]), chunk):
                    k = os.preadv(fd, [buf], off)
                    got += buf[:k]
            finally:
                os.close(fd)
            assert bytes(got) == files[n], f"w{n}: data differs"

        with concurrent.futures.ThreadPoolExecutor(4) as ex:
            for r in [ex.submit(worker, n) for n in files]:
                r.result()
        assert m.proc.poll() is None, "wsfs died"
        assert "uring_refuse: refusing" in m.log(), \
            f"the shim was not loaded; log:\n{m.log()}"

"""libwslock from many threads, as wsfs will use it: one event-loop thread
plus worker threads in blocking waits (some timing out and cancelled),
asynchronous locks released from callbacks, in two processes at once
(over TCP and the Unix socket) checking one shared critical section."""
import os
import subprocess

import pytest

from lockdlib import BUILDDIR

MTCLIENT = os.path.join(BUILDDIR, "tests", "lockd", "mtclient")


def test_threads_exclude_each_other(env, tmp_path):
    if not os.access(MTCLIENT, os.X_OK):
        pytest.skip(f"{MTCLIENT} not built")
    srv = env.server(lease_ms=2000)
    shm = str(tmp_path / "shared")
    procs = [subprocess.Popen([MTCLIENT, srv.unix, "8", "3", shm],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True),
             subprocess.Popen([MTCLIENT, srv.tcp, srv.key, "8", "3", shm],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)]
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        ok, cycles, timeouts, asyncs = out.split()
        assert ok == "ok"
        assert int(cycles) > 50 and int(timeouts) > 0 and int(asyncs) > 0, \
            out
        assert "Sanitizer" not in err and "runtime error" not in err, err

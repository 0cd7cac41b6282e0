"""Fixtures of the wslockd suite: an Env that owns every wslockd and
client process a test starts, and stops them whatever the outcome."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lockdlib  # noqa: E402


@pytest.fixture
def env(tmp_path):
    for p in (lockdlib.WSLOCKD, lockdlib.LOCKCLIENT):
        if not os.access(p, os.X_OK):
            pytest.skip(f"{p} not built (run make check or make "
                        "tests/lockd/lockclient)")
    e = lockdlib.Env(tmp_path)
    failed = []
    try:
        yield e
    finally:
        for st, s in zip(e.cleanup(), e.servers):
            # A crash or a sanitizer report makes the exit status non-zero.
            if st not in (0, None):
                failed.append(f"wslockd exited {st}:\n{s.log()[-4000:]}")
    # Whatever a client printed besides its protocol: sanitizer reports.
    if any("Sanitizer" in n or "runtime error" in n for n in e.noise):
        failed.append("client output:\n" + "\n".join(e.noise[:60]))
    if failed:
        pytest.fail("\n".join(failed), pytrace=False)

"""Fixtures for the scratch tests: a fresh scratch base with a canary tree
beside it (outside the base), removed afterwards even if mounts were left
inside by a failing test."""
import os
import shutil
import tempfile

import pytest

import scratchlib


class Env:
    def __init__(self, top):
        self.top = top
        self.base = os.path.join(top, "scratch")
        self.canary = os.path.join(top, "canary")
        self.out = os.path.join(top, "out")
        os.mkdir(self.out)
        scratchlib.make_canary(self.canary)


@pytest.fixture
def env():
    scratchlib.wsfstest.require_built(scratchlib.WSCTL, scratchlib.WSFS)
    if os.geteuid() != 0:
        pytest.skip("scratch tests create root-owned bases: run as root")
    top = tempfile.mkdtemp(prefix="wsfs-scratch-", dir="/var/tmp")
    os.chmod(top, 0o755)
    try:
        yield Env(top)
    finally:
        scratchlib.umount_all(top)
        if not scratchlib.mounts_under(top):
            shutil.rmtree(top, ignore_errors=True)

"""Fixtures of the wslockd suite: an Env that owns every wslockd and
client process a test starts, and stops them whatever the outcome."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import lockdlib  # noqa: E402


@pytest.fixture
def env(tmp_path):
    yield from lockdlib.owned_env(tmp_path, (lockdlib.WSLOCKD,
                                             lockdlib.LOCKCLIENT))

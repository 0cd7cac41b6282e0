"""Fixtures of the wslockd suite: an Env that owns every wslockd and
client process a test starts, and stops them whatever the outcome."""
import pytest

import lockdlib


@pytest.fixture
def env(tmp_path):
    yield from lockdlib.owned_env(tmp_path, (lockdlib.WSLOCKD,
                                             lockdlib.LOCKCLIENT))

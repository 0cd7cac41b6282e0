"""Every suite of tests/ in one pytest session (issue 15): no two test
modules or helpers share a name, and no test imports a conftest by name,
so `pytest tests/` collects them all, as each directory alone does."""
import os
import subprocess
import sys

import wsfstest


def test_one_session_collects_every_suite():
    tests = os.path.join(wsfstest.SRCDIR, "tests")
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only",
                        "-q", "-p", "no:cacheprovider", tests],
                       capture_output=True, text=True, timeout=300,
                       cwd=wsfstest.BUILDDIR)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    last = p.stdout.strip().splitlines()[-1]
    assert "collected" in last and "error" not in last, last
    suites = {os.path.basename(os.path.dirname(line.split("::")[0]))
              for line in p.stdout.splitlines() if "::" in line}
    want = {d for d in os.listdir(tests)
            if os.path.isdir(os.path.join(tests, d)) and
            any(f.startswith("test_") and f.endswith(".py")
                for f in os.listdir(os.path.join(tests, d)))}
    assert suites == want, (suites, want)

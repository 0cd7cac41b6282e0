"""wsfs as admins run it: through `mount -t fuse.wsfs` and through an fstab
line (`mount -T FILE`), then a clean shutdown on SIGTERM (the mount is gone
and the daemon exits 0). Each mount happens in a private mount namespace
(see mountns.py), so nothing is installed on or leaks to the host."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import wsfstest

WSFS = wsfstest.WSFS
WSCTL = wsfstest.WSCTL
HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "mountns.py")


@pytest.fixture(params=["shared"])
def tree(tmp_path, request):
    """SOURCE and MOUNTPOINT for a mount of kind request.param: a shared
    SOURCE with two admin workspaces, or a scratch base with two scratch
    workspaces. Returns (source, mountpoint, expected listing, kind)."""
    wsfstest.require_built(WSFS, WSCTL)
    for tool in ("mount", "/sbin/mount.fuse3"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if not os.path.exists("/dev/fuse"):
        pytest.skip("/dev/fuse is missing")
    os.chmod(tmp_path, 0o755)
    src = tmp_path / "src"
    mnt = tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    if request.param == "scratch":
        ids = []
        for lifetime in ("task", "conversation"):
            p = subprocess.run([WSCTL, "scratch", "create", "--base",
                                str(src), "--lifetime", lifetime],
                               check=True, capture_output=True, text=True)
            ids.append(p.stdout.split()[0])
        return str(src), str(mnt), sorted(ids), "scratch"
    subprocess.run([WSCTL, "workspace", "create", f"{src}/team",
                    "--owner", "nobody"], check=True, capture_output=True)
    subprocess.run([WSCTL, "workspace", "create", f"{src}/pub"], check=True,
                   capture_output=True)
    return str(src), str(mnt), ["pub", "team"], "shared"


def helper(mnt, *args):
    """Run mountns.py. A daemonized wsfs has no stderr, so sanitizer
    reports of a sanitizer build go to files beside the mount point and are
    returned under "sanitizer"."""
    logdir = os.path.dirname(mnt)
    env = dict(os.environ)
    for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
        opts = [o for o in env.get(var, "").split(":") if o]
        env[var] = ":".join(opts + [f"log_path={logdir}/sanitizer"])
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(wsfstest.__file__))
    p = subprocess.run([sys.executable, HELPER, WSFS, mnt, *args],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    out["sanitizer"] = "".join(
        open(os.path.join(logdir, f)).read() for f in os.listdir(logdir)
        if f.startswith("sanitizer."))
    return out


def run(mnt, *margs):
    return helper(mnt, "--", *margs)


def check_clean_run(out, src, mnt, listing):
    """Mounted with the fixed safety options, listed the workspaces, and
    stopped cleanly on SIGTERM."""
    assert out["mount_status"] == 0, out["mount_stderr"]
    assert "error" not in out, out
    fields = out["mounted"]
    assert fields is not None, out
    assert fields[0] == src and fields[2] == "fuse.wsfs"
    opts = fields[3].split(",")
    assert "nosuid" in opts and "nodev" in opts, opts
    assert "allow_other" in opts and "default_permissions" in opts, opts
    # The workspaces, never the metadata directory.
    assert out["listing"] == listing
    assert out["daemon"] is not None, "no wsfs process serves the mount"
    assert out["mounted_after"] is None, "SIGTERM left the mount in place"
    assert out["sanitizer"] == "", out["sanitizer"]
    assert out["exit"] == 0, f"wsfs exited with {out['exit']} on SIGTERM"


@pytest.mark.parametrize("tree", ["shared", "scratch"], indirect=True)
def test_mount_t_fuse_wsfs(tree):
    src, mnt, listing, kind = tree
    out = run(mnt, "-t", "fuse.wsfs", "-o", f"kind={kind}", src, mnt)
    check_clean_run(out, src, mnt, listing)


def test_fstab_line(tree, tmp_path):
    src, mnt, listing, kind = tree
    fstab = tmp_path / "fstab"
    # Options that mount(8), systemd and the admin add must not upset wsfs.
    fstab.write_text(
        "# a temporary fstab\n"
        f"{src}  {mnt}  fuse.wsfs  kind=shared,_netdev,nofail,noatime,"
        f"x-systemd.requires-mounts-for={src},attr_timeout=2  0 0\n")
    out = run(mnt, "-T", str(fstab), mnt)
    check_clean_run(out, src, mnt, listing)
    assert "noatime" in out["mounted"][3].split(",")


def test_bad_option_refused(tree):
    src, mnt, listing, kind = tree
    out = run(mnt, "-t", "fuse.wsfs", "-o", "kind=shared,no_such_option=1",
              src, mnt)
    assert out["mount_status"] != 0
    assert out["mounted"] is None
    assert "no_such_option" in out["mount_stderr"]


def test_sigterm_releases_cluster_locks(tree, lockd):
    """A kind=shared mount on a real wslockd: a write takes locks, SIGTERM
    ends the node's session cleanly (not by lease expiry) and exits 0."""
    src, mnt, listing, kind = tree
    sock, logpath = lockd
    probe = f"{WSCTL} locks --json --lockd unix:{sock}"
    out = helper(mnt, "--write", "pub/file", "--probe", probe, "--", "-t",
                 "fuse.wsfs", "-o", f"kind=shared,lockd=unix:{sock}", src,
                 mnt)
    check_clean_run(out, src, mnt, listing)
    assert out["write"] == "ok", out
    with open(os.path.join(src, "pub", "file")) as f:
        assert f.read() == "written through the mount\n"
    text = open(logpath).read()
    assert "ended by the client" in text, text
    assert "lease expired" not in text, text
    # While mounted, the node held (cached) the locks of its write.
    held = [r for r in json.loads(out["probe"]) if r["type"] == "holder"]
    assert held, out["probe"]
    q = subprocess.run([WSCTL, "locks", "--lockd", f"unix:{sock}",
                        "--json"], capture_output=True, text=True,
                       timeout=30)
    assert q.returncode == 0, q.stderr
    # wsfs's session is gone at once, not left to expire with its lease:
    # no session, holder or waiter remains (the query's own session is not
    # listed).
    assert json.loads(q.stdout) == [], q.stdout


@pytest.fixture
def lockd(tmp_path):
    """A wslockd on a Unix socket in tmp_path; yields (socket, log path)."""
    wslockd = wsfstest.WSLOCKD
    wsfstest.require_built(wslockd)
    sock = tmp_path / "lockd.sock"
    logpath = tmp_path / "lockd.log"
    log = open(logpath, "w+")
    d = subprocess.Popen([wslockd, "-f", "-v", "--listen", f"unix:{sock}",
                          "--state-dir", str(tmp_path / "state")],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            assert d.poll() is None, open(logpath).read()
            time.sleep(0.05)
        yield sock, logpath
    finally:
        d.terminate()
        wsfstest.reap(d)
        log.close()


def test_locks_json_escapes_keys(lockd):
    """Lock keys are bytes: wsctl locks --json escapes a quote, a newline
    and a byte that is not UTF-8 so the output parses, and the key comes
    back whole through os.fsencode (issue 12, finding 10)."""
    sock, _ = lockd
    key = b'k"\\q\nr\xff\xc3\xa9'
    probe = [WSCTL, "locks", "--json", "--lockd", f"unix:{sock}"]
    p = subprocess.run([WSCTL, "lock", "--lockd", f"unix:{sock}", key, "--",
                        *probe], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout.decode("utf-8"))
    keys = [os.fsencode(r["key"]) for r in rows if r["type"] == "holder"]
    assert keys == [key], rows


@pytest.mark.parametrize("tree,unit", [("shared", "workspaces.mount"),
                                       ("scratch", "scratch.mount")],
                         indirect=["tree"])
def test_example_mount_units_options_work(tree, tmp_path, lockd, unit):
    """The example units' Type= and Options=, as an fstab line over a test
    SOURCE (the lock server replaced by a local one): they mount."""
    src, mnt, listing, kind = tree
    sock, _ = lockd
    text = open(os.path.join(wsfstest.SRCDIR, "scripts", "systemd",
                             unit)).read()
    fields = dict(line.split("=", 1) for line in text.splitlines()
                  if "=" in line and not line.startswith("#"))
    key = tmp_path / "cluster.key"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    opts = ",".join(
        f"lockd=unix:{sock}" if o.startswith("lockd=") else
        f"key={key}" if o.startswith("key=") else o
        for o in fields["Options"].split(","))
    fstab = tmp_path / "fstab"
    fstab.write_text(f"{src} {mnt} {fields['Type']} {opts} 0 0\n")
    out = run(mnt, "-T", str(fstab), mnt)
    check_clean_run(out, src, mnt, listing)

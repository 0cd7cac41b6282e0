"""wsctl status and the Prometheus endpoint of wsfs: they answer, only to
root, and their counters move when operations happen (issue 7, item 5)."""
import json
import os
import re
import shutil
import stat
import subprocess
import urllib.request

import wsfstest

WSCTL = wsfstest.WSCTL


def status(mnt, *args, **kw):
    return subprocess.run([WSCTL, "status", mnt, *args], capture_output=True,
                          text=True, timeout=20, **kw)


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def metric(text, name, labels=""):
    m = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    assert m, f"{name}{labels} missing"
    return float(m.group(1))


def test_status_text_and_json_move(mount_factory):
    # Writes come to wsfs, to be counted, only without kernel passthrough.
    m = mount_factory(opts={"passthrough": "off"})
    r = status(m.mnt)
    assert r.returncode == 0, r.stderr
    assert "kind shared" in r.stdout and "ws1" in r.stdout
    assert "embedded" in r.stdout
    before = json.loads(status(m.mnt, "--json").stdout)
    assert before["kind"] == "shared"
    assert set(before["workspaces"]) == {"ws1", "ws2"}
    assert before["source"] == os.path.realpath(m.src())
    with open(m.path("ws1", "f"), "w") as f:
        f.write("x" * 1000)
    for i in range(5):
        os.stat(m.path("ws1", "f"))
        assert not os.path.exists(m.path("ws1", f"missing{i}"))
    after = json.loads(status(m.mnt, "--json").stdout)
    ops = after["operations"]
    assert ops["create"]["count"] >= before["operations"].get(
        "create", {"count": 0})["count"] + 1
    assert ops["write"]["count"] >= 1
    assert ops["lookup"]["errors"] >= 5
    assert ops["write"]["p99_us"] >= ops["write"]["p50_us"] > 0


def test_status_json_escapes_names(mount_factory):
    """Workspace names are any bytes but '/' and NUL: a quote, a newline
    or a byte that is not UTF-8 must not break the JSON, and the name
    comes back whole (\\udcXX for such bytes, as os.fsdecode gives)."""
    m = mount_factory()
    odd = [b'q"uo\\te', b"new\nline\t", b"\xffbad\xc3", b"caf\xc3\xa9"]
    for name in odd:
        os.mkdir(os.path.join(os.fsencode(m.src()), name))
    r = status(m.mnt, "--json")
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert sorted(got["workspaces"]) == sorted(
        ["ws1", "ws2"] + [os.fsdecode(n) for n in odd])
    assert got["workspace_count"] == 6
    assert got["mountpoint"] == os.path.realpath(m.mnt)


def test_sockets_are_private(mount_factory):
    """The control socket and a Unix metrics socket are mode 0600 from
    the start, although wsfs runs with umask 0 (issue 12, finding 10)."""
    base = wsfstest.make_base("wsfs-sock-")
    try:
        ctl = os.path.join(base, "ctl.sock")
        met = os.path.join(base, "metrics.sock")
        m = mount_factory(opts={"control_socket": ctl,
                                "metrics": f"unix:{met}"})
        for path in (ctl, met):
            st = os.stat(path)
            assert stat.S_ISSOCK(st.st_mode)
            assert stat.S_IMODE(st.st_mode) == 0o600, \
                f"{path} mode {stat.S_IMODE(st.st_mode):04o}"
        r = status(m.mnt, "--socket", ctl)
        assert r.returncode == 0 and "kind shared" in r.stdout, r.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_status_refused_to_non_root_and_unknown_mount(mount_factory):
    m = mount_factory()
    r = wsfstest.as_user(1000, 1000, [WSCTL, "status", m.mnt])
    assert r.returncode == 1
    assert "control socket" in (r.stderr or r.stdout)
    base = wsfstest.make_base()
    try:
        r = status(base)
        assert r.returncode == 1 and "no wsfs answers" in r.stderr
    finally:
        os.rmdir(base)
    r = subprocess.run([WSCTL, "status"], capture_output=True, text=True)
    assert r.returncode == 2 and "--help" in r.stderr


def test_metrics_endpoint(mount_factory):
    port = wsfstest.free_port()
    m = mount_factory(opts={"metrics": f"127.0.0.1:{port}"})
    text = scrape(port)
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert re.match(r'^[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})?'
                            r' [-+0-9.e]+$', line), line
    assert "# TYPE wsfs_operations_total counter" in text
    before = metric(text, "wsfs_operations_total", '{op="mkdir"}')
    os.mkdir(m.path("ws1", "d"))
    with open(m.path("ws1", "d", "f"), "w") as f:
        f.write("y")
    text = scrape(port)
    assert metric(text, "wsfs_operations_total", '{op="mkdir"}') == before + 1
    assert metric(text, "wsfs_workspaces") == 2
    # A device node is refused by the confinement rules, and counted.
    refused = metric(text, "wsfs_confinement_refusals_total")
    r = subprocess.run(["mknod", m.path("ws1", "null"), "c", "1", "3"],
                       capture_output=True)
    assert r.returncode != 0
    text = scrape(port)
    assert metric(text, "wsfs_confinement_refusals_total") == refused + 1
    req = urllib.request.Request(f"http://127.0.0.1:{port}/nothing")
    try:
        urllib.request.urlopen(req, timeout=10)
        assert False, "expected 404"
    except urllib.error.HTTPError as e:
        assert e.code == 404


def test_bad_metrics_address_refused():
    base = wsfstest.make_base()
    try:
        os.makedirs(os.path.join(base, "src", "ws"))
        os.makedirs(os.path.join(base, "mnt"))
        r = wsfstest.run_wsfs(["-f", "-o", "metrics=nonsense:notaport",
                               os.path.join(base, "src"),
                               os.path.join(base, "mnt")])
        assert r.returncode != 0
        assert "metrics" in r.stdout + (r.stderr or "")
    finally:
        subprocess.run(["rm", "-rf", base])

"""Service units, tmpfiles entries, man pages and their installation:
systemd-analyze verify clean, mandoc lint clean, every config key and every
wsctl command documented, and `make install` puts everything in place."""
import os
import pathlib
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import wsfstest

BUILDDIR = wsfstest.BUILDDIR
SRCDIR = wsfstest.SRCDIR
UNITDIR = os.path.join(SRCDIR, "scripts", "systemd")
MANPAGES = ["fs/wsfs.8", "fs/wsfs.conf.5", "tools/wsctl.8"]
UNITS_IN = ["wslockd.service.in", "wsfs-sweep.service.in"]
UNITS = ["wsfs-sweep.timer", "workspaces.mount", "scratch.mount"]


def need(tool):
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed")
    return path


def render_units(dest):
    """The units as `make` renders them, with @sbindir@ pointing at a
    directory of links to the built programs (verify checks ExecStart)."""
    sbin = os.path.join(dest, "sbin")
    os.mkdir(sbin)
    for prog in ("lockd/wslockd", "tools/wsctl", "fs/wsfs"):
        built = os.path.join(BUILDDIR, prog)
        if os.path.exists(built):
            os.symlink(built, os.path.join(sbin, os.path.basename(prog)))
    names = []
    for name in UNITS_IN:
        with open(os.path.join(UNITDIR, name)) as f:
            text = f.read().replace("@sbindir@", sbin)
        assert not re.search(r"@[a-z]+dir@", text), name
        out = os.path.join(dest, name[:-3])
        with open(out, "w") as f:
            f.write(text)
        names.append(out)
    for name in UNITS:
        shutil.copy(os.path.join(UNITDIR, name), dest)
        names.append(os.path.join(dest, name))
    return names


def verify(paths):
    return subprocess.run([need("systemd-analyze"), "verify", "--man=no",
                           *paths], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("unit", [u[:-3] for u in UNITS_IN] + UNITS)
def test_units_verify_clean(tmp_path, unit):
    need("systemd-analyze")
    render_units(str(tmp_path))
    if unit == "wslockd.service":
        # verify checks ExecStart: the program must exist.
        wsfstest.require_built(os.path.join(BUILDDIR, "lockd", "wslockd"))
    p = verify([os.path.join(str(tmp_path), unit)])
    # Unknown keys are only warnings to verify: require silence as well.
    assert p.returncode == 0 and p.stderr == "", p.stderr


def test_verify_would_catch_mistakes(tmp_path):
    """The check above can fail: a misspelt key, a unit name that does not
    match its mount point, and a missing program are all reported."""
    need("systemd-analyze")
    render_units(str(tmp_path))
    text = open(tmp_path / "wsfs-sweep.service").read()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "a.service").write_text(text.replace("ProtectHome=",
                                                "ProtectHomee="))
    (bad / "b.service").write_text(re.sub(r"ExecStart=\S+",
                                          "ExecStart=/nonexistent/wsctl",
                                          text))
    mount = open(os.path.join(UNITDIR, "workspaces.mount")).read()
    (bad / "elsewhere.mount").write_text(mount)
    p = verify([str(bad / "a.service")])
    assert "ProtectHomee" in p.stderr
    for name in ("b.service", "elsewhere.mount"):
        assert verify([str(bad / name)]).returncode != 0, name


def test_wslockd_unit_hardening():
    text = open(os.path.join(UNITDIR, "wslockd.service.in")).read()
    keys = dict(re.findall(r"^(\w+)=(.*)$", text, re.M))
    assert keys["ProtectSystem"] == "strict"
    assert keys["ProtectHome"] == "yes"
    assert keys["NoNewPrivileges"] == "yes"
    assert keys["PrivateTmp"] == "yes"
    assert keys["StateDirectory"] == "wslockd"
    assert keys["RuntimeDirectory"] == "wslockd"
    assert keys["CapabilityBoundingSet"] == ""
    assert keys["RestrictAddressFamilies"] == "AF_UNIX AF_INET AF_INET6"
    assert "-f " in keys["ExecStart"]


def test_security_exposure_is_low(tmp_path):
    """systemd's own score of the sandboxing: 'OK' (below 2.0) or better."""
    need("systemd-analyze")
    paths = render_units(str(tmp_path))
    for unit in (p for p in paths if p.endswith(".service")):
        p = subprocess.run(["systemd-analyze", "security", "--offline=true",
                            unit], capture_output=True, text=True,
                           timeout=120)
        m = re.search(r"Overall exposure level for \S+: ([0-9.]+)",
                      p.stdout + p.stderr)
        if m is None:
            pytest.skip("systemd-analyze security --offline is not "
                        "supported here")
        assert float(m.group(1)) < 2.0, (unit, m.group(0))


def test_tmpfiles_create_scratch_base(tmp_path):
    need("systemd-tmpfiles")
    conf = tmp_path / "etc" / "tmpfiles.d"
    conf.mkdir(parents=True)
    shutil.copy(os.path.join(UNITDIR, "wsfs.tmpfiles"), conf / "wsfs.conf")
    subprocess.run(["systemd-tmpfiles", f"--root={tmp_path}", "--create",
                    "wsfs.conf"], check=True, timeout=60)
    st = os.lstat(tmp_path / "var" / "lib" / "wsfs" / "scratch")
    assert st.st_mode & 0o7777 == 0o755 and st.st_uid == 0


@pytest.mark.parametrize("page", MANPAGES)
def test_man_lint_clean(page):
    mandoc = need("mandoc")
    p = subprocess.run([mandoc, "-T", "lint", "-W", "warning",
                        os.path.join(SRCDIR, page)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout + p.stderr == "", p.stdout
    if shutil.which("groff"):
        p = subprocess.run(["groff", "-w", "all", "-mandoc", "-Tutf8",
                            os.path.join(SRCDIR, page)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stderr == "", p.stderr


def test_man_renders():
    need("man")
    p = subprocess.run(["man", "./fs/wsfs.8"], cwd=SRCDIR,
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="80", MANPAGER="cat",
                                PAGER="cat"))
    assert p.returncode == 0 and p.stderr == "", p.stderr
    for section in ("SYNOPSIS", "DESCRIPTION", "FILES", "SIGNALS",
                    "EXIT STATUS", "EXAMPLES"):
        assert section in p.stdout


def conf_keys():
    with open(os.path.join(SRCDIR, "fs", "conf.c")) as f:
        text = f.read()
    table = text[text.index("conf_keys[] = {"):]
    table = table[:table.index("};")]
    keys = re.findall(r'\{\s*"(\w+)"', table)
    assert len(keys) >= 18
    return keys


@pytest.mark.parametrize("page", ["fs/wsfs.8", "fs/wsfs.conf.5"])
def test_every_config_key_documented(page):
    text = open(os.path.join(SRCDIR, page)).read()
    documented = set(re.findall(r"^\.It Cm (\w+)", text, re.M))
    missing = [k for k in conf_keys() if k not in documented]
    assert missing == [], f"{page} lacks {missing}"


def test_every_wsctl_command_documented():
    wsctl = os.path.join(BUILDDIR, "tools", "wsctl")
    wsfstest.require_built(wsctl)
    out = subprocess.run([wsctl, "--help"], capture_output=True, text=True,
                         timeout=60).stdout
    cmds = re.findall(r"^  (\S+)", out, re.M)
    assert "workspace" in cmds
    text = open(os.path.join(SRCDIR, "tools", "wsctl.8")).read()
    synopsis = text[text.index(".Sh SYNOPSIS"):text.index(".Sh DESCRIPTION")]
    for c in cmds:
        assert re.search(rf"^\.Cm {re.escape(c)}\b", synopsis, re.M), c


def test_make_install(tmp_path):
    """make install puts programs, man pages, units, examples and the
    tmpfiles entry in place, with @sbindir@ substituted."""
    need("make")
    dest = tmp_path / "root"
    p = subprocess.run(["make", "-s", "install", f"DESTDIR={dest}"],
                       cwd=BUILDDIR, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    files = {str(f.relative_to(dest)) for f in dest.rglob("*")
             if f.is_file()}
    wsctl = [f for f in files if f.endswith("sbin/wsctl")]
    assert len(wsctl) == 1, sorted(files)
    prefix = wsctl[0][:-len("sbin/wsctl")]
    for want in ("share/man/man8/wsfs.8", "share/man/man5/wsfs.conf.5",
                 "share/man/man8/wsctl.8", "lib/tmpfiles.d/wsfs.conf",
                 "share/doc/wsfs/examples/workspaces.mount",
                 "share/doc/wsfs/examples/scratch.mount"):
        assert prefix + want in files, (want, sorted(files))
    units = [f for f in files if "/systemd/system/" in f]
    assert {os.path.basename(u) for u in units} >= {
        "wslockd.service", "wsfs-sweep.service", "wsfs-sweep.timer"}
    lockd = open(dest / [u for u in units
                         if u.endswith("wslockd.service")][0]).read()
    assert f"ExecStart=/{prefix}sbin/wslockd -f " in lockd
    assert "@sbindir@" not in lockd


@pytest.fixture
def open_tmp():
    """A temp dir that an unprivileged user can reach (pytest's tmp_path
    sits below a root-only directory)."""
    d = tempfile.mkdtemp(prefix="wsfs-ops-")
    os.chmod(d, 0o755)
    try:
        yield pathlib.Path(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_wslockd_unit_command_runs_sandboxed(open_tmp):
    """The ExecStart line of wslockd.service, with systemd's specifiers
    filled in, run the way the unit runs it: an unprivileged user without
    capabilities, no_new_privs, the key as a mode 0400 credential. wsctl
    reaches it over the Unix socket, and SIGTERM stops it with status 0."""
    wslockd = os.path.join(BUILDDIR, "lockd", "wslockd")
    wsctl = os.path.join(BUILDDIR, "tools", "wsctl")
    wsfstest.require_built(wslockd, wsctl)
    need("setpriv")
    text = open(os.path.join(UNITDIR, "wslockd.service.in")).read()
    cmd = re.search(r"^ExecStart=(.*)$", text, re.M).group(1)
    nobody = pwd.getpwnam("nobody")
    tmp_path = open_tmp
    for d in ("cred", "state", "run", "run/wslockd", "state/wslockd"):
        (tmp_path / d).mkdir()
        os.chown(tmp_path / d, nobody.pw_uid, nobody.pw_gid)
    key = tmp_path / "cred" / "cluster.key"
    key.write_bytes(os.urandom(32))
    os.chown(key, nobody.pw_uid, nobody.pw_gid)
    os.chmod(key, 0o400)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = (cmd.replace("@sbindir@/wslockd", wslockd)
            .replace("%d", str(tmp_path / "cred"))
            .replace("%S", str(tmp_path / "state"))
            .replace("%t", str(tmp_path / "run"))
            .replace(":7420", f"127.0.0.1:{port}")
            .replace("$WSLOCKD_OPTS", "")).split()
    sock = tmp_path / "run" / "wslockd" / "wslockd.sock"
    log = open(tmp_path / "log", "w+")
    p = subprocess.Popen(["setpriv", f"--reuid={nobody.pw_uid}",
                          f"--regid={nobody.pw_gid}", "--clear-groups",
                          "--inh-caps=-all", "--bounding-set=-all",
                          "--no-new-privs", *argv],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            assert p.poll() is None, open(tmp_path / "log").read()
            time.sleep(0.05)
        q = subprocess.run([wsctl, "locks", "--lockd", f"unix:{sock}"],
                           capture_output=True, text=True, timeout=30)
        assert q.returncode == 0, (q.stderr, open(tmp_path / "log").read())
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0, open(tmp_path / "log").read()
        assert (tmp_path / "state" / "wslockd" / "epoch").exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()


def sweep_as_unit(caps, base):
    """wsctl sweep with the capability bounding set caps (a list of
    CAP_* names) and no_new_privs, as wsfs-sweep.service runs it."""
    bounding = ",".join(["-all"] + ["+" + c[4:].lower() for c in caps])
    return subprocess.run(["setpriv", "--inh-caps=-all",
                           f"--bounding-set={bounding}", "--no-new-privs",
                           os.path.join(BUILDDIR, "tools", "wsctl"), "sweep",
                           "--base", str(base), "--ttl-hours", "0"],
                          capture_output=True, text=True, timeout=120)


def test_sweep_unit_capabilities_suffice(open_tmp):
    """The capabilities wsfs-sweep.service keeps are enough to remove an
    idle workspace of another user, with 0700 and read-only directories
    inside, and without them it cannot."""
    wsctl = os.path.join(BUILDDIR, "tools", "wsctl")
    wsfstest.require_built(wsctl)
    need("setpriv")
    text = open(os.path.join(UNITDIR, "wsfs-sweep.service.in")).read()
    caps = re.search(r"^CapabilityBoundingSet=(.*)$", text, re.M)
    caps = caps.group(1).split()
    base = open_tmp / "base"
    base.mkdir()

    def make():
        p = subprocess.run([wsctl, "scratch", "create", "--base", str(base),
                            "--owner", "nobody", "--lifetime",
                            "conversation"], check=True, capture_output=True,
                           text=True)
        ws = base / p.stdout.split()[0]
        subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup",
                        "--clear-groups", "sh", "-c",
                        "mkdir -p a/b && echo x > a/b/f && chmod 700 a && "
                        "chmod 500 a/b"], cwd=ws, check=True)
        return ws

    ws = make()
    p = sweep_as_unit([], base)
    assert os.path.exists(ws / "a"), "swept without any capability?"
    p = sweep_as_unit(caps, base)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "removed 1" in p.stdout, p.stdout + p.stderr
    assert not os.path.lexists(ws)
    trash = base / ".wsfs-trash"
    assert not trash.exists() or os.listdir(trash) == []

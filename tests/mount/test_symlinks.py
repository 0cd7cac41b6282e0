"""Symlink rewriting (DESIGN.md rule 2), checked the way a user meets it:
resolving through the mount with realpath and reading the file. Every link
must land inside its own workspace; canaries outside SOURCE and in another
workspace are never reached."""
import os
import subprocess

import pytest

from wsfstest import CANARY_OUTSIDE, CANARY_WS2

LIBX = b"LIBX-IN-WS1\n"
PASSWD = b"WS1-PASSWD-MARKER\n"
ROOTX = b"X-AT-WS1-ROOT\n"


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def cat(path):
    r = subprocess.run(["cat", path], capture_output=True)
    return r.returncode, r.stdout


@pytest.fixture
def ws1(mount):
    """ws1 with lib/x, etc/passwd (a marker, not the host's), x at its
    root, and directories a/b/c, d1, a (for `a/..` targets)."""
    s = mount.src("ws1")
    write(os.path.join(s, "lib", "x"), LIBX)
    write(os.path.join(s, "etc", "passwd"), PASSWD)
    write(os.path.join(s, "x"), ROOTX)
    os.makedirs(os.path.join(s, "a", "b", "c"))
    os.makedirs(os.path.join(s, "d1", "a"))
    return mount


def check_resolves(m, linkpath, want_rel, want_data):
    """linkpath (through the mount) resolves, by realpath and by cat, to
    ws1/want_rel with want_data."""
    want = m.path("ws1", want_rel)
    assert os.path.realpath(linkpath) == want, (
        linkpath, os.readlink(linkpath))
    rc, data = cat(linkpath)
    assert rc == 0 and data == want_data, (linkpath, rc, data)
    with open(linkpath, "rb") as f:
        assert f.read() == want_data


def check_target_stays_inside(m, linkpath):
    """The target returned through the mount, walked lexically from the
    link's directory, never climbs above the workspace root."""
    t = os.readlink(linkpath)
    assert not t.startswith("/"), t
    root = m.path("ws1")
    d = os.path.dirname(linkpath)
    depth = len(os.path.relpath(d, root).split("/")) if d != root else 0
    for comp in t.split("/"):
        if comp == "..":
            depth -= 1
            assert depth >= 0, (linkpath, t)
        elif comp not in ("", "."):
            depth += 1
    return t


@pytest.mark.parametrize("where,expect", [
    ("l0", "lib/x"),
    ("d1/l1", "../lib/x"),
    ("a/b/c/l3", "../../../lib/x"),
])
def test_absolute_target(ws1, where, expect):
    m = ws1
    os.symlink("/lib/x", m.path("ws1", where))
    # stored as given
    assert os.readlink(m.src("ws1", where)) == "/lib/x"
    check_resolves(m, m.path("ws1", where), "lib/x", LIBX)
    assert check_target_stays_inside(m, m.path("ws1", where)) == expect


def test_absolute_target_made_on_backing(ws1):
    """A link planted directly on the backing store is rewritten too."""
    m = ws1
    os.symlink("/etc/passwd", m.src("ws1", "a", "b", "pw"))
    os.symlink("/", m.src("ws1", "a", "top"))
    check_resolves(m, m.path("ws1", "a", "b", "pw"), "etc/passwd", PASSWD)
    assert os.path.realpath(m.path("ws1", "a", "top")) == m.path("ws1")
    assert sorted(os.listdir(m.path("ws1", "a", "top"))) == \
        sorted(os.listdir(m.src("ws1")))


def test_leading_dotdot_within_root_returned_as_stored(ws1):
    m = ws1
    os.symlink("../lib/x", m.path("ws1", "d1", "l"))
    os.symlink("../../../lib/x", m.path("ws1", "a", "b", "c", "l"))
    os.symlink("lib/x", m.path("ws1", "plain"))
    os.symlink("../../b", m.path("ws1", "a", "b", "c", "up"))
    for where in ("d1/l", "a/b/c/l", "plain", "a/b/c/up"):
        assert os.readlink(m.path("ws1", where)) == \
            os.readlink(m.src("ws1", where)), where
    check_resolves(m, m.path("ws1", "d1", "l"), "lib/x", LIBX)
    check_resolves(m, m.path("ws1", "a", "b", "c", "l"), "lib/x", LIBX)
    check_resolves(m, m.path("ws1", "plain"), "lib/x", LIBX)
    assert os.path.realpath(m.path("ws1", "a", "b", "c", "up")) == \
        m.path("ws1", "a", "b")


@pytest.mark.parametrize("where,target", [
    ("l", "a/../../x"),            # a/.. is the root, then .. stays there
    ("d1/l", "a/../../x"),         # d1/a/.. = d1, .. = root
    ("d1/l2", "./../x"),
    ("a/b/l", "c/../../../../../x"),
    ("l3", "lib/../../../x"),
])
def test_dotdot_after_name_resolved_inside_root(ws1, where, target):
    m = ws1
    os.symlink(target, m.path("ws1", where))
    assert os.readlink(m.src("ws1", where)) == target
    check_resolves(m, m.path("ws1", where), "x", ROOTX)
    check_target_stays_inside(m, m.path("ws1", where))


@pytest.mark.parametrize("where,target", [
    ("d1/pw", "../../../../etc/passwd"),
    ("pw", "../etc/passwd"),
    ("a/b/c/pw", "../../../../../../../../../../../etc/passwd"),
    ("a/pw", "../../../../../../../../../../../../../../../../../etc/passwd"),
])
def test_climbing_above_root_is_clamped(ws1, where, target):
    """`..` stops at the workspace root: the workspace's own etc/passwd is
    read, never the host's."""
    m = ws1
    os.symlink(target, m.path("ws1", where))
    check_resolves(m, m.path("ws1", where), "etc/passwd", PASSWD)
    t = check_target_stays_inside(m, m.path("ws1", where))
    if where == "d1/pw":
        assert t == "../etc/passwd"
    with open("/etc/passwd", "rb") as f:
        assert cat(m.path("ws1", where))[1] != f.read()


@pytest.mark.parametrize("target", ["/lib/x", "../lib/x", "lib/x",
                                    "../../../../../../lib/x"])
def test_hardlinked_symlink_at_two_depths(ws1, target):
    """One symlink inode with names at depth 0 and depth 3 (hard link made
    on the backing store): each name resolves correctly and safely."""
    m = ws1
    os.makedirs(m.src("ws1", "lib", "lib"), exist_ok=True)
    write(m.src("ws1", "lib", "lib", "x"), b"NESTED\n")
    s0 = m.src("ws1", "hl")
    s3 = m.src("ws1", "a", "b", "c", "hl")
    os.symlink(target, s0)
    os.link(s0, s3, follow_symlinks=False)
    assert os.lstat(s0).st_ino == os.lstat(s3).st_ino
    p0 = m.path("ws1", "hl")
    p3 = m.path("ws1", "a", "b", "c", "hl")
    # read each name twice, in both orders, so no cached answer leaks
    for _ in range(2):
        for p in (p0, p3, p0):
            check_target_stays_inside(m, p)
    if target == "/lib/x":
        check_resolves(m, p0, "lib/x", LIBX)
        check_resolves(m, p3, "lib/x", LIBX)
        assert os.readlink(p0) == "lib/x"
        assert os.readlink(p3) == "../../../lib/x"
    elif target == "../lib/x":
        # depth 0: climbs above the root, clamped -> lib/x
        check_resolves(m, p0, "lib/x", LIBX)
        # depth 3: a/b/lib/x does not exist
        assert cat(p3)[0] != 0
        assert os.path.realpath(p3) == m.path("ws1", "a", "b", "lib", "x")
    elif target == "lib/x":
        check_resolves(m, p0, "lib/x", LIBX)
        assert cat(p3)[0] != 0
    else:
        check_resolves(m, p0, "lib/x", LIBX)
        check_resolves(m, p3, "lib/x", LIBX)
    # the same through a link made through the mount (link(2) on a symlink)
    os.link(p3, m.path("ws1", "d1", "hl"), follow_symlinks=False)
    check_target_stays_inside(m, m.path("ws1", "d1", "hl"))


CANARY_TARGETS = [
    "{outside}",                           # absolute path of the canary
    "{outside_dir}",
    "../outside/canary",
    "../../outside/canary",
    "../../../../../../../..{outside}",
    "../ws2/canary",
    "../../ws2/canary",
    "/../ws2/canary",
    "a/../../ws2/canary",
    "{src}/ws2/canary",
    "{mnt}/ws2/canary",
    "/proc/self/root{outside}",
    "/proc/self/cwd/../ws2/canary",
    "//..//..//ws2/canary",
]


@pytest.mark.parametrize("depth", [0, 2])
def test_canaries_never_reachable(ws1, depth):
    m = ws1
    d = m.path("ws1", *(["a", "b"][:depth]))
    fmt = dict(outside=m.canary_outside,
               outside_dir=os.path.dirname(m.canary_outside),
               src=m.source, mnt=m.mnt)
    for i, t in enumerate(CANARY_TARGETS):
        target = t.format(**fmt)
        link = os.path.join(d, f"c{i}")
        os.symlink(target, link)
        for p in (link, link + "-b"):
            if p.endswith("-b"):
                # the same link planted on the backing store
                os.symlink(target, m.src(os.path.relpath(p, m.mnt)))
            rc, data = cat(p)
            assert CANARY_OUTSIDE not in data and CANARY_WS2 not in data, \
                (target, os.readlink(p))
            rp = os.path.realpath(p)
            assert rp == m.path("ws1") or rp.startswith(m.path("ws1") + "/"),\
                (target, os.readlink(p), rp)
            check_target_stays_inside(m, p)
    # chains of links: each hop is rewritten
    os.symlink("/a", m.path("ws1", "hop1"))
    os.symlink("../../..", m.path("ws1", "a", "hop2"))
    rp = os.path.realpath(m.path("ws1", "hop1", "hop2", "ws2", "canary"))
    assert rp.startswith(m.path("ws1") + "/")
    assert cat(m.path("ws1", "hop1", "hop2", "ws2", "canary"))[0] != 0
    # writing through a link never reaches a canary either: the write
    # lands in ws1 where the rewritten target points
    os.symlink(m.canary_outside, m.path("ws1", "w1"))
    os.symlink("../ws2/canary", m.path("ws1", "w2"))
    os.makedirs(m.src("ws1") + os.path.dirname(m.canary_outside))
    os.makedirs(m.src("ws1", "ws2"))
    for name in ("w1", "w2"):
        with open(m.path("ws1", name), "wb") as f:
            f.write(b"overwritten")
    with open(m.canary_outside, "rb") as f:
        assert f.read() == CANARY_OUTSIDE
    with open(m.canary_ws2_src, "rb") as f:
        assert f.read() == CANARY_WS2
    for p in (m.src("ws1") + m.canary_outside, m.src("ws1", "ws2", "canary")):
        with open(p, "rb") as f:
            assert f.read() == b"overwritten"


def test_dotdot_directory_links_stay_inside(ws1):
    m = ws1
    os.symlink("../../../../../..", m.path("ws1", "a", "b", "up"))
    os.symlink("/", m.path("ws1", "d1", "root"))
    for p in (m.path("ws1", "a", "b", "up"), m.path("ws1", "d1", "root")):
        assert os.path.realpath(p) == m.path("ws1")
        assert sorted(os.listdir(p)) == sorted(os.listdir(m.src("ws1")))
        assert "ws2" not in os.listdir(p)
        r = subprocess.run(["find", p + "/", "-maxdepth", "1"],
                           capture_output=True, text=True)
        assert "ws2" not in r.stdout


def test_readlink_is_not_cached(ws1):
    """The target is recomputed per call: a link changed on the backing
    store reads the new target at once."""
    m = ws1
    os.symlink("lib/x", m.src("ws1", "chg"))
    assert os.readlink(m.path("ws1", "chg")) == "lib/x"
    os.unlink(m.src("ws1", "chg"))
    os.symlink("etc/passwd", m.src("ws1", "chg"))
    assert os.readlink(m.path("ws1", "chg")) in ("lib/x", "etc/passwd")
    import time
    time.sleep(1.2)         # attr/entry timeout at most 1 s by default
    assert os.readlink(m.path("ws1", "chg")) == "etc/passwd"
    check_resolves(m, m.path("ws1", "chg"), "etc/passwd", PASSWD)


def test_symlink_in_ws2_cannot_reach_ws1(mount):
    """Confinement is per workspace in both directions."""
    with open(mount.src("ws1", "secret"), "wb") as f:
        f.write(b"WS1-SECRET")
    for i, t in enumerate(["../ws1/secret", "/../ws1/secret",
                           mount.path("ws1", "secret"),
                           mount.src("ws1", "secret")]):
        os.symlink(t, mount.path("ws2", f"l{i}"))
        rc, data = cat(mount.path("ws2", f"l{i}"))
        assert b"WS1-SECRET" not in data, t

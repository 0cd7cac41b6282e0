"""wsctl workspace create/rm/list: the admin's workspaces and the owner uid
rules of DESIGN.md rule 5 (derived uid, reuse, collision probing, shared uid
refused), and rule 3 (rm removes only what wsctl created, never a stray
directory, never through a symlink)."""
import concurrent.futures
import grp
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess

import pytest

import wsfstest

WSCTL = wsfstest.WSCTL
UID_MIN, UID_COUNT = 20000, 40000


def wsctl(*args, check=None):
    """Run wsctl; check=0/1/2 asserts that exit status."""
    p = subprocess.run([WSCTL, *args], capture_output=True, text=True,
                       timeout=60)
    if check is not None:
        assert p.returncode == check, (args, p.returncode, p.stdout, p.stderr)
    return p


def derived_uid(owner):
    """The documented derivation: BLAKE2b-256 of the name, first 8 bytes
    little-endian, mod 40000, + 20000."""
    d = hashlib.blake2b(owner.encode(), digest_size=32).digest()
    return UID_MIN + int.from_bytes(d[:8], "little") % UID_COUNT


def has_account(uid):
    """The uid belongs to an account, or the same number to a group."""
    for lookup in (pwd.getpwuid, grp.getgrgid):
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def colliding_owners(prefix, count=2):
    """Brute-force `count` owner names whose derived uids are equal and
    belong to no account (birthday bound: a few hundred tries)."""
    seen = {}
    i = 0
    while True:
        name = f"{prefix}{i}"
        uid = derived_uid(name)
        if not has_account(uid):
            seen.setdefault(uid, []).append(name)
            if len(seen[uid]) == count:
                return seen[uid], uid
        i += 1


def marker(src, name):
    out = {}
    with open(os.path.join(src, ".wsfs", "workspaces", name)) as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                out[k] = v
    return out


def write_marker(src, name, **fields):
    os.makedirs(os.path.join(src, ".wsfs", "workspaces"), exist_ok=True)
    path = os.path.join(src, ".wsfs", "workspaces", name)
    with open(path, "w") as f:
        f.write("version=1\n")
        for k, v in fields.items():
            f.write(f"{k}={v}\n")


@pytest.fixture
def src(tmp_path):
    wsfstest.require_built(WSCTL)
    s = tmp_path / "src"
    s.mkdir()
    return str(s)


@pytest.fixture
def canary(tmp_path):
    c = tmp_path / "canary"
    c.mkdir()
    (c / "keep").write_bytes(b"CANARY\n")
    return str(c)


def assert_canary(canary):
    with open(os.path.join(canary, "keep"), "rb") as f:
        assert f.read() == b"CANARY\n"


def test_create_account_owner(src):
    nobody = pwd.getpwnam("nobody")
    wsctl("create", "x", check=2)            # no 'workspace' is usage
    wsctl("workspace", "create", f"{src}/ws", "--owner", "nobody", check=0)
    st = os.lstat(f"{src}/ws")
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o700
    assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    m = marker(src, "ws")
    assert m["owner"] == "nobody" and int(m["uid"]) == nobody.pw_uid
    assert m["account"] == "yes"
    assert int(m["ino"]) == st.st_ino
    assert m["created"].endswith("Z")


def test_create_without_owner_is_root_0755(src):
    wsctl("workspace", "create", f"{src}/pub", check=0)
    st = os.lstat(f"{src}/pub")
    assert stat.S_IMODE(st.st_mode) == 0o755
    assert (st.st_uid, st.st_gid) == (0, 0)
    assert marker(src, "pub")["owner"] == "root"


def test_create_existing_refused(src):
    wsctl("workspace", "create", f"{src}/ws", check=0)
    p = wsctl("workspace", "create", f"{src}/ws", "--owner", "nobody",
              check=1)
    assert "already exists" in p.stderr
    assert os.lstat(f"{src}/ws").st_uid == 0


def test_derived_uid_and_reuse(src):
    owner = "agent-without-account"
    with pytest.raises(KeyError):
        pwd.getpwnam(owner)
    uid = derived_uid(owner)
    wsctl("workspace", "create", f"{src}/a", "--owner", owner, check=0)
    wsctl("workspace", "create", f"{src}/b", "--owner", owner, check=0)
    for n in ("a", "b"):
        st = os.lstat(f"{src}/{n}")
        assert (st.st_uid, st.st_gid) == (uid, uid)
        assert stat.S_IMODE(st.st_mode) == 0o700
        assert marker(src, n)["account"] == "no"


def test_recorded_uid_reused_not_rederived(src):
    """An owner keeps the uid its marker records, even one that is not the
    hash (because it was probed past a collision once)."""
    owner = "recorded-owner"
    wsctl("workspace", "create", f"{src}/a", "--owner", owner, check=0)
    # Pretend the hash had collided when 'a' was made: record another uid.
    other = UID_MIN + (derived_uid(owner) - UID_MIN + 17) % UID_COUNT
    m = marker(src, "a")
    m["uid"] = m["gid"] = str(other)
    write_marker(src, "a", **{k: v for k, v in m.items() if k != "version"})
    wsctl("workspace", "create", f"{src}/b", "--owner", owner, check=0)
    assert os.lstat(f"{src}/b").st_uid == other


def test_hash_collision_probes_next_free_uid(src):
    (first, second), uid = colliding_owners("collide-")
    wsctl("workspace", "create", f"{src}/one", "--owner", first, check=0)
    wsctl("workspace", "create", f"{src}/two", "--owner", second, check=0)
    u1 = os.lstat(f"{src}/one").st_uid
    u2 = os.lstat(f"{src}/two").st_uid
    assert u1 == uid
    assert u2 != u1 and UID_MIN <= u2 < UID_MIN + UID_COUNT
    # Linear probing: the next uid that no account holds.
    expect = uid
    while True:
        expect = UID_MIN + (expect - UID_MIN + 1) % UID_COUNT
        if not has_account(expect):
            break
    assert u2 == expect
    # Each keeps its own uid from now on.
    wsctl("workspace", "create", f"{src}/three", "--owner", second, check=0)
    assert os.lstat(f"{src}/three").st_uid == u2


def test_stray_owner_uid_is_not_handed_out(src):
    """A stray directory owned by the derived uid: the uid is taken."""
    owner = "stray-victim"
    uid = derived_uid(owner)
    os.mkdir(f"{src}/stray")
    os.chown(f"{src}/stray", uid, uid)
    wsctl("workspace", "create", f"{src}/ws", "--owner", owner, check=0)
    assert os.lstat(f"{src}/ws").st_uid != uid


def test_group_with_derived_gid_is_not_shared(src):
    """The derived number is also the workspace's gid: a group that already
    has it would reach the owner's files, so the uid is taken."""
    if shutil.which("groupadd") is None:
        pytest.skip("groupadd is not installed")
    owner = "group-victim"
    uid = derived_uid(owner)
    if has_account(uid):
        pytest.skip(f"uid/gid {uid} already in use on this machine")
    group = f"wsfs-ops-{os.getpid()}"
    subprocess.run(["groupadd", "-g", str(uid), group], check=True)
    try:
        wsctl("workspace", "create", f"{src}/ws", "--owner", owner, check=0)
        st = os.lstat(f"{src}/ws")
        assert st.st_uid != uid and st.st_gid != uid
    finally:
        subprocess.run(["groupdel", group], check=True)


def test_parallel_colliding_creates_get_distinct_uids(src):
    names, _ = colliding_owners("race-", count=3)
    with concurrent.futures.ThreadPoolExecutor(3) as ex:
        res = list(ex.map(lambda n: wsctl("workspace", "create",
                                          f"{src}/{n}", "--owner", n),
                          names))
    assert [r.returncode for r in res] == [0, 0, 0], [r.stderr for r in res]
    uids = {os.lstat(f"{src}/{n}").st_uid for n in names}
    assert len(uids) == 3


def test_shared_recorded_uid_refused(src):
    wsctl("workspace", "create", f"{src}/a", "--owner", "owner-a", check=0)
    uid = os.lstat(f"{src}/a").st_uid
    # An operator error: another owner's workspace recorded with that uid.
    os.mkdir(f"{src}/b")
    write_marker(src, "b", owner="owner-b", uid=uid, gid=uid, account="no",
                 mode="0700", ino=os.lstat(f"{src}/b").st_ino,
                 created="2026-01-01T00:00:00Z")
    for owner in ("owner-a", "owner-b"):
        p = wsctl("workspace", "create", f"{src}/new-{owner}", "--owner",
                  owner, check=1)
        assert "refusing to share" in p.stderr, p.stderr
        assert "operator" in p.stderr
        assert not os.path.lexists(f"{src}/new-{owner}")
    # Another owner is not held up by the broken pair.
    wsctl("workspace", "create", f"{src}/c", "--owner", "owner-c", check=0)


def test_account_uid_recorded_for_other_owner_refused(src):
    nobody = pwd.getpwnam("nobody").pw_uid
    os.mkdir(f"{src}/ghost")
    write_marker(src, "ghost", owner="ghost", uid=nobody, gid=nobody,
                 account="no", mode="0700",
                 ino=os.lstat(f"{src}/ghost").st_ino,
                 created="2026-01-01T00:00:00Z")
    p = wsctl("workspace", "create", f"{src}/ws", "--owner", "nobody",
              check=1)
    assert "refusing to share" in p.stderr


def test_damaged_marker_refuses_uid_decisions(src):
    os.makedirs(f"{src}/.wsfs/workspaces")
    with open(f"{src}/.wsfs/workspaces/bad", "w") as f:
        f.write("owner=x\nuid=notanumber\n")
    p = wsctl("workspace", "create", f"{src}/ws", "--owner", "someone",
              check=1)
    assert "damaged marker" in p.stderr
    assert not os.path.lexists(f"{src}/ws")


@pytest.mark.parametrize("name,why", [
    (".hidden", "reserved"),
    ("x" * 256, "255"),
    ("..", "reserved"),
])
def test_bad_names_are_usage_errors(src, name, why):
    p = wsctl("workspace", "create", f"{src}/{name}", check=2)
    assert why in p.stderr and "--help" in p.stderr


@pytest.mark.parametrize("owner", ["123", "a b", "a:b", "-x", "a\nb", ""])
def test_bad_owners_are_usage_errors(src, owner):
    wsctl("workspace", "create", f"{src}/ws", "--owner", owner, check=2)
    assert not os.path.lexists(f"{src}/ws")


def test_symlinked_name_refused(src, canary):
    os.symlink(canary, f"{src}/link")
    p = wsctl("workspace", "create", f"{src}/link", "--owner", "nobody",
              check=1)
    assert "symlink" in p.stderr
    assert os.lstat(canary).st_uid == 0
    assert stat.S_IMODE(os.lstat(canary).st_mode) == 0o755
    p = wsctl("workspace", "rm", f"{src}/link", check=1)
    assert os.path.islink(f"{src}/link")
    assert_canary(canary)


def test_symlinked_source_refused(src, tmp_path):
    os.symlink(src, tmp_path / "srclink")
    p = wsctl("workspace", "create", f"{tmp_path}/srclink/ws", check=1)
    assert "symlink" in p.stderr
    assert not os.path.lexists(f"{src}/ws")
    wsctl("workspace", "list", f"{tmp_path}/srclink", check=1)


def test_symlinked_parent_of_source_refused(tmp_path):
    """A symlink above SOURCE is not followed either: O_NOFOLLOW alone
    would guard only the last component (issue 12, finding 10)."""
    real = tmp_path / "real"
    os.makedirs(real / "src")
    os.symlink(real, tmp_path / "plink")
    via = f"{tmp_path}/plink/src"
    p = wsctl("workspace", "create", f"{via}/ws", check=1)
    assert "symlink" in p.stderr and "real path" in p.stderr, p.stderr
    assert not os.path.lexists(real / "src" / "ws")
    assert not os.path.lexists(real / "src" / ".wsfs")
    p = wsctl("workspace", "list", via, "--json", check=1)
    assert "symlink" in p.stderr and p.stdout == ""
    wsctl("workspace", "create", f"{real}/src/ws", check=0)
    p = wsctl("workspace", "rm", f"{via}/ws", check=1)
    assert "symlink" in p.stderr
    assert os.path.isdir(real / "src" / "ws")


def test_symlinked_metadata_dir_refused(src, canary):
    os.symlink(canary, f"{src}/.wsfs")
    p = wsctl("workspace", "create", f"{src}/ws", check=1)
    assert "symlink" in p.stderr
    assert os.listdir(canary) == ["keep"]


def test_stray_directory_never_removed(src):
    os.mkdir(f"{src}/stray")
    open(f"{src}/stray/data", "w").close()
    p = wsctl("workspace", "rm", f"{src}/stray", check=1)
    assert "not created by wsctl" in p.stderr
    assert os.path.exists(f"{src}/stray/data")


def test_replaced_directory_never_removed(src):
    """A marker whose workspace was swapped for another directory (other
    inode) does not license removing that directory."""
    wsctl("workspace", "create", f"{src}/ws", check=0)
    os.mkdir(f"{src}/impostor")
    open(f"{src}/impostor/data", "w").close()
    os.rename(f"{src}/ws", f"{src}/ws.orig")
    os.rename(f"{src}/impostor", f"{src}/ws")
    p = wsctl("workspace", "rm", f"{src}/ws", check=1)
    assert "not the directory wsctl created" in p.stderr
    assert os.path.exists(f"{src}/ws/data")
    rows = json.loads(wsctl("workspace", "list", src, "--json",
                            check=0).stdout)
    assert {r["name"]: r["state"] for r in rows}["ws"] == "replaced"


def test_symlink_swapped_in_never_followed_by_rm(src, canary):
    wsctl("workspace", "create", f"{src}/ws", check=0)
    os.rename(f"{src}/ws", f"{src}/ws.orig")
    os.symlink(canary, f"{src}/ws")
    p = wsctl("workspace", "rm", f"{src}/ws", check=1)
    assert "symlink" in p.stderr
    assert os.path.islink(f"{src}/ws")
    assert_canary(canary)


def test_rm_removes_created_workspace(src, canary):
    wsctl("workspace", "create", f"{src}/ws", "--owner", "nobody", check=0)
    os.makedirs(f"{src}/ws/deep/er")
    open(f"{src}/ws/deep/er/f", "w").close()
    os.symlink(canary, f"{src}/ws/deep/out")
    os.symlink(f"{canary}/keep", f"{src}/ws/keeplink")
    os.mkfifo(f"{src}/ws/fifo")
    os.mkdir(f"{src}/sibling")
    wsctl("workspace", "rm", f"{src}/ws", check=0)
    assert not os.path.lexists(f"{src}/ws")
    assert not os.path.exists(f"{src}/.wsfs/workspaces/ws")
    assert os.path.isdir(f"{src}/sibling")
    assert_canary(canary)
    # Gone means gone: a second rm has no marker left.
    wsctl("workspace", "rm", f"{src}/ws", check=1)


def test_rm_of_vanished_workspace_drops_marker(src):
    wsctl("workspace", "create", f"{src}/ws", check=0)
    os.rmdir(f"{src}/ws")
    rows = json.loads(wsctl("workspace", "list", src, "--json",
                            check=0).stdout)
    assert rows == [{"name": "ws", "owner": "root", "uid": 0, "mode": None,
                     "created": rows[0]["created"], "marker": True,
                     "state": "missing"}]
    p = wsctl("workspace", "rm", f"{src}/ws", check=0)
    assert "already gone" in p.stderr
    assert os.listdir(f"{src}/.wsfs/workspaces") == []


def test_list(src):
    assert wsctl("workspace", "list", src, "--json", check=0).stdout \
        .strip() == "[]"
    wsctl("workspace", "create", f"{src}/mine", "--owner", "nobody", check=0)
    wsctl("workspace", "create", f"{src}/pub", check=0)
    os.mkdir(f"{src}/stray")
    os.mkdir(f"{src}/.hidden")
    open(f"{src}/file", "w").close()
    rows = json.loads(wsctl("workspace", "list", src, "--json",
                            check=0).stdout)
    by = {r["name"]: r for r in rows}
    assert sorted(by) == ["mine", "pub", "stray"]
    assert by["mine"]["owner"] == "nobody"
    assert by["mine"]["uid"] == pwd.getpwnam("nobody").pw_uid
    assert by["mine"]["mode"] == "0700"
    assert by["mine"]["marker"] is True and by["mine"]["state"] == "ok"
    assert by["pub"]["mode"] == "0755"
    assert by["stray"]["marker"] is False
    assert by["stray"]["state"] == "stray"
    assert by["stray"]["created"] is None
    text = wsctl("workspace", "list", src, check=0).stdout.splitlines()
    assert text[0].split() == ["NAME", "OWNER", "UID", "MODE", "CREATED",
                               "MARKER", "STATE"]
    assert [line.split()[0] for line in text[1:]] == ["mine", "pub", "stray"]


def test_list_json_escapes_names(src):
    name = 'q"uo\\te\tand\xe9'
    wsctl("workspace", "create", f"{src}/{name}", check=0)
    rows = json.loads(wsctl("workspace", "list", src, "--json",
                            check=0).stdout)
    assert rows[0]["name"] == name


def test_list_json_gives_non_utf8_names_back(src):
    """A byte that is not UTF-8 comes back as the same byte through
    os.fsencode, not as U+FFFD (one escaper for every --json)."""
    name = b"bad\xffname\xc3"
    made = subprocess.run([WSCTL, "workspace", "create",
                           os.fsencode(src) + b"/" + name],
                          capture_output=True, timeout=60)
    assert made.returncode == 0, made.stderr
    out = subprocess.run([WSCTL, "workspace", "list", src, "--json"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout.decode("utf-8"))
    assert [os.fsencode(r["name"]) for r in rows] == [name]


def test_list_text_escapes_control_bytes(src):
    """A name with a newline or a terminal escape cannot forge table rows."""
    name = "evil\nfake  root  0  0755\x1b[2J"
    wsctl("workspace", "create", f"{src}/{name}", check=0)
    lines = wsctl("workspace", "list", src, check=0).stdout.splitlines()
    assert len(lines) == 2, lines
    assert lines[1].startswith("evil\\012fake  root  0  0755\\033[2J")
    assert "\x1b" not in lines[1]


def test_usage_errors(src):
    wsctl("workspace", check=2)
    wsctl("workspace", "frobnicate", check=2)
    wsctl("workspace", "create", check=2)
    wsctl("workspace", "create", f"{src}/a", f"{src}/b", check=2)
    wsctl("workspace", "create", f"{src}/a", "--bogus", check=2)
    wsctl("workspace", "create", f"{src}/a", "--owner", check=2)
    wsctl("workspace", "rm", f"{src}/a", "--owner", "x", check=2)
    wsctl("workspace", "list", check=2)
    wsctl("workspace", "list", src, "--owner", "x", check=2)
    assert "usage" in wsctl("workspace", "create", "--help",
                            check=0).stdout
    wsctl("workspace", "list", f"{src}/nonexistent", check=1)


def test_rm_leaves_mount_inside_alone(src, tmp_path):
    """A filesystem mounted inside the workspace is not crossed: its files
    survive, the rest goes, and the leftover is finished by a later rm."""
    wsctl("workspace", "create", f"{src}/ws", check=0)
    os.makedirs(f"{src}/ws/sub/mnt")
    open(f"{src}/ws/sub/file", "w").close()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", f"{src}/ws/sub/mnt"],
                   check=True)
    try:
        with open(f"{src}/ws/sub/mnt/canary", "w") as f:
            f.write("in tmpfs")
        p = wsctl("workspace", "rm", f"{src}/ws", check=1)
        assert "mount point" in p.stderr, p.stderr
        assert not os.path.lexists(f"{src}/ws")
        assert not os.path.exists(f"{src}/.wsfs/workspaces/ws")
        [left] = os.listdir(f"{src}/.wsfs-trash")
        mnt = f"{src}/.wsfs-trash/{left}/sub/mnt"
        with open(f"{mnt}/canary") as f:
            assert f.read() == "in tmpfs"
        assert not os.path.exists(f"{src}/.wsfs-trash/{left}/sub/file")
    finally:
        # Wherever the tmpfs ended up (workspace or trash), unmount it.
        with open("/proc/self/mounts") as f:
            inside = [line.split()[1] for line in f
                      if line.split()[1].startswith(src + "/")]
        for m in inside:
            subprocess.run(["umount", "-l", m])
    wsctl("workspace", "create", f"{src}/other", check=0)
    p = wsctl("workspace", "rm", f"{src}/other", check=0)
    assert "finished 1 interrupted removal" in p.stderr
    assert os.listdir(f"{src}/.wsfs-trash") == []


def test_rm_finishes_crashed_removal(src):
    """A tree left in the trash by a crash after the rename is deleted by
    the next rm, and nothing outside the trash is touched."""
    wsctl("workspace", "create", f"{src}/a", check=0)
    wsctl("workspace", "create", f"{src}/b", check=0)
    os.makedirs(f"{src}/.wsfs-trash", mode=0o700)
    os.makedirs(f"{src}/.wsfs-trash/a.0123456789abcdef/x/y")
    open(f"{src}/.wsfs-trash/a.0123456789abcdef/x/y/f", "w").close()
    open(f"{src}/a/keep", "w").close()
    p = wsctl("workspace", "rm", f"{src}/b", check=0)
    assert "removed" in p.stdout
    assert os.listdir(f"{src}/.wsfs-trash") == []
    assert os.path.exists(f"{src}/a/keep")

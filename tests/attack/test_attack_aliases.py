"""Attack class 10, no race needed: renames through the mount of an inode
that has more than one name or more than one FUSE inode.

A symlink's readlink answer depends on the depth at which the kernel sees
the link, so wsfs must know, after a rename through the mount, which inode
the kernel moved. A rename names a dentry (directory, name), not an inode:

hardlink: two names of one symlink inode in one directory are one FUSE
  inode; renaming one name into a deep directory must not give the other
  name the deep directory's depth (its answer would climb out of the
  workspace and past the mount root).

moved-dir: another node moves a directory the kernel holds on the backing
  store, so the object has a stale and a fresh FUSE inode; renames through
  the mount must move the inode the kernel moved, or a link below it is
  rewritten for the wrong depth.

swapped: another node puts a different directory under a name the kernel
  holds; a rename of that name through the mount moves the kernel's inode
  (the old directory), not the directory the backing store moved, which the
  kernel still sees at its old name.

Each leaves a link whose wrongly rewritten target would lead, through the
kernel's ".." walk past the mount root, to a canary file by its absolute
path; the test follows it, reads it and checks every canary.
"""
import os

import pytest

import attacklib as A
from attacklib import STATS
from test_attack_races import assert_clean, inside, resolve_view


def deep_enough(L):
    """Levels that climb from the workspace root past "/": any answer
    rewritten for this much more depth than the kernel's reaches the
    canary by its absolute path."""
    return len(L.ws_mnt().strip("/").split("/")) + 2


def follow(L, path, what, found):
    """readlink and read through the link at path (mount side)."""
    try:
        t = os.readlink(path)
    except OSError as e:
        return "readlink " + A.errname(e.errno)
    view = resolve_view(path, t)
    if not inside(view, L.ws_mnt()):
        found.append(f"{what}: readlink -> {t!r} resolves outside to {view}")
    try:
        with open(path, "rb") as f:
            L.scan(f.read(), what, found)
        return "follow ok"
    except OSError as e:
        return "follow " + A.errname(e.errno)


@pytest.mark.parametrize("scenario", ["hardlink", "moved-dir", "swapped"])
def test_class10_renamed_aliases(layout, amount, scenario):
    L = layout
    st = STATS[10]
    target = os.path.join(L.base, L.TOP)     # absolute: rewritten by depth
    n = deep_enough(L)
    deep = [f"d{k}" for k in range(n)]
    os.makedirs(L.ws_src(*deep))
    total = max(4, A.iterations(10) // 50)
    with A.Watchdog(L.mnt, 60 + total * 0.2, st, f"class 10 {scenario}"):
        for i in range(total):
            found = []
            if scenario == "hardlink":
                # All through the mount: what one agent alone can do.
                a, b = L.ws_mnt(f"hl{i}a"), L.ws_mnt(f"hl{i}b")
                c = L.ws_mnt(*deep, f"hl{i}c")
                os.symlink(target, a)
                os.link(a, b, follow_symlinks=False)
                os.readlink(a)
                os.readlink(b)
                os.rename(b, c)
                outs = [follow(L, a, "follow the name left behind", found),
                        follow(L, c, "follow the moved name", found)]
                os.unlink(a)
                os.unlink(c)
            elif scenario == "swapped":
                # The kernel holds P/zz -> Z and P/n -> D; another node
                # moves D away and Z to P/n; then P/n is renamed deep
                # through the mount while the kernel still has Z at P/zz.
                P = f"s{i}"
                os.makedirs(L.ws_src(P, "zz"))
                os.makedirs(L.ws_src(P, "n"))
                os.symlink(target, L.ws_src(P, "zz", "l"))
                os.stat(L.ws_mnt(P, "zz", "l"), follow_symlinks=False)
                os.stat(L.ws_mnt(P, "n"))
                os.rename(L.ws_src(P, "n"), L.ws_src(f"s{i}away"))
                os.rename(L.ws_src(P, "zz"), L.ws_src(P, "n"))
                outs = []
                try:
                    os.rename(L.ws_mnt(P, "n"), L.ws_mnt(*deep, f"s{i}"))
                    outs.append("rename ok")
                except OSError as e:
                    outs.append("rename " + A.errname(e.errno))
                outs.append(follow(L, L.ws_mnt(P, "zz", "l"),
                                   "follow a link in the dir left behind",
                                   found))
                wfd = os.open(L.ws_src(), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    for x in (P, f"s{i}away", os.path.join(*deep, f"s{i}")):
                        A.rmtree_at(wfd, x)
                finally:
                    os.close(wfd)
            else:
                # Q/b seen by the kernel, then moved by "another node".
                q = deep[:-1] + [f"Q{i}"]
                os.makedirs(L.ws_src(*q, "b"))
                os.symlink(target, L.ws_src(*q, "b", "l"))
                os.mkdir(L.ws_src(f"p{i}"))
                hold = os.open(L.ws_mnt(*q, "b"), os.O_RDONLY)
                try:
                    os.rename(L.ws_src(*q, "b"), L.ws_src(f"p{i}", "a"))
                    os.stat(L.ws_mnt(f"p{i}", "a"))
                    os.rename(L.ws_mnt(f"p{i}", "a"), L.ws_mnt(*q, "c"))
                    os.rename(L.ws_mnt(*q, "c"), L.ws_mnt(f"m{i}"))
                    outs = [follow(L, L.ws_mnt(f"m{i}", "l"),
                                   "follow a link in the moved dir", found)]
                finally:
                    os.close(hold)
                wfd = os.open(L.ws_src(), os.O_RDONLY | os.O_DIRECTORY)
                try:
                    A.rmtree_at(wfd, f"m{i}")
                finally:
                    os.close(wfd)
                os.rmdir(L.ws_src(f"p{i}"))
                os.rmdir(L.ws_src(*q))
            for o in outs:
                st.errnos[f"{scenario} {o}"] += 1
            st.iterations += 1
            A.check_round(L, st, f"{scenario} round {i}", found)
    assert_clean(10)

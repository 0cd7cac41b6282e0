"""Attack classes 1, 2 and 10: paths whose shape changes while wsfs walks
them.

Racer processes swap a directory or file for a symlink that points out of
the workspace (to "/", "../../..", the canary dir beside SOURCE, the
sibling workspace), with renameat2(RENAME_EXCHANGE), plain renames and
rename+symlink, both directly on the backing directory (as another node
would) and through the mount. Meanwhile the test performs every
path-taking operation through the mount and checks the canaries after
each one. Class 10 plants symlinks crafted to climb and moves their
directory to a shallower depth and back.
"""
import os
import posixpath
import stat

import pytest

import attacklib as A
import wsfstest
from attacklib import STATS

# Rounds are (racer kind, where it runs); each round starts fresh racers.
ROUND_KINDS = ["exchange", "swap4", "symswap"]
ROUND_WHERE = ["backing", "mount", "both"]


def rounds_for(targets):
    out = []
    for t in targets:
        for kind in ROUND_KINDS:
            for where in ROUND_WHERE:
                out.append((t, kind, where))
    return out


def racer_specs(kind, where, root_src, root_mnt, slot, target):
    """Racers for one slot group (slot, slot.l, slot.l2, slot.t)."""
    specs = []
    roots = {"backing": [(root_src, ".l")], "mount": [(root_mnt, ".l2")],
             "both": [(root_src, ".l"), (root_mnt, ".l2")]}[where]
    for root, lsuf in roots:
        d = os.path.join(root, slot)
        if kind == "exchange":
            specs.append(["exchange", d, d + lsuf])
        elif kind == "swap4":
            specs.append(["swap4", d, d + lsuf, d + ".t" + lsuf])
        else:
            specs.append(["symswap", d, d + ".t" + lsuf, target])
    if kind == "symswap" and where == "both":
        # two symswappers on one name would undo each other's work
        specs = specs[:1]
    return specs


def slot_objects(kind, main, target):
    objs = [main, ("link", target)]
    if kind == "symswap":
        objs = [main, ("optlink", target)]
    return objs


def slot_names(slot):
    return [slot, slot + ".l", slot + ".l2", slot + ".t.l", slot + ".t.l2"]


def build_group(parent_src, slot, main, target, layout):
    """Create slot (dir with mirror entries, or file) and its two symlinks
    to target on the backing store."""
    p = os.path.join(parent_src, slot)
    if main[0] == "dir":
        os.mkdir(p)
        A.ensure_mirror(p, layout)
    else:
        with open(p, "wb") as f:
            f.write(b"workspace data\n")
    os.symlink(target, p + ".l")
    os.symlink(target, p + ".l2")


def repair(layout, groups):
    """Put the attacker's tree back together (racers paused)."""
    for parent_src, slot, main, target, kind in groups:
        objs = slot_objects(kind, main, target)
        if kind != "symswap":
            objs.append(("link", target))          # the .l2 link
        where = A.ensure_slots(parent_src, slot_names(slot), objs)
        if main[0] == "dir" and where:
            A.ensure_mirror(os.path.join(parent_src, where), layout)
        if main[0] == "file" and where:
            fd = os.open(os.path.join(parent_src, where),
                         os.O_WRONLY | os.O_NOFOLLOW)
            os.close(fd)
    A.sweep_atk(layout.ws_src(), layout)


def wipe_ws(layout):
    fd = os.open(layout.ws_src(), A.DIRFLAGS)
    try:
        for n in os.listdir(fd):
            A.rmtree_at(fd, n)
    finally:
        os.close(fd)


def run_rounds(layout, mount, cls, rounds, make_groups, make_ops):
    """The common loop of classes 1 and 2."""
    st = STATS[cls]
    total = A.iterations(cls)
    per = max(1, total // len(rounds))
    done = 0
    for ri, (target, kind, where) in enumerate(rounds):
        n = per if ri < len(rounds) - 1 else max(1, total - done)
        wipe_ws(layout)
        groups = make_groups(target, kind)
        for parent_src, slot, main, tgt, _ in groups:
            build_group(parent_src, slot, main, tgt, layout)
        specs = []
        for parent_src, slot, main, tgt, _ in groups:
            rel = os.path.relpath(parent_src, layout.src)
            specs += racer_specs(kind, where, parent_src,
                                 os.path.join(layout.mnt, rel), slot, tgt)
        ops = make_ops()
        with A.Watchdog(layout.mnt, 60 + n * 0.05, st,
                        f"class {cls} round {target} {kind} {where}"), \
                A.Racers(specs, stats=st) as racers:
            dirty = 0
            for i in range(n):
                name, fn = ops[(i * 7 + ri) % len(ops)]
                found = []
                ok = A.run_op(layout, st, name, fn, found)
                st.iterations += 1
                done += 1
                A.check_round(layout, st,
                              f"{name} [{kind}/{where} -> {target}]", found)
                dirty += 1
                if (ok and name in A.DESTRUCTIVE) or dirty >= 16:
                    racers.pause()
                    try:
                        repair(layout, groups)
                    finally:
                        racers.resume()
                    dirty = 0
        # A round must have raced: otherwise the test proves nothing.
        assert racers.rounds > 0, f"racers never ran: {racers.outputs}"
    wipe_ws(layout)
    assert not layout.check(), layout.check()


def assert_clean(cls):
    st = STATS[cls]
    assert st.escapes == 0 and st.failures == 0, (
        f"class {cls}: {st.escapes} escapes, {st.failures} failures in "
        f"{st.iterations} iterations:\n  " + "\n  ".join(st.details))


def test_class1_intermediate_dir_swapped(layout, amount):
    """Intermediate directory ws/d swapped for a symlink to "/",
    "../../..", the canary dir (absolute and relative) or the sibling
    workspace, during every path operation on ws/d/NAME."""
    L = layout
    targets = ["/", "../../..", os.path.join(L.base, L.CDIR),
               "../../" + L.CDIR, "../" + L.SIB]

    def groups(target, kind):
        return [(L.ws_src(), "d", ("dir", None), target, kind)]

    def ops():
        d = L.ws_mnt("d")
        return A.path_ops(L, d, os.path.join(d, L.CF),
                          os.path.join(d, L.CSUB))
    run_rounds(L, amount, 1, rounds_for(targets), groups, ops)
    assert_clean(1)


def test_class2_final_component_swapped(layout, amount):
    """Final components ws/f (file) and ws/sd (dir) swapped for symlinks to
    canary files and dirs outside the workspace, during every path
    operation on them."""
    L = layout
    ftargets = [os.path.join(L.base, L.CDIR, L.CF),
                "../../" + L.CDIR + "/" + L.CF,
                "../" + L.SIB + "/" + L.CF,
                "../../../" + L.CF,
                "../../" + L.TOP]
    dtargets = [os.path.join(L.base, L.CDIR, L.CSUB),
                "../../" + L.CDIR,
                "../" + L.SIB + "/" + L.CSUB,
                "../../..",
                "/"]
    pairs = dict(zip(ftargets, dtargets))

    def groups(target, kind):
        return [(L.ws_src(), "f", ("file", None), target, kind),
                (L.ws_src(), "sd", ("dir", None), pairs[target], kind)]

    def ops():
        return A.path_ops(L, L.ws_mnt(), L.ws_mnt("f"), L.ws_mnt("sd"))
    run_rounds(L, amount, 2, rounds_for(ftargets), groups, ops)
    assert_clean(2)


# --- class 10 -----------------------------------------------------------

def climb_links(L):
    """name -> target of the crafted symlinks."""
    links = {"dotdot": "..", "dot": ".", "self": "./self",
             "loop-a": "loop-b", "loop-b": "loop-a"}
    tails = [L.TOP, L.CDIR + "/" + L.CF, L.SIB + "/" + L.CF, L.CF,
             os.path.basename(L.base) + "/" + L.TOP]
    for k in range(1, 7):
        for j, tail in enumerate(tails):
            links[f"up{k}-{j}"] = "../" * k + tail
            links[f"mid{k}-{j}"] = "x/" + "../" * k + tail
            links[f"deep{k}-{j}"] = "x/y/../" + "../" * k + tail
    links["abs-top"] = os.path.join(L.base, L.TOP)
    links["abs-climb"] = "/../../.." + os.path.join(L.base, L.TOP)
    for j in range(40):
        links[f"chain{j}"] = f"chain{j + 1}" if j < 39 else "../" * 6 + L.TOP
    for j in range(8):
        links[f"short{j}"] = (f"short{j + 1}" if j < 7
                              else "../../../../../" + L.TOP)
    for tail in (L.TOP, ""):
        k = (4095 - len(tail)) // 3
        t = "../" * k + tail
        t = "." * 0 + t
        links[f"long{len(tail)}"] = ("./" * ((4095 - len(t)) // 2) + t)[:4095]
    links["longabs"] = ("/" + "./" * 2040 + L.TOP)[:4095]
    links["dots"] = "a/../" * 819
    return links


def resolve_view(linkpath, target):
    """Where the kernel goes when it follows target from linkpath (as seen
    by the caller), purely lexically (the mount resolves ".." in its own
    dcache)."""
    if target.startswith("/"):
        return posixpath.normpath(target)
    return posixpath.normpath(posixpath.join(posixpath.dirname(linkpath),
                                             target))


def inside(path, root):
    return path == root or path.startswith(root + "/")


def follow_one(wsm, place, name, alt):
    """readlink and follow one crafted link through the mount. Returns
    (outcomes, problems, data): what happened, readlink answers that leave
    the workspace, and what the follow read (bytes or a listing)."""
    lp = os.path.join(wsm, *place, name)
    outcomes, problems, data = [], [], None
    try:
        t = os.readlink(lp)
        outcomes.append("readlink ok")
    except OSError as e:
        outcomes.append("readlink " + A.errname(e.errno))
        t = None
    if t is not None:
        view = resolve_view(lp, t)
        # The mount racer may move the link's directory between our
        # lookup and wsfs's answer, and the kernel follows from where the
        # dentry is then: judge readlink by the place that makes it look
        # best (a follow that really leaves is caught by the canaries).
        if alt and not inside(view, wsm):
            view = resolve_view(os.path.join(wsm, *alt, name), t)
        if not inside(view, wsm):
            problems.append(f"readlink {lp} -> {t[:80]!r} resolves to "
                            f"{view[:120]} outside the workspace")
    try:
        fd = os.open(lp, os.O_RDONLY)
        try:
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                data = ("names", os.listdir(fd))
            else:
                data = os.read(fd, 65536)
        finally:
            os.close(fd)
        outcomes.append("follow ok")
    except OSError as e:
        outcomes.append("follow " + A.errname(e.errno))
    return outcomes, problems, data


def follow_batch(wsm, items):
    """follow_one for many links (run as another user by call_as)."""
    return [follow_one(wsm, place, name, alt) for place, name, alt in items]


ALT = {("a2", "b", "c"): ("c2",), ("c2",): ("a2", "b", "c")}


@pytest.mark.parametrize("racer", ["backing", "mount", "mount-user"])
def test_class10_climbing_symlinks(layout, amount, racer):
    """Symlinks crafted to climb ("..", "x/../../y", chains of 40 (ELOOP),
    loops, 4095-byte targets, one symlink inode hard-linked at depths 0,
    1 and 3) in ws/a/b/c, while a racer moves the link's directory to a
    shallower depth and back. readlink through the mount must return
    targets that stay inside the workspace from the caller's view, and
    following them must never reach a canary.

    racer=backing moves ws/a/b/c on the backing store (another node: the
    kernel's dentries go stale): strict, 0 escapes.

    racer=mount moves the link's own directory (ws/a2/b/c <-> ws/c2)
    through the mount while root follows the links. The kernel walks the
    ".." of the answer after wsfs replied, from wherever a concurrent
    rename has moved the dentry meanwhile, so the walk can overshoot the
    workspace root and even the mount root: a kernel-walk race, which no
    daemon-side depth can close. Such a follow reaches only what the
    caller could open by path with its own rights; these are counted as
    the class's "residual" (README, Security), and anything else (a
    write, a change, an unreadable target) is still an escape.

    racer=mount-user is the same race for an unprivileged uid, for whom
    every canary file is unreadable: a canary read, or a listing of a
    directory it could not list by path, would be a gain of permission
    through wsfs (an escape); a listing of a world-readable directory
    outside (the mount's parent) is the same residual as for root.
    """
    L = layout
    st = STATS[10]
    links = climb_links(L)
    ws = L.ws_src()
    os.makedirs(os.path.join(ws, "a", "b", "c", "x", "y"))
    os.makedirs(os.path.join(ws, "a2", "b", "c", "x", "y"))
    for base in ("a/b/c", "a2/b/c", "."):
        for name, t in links.items():
            os.symlink(t, os.path.join(ws, base, name))
    names = sorted(links)
    # One symlink inode at two depths: hard links of the depth-3 links in
    # the workspace root and in a/ (each name must be rewritten for the
    # directory it is found in, not for where the inode was first seen).
    hard = []
    for name in names:
        if name.startswith(("up", "chain", "abs", "deep", "mid")):
            for place in ((), ("a",)):
                h = "hard-" + name
                os.link(os.path.join(ws, "a", "b", "c", name),
                        os.path.join(ws, *place, h), follow_symlinks=False)
                hard.append((place, h))
    if racer == "backing":
        specs = [["move", L.ws_src("a", "b", "c"), L.ws_src("c")]]
        places = [("a", "b", "c"), ("c",), ()]
        pairs = [(p, n) for n in names for p in places] + hard
    else:
        specs = [["move", L.ws_mnt("a2", "b", "c"), L.ws_mnt("c2")]]
        places = [("a2", "b", "c"), ("c2",)]
        pairs = [(p, n) for n in names for p in places]
    residual = {"mount": A.only_reads,
                "mount-user": A.others_can_list_only}.get(racer)
    wsm = L.ws_mnt()
    total = max(1, A.iterations(10) // 3)
    batch = 1 if racer != "mount-user" else 50
    bad_errnos = {}
    with A.Watchdog(L.mnt, 60 + total * 0.05, st, f"class 10 {racer}"), \
            A.Racers(specs, stats=st):
        for i in range(0, total, batch):
            items = [pairs[(i + k) % len(pairs)] for k in range(
                min(batch, total - i))]
            items = [(p, n, ALT.get(p)) for p, n in items]
            if racer == "mount-user":
                res = wsfstest.call_as(A.USER_UID, A.USER_UID, follow_batch,
                                       wsm, items)
            else:
                res = follow_batch(wsm, items)
            found = []
            for (place, name, _), (outcomes, problems, data) in zip(items,
                                                                    res):
                for o in outcomes:
                    st.errnos[o] += 1
                found += problems
                if isinstance(data, tuple):
                    L.scan_names(data[1], "follow " + name, found)
                else:
                    L.scan(data, "follow " + name, found)
                if name.startswith(("chain", "loop")) and \
                        outcomes[-1] != "follow ok" and outcomes[-1] not in (
                        "follow ELOOP", "follow ENOENT", "follow ESTALE"):
                    bad_errnos[name] = outcomes[-1]
            st.iterations += len(items)
            what = ", ".join("/".join(p + (n,)) for p, n, _ in items[:3])
            A.check_round(L, st, f"follow {what} ({racer} racer)", found,
                          residual=residual)
    if bad_errnos:
        st.notes.append(f"loops/chains gave other than ELOOP: {bad_errnos}")
    assert_clean(10)

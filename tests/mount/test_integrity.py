"""Data integrity under a long random mix of operations.

Data: write, read, truncate, fallocate, mmap read/write, copy_file_range
and O_DIRECT reads on a few files in the mount, checked against an in-memory model after every
read. Metadata: random mkdir/create/rename/link/symlink/unlink/rmdir/chmod/
chown run on the mount and on a native directory in lockstep; every errno
must agree, and at the end the tree listed through the mount equals the
backing tree listed directly and the native tree.

WSFS_INTEGRITY_OPS sets the number of operations (default 3000),
WSFS_INTEGRITY_SEED the seed (default fixed, so a failure reproduces).
"""
import collections
import errno
import mmap
import os
import random
import stat

from wsfstest import (FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, fallocate,
                      outcome, tree)

NOPS = int(os.environ.get("WSFS_INTEGRITY_OPS", "3000"))
SEED = int(os.environ.get("WSFS_INTEGRITY_SEED", "20261130"))
MAXSIZE = 3 << 20
PAGE = mmap.PAGESIZE


class DataRun:
    def __init__(self, d, rng, nfiles=3):
        self.d = d
        self.rng = rng
        self.paths = [os.path.join(d, f"f{i}") for i in range(nfiles)]
        self.model = [bytearray() for _ in self.paths]
        self.fds = [os.open(p, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                    for p in self.paths]
        self.log = collections.deque(maxlen=30)
        self.reads = 0

    def check(self, i, off, got):
        want = bytes(self.model[i][off:off + len(got)])
        if got != want:
            bad = next(k for k in range(len(got)) if got[k] != want[k]) \
                if len(got) == len(want) else None
            raise AssertionError(
                f"seed {SEED}: file f{i} differs from model at offset "
                f"{off}+{bad} (read {len(got)} bytes, model size "
                f"{len(self.model[i])}); last ops:\n" + "\n".join(self.log))
        self.reads += 1

    def rand_range(self, limit, maxlen=256 << 10):
        off = self.rng.randrange(0, max(1, limit))
        if self.rng.random() < 0.3:
            off -= off % PAGE          # aligned cases too
        ln = self.rng.choice([1, 7, 512, 4096, 65536,
                              self.rng.randrange(1, maxlen)])
        return off, ln

    # --- operations ---------------------------------------------------------
    def op_write(self):
        i = self.rng.randrange(len(self.fds))
        off, ln = self.rand_range(MAXSIZE - (256 << 10))
        data = self.rng.randbytes(ln)
        n = os.pwrite(self.fds[i], data, off)
        assert n == ln
        m = self.model[i]
        if len(m) < off + ln:
            m.extend(b"\0" * (off + ln - len(m)))
        m[off:off + ln] = data
        self.log.append(f"pwrite f{i} off={off} len={ln}")

    def op_read(self):
        i = self.rng.randrange(len(self.fds))
        off, ln = self.rand_range(len(self.model[i]) + 65536, 1 << 20)
        got = os.pread(self.fds[i], ln, off)
        self.log.append(f"pread f{i} off={off} len={ln} -> {len(got)}")
        want_len = max(0, min(ln, len(self.model[i]) - off))
        assert len(got) == want_len, (
            f"seed {SEED}: short/long read f{i} off={off} len={ln}: got "
            f"{len(got)}, model {want_len}; last ops:\n" +
            "\n".join(self.log))
        self.check(i, off, got)

    def op_truncate(self):
        i = self.rng.randrange(len(self.fds))
        size = self.rng.choice([0, self.rng.randrange(0, MAXSIZE),
                                len(self.model[i]) // 2,
                                len(self.model[i]) + 12345])
        os.ftruncate(self.fds[i], size)
        m = self.model[i]
        if size < len(m):
            del m[size:]
        else:
            m.extend(b"\0" * (size - len(m)))
        self.log.append(f"ftruncate f{i} {size}")

    def op_fallocate(self):
        i = self.rng.randrange(len(self.fds))
        off, ln = self.rand_range(MAXSIZE - (256 << 10))
        mode = self.rng.choice([0, FALLOC_FL_KEEP_SIZE,
                                FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE])
        fallocate(self.fds[i], mode, off, ln)
        m = self.model[i]
        if mode == 0 and off + ln > len(m):
            m.extend(b"\0" * (off + ln - len(m)))
        elif mode & FALLOC_FL_PUNCH_HOLE:
            end = min(off + ln, len(m))
            if off < end:
                m[off:end] = b"\0" * (end - off)
        self.log.append(f"fallocate f{i} mode={mode} off={off} len={ln}")
        assert os.fstat(self.fds[i]).st_size == len(m), \
            f"seed {SEED}: size after fallocate: last ops:\n" + \
            "\n".join(self.log)

    def op_mmap_read(self):
        i = self.rng.randrange(len(self.fds))
        size = len(self.model[i])
        if size == 0:
            return
        fd = os.open(self.paths[i], os.O_RDONLY)
        try:
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ) as m:
                off, ln = self.rand_range(size, 1 << 20)
                got = m[off:off + ln]
                self.log.append(f"mmap-read f{i} off={off} len={ln}")
                self.check(i, off, got)
        finally:
            os.close(fd)

    def op_mmap_write(self):
        i = self.rng.randrange(len(self.fds))
        size = len(self.model[i])
        if size == 0:
            return
        off, ln = self.rand_range(size, 128 << 10)
        ln = min(ln, size - off)
        if ln <= 0:
            return
        data = self.rng.randbytes(ln)
        with mmap.mmap(self.fds[i], size, mmap.MAP_SHARED) as m:
            m[off:off + ln] = data
            if self.rng.random() < 0.5:
                m.flush()
        self.model[i][off:off + ln] = data
        self.log.append(f"mmap-write f{i} off={off} len={ln}")

    def op_copy(self):
        a = self.rng.randrange(len(self.fds))
        b = self.rng.randrange(len(self.fds))
        off_in, ln = self.rand_range(len(self.model[a]) + 4096, 512 << 10)
        off_out = self.rng.randrange(0, MAXSIZE - (512 << 10))
        if a == b and abs(off_in - off_out) < ln:
            off_out = off_in + ln + self.rng.randrange(0, 65536)
        n = os.copy_file_range(self.fds[a], self.fds[b], ln, off_in, off_out)
        src = bytes(self.model[a][off_in:off_in + ln])
        assert n <= len(src), f"copied {n} > available {len(src)}"
        # a short copy is legal; what was copied must be what is there
        src = src[:n]
        m = self.model[b]
        if n:
            if len(m) < off_out + n:
                m.extend(b"\0" * (off_out + n - len(m)))
            m[off_out:off_out + n] = src
        self.log.append(f"copy_file_range f{a}@{off_in} -> f{b}@{off_out} "
                        f"len={ln} -> {n}")

    def op_direct_read(self):
        """An O_DIRECT read must see what buffered writes and mmap stores
        put there (the kernel writes dirty pages back first)."""
        i = self.rng.randrange(len(self.fds))
        size = len(self.model[i])
        off = self.rng.randrange(0, size + PAGE) // PAGE * PAGE
        ln = self.rng.choice([PAGE, 16 * PAGE, 64 * PAGE])
        buf = mmap.mmap(-1, ln)
        fd = os.open(self.paths[i], os.O_RDONLY | os.O_DIRECT)
        try:
            n = os.preadv(fd, [buf], off)
        finally:
            os.close(fd)
        self.log.append(f"direct-read f{i} off={off} len={ln} -> {n}")
        want_len = max(0, min(ln, size - off))
        assert n == want_len, (
            f"seed {SEED}: O_DIRECT read f{i} off={off} len={ln}: got {n}, "
            f"model {want_len}; last ops:\n" + "\n".join(self.log))
        self.check(i, off, buf[:n])
        buf.close()

    def op_fsync(self):
        i = self.rng.randrange(len(self.fds))
        os.fsync(self.fds[i])
        self.log.append(f"fsync f{i}")

    def op_reopen(self):
        i = self.rng.randrange(len(self.fds))
        os.close(self.fds[i])
        self.fds[i] = os.open(self.paths[i], os.O_RDWR)
        self.log.append(f"reopen f{i}")

    WEIGHTS = {"write": 25, "read": 25, "truncate": 4, "fallocate": 8,
               "mmap_read": 8, "mmap_write": 10, "copy": 10, "fsync": 3,
               "reopen": 4, "direct_read": 5}

    def run(self, nops):
        names = list(self.WEIGHTS)
        weights = [self.WEIGHTS[n] for n in names]
        counts = collections.Counter()
        for _ in range(nops):
            name = self.rng.choices(names, weights)[0]
            getattr(self, "op_" + name)()
            counts[name] += 1
        return counts

    def close(self):
        for fd in self.fds:
            os.fsync(fd)
            os.close(fd)


def test_data_integrity(mount, ws):
    rng = random.Random(SEED)
    r = DataRun(ws, rng)
    try:
        counts = r.run(NOPS)
    finally:
        r.close()
    assert r.reads > NOPS // 5
    assert all(counts[k] > 0 for k in DataRun.WEIGHTS), counts
    for i, p in enumerate(r.paths):
        with open(p, "rb") as f:
            assert f.read() == bytes(r.model[i]), f"f{i} via the mount"
        with open(mount.src("ws1", "t", f"f{i}"), "rb") as f:
            assert f.read() == bytes(r.model[i]), f"f{i} on the backing store"


def test_data_integrity_uring_off(mount_factory):
    """The same mix on the plain-syscall data path."""
    m = mount_factory(opts={"uring": "off"})
    d = m.path("ws1")
    rng = random.Random(SEED + 1)
    r = DataRun(d, rng)
    try:
        r.run(max(300, NOPS // 3))
    finally:
        r.close()
    for i in range(len(r.paths)):
        with open(m.src("ws1", f"f{i}"), "rb") as f:
            assert f.read() == bytes(r.model[i])


# --- metadata stress ----------------------------------------------------------------

NAMES = ["a", "b", "c", "dd"]


def rand_path(rng):
    depth = rng.choices([1, 2, 3], [5, 4, 2])[0]
    return "/".join(rng.choice(NAMES) for _ in range(depth))


def rand_link_target(rng, path):
    """A relative target that stays inside the root as stored (leading ..
    no deeper than the link's directory, then plain names), so readlink
    through the mount returns it unchanged."""
    depth = path.count("/")
    ups = rng.randint(0, depth)
    return "/".join([".."] * ups + [rng.choice(NAMES)
                                    for _ in range(rng.randint(1, 2))])


def meta_ops(rng, n):
    """A list of n operations, each (name, args), independent of results."""
    ops = []
    for _ in range(n):
        k = rng.choices(["mkdir", "create", "write", "rename", "link",
                         "symlink", "unlink", "rmdir", "chmod", "chown",
                         "truncate", "exchange"],
                        [12, 14, 8, 12, 6, 6, 10, 8, 6, 4, 4, 3])[0]
        p, q = rand_path(rng), rand_path(rng)
        if k == "mkdir":
            ops.append((k, (p, rng.choice([0o755, 0o700, 0o2775, 0o1777]))))
        elif k == "create":
            ops.append((k, (p, rng.choice([0o644, 0o600, 0o4755]),
                            rng.randbytes(rng.randrange(0, 5000)))))
        elif k == "write":
            ops.append((k, (p, rng.randrange(0, 8000),
                            rng.randbytes(rng.randrange(1, 3000)))))
        elif k in ("rename", "link", "exchange"):
            ops.append((k, (p, q)))
        elif k == "symlink":
            ops.append((k, (rand_link_target(rng, q), q)))
        elif k in ("unlink", "rmdir"):
            ops.append((k, (p,)))
        elif k == "chmod":
            ops.append((k, (p, rng.choice([0o644, 0o755, 0o700, 0o6755,
                                           0o1777, 0o444]))))
        elif k == "chown":
            ops.append((k, (p, rng.choice([0, 1000, 1001]),
                            rng.choice([0, 1000, 2000]))))
        elif k == "truncate":
            ops.append((k, (p, rng.randrange(0, 10000))))
    return ops


def apply(root, k, args):
    from wsfstest import RENAME_EXCHANGE, renameat2
    j = lambda p: os.path.join(root, p)  # noqa: E731
    if k == "mkdir":
        os.mkdir(j(args[0]), args[1])
    elif k == "create":
        fd = os.open(j(args[0]), os.O_CREAT | os.O_EXCL | os.O_WRONLY
                     | os.O_NOFOLLOW, args[1])
        try:
            os.write(fd, args[2])
        finally:
            os.close(fd)
    elif k == "write":
        fd = os.open(j(args[0]), os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.pwrite(fd, args[2], args[1])
        finally:
            os.close(fd)
    elif k == "rename":
        os.rename(j(args[0]), j(args[1]))
    elif k == "exchange":
        renameat2(j(args[0]), j(args[1]), RENAME_EXCHANGE)
    elif k == "link":
        os.link(j(args[0]), j(args[1]), follow_symlinks=False)
    elif k == "symlink":
        os.symlink(args[0], j(args[1]))
    elif k == "unlink":
        os.unlink(j(args[0]))
    elif k == "rmdir":
        os.rmdir(j(args[0]))
    elif k == "chmod":
        st = os.lstat(j(args[0]))
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(j(args[0]), args[1])
    elif k == "chown":
        os.chown(j(args[0]), args[1], args[2], follow_symlinks=False)
    elif k == "truncate":
        fd = os.open(j(args[0]), os.O_WRONLY | os.O_NOFOLLOW)
        try:
            os.ftruncate(fd, args[1])
        finally:
            os.close(fd)


def test_metadata_stress(mount, ws, native):
    rng = random.Random(SEED + 2)
    ops = meta_ops(rng, NOPS)
    ok = collections.Counter()
    for n, (k, args) in enumerate(ops):
        a = outcome(apply, native, k, args)
        b = outcome(apply, ws, k, args)
        assert a == b, (f"seed {SEED}: op {n} {k}{args[:2]}: native {a}, "
                        f"mount {b}")
        if a[0] == "ok":
            ok[k] += 1
    assert sum(ok.values()) > NOPS // 8, ok
    assert ok["rename"] and ok["link"] and ok["symlink"] and ok["rmdir"], ok
    tn = tree(native)
    tm = tree(ws)
    tb = tree(mount.src("ws1", "t"))
    assert len(tn) > 10
    assert tm == tb, "mount and backing trees differ"
    assert tm == tn, "mount and native trees differ"
    # every directory's nlink and every name's inode agree with the backing
    for rel in tm:
        assert os.lstat(os.path.join(ws, rel)).st_nlink == \
            os.lstat(mount.src("ws1", "t", rel)).st_nlink, rel

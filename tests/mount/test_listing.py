"""Readdirplus gives the attributes of a small directory's entries and
leaves a big one's out (fs/ops.c, ops_dir_many): a listing of 4,000
entries or more is mostly read for its names, and its first chunk would
stat some 200 inodes before the first name came back."""
import os

import wsfstest

# Long names: ext4 takes 8 bytes plus the name, rounded up to 4, per
# entry; 8,000 such entries make a directory far above 128 KiB there (and
# above it on tmpfs, 20 bytes an entry).
NAME = "an-entry-name-long-enough-to-fill-blocks-{:05d}"


def lookups(m):
    return wsfstest.op_count(m, "lookup")


def fill(m, d, n):
    """n empty files in d, made on the backing store."""
    src = m.src("ws1", d)
    os.makedirs(src)
    for i in range(n):
        os.close(os.open(os.path.join(src, NAME.format(i)),
                         os.O_WRONLY | os.O_CREAT, 0o640))
    return src


def listed(m, d):
    with os.scandir(m.path("ws1", d)) as it:
        return {e.name: e.is_file(follow_symlinks=False) for e in it}


def test_big_listing_stats_no_inode(mount_factory):
    # Long timeouts: what the test counts must not expire on a slow day.
    m = mount_factory(opts={"entry_timeout": "60", "attr_timeout": "60"})
    src = fill(m, "big", 8000)
    assert os.stat(src).st_size >= 128 * 1024
    before = wsfstest.status(m)["inodes"]
    names = listed(m, "big")
    assert len(names) == 8000
    assert all(names[NAME.format(i)] for i in range(8000))
    # The directory itself; none of its 8,000 files.
    assert wsfstest.status(m)["inodes"] - before <= 2
    # A stat after the listing is a lookup, and sees the file as it is.
    st = os.lstat(m.path("ws1", "big", NAME.format(4321)))
    assert st.st_mode & 0o777 == 0o640 and st.st_size == 0


def test_small_listing_gives_attributes(mount_factory):
    m = mount_factory(opts={"entry_timeout": "60", "attr_timeout": "60"})
    fill(m, "small", 50)
    names = listed(m, "small")
    assert len(names) == 50
    n = lookups(m)
    for name in names:
        st = os.lstat(m.path("ws1", "small", name))
        assert st.st_mode & 0o777 == 0o640
    # Every stat was answered by what the listing gave the kernel.
    assert lookups(m) == n

/*
 * Unit tests for the inode table (fs/inode.c) on a real temporary
 * directory: lookups never follow links, hidden names at the top,
 * references, fd eviction and reopening by handle, symlinks and
 * directories keyed by the directory they are seen in, kernel-view depth,
 * renames that move the inode the kernel moved.
 * Needs root (open_by_handle_at wants CAP_DAC_READ_SEARCH).
 */
#include "config.h"

#include <sys/stat.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "wsfs.h"

struct wsfs wsfs;
static char base[64];

static void
mk(const char *rel, mode_t mode)
{
	char	p[256];
	int	fd;

	snprintf(p, sizeof p, "%s/%s", base, rel);
	if (S_ISDIR(mode))
		assert_int_equal(mkdir(p, mode & 07777), 0);
	else {
		assert_true((fd = open(p, O_CREAT | O_WRONLY, mode & 07777)) >= 0);
		close(fd);
	}
}

static void
ln_s(const char *target, const char *rel)
{
	char	p[256];

	snprintf(p, sizeof p, "%s/%s", base, rel);
	assert_int_equal(symlink(target, p), 0);
}

static struct inode *
look(struct inode *dir, const char *name, int want)
{
	struct fuse_entry_param	e;
	int			r;

	r = inode_lookup(dir, name, &e);
	assert_int_equal(r, want);
	return r == 0 ? inode_from_ino(e.ino) : NULL;
}

/* The depth readlink would use for in: want, or -errno. */
static void
depth_is(struct inode *in, int want)
{
	unsigned int	depth;
	int		r = inode_kdepth(in, &depth);

	assert_int_equal(r < 0 ? r : (int)depth, want);
}

static int
setup(void **state)
{
	log_open("test_inode", LOG_TO_STDERR, 0);
	if (geteuid() != 0) {
		print_message("skipped: the inode table needs root "
		    "(open_by_handle_at)\n");
		return -1;
	}
	snprintf(base, sizeof base, "/tmp/wsfs-inode-XXXXXX");
	assert_non_null(mkdtemp(base));
	mk("ws", S_IFDIR | 0755);
	mk("ws/a", S_IFDIR | 0755);
	mk("ws/a/b", S_IFDIR | 0755);
	mk("ws/f", S_IFREG | 0644);
	mk(".wsfs", S_IFDIR | 0700);
	mk("topfile", S_IFREG | 0644);
	ln_s("/etc", "ws/etc-link");
	ln_s("/x", "ws/a/b/abs");
	memset(&wsfs, 0, sizeof wsfs);
	conf_init(&wsfs.conf);
	wsfs.source = base;
	wsfs.source_fd = open(base, O_PATH | O_DIRECTORY | O_CLOEXEC);
	wsfs.source_fd_rd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	wsfs.proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(wsfs.source_fd >= 0 && wsfs.source_fd_rd >= 0);
	inode_table_init(wsfs.source_fd, 4);
	return 0;
}

static int
teardown(void **state)
{
	char	cmd[128];

	snprintf(cmd, sizeof cmd, "rm -rf %s", base);
	return system(cmd) == 0 ? 0 : -1;
}

static void
test_top_level(void **state)
{
	struct inode	*root = inode_root(), *ws;

	ws = look(root, "ws", 0);
	assert_true(ws->ws_root == ws);
	assert_int_equal(ws->type, S_IFDIR);
	/* Dot names and non-directories at the top are not workspaces. */
	look(root, ".wsfs", -ENOENT);
	look(root, "topfile", -ENOENT);
	look(root, "nothing", -ENOENT);
	/* One inode for one workspace, counted per lookup. */
	assert_ptr_equal(look(root, "ws", 0), ws);
	assert_int_equal(ws->nlookup, 2);
	inode_forget(ws, 1);
}

static void
test_no_follow(void **state)
{
	struct inode	*ws = look(inode_root(), "ws", 0), *l;
	struct stat	 st;

	/* A symlink to /etc is the symlink, never /etc. */
	l = look(ws, "etc-link", 0);
	assert_int_equal(l->type, S_IFLNK);
	assert_int_equal(inode_stat(l, &st), 0);
	assert_true(S_ISLNK(st.st_mode));
	/* A lookup "through" it is not a directory lookup at all. */
	look(l, "passwd", -ENOTDIR);
	look(ws, "a/b", -EINVAL);
	inode_forget(l, 1);
	inode_forget(ws, 1);
}

/* The fds this process really has open. */
static int
open_fds(void)
{
	DIR	*d;
	int	 n = 0;

	assert_non_null(d = opendir("/proc/self/fd"));
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n - 3;		/* ".", ".." and d's own fd */
}

static void
test_eviction_and_reopen(void **state)
{
	struct inode	*ws = look(inode_root(), "ws", 0), *in[40];
	unsigned long	 n, fds;
	struct stat	 st, st2;
	char		 name[256];
	int		 i, fd, fds0 = open_fds();

	for (i = 0; i < 40; i++) {
		snprintf(name, sizeof name, "ws/e%d", i);
		mk(name, S_IFREG | 0600);
		in[i] = look(ws, name + 3, 0);
	}
	inode_stats(&n, &fds);
	/* max_fds is 4: the rest gave their fds back (roots are pinned). */
	assert_true(fds <= 4 + 2);
	assert_true(n >= 41);
	/* Closed for real, after the table's lock, by the closer thread. */
	inode_closes_wait();
	assert_true(open_fds() <= fds0 + 4 + 2);
	for (i = 0; i < 40; i++) {
		assert_true((fd = inode_fd_get(in[i])) >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		snprintf(name, sizeof name, "%s/ws/e%d", base, i);
		assert_int_equal(stat(name, &st2), 0);
		assert_int_equal(st.st_ino, st2.st_ino);
		inode_fd_put(in[i]);
	}
	inode_stats(&n, &fds);
	assert_true(fds <= 4 + 2);
	/* Opened for I/O by handle, even after its name changed. */
	snprintf(name, sizeof name, "%s/ws/e0", base);
	{
		char	to[256];

		snprintf(to, sizeof to, "%s/ws/renamed", base);
		assert_int_equal(rename(name, to), 0);
		assert_true((fd = inode_open(in[0], O_RDONLY)) >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		assert_int_equal(stat(to, &st2), 0);
		assert_int_equal(st.st_ino, st2.st_ino);
		close(fd);
	}
	for (i = 0; i < 40; i++)
		inode_forget(in[i], 1);
	inode_stats(&n, &fds);
	assert_true(n <= 2);
	inode_closes_wait();
	assert_true(open_fds() <= fds0);
	inode_forget(ws, 1);
}

static void
test_symlink_per_directory_and_depth(void **state)
{
	struct inode	*ws = look(inode_root(), "ws", 0), *a, *b, *l1, *l2;
	char		 from[256], to[256];

	a = look(ws, "a", 0);
	b = look(a, "b", 0);
	l1 = look(b, "abs", 0);
	depth_is(l1, 2);
	depth_is(b, 2);
	/* The same symlink inode hard-linked at the top: another inode. */
	snprintf(from, sizeof from, "%s/ws/a/b/abs", base);
	snprintf(to, sizeof to, "%s/ws/abs2", base);
	assert_int_equal(linkat(AT_FDCWD, from, AT_FDCWD, to, 0), 0);
	l2 = look(ws, "abs2", 0);
	assert_ptr_not_equal(l1, l2);
	assert_int_equal(l1->ino, l2->ino);
	depth_is(l2, 0);
	/* A rename through the mount moves b to the top: depth follows. */
	snprintf(from, sizeof from, "%s/ws/a/b", base);
	snprintf(to, sizeof to, "%s/ws/b", base);
	assert_int_equal(rename(from, to), 0);
	inode_renamed(a, "b", ws, "b", 0);
	depth_is(l1, 1);
	/* ".." is the parent the kernel knows, never above the root. */
	assert_ptr_equal(look(b, "..", 0), ws);
	assert_ptr_equal(look(ws, "..", 0), ws);
	inode_forget(ws, 2);
	inode_forget(l2, 1);
	inode_forget(l1, 1);
	inode_forget(b, 1);
	inode_forget(a, 1);
	inode_forget(ws, 1);
}

/* An inode number that comes back for a new file is a new inode. */
/*
 * Create files ws/PREFIXn until one gets inode number ino (ext4 and tmpfs
 * hand a freed number out again soon): 1 with its path in q, or 0.
 */
static int
make_until_number(ino_t ino, const char *prefix, char *q, size_t len)
{
	struct stat	st;
	int		i, fd;

	for (i = 0; i < 200; i++) {
		snprintf(q, len, "%s/ws/%s%d", base, prefix, i);
		assert_true((fd = open(q, O_CREAT | O_WRONLY, 0644)) >= 0);
		assert_int_equal(fstat(fd, &st), 0);
		close(fd);
		if (st.st_ino == ino)
			return 1;
	}
	return 0;
}

static void
test_number_reused(void **state)
{
	struct inode	*ws = look(inode_root(), "ws", 0), *old, *neu;
	char		 p[256], q[256];
	ino_t		 ino;
	int		 fd, reused;

	mk("ws/gone", S_IFREG | 0644);
	old = look(ws, "gone", 0);
	ino = old->ino;
	snprintf(p, sizeof p, "%s/ws/gone", base);
	assert_int_equal(unlink(p), 0);
	reused = make_until_number(ino, "new", q, sizeof q);
	if (!reused) {
		print_message("note: no inode number came back; nothing to "
		    "check\n");
		inode_forget(old, 1);
		inode_forget(ws, 1);
		return;
	}
	neu = look(ws, strrchr(q, '/') + 1, 0);
	assert_ptr_not_equal(neu, old);
	assert_true((fd = inode_open(neu, O_RDONLY)) >= 0);
	close(fd);
	/* The old one is gone: never the new file under the old node id. */
	assert_int_equal(inode_open(old, O_RDONLY), -ENOENT);
	inode_forget(neu, 1);
	inode_forget(old, 1);
	inode_forget(ws, 1);
}

/*
 * A lookup guesses from the last one in its directory whether the name is
 * new to the table: right or wrong, a name leads to its one inode, and a
 * wrong guess leaves no fd behind.
 */
/* A regular file entered by its name: no fd until first use. */
static void
test_lookup_by_name(void **state)
{
	struct inode	*ws, *a, *a2, *b, *d, *e, *dir;
	char		 p[256], q[256];
	int		 fds0, fd;

	/* One node over a local filesystem: the only place it is done. */
	inode_handles(1, 1);
	ws = look(inode_root(), "ws", 0);
	mk("ws/byname-a", S_IFREG | 0644);
	inode_closes_wait();
	fds0 = open_fds();
	a = look(ws, "byname-a", 0);
	assert_int_equal(a->fd, -1);
	assert_null(a->fh);
	assert_true(a->birth != 0);
	assert_int_equal(open_fds(), fds0);
	a2 = look(ws, "byname-a", 0);
	assert_ptr_equal(a, a2);
	assert_int_equal(a->nlookup, 2);
	/* First use: opened by its name. */
	assert_true((fd = inode_fd_get(a)) >= 0);
	inode_fd_put(a);
	assert_int_equal(a->fd, fd);

	/* Renamed on the backing store: its name is gone. */
	mk("ws/byname-b", S_IFREG | 0644);
	b = look(ws, "byname-b", 0);
	snprintf(p, sizeof p, "%s/ws/byname-b", base);
	snprintf(q, sizeof q, "%s/ws/byname-b2", base);
	assert_int_equal(rename(p, q), 0);
	assert_int_equal(inode_fd_get(b), -ENOENT);
	assert_int_equal(inode_open(b, O_RDONLY), -ENOENT);

	/* Replaced by another file: ESTALE, and a lookup finds the new. */
	mk("ws/byname-d", S_IFREG | 0644);
	d = look(ws, "byname-d", 0);
	mk("ws/byname-d.new", S_IFREG | 0644);
	snprintf(p, sizeof p, "%s/ws/byname-d.new", base);
	snprintf(q, sizeof q, "%s/ws/byname-d", base);
	assert_int_equal(rename(p, q), 0);
	assert_int_equal(inode_fd_get(d), -ESTALE);
	a2 = look(ws, "byname-d", 0);
	assert_ptr_not_equal(a2, d);
	assert_true((fd = inode_fd_get(a2)) >= 0);
	inode_fd_put(a2);
	inode_forget(a2, 1);

	/* Swapped for a symlink: never followed, never taken. */
	mk("ws/byname-e", S_IFREG | 0644);
	e = look(ws, "byname-e", 0);
	snprintf(p, sizeof p, "%s/ws/byname-e", base);
	assert_int_equal(unlink(p), 0);
	assert_int_equal(symlink("/etc/passwd", p), 0);
	assert_int_equal(inode_fd_get(e), -ESTALE);

	/* Directories still take the walk. */
	dir = look(ws, "a", 0);
	assert_true(dir->fd >= 0);
	assert_null(look(ws, "byname-none", -ENOENT));
	inode_forget(dir, 1);
	inode_forget(e, 1);
	inode_forget(d, 1);
	inode_forget(b, 1);
	inode_forget(a, 2);
	inode_forget(ws, 1);
	inode_handles(0, 0);
}

/*
 * n new files prefix0.. in ws, each looked up and opened once: with
 * max_fds 4 they push the older fds out.
 */
static void
push_fds(struct inode *ws, const char *prefix, struct inode **pad, int n)
{
	char	q[64];
	int	i;

	for (i = 0; i < n; i++) {
		snprintf(q, sizeof q, "ws/%s%d", prefix, i);
		mk(q, S_IFREG | 0644);
		pad[i] = look(ws, q + 3, 0);
		assert_true(inode_fd_get(pad[i]) >= 0);
		inode_fd_put(pad[i]);
	}
}

/*
 * Under cluster locks (handles not lazy) a file is still entered by its
 * name; its first fd brings its handle, and then it is evicted and
 * reopened like any inode, never pinned.
 */
static void
test_by_name_takes_its_handle(void **state)
{
	struct inode	*ws, *f, *pad[6];
	int		 i;

	inode_handles(0, 1);
	ws = look(inode_root(), "ws", 0);
	mk("ws/eager-f", S_IFREG | 0644);
	f = look(ws, "eager-f", 0);
	assert_int_equal(f->fd, -1);
	assert_null(f->fh);
	assert_true(inode_fd_get(f) >= 0);
	inode_fd_put(f);
	assert_non_null(f->fh);
	assert_int_equal(f->pinned, 0);
	/* Others entered the same way push its fd out. */
	push_fds(ws, "eager-pad", pad, 6);
	for (i = 0; i < 6; i++)
		assert_non_null(pad[i]->fh);
	/* max_fds is 4: its fd went, its handle brings it back. */
	assert_true(f->fd < 0);
	assert_true(inode_fd_get(f) >= 0);
	inode_fd_put(f);
	for (i = 0; i < 6; i++)
		inode_forget(pad[i], 1);
	inode_forget(f, 1);
	inode_forget(ws, 1);
	inode_handles(0, 0);
}

static void
test_lazy_handles(void **state)
{
	struct inode	*ws, *old, *neu, *f, *pad[6];
	char		 p[256], q[256];
	ino_t		 ino;
	int		 i, fd, reused;

	inode_handles(1, 1);
	test_eviction_and_reopen(state);
	ws = look(inode_root(), "ws", 0);
	f = look(ws, "f", 0);
	/* Opened by its name, never evicted: no handle taken. */
	assert_true(inode_fd_get(f) >= 0);
	inode_fd_put(f);
	assert_true(f->fd >= 0);
	assert_null(f->fh);
	inode_forget(f, 1);

	mk("ws/lazy-gone", S_IFREG | 0644);
	old = look(ws, "lazy-gone", 0);
	assert_true(inode_fd_get(old) >= 0);
	inode_fd_put(old);
	ino = old->ino;
	snprintf(p, sizeof p, "%s/ws/lazy-gone", base);
	assert_int_equal(unlink(p), 0);
	/* Push its fd out: it takes the handle of the unlinked inode. */
	push_fds(ws, "lazy-pad", pad, 6);
	assert_true(old->fd < 0);
	assert_non_null(old->fh);
	inode_closes_wait();
	reused = make_until_number(ino, "lazy-new", q, sizeof q);
	if (reused) {
		neu = look(ws, strrchr(q, '/') + 1, 0);
		assert_ptr_not_equal(neu, old);
		assert_int_equal(inode_open(old, O_RDONLY), -ENOENT);
		assert_true((fd = inode_open(neu, O_RDONLY)) >= 0);
		close(fd);
		inode_forget(neu, 1);
	} else
		print_message("note: no inode number came back\n");
	for (i = 0; i < 6; i++)
		inode_forget(pad[i], 1);
	inode_forget(old, 1);
	inode_forget(ws, 1);
	inode_handles(0, 0);
}

/*
 * One symlink inode with two names in one directory is one FUSE inode;
 * renaming one name elsewhere through the mount leaves the inode with no
 * single depth: readlink says ESTALE (the kernel then looks both names up
 * again) and fresh lookups give each name an inode of its own.
 */
static void
test_hardlinked_symlink_renamed(void **state)
{
	struct inode	*ws = look(inode_root(), "ws", 0), *d1, *d2, *la, *lb;
	struct inode	*na, *nc;
	char		 from[256], to[256];

	mk("ws/h1", S_IFDIR | 0755);
	mk("ws/h1/h2", S_IFDIR | 0755);
	ln_s("/t", "ws/ha");
	snprintf(from, sizeof from, "%s/ws/ha", base);
	snprintf(to, sizeof to, "%s/ws/hb", base);
	assert_int_equal(linkat(AT_FDCWD, from, AT_FDCWD, to, 0), 0);
	la = look(ws, "ha", 0);
	lb = look(ws, "hb", 0);
	assert_ptr_equal(la, lb);
	d1 = look(ws, "h1", 0);
	d2 = look(d1, "h2", 0);
	snprintf(from, sizeof from, "%s/ws/hb", base);
	snprintf(to, sizeof to, "%s/ws/h1/h2/hc", base);
	assert_int_equal(rename(from, to), 0);
	inode_renamed(ws, "hb", d2, "hc", 0);
	depth_is(la, -ESTALE);
	na = look(ws, "ha", 0);
	nc = look(d2, "hc", 0);
	assert_ptr_not_equal(na, la);
	assert_ptr_not_equal(nc, la);
	depth_is(na, 0);
	depth_is(nc, 2);
	inode_forget(nc, 1);
	inode_forget(na, 1);
	inode_forget(la, 2);
	inode_forget(d2, 1);
	inode_forget(d1, 1);
	inode_forget(ws, 1);
}

/*
 * The backing store moved a directory the kernel holds (another node), so
 * the object has two FUSE inodes; renames through the mount then move the
 * inode the kernel moved, never the other one: a link below keeps the depth
 * the kernel sees.
 */
static void
test_rename_moves_the_kernels_inode(void **state)
{
	struct inode	*ws = look(inode_root(), "ws", 0), *q1, *q, *p;
	struct inode	*stale, *x, *l;
	char		 from[256], to[256];

	mk("ws/q1", S_IFDIR | 0755);
	mk("ws/q1/Q", S_IFDIR | 0755);
	mk("ws/q1/Q/b", S_IFDIR | 0755);
	mk("ws/p", S_IFDIR | 0755);
	ln_s("/t", "ws/q1/Q/b/l");
	q1 = look(ws, "q1", 0);
	q = look(q1, "Q", 0);
	p = look(ws, "p", 0);
	stale = look(q, "b", 0);
	/* Another node moves Q/b to p/a; the kernel looks p/a up. */
	snprintf(from, sizeof from, "%s/ws/q1/Q/b", base);
	snprintf(to, sizeof to, "%s/ws/p/a", base);
	assert_int_equal(rename(from, to), 0);
	x = look(p, "a", 0);
	assert_ptr_not_equal(x, stale);
	/* Through the mount: p/a -> Q/c, then Q/c -> the workspace root. */
	snprintf(from, sizeof from, "%s/ws/p/a", base);
	snprintf(to, sizeof to, "%s/ws/q1/Q/c", base);
	assert_int_equal(rename(from, to), 0);
	inode_renamed(p, "a", q, "c", 0);
	snprintf(from, sizeof from, "%s/ws/q1/Q/c", base);
	snprintf(to, sizeof to, "%s/ws/d", base);
	assert_int_equal(rename(from, to), 0);
	inode_renamed(q, "c", ws, "d", 0);
	depth_is(x, 1);
	l = look(x, "l", 0);
	depth_is(l, 1);
	/* The stale inode stays where the kernel still has it. */
	depth_is(stale, 3);
	inode_forget(l, 1);
	inode_forget(x, 1);
	inode_forget(stale, 1);
	inode_forget(p, 1);
	inode_forget(q, 1);
	inode_forget(q1, 1);
	inode_forget(ws, 1);
}

/*
 * A node id is an address, handed out again once its inode is freed: the
 * pair (node id, generation) never repeats, or a file handle of the old
 * inode would open the new one.
 */
static void
test_node_id_and_generation_unique(void **state)
{
	struct inode		*ws = look(inode_root(), "ws", 0);
	struct fuse_entry_param	 e1, e2;
	int			 i, same_id = 0;

	mk("ws/g1", S_IFREG | 0644);
	mk("ws/g2", S_IFREG | 0644);
	for (i = 0; i < 50; i++) {
		assert_int_equal(inode_lookup(ws, "g1", &e1), 0);
		inode_forget(inode_from_ino(e1.ino), 1);
		assert_int_equal(inode_lookup(ws, "g2", &e2), 0);
		inode_forget(inode_from_ino(e2.ino), 1);
		same_id += e1.ino == e2.ino;
		/* Either id may come back at any time: generations differ. */
		assert_true(e1.generation != e2.generation);
		assert_true(e1.generation != 0 && e2.generation != 0);
	}
	print_message("node id handed out again in %d of 50 rounds\n",
	    same_id);
	inode_forget(ws, 1);
}

UNIT_MAIN(1, setup, teardown,
    cmocka_unit_test(test_top_level),
    cmocka_unit_test(test_no_follow),
    cmocka_unit_test(test_eviction_and_reopen),
    cmocka_unit_test(test_symlink_per_directory_and_depth),
    cmocka_unit_test(test_number_reused),
    cmocka_unit_test(test_lazy_handles),
    cmocka_unit_test(test_lookup_by_name),
    cmocka_unit_test(test_by_name_takes_its_handle),
    cmocka_unit_test(test_hardlinked_symlink_renamed),
    cmocka_unit_test(test_rename_moves_the_kernels_inode),
    cmocka_unit_test(test_node_id_and_generation_unique))

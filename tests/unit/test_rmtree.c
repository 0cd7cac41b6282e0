/*
 * Unit tests for the safe tree removal (fs/rmtree.c), on real temporary
 * directories: the walker is only worth testing against the kernel's
 * answers.
 */
#include "config.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>

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

#include "rmtree.h"
#include "tbase.h"

/*
 * Symlinks to a canary, a FIFO, a socket-free mix of files: everything in
 * the tree goes, nothing the symlinks point at does, nothing is opened.
 */
static void
test_remove_mixed(void **state)
{
	struct rmtree_stats	st;
	struct tbase		t;
	struct stat		sb;
	char			canary[128];
	int			ws, sub;

	tbase_init(&t);
	snprintf(canary, sizeof canary, "%s/canary", t.dir);
	touch_at(t.dirfd, "canary/keep");
	assert_int_equal(mkdirat(t.fd, "ws", 0700), 0);
	assert_true((ws = openat(t.fd, "ws", O_RDONLY | O_DIRECTORY)) >= 0);
	assert_int_equal(symlinkat(canary, ws, "dirlink"), 0);
	assert_int_equal(symlinkat("/tmp", ws, "tmplink"), 0);
	assert_int_equal(mkfifoat(ws, "fifo", 0600), 0);
	assert_int_equal(mkdirat(ws, "sub", 0), 0);	/* mode 000 */
	assert_true((sub = openat(ws, "sub", O_RDONLY | O_DIRECTORY)) >= 0);
	touch_at(sub, "f");
	assert_int_equal(symlinkat("../../../canary/keep", sub, "up"), 0);
	close(sub);
	close(ws);

	memset(&st, 0, sizeof st);
	assert_int_equal(rmtree_remove(t.fd, "ws", &st), 0);
	assert_int_equal(st.files, 5);
	assert_int_equal(st.dirs, 2);
	assert_int_equal(fstatat(t.fd, "ws", &sb, 0), -1);
	assert_int_equal(fstatat(t.dirfd, "canary/keep", &sb, 0), 0);
	/* The trash is empty again and stays private. */
	assert_int_equal(fstatat(t.fd, RMTREE_TRASH_DIR, &sb, 0), 0);
	assert_int_equal(sb.st_mode & 0777, 0700);
	assert_int_equal(sb.st_nlink, 2);
	tbase_done(&t);
}

static void
test_remove_bad_names(void **state)
{
	struct tbase	t;

	tbase_init(&t);
	touch_at(t.fd, "file");
	assert_int_equal(symlinkat("../canary", t.fd, "link"), 0);
	assert_int_equal(rmtree_remove(t.fd, "", NULL), -EINVAL);
	assert_int_equal(rmtree_remove(t.fd, "..", NULL), -EINVAL);
	assert_int_equal(rmtree_remove(t.fd, ".wsfs", NULL), -EINVAL);
	assert_int_equal(rmtree_remove(t.fd, "a/b", NULL), -EINVAL);
	assert_int_equal(rmtree_remove(t.fd, "nope", NULL), -ENOENT);
	assert_int_equal(rmtree_remove(t.fd, "file", NULL), -ENOTDIR);
	assert_int_equal(rmtree_remove(t.fd, "link", NULL), -ENOTDIR);
	assert_int_equal(faccessat(t.dirfd, "canary", F_OK, 0), 0);
	tbase_done(&t);
}

/*
 * A tree far deeper than the descriptor limit allows open at once is
 * removed with a handful of descriptors.
 */
static void
test_remove_deep(void **state)
{
	struct rmtree_stats	st;
	struct rlimit		old, low;
	struct tbase		t;
	int			fd, next, i, before;
	const int		depth = 3000;

	tbase_init(&t);
	assert_int_equal(mkdirat(t.fd, "deep", 0700), 0);
	fd = openat(t.fd, "deep", O_RDONLY | O_DIRECTORY);
	for (i = 0; i < depth; i++) {
		assert_int_equal(mkdirat(fd, "d", 0700), 0);
		if (i % 100 == 0)
			touch_at(fd, "f");
		next = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		assert_true(next >= 0);
		close(fd);
		fd = next;
	}
	close(fd);
	before = count_fds();
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = before + 48;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	memset(&st, 0, sizeof st);
	assert_int_equal(rmtree_remove(t.fd, "deep", &st), 0);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(st.dirs, depth + 1);
	assert_int_equal(st.files, depth / 100);
	assert_int_equal(count_fds(), before);
	tbase_done(&t);
}

/*
 * A deep chain with a deep side branch at every level: the walk climbs
 * back to directories whose streams it closed and descends again from
 * there, many times.
 */
static void
test_remove_deep_branches(void **state)
{
	struct rmtree_stats	st;
	struct tbase		t;
	int			fd, next, side, snext, i, j;
	const int		depth = 120, branch = 70;

	tbase_init(&t);
	assert_int_equal(mkdirat(t.fd, "comb", 0700), 0);
	fd = openat(t.fd, "comb", O_RDONLY | O_DIRECTORY);
	for (i = 0; i < depth; i++) {
		/* "a" sorts anywhere: readdir order is the filesystem's. */
		assert_int_equal(mkdirat(fd, "a", 0700), 0);
		assert_int_equal(mkdirat(fd, "b", 0700), 0);
		touch_at(fd, "f");
		side = openat(fd, "b", O_RDONLY | O_DIRECTORY);
		for (j = 0; j < (i % 3 == 0 ? branch : 2); j++) {
			assert_int_equal(mkdirat(side, "s", 0700), 0);
			snext = openat(side, "s", O_RDONLY | O_DIRECTORY);
			close(side);
			side = snext;
		}
		close(side);
		next = openat(fd, "a", O_RDONLY | O_DIRECTORY);
		close(fd);
		fd = next;
	}
	close(fd);
	memset(&st, 0, sizeof st);
	assert_int_equal(rmtree_remove(t.fd, "comb", &st), 0);
	assert_int_equal(st.files, depth);
	/* root, the "a" chain, and each "b" with its "s" chain */
	assert_int_equal(st.dirs, 1 + depth + depth + (depth / 3) * branch +
	    (depth - depth / 3) * 2);
	assert_int_equal(faccessat(t.fd, "comb", F_OK, 0), -1);
	tbase_done(&t);
}

/* A crash after the move: rmtree_empty_trash finishes the entry. */
static void
test_trash_leftover(void **state)
{
	struct rmtree_stats	st;
	struct tbase		t;
	char			trash[320], canary[128];
	uint64_t		finished = 0;
	int			i, ws, tfd;

	tbase_init(&t);
	assert_int_equal(mkdirat(t.fd, "ws", 0700), 0);
	ws = openat(t.fd, "ws", O_RDONLY | O_DIRECTORY);
	for (i = 0; i < 1000; i++) {
		char name[16];

		snprintf(name, sizeof name, "f%d", i);
		touch_at(ws, name);
	}
	close(ws);
	assert_int_equal(rmtree_trash_move(t.fd, "ws", trash, sizeof trash), 0);
	assert_int_equal(faccessat(t.fd, "ws", F_OK, 0), -1);
	assert_int_equal(strncmp(trash, "ws.", 3), 0);
	/* Trash entries that are not directories are unlinked, not followed. */
	tfd = openat(t.fd, RMTREE_TRASH_DIR, O_RDONLY | O_DIRECTORY);
	assert_true(tfd >= 0);
	snprintf(canary, sizeof canary, "%s/canary", t.dir);
	touch_at(t.dirfd, "canary/keep");
	assert_int_equal(symlinkat(canary, tfd, "link.0000000000000001"), 0);
	assert_int_equal(mkfifoat(tfd, "fifo.0000000000000002", 0600), 0);
	close(tfd);
	memset(&st, 0, sizeof st);
	assert_int_equal(rmtree_empty_trash(t.fd, &st, &finished), 0);
	assert_int_equal(finished, 3);
	assert_int_equal(st.files, 1002);
	assert_int_equal(faccessat(t.dirfd, "canary/keep", F_OK, 0), 0);
	tbase_done(&t);
}

static void
test_tree_size(void **state)
{
	struct tbase	t;
	uint64_t	bytes = 0;
	char		buf[8192];
	int		ws, fd;

	tbase_init(&t);
	memset(buf, 'x', sizeof buf);
	assert_int_equal(mkdirat(t.fd, "ws", 0700), 0);
	ws = openat(t.fd, "ws", O_RDONLY | O_DIRECTORY);
	fd = openat(ws, "data", O_WRONLY | O_CREAT, 0644);
	assert_int_equal(write(fd, buf, sizeof buf), (ssize_t)sizeof buf);
	fsync(fd);
	close(fd);
	/* A symlink to something big outside is not counted. */
	assert_int_equal(symlinkat("/usr", ws, "usr"), 0);
	close(ws);
	assert_int_equal(rmtree_size(t.fd, "ws", &bytes), 0);
	assert_true(bytes >= sizeof buf);
	assert_true(bytes < 1024 * 1024);
	tbase_done(&t);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_remove_mixed),
    cmocka_unit_test(test_remove_bad_names),
    cmocka_unit_test(test_remove_deep),
    cmocka_unit_test(test_remove_deep_branches),
    cmocka_unit_test(test_trash_leftover),
    cmocka_unit_test(test_tree_size))

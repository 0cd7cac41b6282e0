/*
 * Temporary directories for the unit tests that walk real trees
 * (test_rmtree, test_sweep): a fresh DIR holding base/ and canary/.
 */
#ifndef TESTS_UNIT_TBASE_H
#define TESTS_UNIT_TBASE_H

/* A fresh temporary base with its fd; the canary lives beside it. */
struct tbase {
	char	dir[64];	/* holds base/ and canary/ */
	int	dirfd;
	int	fd;		/* dir/base */
};

static inline void
tbase_init(struct tbase *t)
{
	snprintf(t->dir, sizeof t->dir, "/tmp/test-sweep-XXXXXX");
	assert_non_null(mkdtemp(t->dir));
	assert_true((t->dirfd = open(t->dir, O_RDONLY | O_DIRECTORY)) >= 0);
	assert_int_equal(mkdirat(t->dirfd, "base", 0700), 0);
	assert_int_equal(mkdirat(t->dirfd, "canary", 0700), 0);
	assert_true((t->fd = openat(t->dirfd, "base", O_RDONLY |
	    O_DIRECTORY)) >= 0);
}

static inline int
count_fds(void)
{
	DIR	*d = opendir("/proc/self/fd");
	int	 n = 0;

	assert_non_null(d);
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

static inline void
rm_rf(const char *path)
{
	char	cmd[256];

	snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
	assert_int_equal(system(cmd), 0);
}

static inline void
tbase_done(struct tbase *t)
{
	close(t->fd);
	close(t->dirfd);
	rm_rf(t->dir);
}

static inline void
touch_at(int dirfd, const char *name)
{
	int	fd;

	assert_true((fd = openat(dirfd, name, O_WRONLY | O_CREAT, 0644)) >= 0);
	close(fd);
}

#endif

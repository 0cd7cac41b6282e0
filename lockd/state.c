/*
 * wslockd's state directory: the few facts that must survive a restart.
 * "epoch" holds the number of the current server incarnation, the high
 * half of every fencing token, so tokens keep growing across restarts.
 * "clients" lists the client ids that had a live session, so that after a
 * restart the grace period knows whom to wait for and refuses reclaims
 * from anyone else. Both are replaced atomically (write, fsync, rename).
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lockd.h"

struct state {
	int		 dirfd;
	int		 dirty;		/* clients changed, not yet written */
	uint32_t	 epoch;
	uint64_t	*clients;
	size_t		 nclients;
	size_t		 cap;
};

/* Replace file name in the state directory with buf, durably. */
static int
state_write(struct state *st, const char *name, const char *buf, size_t len)
{
	char	tmp[64];
	int	fd, r = 0;

	snprintf(tmp, sizeof tmp, ".%s.tmp", name);
	if ((fd = openat(st->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC |
	    O_CLOEXEC | O_NOFOLLOW, 0600)) < 0)
		return -errno;
	if (write(fd, buf, len) != (ssize_t)len || fsync(fd) < 0)
		r = errno ? -errno : -EIO;
	if (close(fd) < 0 && r == 0)
		r = -errno;
	if (r == 0 && renameat(st->dirfd, tmp, st->dirfd, name) < 0)
		r = -errno;
	if (r == 0 && fsync(st->dirfd) < 0)
		r = -errno;
	if (r < 0)
		unlinkat(st->dirfd, tmp, 0);
	return r;
}

/* Read a small state file; a missing file reads as empty. */
static int
state_read(struct state *st, const char *name, char **out)
{
	struct stat	 sb;
	char		*buf = NULL;
	ssize_t		 n;
	int		 fd, r;

	if ((fd = openat(st->dirfd, name, O_RDONLY | O_CLOEXEC |
	    O_NOFOLLOW)) < 0) {
		if (errno != ENOENT)
			return -errno;
		*out = NULL;
		return 0;
	}
	if (fstat(fd, &sb) < 0) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(sb.st_mode) || sb.st_size > 64 * 1024 * 1024) {
		r = -EINVAL;
		goto out;
	}
	if ((buf = malloc(sb.st_size + 1)) == NULL) {
		r = -ENOMEM;
		goto out;
	}
	if ((n = read(fd, buf, sb.st_size)) < 0) {
		r = -errno;
		goto out;
	}
	buf[n] = '\0';
	*out = buf;
	buf = NULL;
	r = 0;
out:
	free(buf);
	close(fd);
	return r;
}

static int
state_save_clients(struct state *st)
{
	char	*buf;
	size_t	 i, len = 0;
	int	 r;

	if ((buf = malloc(st->nclients * 17 + 1)) == NULL)
		return -ENOMEM;
	for (i = 0; i < st->nclients; i++)
		len += snprintf(buf + len, 18, "%016" PRIx64 "\n",
		    st->clients[i]);
	r = state_write(st, "clients", buf, len);
	free(buf);
	return r;
}

static int
state_push(struct state *st, uint64_t id)
{
	uint64_t	*n;
	size_t		 cap;

	if (st->nclients == st->cap) {
		cap = st->cap ? st->cap * 2 : 16;
		if ((n = reallocarray(st->clients, cap, sizeof *n)) == NULL)
			return -ENOMEM;
		st->clients = n;
		st->cap = cap;
	}
	st->clients[st->nclients++] = id;
	return 0;
}

/* Open (creating if needed) the state directory and read what it holds. */
int
state_open(const char *dir, struct state **out)
{
	struct state	*st;
	char		*buf = NULL, *line, *end, *save;
	unsigned long	 ul;
	uint64_t	 id;
	int		 r;

	if ((st = calloc(1, sizeof *st)) == NULL)
		return -ENOMEM;
	st->dirfd = -1;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		goto out;
	}
	if ((st->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		r = -errno;
		goto out;
	}
	if ((r = state_read(st, "epoch", &buf)) < 0)
		goto out;
	if (buf != NULL) {
		errno = 0;
		ul = strtoul(buf, &end, 10);
		if (errno != 0 || end == buf || (*end != '\n' && *end != '\0') ||
		    ul > UINT32_MAX) {
			r = -EINVAL;
			goto out;
		}
		st->epoch = ul;
	}
	free(buf);
	buf = NULL;
	if ((r = state_read(st, "clients", &buf)) < 0)
		goto out;
	for (line = buf ? strtok_r(buf, "\n", &save) : NULL; line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		errno = 0;
		id = strtoull(line, &end, 16);
		if (errno != 0 || end == line || *end != '\0') {
			r = -EINVAL;
			goto out;
		}
		if ((r = state_push(st, id)) < 0)
			goto out;
	}
	*out = st;
	st = NULL;
	r = 0;
out:
	free(buf);
	state_close(st);
	return r;
}

void
state_close(struct state *st)
{
	if (st == NULL)
		return;
	if (st->dirfd >= 0)
		close(st->dirfd);
	free(st->clients);
	free(st);
}

uint32_t
state_epoch(const struct state *st)
{
	return st->epoch;
}

/* Start a new incarnation; durable before any token of it is issued. */
int
state_next_epoch(struct state *st)
{
	char	buf[16];
	int	len, r;

	if (st->epoch == UINT32_MAX)
		return -EOVERFLOW;
	len = snprintf(buf, sizeof buf, "%u\n", st->epoch + 1);
	if ((r = state_write(st, "epoch", buf, len)) < 0)
		return r;
	st->epoch++;
	return 0;
}

size_t
state_nclients(const struct state *st)
{
	return st->nclients;
}

const uint64_t *
state_clients(const struct state *st)
{
	return st->clients;
}

int
state_has_client(const struct state *st, uint64_t id)
{
	size_t	i;

	for (i = 0; i < st->nclients; i++)
		if (st->clients[i] == id)
			return 1;
	return 0;
}

/*
 * Client list changes are written by state_sync(), once per batch: the
 * server calls it before it sends any answer, so a client is on disk
 * before it hears of its session, without one fsync per connection.
 */
int
state_add_client(struct state *st, uint64_t id)
{
	int	r;

	if (state_has_client(st, id))
		return 0;
	if ((r = state_push(st, id)) < 0)
		return r;
	st->dirty = 1;
	return 0;
}

int
state_del_client(struct state *st, uint64_t id)
{
	size_t	i;

	for (i = 0; i < st->nclients; i++) {
		if (st->clients[i] != id)
			continue;
		st->clients[i] = st->clients[--st->nclients];
		st->dirty = 1;
		return 0;
	}
	return 0;
}

int
state_sync(struct state *st)
{
	int	r;

	if (!st->dirty)
		return 0;
	if ((r = state_save_clients(st)) < 0)
		return r;
	st->dirty = 0;
	return 0;
}

/*
 * wslockd's state directory: the few facts that must survive a restart.
 * "epoch" holds the number of the current server incarnation, the high
 * half of every fencing token, so tokens keep growing across restarts.
 * "clients" lists the client ids that had a live session, each with its
 * session's secret, so that after a restart the grace period knows whom
 * to wait for, refuses reclaims from anyone else, and lets only the
 * holder of the secret speak for a client id. Both files are replaced
 * atomically (write, fsync, rename), mode 0600 in a 0700 directory.
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

#include <sodium.h>

#include "lockd.h"

struct state {
	const struct state_store *store; /* NULL: the state directory */
	int		 dirfd;
	int		 dirty;		/* clients changed, not yet written */
	uint64_t	 changes;	/* of the clients, so far */
	uint32_t	 epoch;
	uint64_t	*clients;
	uint8_t		(*secrets)[WSL_SECRET_LEN]; /* all 0: none known */
	size_t		 nclients;
	size_t		 cap;
};

#define CLIENT_LINE	(16 + 1 + 2 * WSL_SECRET_LEN + 1)

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

/* The clients file's text (malloc'd; it holds secrets: zero it). */
static char *
clients_text(const struct state *st, size_t *lenp)
{
	char	*buf;
	size_t	 i, len = 0;

	if ((buf = malloc(st->nclients * CLIENT_LINE + 1)) == NULL)
		return NULL;
	for (i = 0; i < st->nclients; i++) {
		len += snprintf(buf + len, 18, "%016" PRIx64 " ",
		    st->clients[i]);
		sodium_bin2hex(buf + len, 2 * WSL_SECRET_LEN + 1,
		    st->secrets[i], WSL_SECRET_LEN);
		len += 2 * WSL_SECRET_LEN;
		buf[len++] = '\n';
	}
	*lenp = len;
	return buf;
}

static int
state_save_clients(struct state *st)
{
	char	*buf;
	size_t	 len;
	int	 r;

	if ((buf = clients_text(st, &len)) == NULL)
		return -ENOMEM;
	if (st->store != NULL)
		r = st->store->put_clients(st->store->arg, buf, len);
	else
		r = state_write(st, "clients", buf, len);
	sodium_memzero(buf, len);
	free(buf);
	return r;
}

static int
state_push(struct state *st, uint64_t id, const uint8_t *secret)
{
	uint64_t	*n;
	uint8_t		(*sn)[WSL_SECRET_LEN];
	size_t		 cap;

	if (st->nclients == st->cap) {
		cap = st->cap ? st->cap * 2 : 16;
		if ((n = reallocarray(st->clients, cap, sizeof *n)) == NULL)
			return -ENOMEM;
		st->clients = n;
		if ((sn = reallocarray(st->secrets, cap, sizeof *sn)) == NULL)
			return -ENOMEM;
		st->secrets = sn;
		st->cap = cap;
	}
	if (secret != NULL)
		memcpy(st->secrets[st->nclients], secret, WSL_SECRET_LEN);
	else
		memset(st->secrets[st->nclients], 0, WSL_SECRET_LEN);
	st->clients[st->nclients++] = id;
	return 0;
}

static int	state_parse_clients(struct state *, char *);

/* Open (creating if needed) the state directory and read what it holds. */
int
state_open(const char *dir, struct state **out)
{
	struct state	*st;
	char		*buf = NULL, *end;
	unsigned long	 ul;
	size_t		 blen = 0;
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
	blen = buf != NULL ? strlen(buf) : 0;
	if ((r = state_parse_clients(st, buf)) < 0)
		goto out;
	*out = st;
	st = NULL;
	r = 0;
out:
	if (buf != NULL)
		sodium_memzero(buf, blen);
	free(buf);
	state_close(st);
	return r;
}

/* Read the known clients from the text of a clients file (NULL: none). */
static int
state_parse_clients(struct state *st, char *buf)
{
	char		*line, *end, *save;
	uint8_t		 secret[WSL_SECRET_LEN];
	uint64_t	 id;
	size_t		 n;
	int		 r;

	/* "ID SECRET", or "ID" alone as written before secrets existed. */
	for (line = buf ? strtok_r(buf, "\n", &save) : NULL; line != NULL;
	    line = strtok_r(NULL, "\n", &save)) {
		errno = 0;
		id = strtoull(line, &end, 16);
		if (errno != 0 || end == line || (*end != '\0' && *end != ' '))
			return -EINVAL;
		memset(secret, 0, sizeof secret);
		if (*end == ' ' && (strlen(end + 1) != 2 * WSL_SECRET_LEN ||
		    sodium_hex2bin(secret, sizeof secret, end + 1,
		    2 * WSL_SECRET_LEN, NULL, &n, NULL) != 0 ||
		    n != WSL_SECRET_LEN)) {
			sodium_memzero(secret, sizeof secret);
			return -EINVAL;
		}
		r = state_push(st, id, secret);
		sodium_memzero(secret, sizeof secret);
		if (r < 0)
			return r;
	}
	return 0;
}

/*
 * State kept elsewhere (etcd, for replicas): the epoch and the clients
 * text as the store holds them; later changes go to the store.
 */
int
state_open_store(const struct state_store *store, uint32_t epoch,
    char *clients, struct state **out)
{
	struct state	*st;
	int		 r;

	if ((st = calloc(1, sizeof *st)) == NULL)
		return -ENOMEM;
	st->dirfd = -1;
	st->store = store;
	st->epoch = epoch;
	if ((r = state_parse_clients(st, clients)) < 0) {
		state_close(st);
		return r;
	}
	*out = st;
	return 0;
}

void
state_close(struct state *st)
{
	if (st == NULL)
		return;
	if (st->dirfd >= 0)
		close(st->dirfd);
	free(st->clients);
	if (st->secrets != NULL)
		sodium_memzero(st->secrets, st->cap * sizeof *st->secrets);
	free(st->secrets);
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
	if (st->store != NULL)
		return st->store->next_epoch(st->store->arg, &st->epoch);
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
state_add_client(struct state *st, uint64_t id, const uint8_t *secret)
{
	size_t	i;
	int	r;

	for (i = 0; i < st->nclients; i++) {
		if (st->clients[i] != id)
			continue;
		if (memcmp(st->secrets[i], secret, WSL_SECRET_LEN) != 0) {
			memcpy(st->secrets[i], secret, WSL_SECRET_LEN);
			st->dirty = 1;
			st->changes++;
		}
		return 0;
	}
	if ((r = state_push(st, id, secret)) < 0)
		return r;
	st->dirty = 1;
	st->changes++;
	return 0;
}

/*
 * The secret of a listed client's last session: 0, or -ENOENT when the
 * client is not listed or its secret is not known (an old state file).
 */
int
state_client_secret(const struct state *st, uint64_t id, uint8_t *out)
{
	static const uint8_t	zero[WSL_SECRET_LEN];
	size_t			i;

	for (i = 0; i < st->nclients; i++) {
		if (st->clients[i] != id)
			continue;
		if (sodium_memcmp(st->secrets[i], zero, WSL_SECRET_LEN) == 0)
			return -ENOENT;
		memcpy(out, st->secrets[i], WSL_SECRET_LEN);
		return 0;
	}
	return -ENOENT;
}

int
state_del_client(struct state *st, uint64_t id)
{
	size_t	i;

	for (i = 0; i < st->nclients; i++) {
		if (st->clients[i] != id)
			continue;
		st->clients[i] = st->clients[--st->nclients];
		memcpy(st->secrets[i], st->secrets[st->nclients],
		    WSL_SECRET_LEN);
		sodium_memzero(st->secrets[st->nclients], WSL_SECRET_LEN);
		st->dirty = 1;
		st->changes++;
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

/* How many times the clients changed so far. */
uint64_t
state_changes(const struct state *st)
{
	return st->changes;
}

/*
 * The clients as they are now, for a writer of one's own (an etcd write
 * off the main loop): 1 with *buf (malloc'd, secrets: zero it), *len and
 * *changes (state_changes() as of the text), 0 when nothing changed since
 * the last state_take() or state_sync(), or -ENOMEM.
 */
int
state_take(struct state *st, char **buf, size_t *len, uint64_t *changes)
{
	if (!st->dirty)
		return 0;
	if ((*buf = clients_text(st, len)) == NULL)
		return -ENOMEM;
	*changes = st->changes;
	st->dirty = 0;
	return 1;
}

/*
 * Scratch workspace metadata and state. A workspace BASE/ID has three
 * small files in BASE/.wsfs: ID.meta (what it is: lifetime, owner, label,
 * created, ended; replaced atomically), ID.lock (holders take flock(2) on
 * it; the sweeper treats a workspace whose lock it cannot take as in use)
 * and ID.used (its mtime is the last use through the mount: one
 * utimensat, cheap and persistent, unlike atime under relatime or NFS).
 *
 * Everything is opened relative to the base descriptor, never by a full
 * path, and never through a symlink.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "clock.h"
#include "fdio.h"
#include "log.h"
#include "nofollow.h"
#include "number.h"
#include "rmtree.h"
#include "scratch.h"

#define USE_BUCKETS	256
#define USE_PRUNE_AT	1024	/* entries before idle ones are dropped */

/* What wsfs knows about one workspace's activity. */
struct use_ent {
	struct use_ent	*next;
	char		 id[SCRATCH_ID_LEN + 1];
	double		 written;	/* monotonic time of the last write */
	unsigned	 holds;		/* open handles in wsfs */
	int		 lockfd;	/* ID.lock while holds > 0, else -1 */
	int		 locked;	/* LOCK_SH taken on lockfd */
};

struct scratch_base {
	int		 base_fd;
	int		 meta_fd;
	char		*path;		/* for messages only */
	pthread_mutex_t	 mtx;		/* guards everything below */
	struct use_ent	*use[USE_BUCKETS];
	size_t		 nuse;
	double		 note_interval;
};

/* Latest time accepted: the end of year 9999. */
#define META_TIME_MAX	253402300799LL

enum meta_type {
	MT_VERSION,	/* must be SCRATCH_META_VERSION */
	MT_LIFETIME,	/* scratch_lifetime_parse */
	MT_TEXT,	/* valid() says yes; copied to the field */
	MT_NUMBER,	/* canonical decimal, min to max */
};

/* The keys of a metadata file; a new key is one row. */
#define FIELD(f)	offsetof(struct scratch_meta, f), \
			sizeof(((struct scratch_meta *)0)->f)
static const struct meta_key {
	const char	*name;
	enum meta_type	 type;
	size_t		 off, size;
	int		 (*valid)(const char *);	/* MT_TEXT */
	uint64_t	 min, max;			/* MT_NUMBER */
	int		 required;
} meta_keys[] = {
	{ "version", MT_VERSION, 0, 0, NULL, 0, 0, 1 },
	{ "id", MT_TEXT, FIELD(id), scratch_id_valid, 0, 0, 1 },
	{ "lifetime", MT_LIFETIME, FIELD(lifetime), NULL, 0, 0, 1 },
	/* (uid_t)-1 means "no change" to chown: never valid. */
	{ "owner", MT_NUMBER, FIELD(owner), NULL, 0, UINT32_MAX - 1, 1 },
	{ "label", MT_TEXT, FIELD(label), scratch_label_valid, 0, 0, 0 },
	{ "created", MT_NUMBER, FIELD(created), NULL, 1, META_TIME_MAX, 1 },
	{ "ended", MT_NUMBER, FIELD(ended), NULL, 0, META_TIME_MAX, 0 },
};
#undef FIELD
#define MK_COUNT	(sizeof meta_keys / sizeof meta_keys[0])

_Static_assert(sizeof(uid_t) == 4 && sizeof(int64_t) == 8,
    "numeric metadata fields are 32 or 64 bits");

static const char *lifetime_names[] = {
	[SCRATCH_LIFETIME_TASK] = "task",
	[SCRATCH_LIFETIME_CONVERSATION] = "conversation",
};

const char *
scratch_lifetime_name(enum scratch_lifetime l)
{
	return lifetime_names[l];
}

int
scratch_lifetime_parse(const char *s, enum scratch_lifetime *out)
{
	size_t	i;

	for (i = 0; i < sizeof lifetime_names / sizeof lifetime_names[0]; i++) {
		if (strcmp(s, lifetime_names[i]) == 0) {
			*out = (enum scratch_lifetime)i;
			return 0;
		}
	}
	return -EINVAL;
}

int
scratch_id_valid(const char *s)
{
	size_t	i;

	for (i = 0; i < SCRATCH_ID_LEN; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return 0;
		} else if (!((s[i] >= '0' && s[i] <= '9') ||
		    (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	}
	return s[SCRATCH_ID_LEN] == '\0';
}

int
scratch_label_valid(const char *s)
{
	size_t	i;

	for (i = 0; s[i] != '\0'; i++) {
		if (i >= SCRATCH_LABEL_MAX || s[i] < 0x20 || s[i] > 0x7e)
			return 0;
	}
	return 1;
}

/* Parse the value v of key k into m: 0, or -EINVAL. */
static int
meta_set(const struct meta_key *k, const char *v, struct scratch_meta *m)
{
	char		*field = (char *)m + k->off;
	uint64_t	 n;
	uint32_t	 n32;

	switch (k->type) {
	case MT_VERSION:
		if (number_parse(v, NUMBER_CANONICAL, INT_MAX, &n) < 0 ||
		    n != SCRATCH_META_VERSION)
			return -EINVAL;
		return 0;
	case MT_LIFETIME:
		return scratch_lifetime_parse(v, &m->lifetime);
	case MT_TEXT:
		if (!k->valid(v))
			return -EINVAL;
		snprintf(field, k->size, "%s", v);
		return 0;
	case MT_NUMBER:
		if (number_parse(v, NUMBER_CANONICAL, k->max, &n) < 0 ||
		    n < k->min)
			return -EINVAL;
		/* int64_t fields hold at most META_TIME_MAX: no sign issue. */
		n32 = (uint32_t)n;
		if (k->size == sizeof n32)
			memcpy(field, &n32, sizeof n32);
		else
			memcpy(field, &n, sizeof n);
		return 0;
	}
	return -EINVAL;
}

int
scratch_meta_parse(const char *buf, size_t len, struct scratch_meta *out)
{
	struct scratch_meta	 m;
	const char		*line = buf, *end = buf + len, *nl, *eq, *v;
	char			 tmp[SCRATCH_LABEL_MAX + 1];
	size_t			 klen, vlen, k;
	int			 seen[MK_COUNT] = { 0 };

	if (len == 0 || len > SCRATCH_META_MAX || buf[len - 1] != '\n' ||
	    memchr(buf, '\0', len) != NULL)
		return -EINVAL;
	memset(&m, 0, sizeof m);
	while (line < end) {
		nl = memchr(line, '\n', end - line);
		if ((eq = memchr(line, '=', nl - line)) == NULL)
			return -EINVAL;
		klen = eq - line;
		v = eq + 1;
		vlen = nl - v;
		for (k = 0; k < MK_COUNT; k++) {
			if (strlen(meta_keys[k].name) == klen &&
			    memcmp(meta_keys[k].name, line, klen) == 0)
				break;
		}
		if (k == MK_COUNT || seen[k]++)
			return -EINVAL;
		if (vlen > SCRATCH_LABEL_MAX)
			return -EINVAL;
		memcpy(tmp, v, vlen);
		tmp[vlen] = '\0';
		if (meta_set(&meta_keys[k], tmp, &m) < 0)
			return -EINVAL;
		line = nl + 1;
	}
	for (k = 0; k < MK_COUNT; k++) {
		if (meta_keys[k].required && !seen[k])
			return -EINVAL;
	}
	*out = m;
	return 0;
}

int
scratch_meta_format(const struct scratch_meta *m, char *buf, size_t len)
{
	int	n;

	if (!scratch_id_valid(m->id) || !scratch_label_valid(m->label) ||
	    m->created <= 0 || m->created > META_TIME_MAX || m->ended < 0 ||
	    m->ended > META_TIME_MAX || m->owner == (uid_t)-1 ||
	    (unsigned)m->lifetime > SCRATCH_LIFETIME_CONVERSATION)
		return -EINVAL;
	n = snprintf(buf, len, "version=%d\nid=%s\nlifetime=%s\nowner=%u\n"
	    "label=%s\ncreated=%lld\nended=%lld\n", SCRATCH_META_VERSION,
	    m->id, scratch_lifetime_name(m->lifetime), (unsigned)m->owner,
	    m->label, (long long)m->created, (long long)m->ended);
	if (n < 0 || (size_t)n >= len)
		return -ENOSPC;
	return n;
}

/* Only root or we may own a directory the sweeper trusts. */
static int
dir_trusted(int fd, const char *what)
{
	struct stat	sb;

	if (fstat(fd, &sb) < 0)
		return -errno;
	if ((sb.st_uid != 0 && sb.st_uid != geteuid()) ||
	    (sb.st_mode & (S_IWGRP | S_IWOTH))) {
		log_warn("%s is owned by uid %u with mode %04o: it must belong "
		    "to root and be writable by its owner only", what,
		    (unsigned)sb.st_uid, (unsigned)(sb.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int
scratch_base_open(const char *path, int flags, struct scratch_base **out)
{
	struct scratch_base	*sb;
	char			 what[PATH_MAX + 16];
	int			 r;

	if ((sb = calloc(1, sizeof *sb)) == NULL)
		return -ENOMEM;
	sb->base_fd = sb->meta_fd = -1;
	sb->note_interval = 60;
	pthread_mutex_init(&sb->mtx, NULL);
	if ((sb->path = strdup(path)) == NULL) {
		r = -ENOMEM;
		goto fail;
	}
	/* No symlink anywhere on the path: it would lead out of the base. */
	if ((sb->base_fd = nofollow_open_path(path, (flags & SCRATCH_CREATE) ?
	    NOFOLLOW_CREATE : 0)) < 0) {
		r = sb->base_fd;
		goto fail;
	}
	if ((r = dir_trusted(sb->base_fd, path)) < 0)
		goto fail;
	/* Whoever may write the base may also make its metadata dir. */
	if (mkdirat(sb->base_fd, SCRATCH_META_DIR, 0755) < 0 &&
	    errno != EEXIST && errno != EACCES && errno != EPERM &&
	    errno != EROFS) {
		r = -errno;
		goto fail;
	}
	if ((sb->meta_fd = nofollow_open_beneath(sb->base_fd,
	    SCRATCH_META_DIR)) < 0) {
		r = sb->meta_fd;
		goto fail;
	}
	snprintf(what, sizeof what, "%s/%s", path, SCRATCH_META_DIR);
	if ((r = dir_trusted(sb->meta_fd, what)) < 0)
		goto fail;
	*out = sb;
	return 0;
fail:
	scratch_base_free(sb);
	return r;
}

void
scratch_base_free(struct scratch_base *sb)
{
	struct use_ent	*e, *next;
	size_t		 i;

	if (sb == NULL)
		return;
	for (i = 0; i < USE_BUCKETS; i++) {
		for (e = sb->use[i]; e != NULL; e = next) {
			next = e->next;
			if (e->lockfd >= 0)
				close(e->lockfd);
			free(e);
		}
	}
	if (sb->meta_fd >= 0)
		close(sb->meta_fd);
	if (sb->base_fd >= 0)
		close(sb->base_fd);
	pthread_mutex_destroy(&sb->mtx);
	free(sb->path);
	free(sb);
}

int
scratch_base_fd(const struct scratch_base *sb)
{
	return sb->base_fd;
}

int
scratch_meta_fd(const struct scratch_base *sb)
{
	return sb->meta_fd;
}

const char *
scratch_base_path(const struct scratch_base *sb)
{
	return sb->path;
}

static void
file_name(char *buf, size_t len, const char *id, const char *suffix)
{
	snprintf(buf, len, "%s.%s", id, suffix);
}

int
scratch_write(struct scratch_base *sb, const struct scratch_meta *m)
{
	char		buf[SCRATCH_META_MAX], tmp[64], name[64];
	uint64_t	nonce;
	ssize_t		n;
	int		fd = -1, len, r;

	if ((len = scratch_meta_format(m, buf, sizeof buf)) < 0)
		return len;
	if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce)
		return -EIO;
	snprintf(tmp, sizeof tmp, "%s.tmp.%016llx", m->id,
	    (unsigned long long)nonce);
	file_name(name, sizeof name, m->id, "meta");
	if ((fd = openat(sb->meta_fd, tmp, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0644)) < 0)
		return -errno;
	if ((n = write(fd, buf, len)) != len) {
		r = n < 0 ? -errno : -EIO;
		goto fail;
	}
	if (fsync(fd) < 0) {
		r = -errno;
		goto fail;
	}
	close(fd);
	fd = -1;
	if (renameat(sb->meta_fd, tmp, sb->meta_fd, name) < 0) {
		r = -errno;
		goto fail;
	}
	if (fsync(sb->meta_fd) < 0)
		return -errno;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	(void)unlinkat(sb->meta_fd, tmp, 0);
	return r;
}

/*
 * Open id's file with suffix in the metadata directory (its name into
 * name), a regular file only: the fd, with its stat in *st, or -errno.
 */
static int
file_open(struct scratch_base *sb, const char *id, const char *suffix,
    char *name, size_t len, struct stat *st)
{
	int	fd, r;

	if (!scratch_id_valid(id))
		return -EINVAL;
	file_name(name, len, id, suffix);
	/* O_NONBLOCK: a FIFO planted there must not hang us. */
	if ((fd = openat(sb->meta_fd, name, O_RDONLY | O_NOFOLLOW |
	    O_CLOEXEC | O_NONBLOCK)) < 0)
		return -errno;
	if (fstat(fd, st) < 0)
		r = -errno;
	else if (!S_ISREG(st->st_mode))
		r = -EINVAL;
	else
		return fd;
	close(fd);
	return r;
}

int
scratch_read(struct scratch_base *sb, const char *id, struct scratch_meta *m)
{
	struct scratch_meta	 tmp;
	struct stat		 st;
	char			 buf[SCRATCH_META_MAX + 1], name[64];
	ssize_t			 n;
	int			 fd, r;

	if ((fd = file_open(sb, id, "meta", name, sizeof name, &st)) < 0)
		return fd;
	if ((n = fdio_read_all(fd, buf, sizeof buf)) < 0) {
		r = (int)n;
		goto out;
	}
	if ((r = scratch_meta_parse(buf, (size_t)n, &tmp)) < 0)
		goto out;
	if (strcmp(tmp.id, id) != 0) {
		r = -EINVAL;
		goto out;
	}
	*m = tmp;
	r = 0;
out:
	close(fd);
	return r;
}

int
scratch_last_use(struct scratch_base *sb, const char *id, double *t)
{
	struct stat	st;
	char		name[64];

	if (!scratch_id_valid(id))
		return -EINVAL;
	file_name(name, sizeof name, id, "used");
	if (fstatat(sb->meta_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*t = st.st_mtim.tv_sec + st.st_mtim.tv_nsec / 1e9;
	return 0;
}

/* Create an empty file of ours in .wsfs. */
static int
meta_file_create(struct scratch_base *sb, const char *id, const char *suffix)
{
	char	name[64];
	int	fd;

	file_name(name, sizeof name, id, suffix);
	if ((fd = openat(sb->meta_fd, name, O_WRONLY | O_CREAT | O_NOFOLLOW |
	    O_CLOEXEC | O_NONBLOCK, 0644)) < 0)
		return -errno;
	close(fd);
	return 0;
}

int
scratch_touch(struct scratch_base *sb, const char *id)
{
	char	name[64];

	if (!scratch_id_valid(id))
		return -EINVAL;
	file_name(name, sizeof name, id, "used");
	if (utimensat(sb->meta_fd, name, NULL, AT_SYMLINK_NOFOLLOW) == 0)
		return 0;
	if (errno != ENOENT)
		return -errno;
	/* Recreate it only for a workspace that still has metadata. */
	file_name(name, sizeof name, id, "meta");
	if (faccessat(sb->meta_fd, name, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return -errno;
	return meta_file_create(sb, id, "used");
}

static void
drop_metadata(struct scratch_base *sb, const char *id)
{
	static const char	*suffixes[] = { "meta", "used", "lock" };
	char			 name[64];
	size_t			 i;

	/* The lock goes last: it is what a holder checks is still linked. */
	for (i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
		file_name(name, sizeof name, id, suffixes[i]);
		if (unlinkat(sb->meta_fd, name, 0) < 0 && errno != ENOENT)
			log_warn("%s: cannot remove %s: %s", id, name,
			    strerror(errno));
	}
	(void)fsync(sb->meta_fd);
}

int
scratch_create(struct scratch_base *sb, enum scratch_lifetime lt, uid_t uid,
    gid_t gid, const char *label, char *id)
{
	struct scratch_meta	m;
	uuid_t			u;
	int			fd = -1, lfd = -1, r;

	if (!scratch_label_valid(label) || uid == (uid_t)-1)
		return -EINVAL;
	memset(&m, 0, sizeof m);
	uuid_generate_random(u);
	uuid_unparse_lower(u, m.id);
	m.lifetime = lt;
	m.owner = uid;
	strcpy(m.label, label);
	m.created = time(NULL);
	/*
	 * Metadata first: a crash now leaves metadata without a directory,
	 * which the sweeper drops, never a directory nobody knows about. The
	 * lock, held until the directory exists, keeps a sweeper from taking
	 * this half-made workspace for such a leftover.
	 */
	if ((r = meta_file_create(sb, m.id, "lock")) < 0 ||
	    (r = scratch_lock(sb, m.id, LOCK_EX, &lfd)) < 0 ||
	    (r = scratch_write(sb, &m)) < 0 ||
	    (r = meta_file_create(sb, m.id, "used")) < 0)
		goto fail;
	if (mkdirat(sb->base_fd, m.id, 0700) < 0) {
		r = -errno;
		goto fail;
	}
	if ((fd = nofollow_open_beneath(sb->base_fd, m.id)) < 0) {
		r = fd;
		goto fail_dir;
	}
	if (fchown(fd, uid, gid) < 0 || fchmod(fd, 0700) < 0) {
		r = -errno;
		goto fail_dir;
	}
	close(fd);
	if (fsync(sb->base_fd) < 0)
		log_warn("fsync %s: %s", sb->path, strerror(errno));
	close(lfd);
	memcpy(id, m.id, SCRATCH_ID_LEN + 1);
	return 0;
fail_dir:
	if (fd >= 0)
		close(fd);
	(void)unlinkat(sb->base_fd, m.id, AT_REMOVEDIR);
fail:
	drop_metadata(sb, m.id);
	if (lfd >= 0)
		close(lfd);
	return r;
}

int
scratch_lock(struct scratch_base *sb, const char *id, int op, int *fdp)
{
	struct stat	a, b;
	char		name[64];
	int		fd, r;

	if ((fd = file_open(sb, id, "lock", name, sizeof name, &a)) < 0)
		return fd;
	while ((r = flock(fd, op)) < 0 && errno == EINTR)
		;
	if (r < 0) {
		r = -errno;
		goto fail;
	}
	/* The sweeper unlinks the lock of a workspace it removed. */
	if (fstatat(sb->meta_fd, name, &b, AT_SYMLINK_NOFOLLOW) < 0 ||
	    a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
		r = -ENOENT;
		goto fail;
	}
	*fdp = fd;
	return 0;
fail:
	close(fd);
	return r;
}

int
scratch_in_use(struct scratch_base *sb, const char *id)
{
	int	fd, r;

	if ((r = scratch_lock(sb, id, LOCK_EX | LOCK_NB, &fd)) == 0) {
		close(fd);
		return 0;
	}
	return r == -EWOULDBLOCK ? 1 : r;
}

int
scratch_retire(struct scratch_base *sb, const char *id, char *trash,
    size_t trashlen)
{
	int	r;

	if (!scratch_id_valid(id) || trashlen < 300)
		return -EINVAL;
	trash[0] = '\0';
	r = rmtree_trash_move(sb->base_fd, id, trash, trashlen);
	if (r < 0 && r != -ENOENT)
		return r;
	drop_metadata(sb, id);
	return 0;
}

int
scratch_sweep_lock(struct scratch_base *sb, int *fdp)
{
	int	fd;

	if ((fd = openat(sb->meta_fd, "sweep.lock", O_RDONLY | O_CREAT |
	    O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644)) < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	*fdp = fd;
	return 0;
}

static unsigned
use_hash(const char *id)
{
	unsigned	h = 2166136261u;

	while (*id != '\0')
		h = (h ^ (unsigned char)*id++) * 16777619u;
	return h % USE_BUCKETS;
}

/* Drop entries with no holds that the throttle no longer needs. */
static void
use_prune(struct scratch_base *sb, double now)
{
	struct use_ent	**pp, *e;
	size_t		  i;

	for (i = 0; i < USE_BUCKETS; i++) {
		for (pp = &sb->use[i]; (e = *pp) != NULL; ) {
			if (e->holds == 0 && now - e->written >=
			    sb->note_interval) {
				*pp = e->next;
				free(e);
				sb->nuse--;
			} else
				pp = &e->next;
		}
	}
}

/* id's entry or NULL; called with mtx held. */
static struct use_ent *
use_find(struct scratch_base *sb, const char *id)
{
	struct use_ent	*e;

	for (e = sb->use[use_hash(id)]; e != NULL; e = e->next) {
		if (strcmp(e->id, id) == 0)
			break;
	}
	return e;
}

/* Find or add id's entry; called with mtx held. NULL: out of memory. */
static struct use_ent *
use_get(struct scratch_base *sb, const char *id, double now)
{
	struct use_ent	*e;
	unsigned	 h = use_hash(id);

	if ((e = use_find(sb, id)) != NULL)
		return e;
	if (sb->nuse >= USE_PRUNE_AT)
		use_prune(sb, now);
	if ((e = calloc(1, sizeof *e)) == NULL)
		return NULL;
	memcpy(e->id, id, SCRATCH_ID_LEN + 1);
	e->written = now - sb->note_interval - 1;
	e->lockfd = -1;
	e->next = sb->use[h];
	sb->use[h] = e;
	sb->nuse++;
	return e;
}

/*
 * Take the shared lock for an entry with holds; mtx held. flock with
 * LOCK_NB never blocks, but opening the lock file can wait for the disk,
 * and mtx is taken by every operation on the base: without an fd yet this
 * returns 1 and the caller, once it has dropped mtx, calls use_lock_open.
 */
static int
use_lock(struct use_ent *e)
{
	if (e->lockfd < 0)
		return 1;
	/*
	 * Busy means a task runner holds it exclusively (in use anyway) or
	 * a sweeper is deciding; try again on the next activity.
	 */
	e->locked = flock(e->lockfd, LOCK_SH | LOCK_NB) == 0;
	return 0;
}

/* Open id's lock file without mtx, then take the lock if still wanted. */
static void
use_lock_open(struct scratch_base *sb, const char *id)
{
	struct use_ent	*e;
	char		 name[64];
	int		 fd;

	file_name(name, sizeof name, id, "lock");
	if ((fd = openat(sb->meta_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
	    O_NONBLOCK)) < 0)
		return;
	pthread_mutex_lock(&sb->mtx);
	/* Released, or another thread opened it, meanwhile. */
	if ((e = use_find(sb, id)) != NULL && e->holds > 0 && e->lockfd < 0) {
		e->lockfd = fd;
		fd = -1;
		(void)use_lock(e);
	}
	pthread_mutex_unlock(&sb->mtx);
	if (fd >= 0)
		close(fd);
}

static void
use_write(struct scratch_base *sb, const char *id)
{
	int	r;

	if ((r = scratch_touch(sb, id)) < 0 && r != -ENOENT)
		log_limited(LOG_WARNING, "scratch_note_use",
		    "%s: cannot record last use: %s", id, strerror(-r));
}

void
scratch_note_use(struct scratch_base *sb, const char *id)
{
	struct use_ent	*e;
	double		 now;
	int		 due = 0, need_fd = 0;

	if (!scratch_id_valid(id))
		return;
	now = clock_s(CLOCK_MONOTONIC);
	pthread_mutex_lock(&sb->mtx);
	if ((e = use_get(sb, id, now)) != NULL) {
		if (now - e->written >= sb->note_interval) {
			e->written = now;
			due = 1;
		}
		if (e->holds > 0 && !e->locked)
			need_fd = use_lock(e);
	}
	pthread_mutex_unlock(&sb->mtx);
	if (need_fd)
		use_lock_open(sb, id);
	if (due)
		use_write(sb, id);
}

void
scratch_hold_open(struct scratch_base *sb, const char *id)
{
	struct use_ent	*e;

	if (!scratch_id_valid(id))
		return;
	pthread_mutex_lock(&sb->mtx);
	if ((e = use_get(sb, id, clock_s(CLOCK_MONOTONIC))) != NULL)
		e->holds++;
	pthread_mutex_unlock(&sb->mtx);
	/* Takes the shared lock now that there is a hold. */
	scratch_note_use(sb, id);
}

void
scratch_hold_close(struct scratch_base *sb, const char *id)
{
	struct use_ent	*e;
	int		 last = 0, fd = -1;

	if (!scratch_id_valid(id))
		return;
	pthread_mutex_lock(&sb->mtx);
	if ((e = use_find(sb, id)) == NULL || e->holds == 0)
		log_warn("%s: hold_close without hold_open", id);
	else if (--e->holds == 0) {
		fd = e->lockfd;		/* closed after mtx, as it was opened */
		e->lockfd = -1;
		e->locked = 0;
		e->written = clock_s(CLOCK_MONOTONIC);
		last = 1;
	}
	pthread_mutex_unlock(&sb->mtx);
	if (fd >= 0)
		close(fd);
	/* The last handle closing is the last use so far: record it now. */
	if (last)
		use_write(sb, id);
}

void
scratch_set_note_interval(struct scratch_base *sb, double seconds)
{
	pthread_mutex_lock(&sb->mtx);
	sb->note_interval = seconds > 0 ? seconds : 0;
	pthread_mutex_unlock(&sb->mtx);
}

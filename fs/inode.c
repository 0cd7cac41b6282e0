/*
 * The inode table: every backing inode the kernel knows, keyed by device,
 * inode number and workspace, each with an O_PATH fd. The daemon's open-file
 * limit must not bound the number of inodes served, so fds of inodes that no
 * operation is using sit on an LRU list and are closed when there are too
 * many; the inode is reopened later from its file handle, which needs no
 * path and so cannot be redirected by a rename or a symlink. Over a local
 * filesystem a regular file is entered by its name, without an fd until
 * its first use (inode_by_name_ok).
 */
#include "config.h"

#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <dirent.h>
#include <errno.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wsfs.h"

static struct {
	pthread_mutex_t		 lock;
	void			*tree;		/* tsearch tree of inodes */
	void			*names;		/* tsearch tree of knames */
	TAILQ_HEAD(inode_lru, inode) lru;		/* evictable fds, newest first */
	unsigned long		 ninodes;
	uint64_t		 generation;	/* of the newest inode */
	unsigned long		 nfds;
	unsigned long		 max_fds;
	int			 mount_fd;	/* for open_by_handle_at */
	int			 handles_warned;
	int			 lazy_handles;	/* set before any lookup */
	int			 by_name;	/* set before any lookup */
	int			 handles_die;	/* const: see inode_table_init */
	int			*closing;	/* fds to close after unlock */
	size_t			 nclosing, closing_cap;
	struct inode		 root;
} itab = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/*
 * Closing an inode's last fd can wait for the disk (the inode is written
 * back or evicted, and that may first read its block), and so can
 * reopening it: never under itab.lock, which every lookup takes, or one
 * slow disk read stalls the whole mount. Nor in the worker that frees the
 * inode: that is mostly a FORGET, and libfuse does not count a worker
 * serving a FORGET as busy, so after the kernel drops its caches a burst
 * of forgets waiting for the disk could hold every worker while libfuse
 * started no new one. Fds closed under the lock wait in itab.closing until
 * itab_unlock(), which hands them to one closer thread; past CLOSER_MAX
 * queued fds the caller closes its own (slow, but the fds stay bounded).
 * Woken for a first fd, the closer lets more gather for CLOSER_LINGER_MS
 * (or until CLOSER_BATCH are queued): an rm -rf frees an inode per
 * removed name, and a wake-up each cost the daemon more than the closes.
 */
#define CLOSER_MAX	1024
#define CLOSER_BATCH	256
#define CLOSER_LINGER_MS 10

static struct {
	pthread_mutex_t	 lock;
	pthread_cond_t	 cond;		/* work queued, or the queue emptied */
	pthread_once_t	 once;
	int		 running;
	int		*fds;
	size_t		 n, cap;
	size_t		 busy;		/* taken off the queue, not yet closed */
} closer = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.once = PTHREAD_ONCE_INIT,
};

static void *
closer_main(void *arg)
{
	struct timespec	 until;
	int		*fds;
	size_t		 n;

	(void)arg;
	pthread_mutex_lock(&closer.lock);
	for (;;) {
		while (closer.n == 0)
			pthread_cond_wait(&closer.cond, &closer.lock);
		if (closer.n < CLOSER_BATCH) {
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_nsec += CLOSER_LINGER_MS * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			while (closer.n < CLOSER_BATCH &&
			    pthread_cond_clockwait(&closer.cond, &closer.lock,
			    CLOCK_MONOTONIC, &until) != ETIMEDOUT)
				;
		}
		fds = closer.fds;
		closer.busy = n = closer.n;
		closer.fds = NULL;
		closer.n = closer.cap = 0;
		pthread_mutex_unlock(&closer.lock);
		while (n > 0)
			close(fds[--n]);
		free(fds);
		pthread_mutex_lock(&closer.lock);
		closer.busy = 0;
		pthread_cond_broadcast(&closer.cond);
	}
	return NULL;
}

/*
 * Started by the first close, in a worker: it inherits the worker's
 * blocked signals and the capabilities left after priv_drop.
 */
static void
closer_start(void)
{
	pthread_attr_t	attr;
	pthread_t	t;

	if (pthread_attr_init(&attr) != 0)
		return;
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &attr, closer_main, NULL) == 0)
		closer.running = 1;
	else
		log_warn("no closer thread; fds are closed by the workers");
	pthread_attr_destroy(&attr);
}

/* Close n fds in the closer thread, or here if it cannot take them. */
static void
closer_push(const int *fds, size_t n)
{
	size_t	 cap;
	int	*a, queued = 0, wake = 0;

	pthread_once(&closer.once, closer_start);
	pthread_mutex_lock(&closer.lock);
	if (closer.running && closer.n + n <= CLOSER_MAX) {
		if (closer.n + n > closer.cap) {
			cap = closer.n + n < 32 ? 64 : (closer.n + n) * 2;
			if ((a = reallocarray(closer.fds, cap,
			    sizeof *a)) != NULL) {
				closer.fds = a;
				closer.cap = cap;
			}
		}
		if (closer.n + n <= closer.cap) {
			/* It waits for a first fd, then for a batch. */
			wake = closer.n == 0 || (closer.n < CLOSER_BATCH &&
			    closer.n + n >= CLOSER_BATCH);
			memcpy(closer.fds + closer.n, fds, n * sizeof *fds);
			closer.n += n;
			queued = 1;
		}
	}
	pthread_mutex_unlock(&closer.lock);
	/*
	 * Woken after the unlock, the closer does not block again at once on
	 * the lock we held: one futex call per hand-off on each side, not two.
	 */
	if (wake)
		pthread_cond_broadcast(&closer.cond);
	if (!queued)
		while (n > 0)
			close(fds[--n]);
}

/* Wait until every fd handed to the closer is closed (for tests). */
void
inode_closes_wait(void)
{
	pthread_mutex_lock(&closer.lock);
	while (closer.n > 0 || closer.busy > 0)
		pthread_cond_wait(&closer.cond, &closer.lock);
	pthread_mutex_unlock(&closer.lock);
}

static void
inode_close_later(int fd)
{
	int	*a;
	size_t	 cap;

	if (itab.nclosing == itab.closing_cap) {
		cap = itab.closing_cap ? itab.closing_cap * 2 : 16;
		if ((a = reallocarray(itab.closing, cap, sizeof *a)) == NULL) {
			close(fd);	/* out of memory: slow, not wrong */
			return;
		}
		itab.closing = a;
		itab.closing_cap = cap;
	}
	itab.closing[itab.nclosing++] = fd;
}

static void
itab_unlock(void)
{
	int	*fds = itab.closing;
	size_t	 n = itab.nclosing;

	itab.closing = NULL;
	itab.nclosing = itab.closing_cap = 0;
	pthread_mutex_unlock(&itab.lock);
	if (n > 0)
		closer_push(fds, n);
	free(fds);
}

static int
inode_cmp(const void *a, const void *b)
{
	const struct inode	*x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->dev != y->dev)
		return x->dev < y->dev ? -1 : 1;
	if (x->ws != y->ws)
		return x->ws < y->ws ? -1 : 1;
	/*
	 * An inode number can come back as another type once the old inode
	 * is gone while the kernel still holds it: the type is part of the
	 * key, compared before anything that depends on it, or the order
	 * would not be the same both ways.
	 */
	if (x->type != y->type)
		return x->type < y->type ? -1 : 1;
	/*
	 * Symlinks and directories are one inode per directory they are seen
	 * in, so that the kernel's idea of their place never differs from
	 * the daemon's: what readlink returns depends on it.
	 */
	if ((x->type == S_IFLNK || x->type == S_IFDIR) && x->parent != y->parent)
		return (uintptr_t)x->parent < (uintptr_t)y->parent ? -1 : 1;
	return 0;
}

/*
 * A name the kernel holds for a directory or symlink inode: the reply to a
 * lookup, a create or a rename put a dentry (dir, name) -> in in its cache.
 * A rename through the mount names the dentry, not the inode, and the
 * backing store may by then hold another object under that name, so only
 * these tell which inode the kernel moved. Each holds a reference on dir.
 */
struct kname {
	struct inode		*dir;
	struct inode		*in;
	LIST_ENTRY(kname)	 entry;		/* in->knames */
	char			 name[];
};

static int
kname_cmp(const void *a, const void *b)
{
	const struct kname	*x = a, *y = b;

	if (x->dir != y->dir)
		return (uintptr_t)x->dir < (uintptr_t)y->dir ? -1 : 1;
	return strcmp(x->name, y->name);
}

static struct kname *
kname_find_locked(struct inode *dir, const char *name)
{
	struct kname	*key, **slot;
	size_t		 len = strlen(name);
	union {
		struct kname	k;
		char		buf[sizeof(struct kname) + NAME_MAX + 1];
	}		 kb;

	if (len > NAME_MAX)
		return NULL;
	key = &kb.k;
	key->dir = dir;
	memcpy(key->name, name, len + 1);
	slot = tfind(key, &itab.names, kname_cmp);
	return slot != NULL ? *slot : NULL;
}

static void inode_unref_locked(struct inode *in);

static void
kname_drop_locked(struct kname *k)
{
	struct kname	**slot;

	/* Names kept off the tree: kname_lose_locked, kname_file_add_locked. */
	if ((slot = tfind(k, &itab.names, kname_cmp)) != NULL && *slot == k)
		tdelete(k, &itab.names, kname_cmp);
	LIST_REMOVE(k, entry);
	inode_unref_locked(k->dir);
	free(k);
}

/*
 * The kernel's name k leads to in now. Where k's inode is in's object,
 * entered again because a lookup found its handle dead (inode_adopt),
 * the kernel may hold that inode still (an fd, a cwd) after it forgot
 * in: it keeps the name off the tree, so that inode_reopen_by_name can
 * find it again, though a rename no longer moves it.
 */
static void
kname_lose_locked(struct kname *k, struct inode *in)
{
	struct inode	*old = k->in;

	if (!itab.handles_die || old->ino != in->ino || old->dev != in->dev ||
	    old->type != in->type) {
		kname_drop_locked(k);
		return;
	}
	tdelete(k, &itab.names, kname_cmp);
}

/* Does the kernel hold the names the rename table keys inodes by? */
static int
kname_kept(struct inode *in)
{
	return (in->type == S_IFDIR || in->type == S_IFLNK) &&
	    in->ws_root != NULL && in != in->ws_root;
}

/*
 * No single place for in: readlink answers ESTALE, and in leaves the table
 * so that the kernel's retry, which looks each name up again, makes inodes
 * that have one.
 */
static void
inode_adrift_locked(struct inode *in)
{
	in->adrift = 1;
	if (!in->detached)
		tdelete(in, &itab.tree, inode_cmp);
	in->detached = 1;
}

/* Record the directory in was named in; see inode_ancestors. */
static void
inode_dir_set_locked(struct inode *in, struct inode *dir)
{
	struct inode	*old = in->dir_ref;

	if (in->type == S_IFDIR || in->type == S_IFLNK || old == dir)
		return;
	dir->refs++;
	in->dir_ref = dir;
	if (old != NULL)
		inode_unref_locked(old);
}

int
inode_ancestors(struct inode *in, struct inode *dir, struct glock_dir *out,
    int max)
{
	struct inode	*d = dir;
	int		 n = 0;

	pthread_mutex_lock(&itab.lock);
	if (in != NULL)
		d = in->type == S_IFDIR || in->type == S_IFLNK ? in->parent :
		    in->dir_ref;
	for (; d != NULL && d != &itab.root && n < max; d = d->parent) {
		out[n].ino = d->ino;
		out[n++].birth = d->birth;
	}
	itab_unlock();
	return n;
}

/*
 * The kernel now has dir/name -> in (unless the reply does not reach it:
 * then the name is one the kernel lacks, which costs at most a spurious
 * ESTALE). Returns the name, or NULL if it could not be kept.
 */
static struct kname *
kname_set_locked(struct inode *dir, const char *name, struct inode *in)
{
	struct kname	*k, **slot;
	size_t		 len = strlen(name);

	inode_dir_set_locked(in, dir);
	if (!kname_kept(in))
		return NULL;
	if ((k = kname_find_locked(dir, name)) != NULL) {
		if (k->in == in)
			return k;
		kname_lose_locked(k, in);
	}
	if ((k = malloc(sizeof *k + len + 1)) == NULL)
		goto lost;
	k->dir = dir;
	k->in = in;
	memcpy(k->name, name, len + 1);
	if ((slot = tsearch(k, &itab.names, kname_cmp)) == NULL) {
		free(k);
		goto lost;
	}
	dir->refs++;
	LIST_INSERT_HEAD(&in->knames, k, entry);
	return k;
lost:
	/* Without the name a rename could not follow it: fail closed. */
	inode_adrift_locked(in);
	return NULL;
}

/*
 * Regular files are one inode whatever their names, so the rename table
 * keeps none of theirs. Where handles die with a client's cache, and
 * where a file may be entered by its name alone (inode_lookup_known), a
 * file needs them all the same, to be found again (inode_reopen_by_name):
 * the names the kernel was last given for it, newest first, at most
 * KNAME_FILE_MAX, moved by a rename and dropped by an unlink through the
 * mount as the table's are. A name lost for lack of memory only costs
 * the reopen.
 */
#define KNAME_FILE_MAX	4

/* Add name to in's names, off the tree, making room: NULL if no memory. */
static struct kname *
kname_file_add_locked(struct inode *dir, const char *name, struct inode *in)
{
	struct kname	*k, *last = NULL;
	size_t		 len = strlen(name);
	int		 n = 0;

	LIST_FOREACH(k, &in->knames, entry) {
		last = k;
		n++;
	}
	if (n >= KNAME_FILE_MAX)
		kname_drop_locked(last);
	if ((k = malloc(sizeof *k + len + 1)) == NULL)
		return NULL;
	k->dir = dir;
	k->in = in;
	memcpy(k->name, name, len + 1);
	dir->refs++;
	LIST_INSERT_HEAD(&in->knames, k, entry);
	return k;
}

static void
kname_file_set_locked(struct inode *dir, const char *name, struct inode *in)
{
	struct kname	*k, **slot;

	/*
	 * Outside handles that die, only a file entered by its name and never
	 * opened needs them: once it has an fd, its eviction takes a handle.
	 * So a create or a lookup of a known file allocates nothing here.
	 */
	if (in->type != S_IFREG || in->ws_root == NULL || (!itab.handles_die &&
	    (!itab.by_name || in->fd >= 0 || in->fh != NULL)))
		return;
	if ((k = kname_find_locked(dir, name)) != NULL) {
		if (k->in == in) {
			LIST_REMOVE(k, entry);
			LIST_INSERT_HEAD(&in->knames, k, entry);
			return;
		}
		kname_lose_locked(k, in);
	}
	if ((k = kname_file_add_locked(dir, name, in)) == NULL)
		return;
	if ((slot = tsearch(k, &itab.names, kname_cmp)) == NULL || *slot != k)
		kname_drop_locked(k);
}

void
inode_table_init(int source_fd, int max_fds)
{
	struct stat	st;
	struct statfs	sf;

	if (fstatat(source_fd, "", &st, AT_EMPTY_PATH) == -1)
		fatal("stat %s", wsfs.source);
	TAILQ_INIT(&itab.lru);
	itab.mount_fd = wsfs.source_fd_rd;
	itab.max_fds = max_fds;
	itab.root.dev = st.st_dev;
	itab.root.ino = st.st_ino;
	itab.root.type = S_IFDIR;
	itab.root.ws = 0;
	itab.root.fd = source_fd;
	itab.root.nlookup = 1;
	itab.root.pinned = 1;
	/*
	 * A FUSE filesystem without export support (GlusterFS's client) gives
	 * handles of its node ids: they die when the kernel forgets its inode,
	 * while the object lives on, and the id can come back for another
	 * object (inode_fd_get checks what a handle opens there). Elsewhere
	 * a stale handle means the object was removed (NFS and CephFS have
	 * export operations), and its number may already name a new one:
	 * nothing is reopened by name there.
	 */
	itab.handles_die = fstatfs(source_fd, &sf) == 0 &&
	    (unsigned long)sf.f_type == FUSE_SUPER_MAGIC;
}

struct inode *
inode_root(void)
{
	return &itab.root;
}

struct inode *
inode_from_ino(fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return &itab.root;
	return (struct inode *)(uintptr_t)ino;
}

void
inode_stats(unsigned long *inodes, unsigned long *fds)
{
	pthread_mutex_lock(&itab.lock);
	*inodes = itab.ninodes;
	*fds = itab.nfds;
	itab_unlock();
}

/*
 * lazy: whether an inode's file handle is taken only when its fd is
 * evicted. On a local filesystem an inode number is not reused while an fd
 * holds the inode, so while the fd is open the handle tells nothing the
 * number does not, and most inodes are forgotten before they are ever
 * evicted: the name_to_handle_at of every lookup and create is saved.
 * Network filesystems reuse numbers under us, and the cluster locks copy
 * handles at any time (glock.c): there every inode with an fd has its
 * handle. by_name: whether a lookup may enter a regular file by its name
 * (inode_by_name_ok), on a local filesystem, with or without cluster
 * locks; where handles are not lazy, such a file takes its handle with
 * its first fd (inode_fd_get). Set once by main, before the first lookup.
 */
void
inode_handles(int lazy, int by_name)
{
	itab.lazy_handles = lazy;
	itab.by_name = by_name;
}

static int
inode_handles_lazy(void)
{
	return itab.lazy_handles;
}

static int
inode_evictable(struct inode *in)
{
	return !in->pinned && (in->fh != NULL || inode_handles_lazy());
}

static struct file_handle	*inode_handle(int);

/*
 * Close the least recently used idle fds until under the limit. A lazy
 * inode takes its handle now, from the fd, under the lock: encoding a
 * handle reads only the in-memory inode, it never waits for the disk.
 */
static void
inode_evict_locked(void)
{
	struct inode		*in;
	struct file_handle	*fh;

	while (itab.nfds > itab.max_fds && !TAILQ_EMPTY(&itab.lru)) {
		in = TAILQ_LAST(&itab.lru, inode_lru);
		TAILQ_REMOVE(&itab.lru, in, lru);
		in->in_lru = 0;
		if (in->fh == NULL) {
			if ((fh = inode_handle(in->fd)) == NULL) {
				/* No way to reopen it: it keeps its fd. */
				in->pinned = 1;
				if (!itab.handles_warned) {
					itab.handles_warned = 1;
					log_warn("%s: no file handles (%s); "
					    "every inode keeps an open fd",
					    wsfs.source, strerror(errno));
				}
				continue;
			}
			/* inode_open reads it without the lock. */
			__atomic_store_n(&in->fh, fh, __ATOMIC_RELEASE);
		}
		inode_close_later(in->fd);
		in->fd = -1;
		itab.nfds--;
	}
}

static void
inode_lru_add_locked(struct inode *in)
{
	if (in->fd >= 0 && in->fd_users == 0 && !in->in_lru &&
	    inode_evictable(in)) {
		TAILQ_INSERT_HEAD(&itab.lru, in, lru);
		in->in_lru = 1;
	}
}

static void
inode_lru_del_locked(struct inode *in)
{
	if (in->in_lru) {
		TAILQ_REMOVE(&itab.lru, in, lru);
		in->in_lru = 0;
	}
}

static void	(*inode_free_hook)(struct inode *);

void
inode_on_free(void (*fn)(struct inode *in))
{
	inode_free_hook = fn;
}

/* Free an inode nobody references any more, then drop what it held. */
static void
inode_free_locked(struct inode *in)
{
	struct inode	*parent = in->parent, *ws_root = in->ws_root;
	struct inode	*dir = in->dir_ref;

	while (!LIST_EMPTY(&in->knames))
		kname_drop_locked(LIST_FIRST(&in->knames));
	if (!in->detached)
		tdelete(in, &itab.tree, inode_cmp);
	inode_lru_del_locked(in);
	if (in->fd >= 0) {
		inode_close_later(in->fd);
		itab.nfds--;
	}
	itab.ninodes--;
	if (inode_free_hook != NULL)
		inode_free_hook(in);
	free(in->fh);
	free(in->name);
	free(in);
	if (parent != NULL)
		inode_unref_locked(parent);
	if (dir != NULL)
		inode_unref_locked(dir);
	if (ws_root != NULL && ws_root != in)
		inode_unref_locked(ws_root);
}

static void
inode_unref_locked(struct inode *in)
{
	if (--in->refs == 0 && in->nlookup == 0 && in != &itab.root)
		inode_free_locked(in);
}

void
inode_forget(struct inode *in, uint64_t n)
{
	if (in == &itab.root)
		return;
	pthread_mutex_lock(&itab.lock);
	if (n > in->nlookup) {
		log_warn("forget %llu of inode %llu with nlookup %llu",
		    (unsigned long long)n, (unsigned long long)in->ino,
		    (unsigned long long)in->nlookup);
		n = in->nlookup;
	}
	in->nlookup -= n;
	if (in->nlookup == 0 && in->refs == 0)
		inode_free_locked(in);
	itab_unlock();
}

static int	inode_reopen_by_name(struct inode *);
static int	inode_reopen_check(struct inode *, int);
static struct file_handle *inode_fd_set_locked(struct inode *, int,
		    struct file_handle *);
static int	inode_statx_mnt(int, const char *, int, struct stat *,
		    uint64_t *, int *);

/*
 * The storage answered err to what wsfs did on in, and wsfs passes it on
 * (EIO, or ESTALE where handles die with a client's cache): say which
 * object, so that a failing storage is told from a failing wsfs. Where a
 * stale handle means a removed object, it is answered ENOENT, and needs
 * no line. Returns what to answer.
 */
static int
inode_storage_error(struct inode *in, const char *what, int err)
{
	char	ws[NAME_MAX + 1] = "?";

	if (err == -ESTALE && !itab.handles_die)
		return -ENOENT;
	if (err != -EIO && err != -ESTALE)
		return err;
	pthread_mutex_lock(&itab.lock);
	if (in->ws_root != NULL && in->ws_root->name != NULL)
		snprintf(ws, sizeof ws, "%s", in->ws_root->name);
	itab_unlock();
	log_limited(LOG_ERR, "storage-error", "%s: workspace %s (%llu), inode "
	    "%llu: %s: the storage answered %s", wsfs.source, ws,
	    (unsigned long long)in->ws, (unsigned long long)in->ino, what,
	    strerror(-err));
	return err;
}

/*
 * Pin and return the inode's O_PATH fd, reopening it from its handle if it
 * was evicted, or by its name if it was entered without one. Every
 * successful call is paired with inode_fd_put().
 */
int
inode_fd_get(struct inode *in)
{
	struct file_handle	*fh, *nfh = NULL;
	int			 fd;

	pthread_mutex_lock(&itab.lock);
	if (in->fd < 0) {
		/* A handle is the inode's for life; the caller holds it. */
		fh = in->fh;
		itab_unlock();
		if (fh == NULL) {
			/*
			 * Entered by its name, never opened (inode_by_name_ok):
			 * ESTALE if the name leads elsewhere now, so that the
			 * kernel looks the path up again; ENOENT if it is gone.
			 * Where handles are not lazy it takes one now.
			 */
			fd = inode_reopen_by_name(in);
			if (fd >= 0 && !inode_handles_lazy())
				nfh = inode_handle(fd);
		} else {
			fd = open_by_handle_at(itab.mount_fd, fh,
			    O_PATH | O_CLOEXEC | O_NOFOLLOW);
			if (fd == -1)
				fd = -errno;
			/*
			 * A dead FUSE node id can be given to another object
			 * of the same generation: then the handle opens that
			 * one. Keep it only if it is in's object.
			 */
			else if (itab.handles_die)
				fd = inode_reopen_check(in, fd);
			if (fd == -ESTALE)
				fd = inode_reopen_by_name(in);
			/*
			 * Not found again: the object is gone, or on a FUSE
			 * storage ESTALE makes the kernel walk the path
			 * again, which finds what the name leads to now.
			 */
			if (fd < 0)
				fd = inode_storage_error(in, "reopen", fd);
		}
		if (fd < 0)
			return fd;
		pthread_mutex_lock(&itab.lock);
		if (in->fd < 0)
			nfh = inode_fd_set_locked(in, fd, nfh);
		else			/* another thread reopened it meanwhile */
			inode_close_later(fd);
	}
	in->fd_users++;
	inode_lru_del_locked(in);
	fd = in->fd;
	inode_evict_locked();
	itab_unlock();
	free(nfh);
	return fd;
}

/*
 * Keep fd (owned by the call) only if it is in's object: number, device,
 * type and, where both are known, birth time. -ESTALE if not.
 */
static int
inode_reopen_check(struct inode *in, int fd)
{
	struct stat	st;
	uint64_t	birth;

	if (inode_statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, &st,
	    &birth) < 0 || st.st_ino != in->ino || st.st_dev != in->dev ||
	    (st.st_mode & S_IFMT) != in->type ||
	    (birth != 0 && in->birth != 0 && birth != in->birth)) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}

/*
 * Open name below dir, beneath it and following nothing, as a lookup
 * would, and keep the fd only if it is in's object (inode_reopen_check).
 * -ENOENT if nothing is there, else -ESTALE if not.
 */
static int
inode_reopen_at(struct inode *in, struct inode *dir, const char *name)
{
	int	pfd, fd;

	if ((pfd = inode_fd_get(dir)) < 0)
		return -ESTALE;
	fd = inode_openat_beneath(pfd, name, O_PATH, 0);
	inode_fd_put(dir);
	if (fd < 0)
		return fd == -ENOENT ? -ENOENT : -ESTALE;
	return inode_reopen_check(in, fd);
}

/*
 * Another inode of in's object, entered since by a lookup that found in's
 * handle dead: its fd is the same object's.
 */
static int
inode_reopen_from(struct inode *in, struct inode *sib)
{
	int	sfd, fd;

	if ((sfd = inode_fd_get(sib)) < 0)
		return -ESTALE;
	fd = fcntl(sfd, F_DUPFD_CLOEXEC, 0);
	inode_fd_put(sib);
	if (fd == -1)
		return -ESTALE;
	return inode_reopen_check(in, fd);
}

/*
 * A stale handle need not mean a removed object: GlusterFS's FUSE client
 * gives handles that die with its kernel inode (drop_caches, memory
 * pressure), so a directory that is some process's cwd, or a name the
 * kernel cached, would read as gone once its fd was evicted. Directories
 * and symlinks know where the kernel sees them (parent and knames),
 * regular files the names it was last given (kname_file_set_locked):
 * open such a name again (inode_reopen_at), newest first, unless the
 * table holds another inode of the object (inode_reopen_from). -ESTALE
 * if none leads to in's object (-ENOENT for a file entered by its name
 * whose names are all gone). Only where handles die with a client's
 * cache (inode_table_init), and for a regular file entered by its name
 * alone, which has no handle (inode_lookup_known).
 */
static int
inode_reopen_by_name(struct inode *in)
{
	struct inode	*dirs[KNAME_FILE_MAX], *sib = NULL, **slot;
	struct kname	*k;
	char		*names[KNAME_FILE_MAX];
	int		 i, n = 0, fd = -ESTALE, missing = 1;

	if ((!itab.handles_die && (in->type != S_IFREG ||
	    __atomic_load_n(&in->fh, __ATOMIC_ACQUIRE) != NULL)) ||
	    (in->type != S_IFDIR && in->type != S_IFLNK && in->type != S_IFREG))
		return -ESTALE;
	pthread_mutex_lock(&itab.lock);
	if (in->detached && (slot = tfind(in, &itab.tree, inode_cmp)) != NULL &&
	    *slot != in) {
		sib = *slot;
		sib->refs++;
	}
	LIST_FOREACH(k, &in->knames, entry) {
		if (n == KNAME_FILE_MAX)
			break;
		/* A directory or symlink: the name below its parent. */
		if (in->type != S_IFREG && k->dir != in->parent)
			continue;
		if ((names[n] = strdup(k->name)) == NULL)
			break;
		dirs[n] = k->dir;
		dirs[n++]->refs++;	/* the name may go while we open it */
		if (in->type != S_IFREG)
			break;
	}
	itab_unlock();
	if (sib != NULL)
		fd = inode_reopen_from(in, sib);
	for (i = 0; i < n && fd < 0; i++)
		if ((fd = inode_reopen_at(in, dirs[i], names[i])) != -ENOENT)
			missing = 0;
	pthread_mutex_lock(&itab.lock);
	if (sib != NULL)
		inode_unref_locked(sib);
	for (i = 0; i < n; i++)
		inode_unref_locked(dirs[i]);
	itab_unlock();
	for (i = 0; i < n; i++)
		free(names[i]);
	/*
	 * A file entered by its name whose names are all gone is gone, as
	 * on a local filesystem; where something else is there now, ESTALE
	 * makes the kernel look the name up again.
	 */
	if (fd < 0 && missing && sib == NULL && !itab.handles_die)
		return -ENOENT;
	return fd < 0 ? -ESTALE : fd;
}

void
inode_fd_put(struct inode *in)
{
	pthread_mutex_lock(&itab.lock);
	if (--in->fd_users == 0)
		inode_lru_add_locked(in);
	inode_evict_locked();
	itab_unlock();
}

void
inode_opened(struct inode *in, int delta)
{
	pthread_mutex_lock(&itab.lock);
	in->opens += delta;
	itab_unlock();
}

void
inode_procpath(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "/proc/self/fd/%d", fd);
}

/*
 * Open what fd (often O_PATH) refers to, through its magic link in
 * /proc/self/fd: the link leads to fd's own inode, whatever the backing
 * store's names say now. flags must not hold O_NOFOLLOW, which refuses
 * the link. -errno or an fd.
 */
int
inode_proc_open(int fd, int flags)
{
	char	name[16];
	int	r;

	snprintf(name, sizeof name, "%d", fd);
	r = openat(wsfs.proc_fd, name, flags | O_CLOEXEC);
	return r == -1 ? -errno : r;
}

/*
 * Open one name below dirfd without following any symlink, without magic
 * links and without crossing into another mount.
 */
int
inode_openat_beneath(int dirfd, const char *name, int flags, mode_t mode)
{
	struct open_how	how;
	int		fd;

	if (name[0] == '\0' || strchr(name, '/') != NULL)
		return -EINVAL;
	memset(&how, 0, sizeof how);
	how.flags = (uint64_t)flags | O_NOFOLLOW | O_CLOEXEC;
	how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
	    RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
	do {
		fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	} while (fd == -1 && errno == EAGAIN);
	if (fd == -1)
		return -errno;
	return fd;
}

/*
 * Open the inode itself for I/O. A file handle names the inode, not a path,
 * so a rename or a symlink swapped in on the backing store cannot redirect
 * the open.
 */
int
inode_open(struct inode *in, int flags)
{
	struct file_handle	*fh;
	int			 fd, r;

	flags &= ~(O_CREAT | O_EXCL | O_NOCTTY | O_TRUNC);
	flags |= O_CLOEXEC | O_NOFOLLOW;
	/*
	 * Where handles die (inode_table_init), a dead one can name another
	 * object now, which an open for I/O must not even touch (a FIFO
	 * would block it): through the O_PATH fd, checked by inode_fd_get.
	 */
	if (!itab.handles_die &&
	    (fh = __atomic_load_n(&in->fh, __ATOMIC_ACQUIRE)) != NULL) {
		fd = open_by_handle_at(itab.mount_fd, fh, flags);
		if (fd >= 0)
			return fd;
		return inode_storage_error(in, "open", -errno);
	}
	if ((r = inode_fd_get(in)) < 0)
		return r;
	fd = inode_proc_open(r, flags & ~O_NOFOLLOW);
	inode_fd_put(in);
	return fd;
}

int
inode_stat(struct inode *in, struct stat *st)
{
	int	fd, r = 0;

	if ((fd = inode_fd_get(in)) < 0)
		return fd;
	if (fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
		r = inode_storage_error(in, "stat", -errno);
	inode_fd_put(in);
	return r;
}

/*
 * fstatat with the birth time: *birth in nanoseconds since the epoch, or
 * 0 where the storage does not tell it (GlusterFS's FUSE client, for
 * one). The one stat of a name that keys a cluster lock (glock.c), so
 * that every node spells the same object's key the same way.
 */
int
inode_statx(int dirfd, const char *name, int flags, struct stat *st,
    uint64_t *birth)
{
	return inode_statx_mnt(dirfd, name, flags, st, birth, NULL);
}

/*
 * inode_statx that also says whether the object is the root of a mount
 * (*mnt_root 1), or whether that cannot be told (-1: a kernel without
 * STATX_ATTR_MOUNT_ROOT).
 */
static int
inode_statx_mnt(int dirfd, const char *name, int flags, struct stat *st,
    uint64_t *birth, int *mnt_root)
{
	struct statx	stx;

	if (statx(dirfd, name, flags | AT_STATX_SYNC_AS_STAT,
	    STATX_BASIC_STATS | STATX_BTIME, &stx) == -1)
		return -errno;
	if (mnt_root != NULL)
		*mnt_root = !(stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) ?
		    -1 : (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
	memset(st, 0, sizeof *st);
	st->st_dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
	st->st_ino = stx.stx_ino;
	st->st_mode = stx.stx_mode;
	st->st_nlink = stx.stx_nlink;
	st->st_uid = stx.stx_uid;
	st->st_gid = stx.stx_gid;
	st->st_rdev = makedev(stx.stx_rdev_major, stx.stx_rdev_minor);
	st->st_size = (off_t)stx.stx_size;
	st->st_blksize = (blksize_t)stx.stx_blksize;
	st->st_blocks = (blkcnt_t)stx.stx_blocks;
	st->st_atim.tv_sec = stx.stx_atime.tv_sec;
	st->st_atim.tv_nsec = stx.stx_atime.tv_nsec;
	st->st_mtim.tv_sec = stx.stx_mtime.tv_sec;
	st->st_mtim.tv_nsec = stx.stx_mtime.tv_nsec;
	st->st_ctim.tv_sec = stx.stx_ctime.tv_sec;
	st->st_ctim.tv_nsec = stx.stx_ctime.tv_nsec;
	*birth = 0;
	if ((stx.stx_mask & STATX_BTIME) && stx.stx_btime.tv_sec > 0)
		*birth = (uint64_t)stx.stx_btime.tv_sec * 1000000000u +
		    stx.stx_btime.tv_nsec;
	return 0;
}

/*
 * The table key of the object st found in parent: a workspace root is
 * keyed by its own number; directories and symlinks also by the directory
 * they are seen in.
 */
static void
inode_key(struct inode *key, struct inode *parent, const struct stat *st)
{
	memset(key, 0, sizeof *key);
	key->dev = st->st_dev;
	key->ino = st->st_ino;
	key->type = st->st_mode & S_IFMT;
	key->ws = parent == &itab.root ? (uint64_t)st->st_ino : parent->ws;
	key->parent = parent == &itab.root || (!S_ISDIR(st->st_mode) &&
	    !S_ISLNK(st->st_mode)) ? NULL : parent;
}

/*
 * How many levels below its workspace root the kernel sees an inode's
 * directory: the depth the kernel walks ".." from when it follows a link
 * there. For a symlink, its directory's depth.
 */
int
inode_kdepth(struct inode *in, unsigned int *depth)
{
	struct inode	*d;
	unsigned int	 n = 0;
	int		 r = 0;

	pthread_mutex_lock(&itab.lock);
	d = in->type == S_IFLNK ? in->parent : in;
	while (d != NULL && d != d->ws_root && !d->adrift) {
		d = d->parent;
		if (++n > PATH_MAX / 2)
			break;
	}
	if (in->adrift || (d != NULL && d->adrift))
		/*
		 * Not one place: the kernel retries its walk with fresh
		 * lookups on ESTALE, which give inodes with one place.
		 */
		r = -ESTALE;
	else if (d == NULL || d != d->ws_root)
		r = -ENOENT;
	else
		*depth = n;
	itab_unlock();
	return r;
}

/* The kernel moved in to the name keep in directory to: re-key it there. */
static void
inode_moved_locked(struct inode *in, struct inode *to, struct kname *keep)
{
	struct inode	**slot;
	struct kname	 *k, *next;

	if (!kname_kept(in) || in->adrift)
		return;
	if (keep == NULL) {
		inode_adrift_locked(in);
		return;
	}
	for (k = LIST_FIRST(&in->knames); k != NULL; k = next) {
		next = LIST_NEXT(k, entry);
		if (k == keep || k->dir == to)
			continue;
		/* A directory has one dentry: its other names are gone. */
		if (in->type == S_IFDIR) {
			kname_drop_locked(k);
			continue;
		}
		/*
		 * A symlink's other names stay where they were: one inode
		 * in two directories has no single depth.
		 */
		inode_adrift_locked(in);
		return;
	}
	if (in->parent == to)
		return;
	/* The parent is part of the key. */
	if (!in->detached)
		tdelete(in, &itab.tree, inode_cmp);
	to->refs++;
	inode_unref_locked(in->parent);
	in->parent = to;
	in->detached = 0;
	slot = tsearch(in, &itab.tree, inode_cmp);
	if (slot == NULL || *slot != in) {
		/*
		 * Another inode of this object is known there (the backing
		 * store moved it first): this one stays out of the table,
		 * with the place the kernel sees it at.
		 */
		in->detached = 1;
	}
}

/*
 * A rename through the mount of from/name to to/newname succeeded: move the
 * inodes whose dentries the kernel moved, whatever the backing store holds
 * under those names now.
 */
void
inode_renamed(struct inode *from, const char *name, struct inode *to,
    const char *newname, int exchange)
{
	struct kname	*k;
	struct inode	*moved = NULL, *back = NULL;

	pthread_mutex_lock(&itab.lock);
	/* Keep both directories while their names are dropped. */
	from->refs++;
	to->refs++;
	if ((k = kname_find_locked(from, name)) != NULL) {
		moved = k->in;
		kname_drop_locked(k);
	}
	/* The kernel unhashed the dentry it replaced, or swapped it. */
	if ((k = kname_find_locked(to, newname)) != NULL) {
		back = k->in;
		kname_drop_locked(k);
	}
	if (moved != NULL)
		inode_moved_locked(moved, to,
		    kname_set_locked(to, newname, moved));
	if (exchange && back != NULL)
		inode_moved_locked(back, from,
		    kname_set_locked(from, name, back));
	/* A file's names follow it too (inode_reopen_by_name). */
	if (moved != NULL)
		kname_file_set_locked(to, newname, moved);
	if (exchange && back != NULL)
		kname_file_set_locked(from, name, back);
	inode_unref_locked(to);
	inode_unref_locked(from);
	itab_unlock();
}

/* name in parent was removed through the mount. */
void
inode_unlinked(struct inode *parent, const char *name)
{
	struct kname	*k;

	pthread_mutex_lock(&itab.lock);
	parent->refs++;
	if ((k = kname_find_locked(parent, name)) != NULL)
		kname_drop_locked(k);
	inode_unref_locked(parent);
	itab_unlock();
}

/* Same inode (and generation)? Unknown handles cannot tell: yes. */
static int
inode_handle_eq(const struct file_handle *a, const struct file_handle *b)
{
	if (a == NULL || b == NULL)
		return 1;
	return a->handle_type == b->handle_type &&
	    a->handle_bytes == b->handle_bytes &&
	    memcmp(a->f_handle, b->f_handle, a->handle_bytes) == 0;
}

static struct file_handle *
inode_handle(int fd)
{
	struct file_handle	*fh;
	int			 mnt;

	if ((fh = malloc(sizeof *fh + MAX_HANDLE_SZ)) == NULL)
		return NULL;
	fh->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", fh, &mnt, AT_EMPTY_PATH) == -1) {
		free(fh);
		return NULL;
	}
	return fh;
}

/*
 * The entry reply for in. The node id is the inode's address, which malloc
 * hands out again once the inode is freed; the generation, never reused,
 * keeps a file handle of the old inode (open_by_handle_at on the mount)
 * from resolving to the new one while the kernel has it cached.
 */
static void
inode_entry(struct inode *in, const struct stat *st,
    struct fuse_entry_param *e)
{
	memset(e, 0, sizeof *e);
	e->ino = in == &itab.root ? FUSE_ROOT_ID : (uintptr_t)in;
	e->generation = in->generation;
	e->attr = *st;
	e->attr_timeout = wsfs.conf.attr_timeout;
	e->entry_timeout = wsfs.conf.entry_timeout;
}

/*
 * A new inode keyed as key, found below parent, with its birth time and
 * handle (the inode's from now on, may be NULL) and no fd, entered into
 * the table: NULL for lack of memory. Nothing of that key is in the
 * table.
 */
static struct inode *
inode_new_locked(const struct inode *key, struct inode *parent,
    uint64_t birth, struct file_handle *fh)
{
	struct inode	*in;

	if ((in = calloc(1, sizeof *in)) == NULL)
		return NULL;
	*in = *key;
	in->fd = -1;
	in->fh = fh;
	in->birth = birth;
	if (tsearch(in, &itab.tree, inode_cmp) == NULL) {
		free(in);
		return NULL;
	}
	in->generation = ++itab.generation;
	itab.ninodes++;
	if (parent == &itab.root) {
		in->ws_root = in;
		in->pinned = 1;
	} else {
		in->ws_root = parent->ws_root;
		in->ws_root->refs++;
	}
	if (in->parent != NULL)
		in->parent->refs++;
	return in;
}

/*
 * Give in (without an fd) the fd just opened for it and, where handles are
 * not lazy and in has none (a file entered by its name), the handle fh
 * taken from that fd: an inode with an fd has its handle there. Without
 * one, only its fd reaches it, and it keeps it. Returns fh if unused.
 */
static struct file_handle *
inode_fd_set_locked(struct inode *in, int fd, struct file_handle *fh)
{
	if (in->fh == NULL && fh != NULL) {
		/* inode_fd_get and glock.c read it without the lock. */
		__atomic_store_n(&in->fh, fh, __ATOMIC_RELEASE);
		fh = NULL;
	}
	if (in->fh == NULL && !inode_handles_lazy())
		in->pinned = 1;
	in->fd = fd;
	itab.nfds++;
	return fh;
}

/*
 * Enter the inode open as fd (O_PATH, owned by this call) into the table as
 * a child of parent, take one kernel reference and fill e for the reply.
 */
int
inode_adopt(struct inode *parent, const char *name, int fd,
    struct fuse_entry_param *e)
{
	struct inode		 key, *in, **slot;
	struct file_handle	*fh = NULL;
	struct stat		 st;
	uint64_t		 birth;
	int			 lazy = inode_handles_lazy(), r;

	if ((r = inode_statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, &st,
	    &birth)) < 0) {
		close(fd);
		return r;
	}
	/* The mount root shows directories only: each is a workspace. */
	if (parent == &itab.root && !S_ISDIR(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	inode_key(&key, parent, &st);
	/* The handle tells this inode from an older one of the same number. */
	if (!lazy && (fh = inode_handle(fd)) == NULL && !itab.handles_warned) {
		itab.handles_warned = 1;
		log_warn("%s: no file handles (%s); every inode keeps an open fd",
		    wsfs.source, strerror(errno));
	}

	pthread_mutex_lock(&itab.lock);
	slot = tfind(&key, &itab.tree, inode_cmp);
	/*
	 * Lazy handles: an inode of the table whose fd is open is the one fd
	 * leads to (its number is not reused while it lives); one whose fd
	 * was evicted has its handle, and fd's tells them apart; one entered
	 * by its name has none, and its birth time tells.
	 */
	if (lazy && slot != NULL && (*slot)->fd < 0 && (*slot)->fh != NULL) {
		itab_unlock();
		fh = inode_handle(fd);
		pthread_mutex_lock(&itab.lock);
		slot = tfind(&key, &itab.tree, inode_cmp);
	}
	if (slot != NULL && (!inode_handle_eq((*slot)->fh, fh) ||
	    (birth != 0 && (*slot)->birth != 0 && birth != (*slot)->birth))) {
		/*
		 * The number came back for another inode while the kernel
		 * still holds the old one: that one stays for the kernel
		 * until it forgets it, out of the table.
		 */
		in = *slot;
		tdelete(in, &itab.tree, inode_cmp);
		in->detached = 1;
		slot = NULL;
	}
	if (slot != NULL)
		in = *slot;
	/* Under the lock since the tfind: nothing else came in. */
	else if ((in = inode_new_locked(&key, parent, birth, fh)) == NULL) {
		itab_unlock();
		free(fh);
		close(fd);
		return -ENOMEM;
	} else
		fh = NULL;
	in->nlookup++;
	kname_set_locked(parent, name, in);
	if (in->fd < 0) {
		fh = inode_fd_set_locked(in, fd, fh);
		inode_lru_add_locked(in);
		fd = -1;
	}
	kname_file_set_locked(parent, name, in);
	inode_evict_locked();
	itab_unlock();
	free(fh);
	if (fd >= 0)
		close(fd);

	inode_entry(in, &st, e);
	return 0;
}

/* Enter a freshly created object, open as fd (any access mode, kept). */
int
inode_from_new_fd(struct inode *parent, const char *name, int fd,
    struct fuse_entry_param *e)
{
	int	pfd;

	if ((pfd = inode_proc_open(fd, O_PATH)) < 0)
		return pfd;
	return inode_adopt(parent, name, pfd, e);
}

/*
 * Whether a lookup may enter what a stat of name in parent found without
 * opening it: on one node over a local filesystem (lazy handles), a
 * regular file with a birth time, on parent's filesystem and not the
 * root of a mount. Its inode keeps the name (kname_file_set_locked) and is
 * opened by it on first use, below parent and following nothing, as the
 * walk would, and kept only if number, type and birth time match
 * (inode_reopen_by_name); a cold stat, a listing and an unlink never open
 * it at all. The birth time tells it from a later object of its number.
 */
static int
inode_by_name_ok(struct inode *parent, const struct stat *st, uint64_t birth,
    int mnt_root)
{
	return itab.by_name && S_ISREG(st->st_mode) && birth != 0 &&
	    mnt_root == 0 && st->st_dev == parent->dev && parent != &itab.root;
}

/*
 * The common case of a lookup: the kernel asks again for a name it knew.
 * One stat that follows nothing tells whether the name still leads to an
 * inode of the table, under the same key; a new inode needs the openat2
 * walk and a handle, unless inode_by_name_ok lets it in by its name. An
 * inode reached here was entered before by that walk, or is a regular
 * file of parent's filesystem that is no mount point, so this can never
 * cross a mount point or leave the workspace. Returns 1 with e filled and
 * one more kernel reference, -ENOENT when the name is not there, 0 for
 * the full walk.
 */
static int
inode_lookup_known(struct inode *parent, int pfd, const char *name,
    struct fuse_entry_param *e)
{
	union {
		struct file_handle	h;
		char			buf[sizeof(struct file_handle) +
					    MAX_HANDLE_SZ];
	}		 hb;
	struct file_handle *fh = &hb.h;
	struct inode	 key, *in, **slot;
	struct stat	 st;
	uint64_t	 birth = 0;
	int		 by_name = itab.by_name, mnt_root = -1, mnt, r;

	if (by_name)
		r = inode_statx_mnt(pfd, name, AT_SYMLINK_NOFOLLOW, &st, &birth,
		    &mnt_root);
	else
		r = fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == -1 ?
		    -errno : 0;
	if (r < 0)
		/* Nothing there: the walk would find nothing either. */
		return r == -ENOENT ? -ENOENT : 0;
	inode_key(&key, parent, &st);
	pthread_mutex_lock(&itab.lock);
	if ((slot = tfind(&key, &itab.tree, inode_cmp)) == NULL) {
		if (!inode_by_name_ok(parent, &st, birth, mnt_root) ||
		    (in = inode_new_locked(&key, parent, birth, NULL)) == NULL) {
			/* The walk enters it (or says why it cannot). */
			itab_unlock();
			return 0;
		}
		goto found;
	}
	in = *slot;
	if (by_name && in->fd < 0 && in->fh == NULL) {
		/* Entered by its name: the birth time is all that tells. */
		if (birth == in->birth)
			goto found;
		/* A later object of that number: see inode_adopt. */
		tdelete(in, &itab.tree, inode_cmp);
		in->detached = 1;
		if (!inode_by_name_ok(parent, &st, birth, mnt_root) ||
		    (in = inode_new_locked(&key, parent, birth, NULL)) == NULL) {
			itab_unlock();
			return 0;
		}
		goto found;
	}
	/*
	 * On a local filesystem an inode number is not reused while an fd
	 * holds the inode: with its fd open now, the inode of the table is
	 * alive and is the one the name leads to. Else the handle tells it
	 * from an older one of the same number.
	 */
	if (in->fd < 0 || !wsfs.source_local) {
		itab_unlock();
		fh->handle_bytes = MAX_HANDLE_SZ;
		if (name_to_handle_at(pfd, name, fh, &mnt, 0) == -1)
			return 0;
		pthread_mutex_lock(&itab.lock);
		if ((slot = tfind(&key, &itab.tree, inode_cmp)) == NULL ||
		    !inode_handle_eq((in = *slot)->fh, fh)) {
			itab_unlock();
			return 0;
		}
	}
found:
	in->nlookup++;
	kname_set_locked(parent, name, in);
	kname_file_set_locked(parent, name, in);
	itab_unlock();
	inode_entry(in, &st, e);
	return 1;
}

/*
 * Whether the table may know what a directory listing names: an inode of
 * that number and type in parent's workspace (and, for directories and
 * symlinks, seen in parent). Only a hint that saves the fstatat of a
 * known-name lookup for names the table cannot know; the walk's
 * inode_adopt finds the inode all the same if the hint was stale.
 */
static int
inode_maybe_known(struct inode *parent, ino_t ino, unsigned char dtype)
{
	struct inode	 key;
	int		 found;

	memset(&key, 0, sizeof key);
	key.dev = parent->dev;
	key.ino = ino;
	key.type = DTTOIF(dtype);
	key.ws = parent->ws;
	key.parent = S_ISDIR(key.type) || S_ISLNK(key.type) ? parent : NULL;
	pthread_mutex_lock(&itab.lock);
	found = tfind(&key, &itab.tree, inode_cmp) != NULL;
	itab_unlock();
	return found;
}

static int	inode_lookup_walk(struct inode *, const char *, int,
		    struct fuse_entry_param *);

/*
 * A lookup the kernel sends: a name it holds or a new one, it does not
 * say. One stat answers for an inode the table knows and, on one node
 * over a local filesystem, for a regular file (inode_by_name_ok); the
 * rest takes the walk.
 */
int
inode_lookup(struct inode *parent, const char *name,
    struct fuse_entry_param *e)
{
	return inode_lookup_walk(parent, name, 1, e);
}

/*
 * A lookup of a name a listing of parent returned as (ino, dtype), for
 * readdirplus: a name whose number the table does not hold goes straight
 * to the walk, without first asking whether it is a known one, unless a
 * stat could enter it (a regular file, inode_by_name_ok).
 */
int
inode_lookup_listed(struct inode *parent, const char *name, ino_t ino,
    unsigned char dtype, struct fuse_entry_param *e)
{
	int	known = 1;

	if (parent != &itab.root && dtype != DT_UNKNOWN &&
	    strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
		known = (dtype == DT_REG && itab.by_name) ||
		    inode_maybe_known(parent, ino, dtype);
	return inode_lookup_walk(parent, name, known, e);
}

static int
inode_lookup_walk(struct inode *parent, const char *name, int maybe_known,
    struct fuse_entry_param *e)
{
	struct inode	*self;
	struct stat	 st;
	int		 pfd, fd, r;

	if (parent->type != S_IFDIR)
		return -ENOTDIR;
	/* Names at the top of SOURCE that start with '.' are wsfs's own. */
	if (parent == &itab.root && name[0] == '.' &&
	    strcmp(name, ".") != 0 && strcmp(name, "..") != 0)
		return -ENOENT;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
		/* ".." stops at the workspace root and at the mount root. */
		/*
		 * ".." is the parent the kernel knows, never the backing
		 * store's, and stops at the workspace root.
		 */
		pthread_mutex_lock(&itab.lock);
		self = parent;
		if (strcmp(name, "..") == 0 && parent->parent != NULL &&
		    parent->ws_root != parent)
			self = parent->parent;
		self->nlookup++;
		itab_unlock();
		if ((r = inode_stat(self, &st)) < 0) {
			inode_forget(self, 1);
			return r;
		}
		inode_entry(self, &st, e);
		return 0;
	}
	if ((pfd = inode_fd_get(parent)) < 0)
		return pfd;
	if (maybe_known &&
	    (r = inode_lookup_known(parent, pfd, name, e)) != 0) {
		inode_fd_put(parent);
		return r < 0 ? r : 0;
	}
	fd = inode_openat_beneath(pfd, name, O_PATH, 0);
	inode_fd_put(parent);
	if (fd == -EXDEV) {
		stats_count(SC_CONFINE_REFUSED, 1);
		log_limited(LOG_NOTICE, "xdev", "refused to cross into a mount "
		    "point at '%s' below %s", name, wsfs.source);
		return -EACCES;
	}
	if (fd < 0)
		return inode_storage_error(parent, "lookup below it", fd);
	if ((r = inode_adopt(parent, name, fd, e)) < 0)
		return r;
	if (parent != &itab.root)
		return 0;
	/* A workspace root knows its name: scratch ids are these names. */
	self = (struct inode *)(uintptr_t)e->ino;
	pthread_mutex_lock(&itab.lock);
	if (self->name == NULL)
		self->name = strdup(name);
	itab_unlock();
	return 0;
}

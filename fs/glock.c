/*
 * Object locks of kind=shared mounts, cached like the glocks of a cluster
 * filesystem, and the kernel's caches kept under them.
 *
 * Every change holds the exclusive lock of each object it changes. A lock
 * is kept after use and given back only when another node asks for it
 * (revoke) or when more than lock_cache locks are idle (LRU); never after
 * a while idle. While the node holds an object's lock, shared or
 * exclusive, nothing can change the object on another node, so the kernel
 * may cache what it covers: attributes of the object, and for a directory
 * its names (negative ones too). Lookups and stats of an object the node
 * holds no lock on ask for the shared lock quietly (granted only if free,
 * nobody is asked to give theirs back), so that the next answer caches.
 *
 * Giving a lock back is the one moment of coherence: the object's writes
 * are made durable, the kernel's attributes of it are dropped and, for a
 * directory whose names the kernel was allowed to cache, every cached
 * name of the mount (FUSE_NOTIFY_INC_EPOCH: the kernel has no cheaper
 * race-free way to drop one directory's names); then the server is told.
 * Both drops are lock-free in the kernel, so they cannot wait for a
 * request that waits for us. Replies racing with a release are safe: the
 * kernel discards attributes whose request predates the drop
 * (attr_version) and names whose lookup predates the epoch. File pages are
 * never trusted across holds instead of being dropped under the lock
 * (their folio locks may be held by a write waiting for a lock): an open
 * keeps the page cache only when it is the same hold that filled it, and
 * pages of a regular file are dropped after the release, for mappings.
 *
 * Every timeout handed to the kernel under a lock is at most the lease
 * the node can still rely on, so no cache outlives the lock even if this
 * daemon stops dead: the server frees a silent node's locks only after a
 * whole lease.
 *
 * Objects made under a directory's lock. An object this node makes in a
 * directory whose exclusive lock it holds is *covered* by that hold: the
 * node uses it as if it held the object's exclusive lock, without asking
 * wslockd (no round trip per new object, and the create's reply may
 * cache its attributes). A directory made there is covered too, and so
 * is what is made in it in turn, up to GLOCK_CHAIN - 1 directories deep.
 * A covered directory GLOCK_PROMOTE_DEPTH deep also asks for its own lock,
 * without waiting, and what is made in it after the grant counts its
 * depth from there: an untar under a held directory waits for the server
 * nowhere. Why no other node can see such an object unlocked:
 *
 *  - every lock request names the directories its object was reached
 *    through, nearest first, up to GLOCK_CHAIN of them or its workspace
 *    root (LOCK UNDER with ABOVE, lockd/PROTOCOL.md). While nobody holds
 *    the object's key, wslockd takes the first of those directories that
 *    anyone holds and holds the request off for as long as another
 *    session holds that one exclusively. A covered object was made in a
 *    covered directory or in the held one, and never had a name
 *    elsewhere; so another node reaches it (lookup, listing, an unlocked
 *    stat of the backing store) only through that chain of directories,
 *    which the server sees unheld down from the held one, and its
 *    request, whatever object of the chain it is for, finds the held
 *    directory first. It cannot get the lock before that is given back;
 *  - a chain may end early at a directory the asking node holds or
 *    covers itself: a directory the node has held was never covered by
 *    another node (a cover starts at a making and ends for good), so any
 *    other node's cover below it ends at or below it, and a directory
 *    the node covers holds nothing another node made;
 *  - giving the directory back forgets everything it covers, deepest
 *    first: their writes are made durable, their kernel caches dropped
 *    (names too, for directories), then the server is told (the same
 *    order as for a lock of its own). An operation on a covered object
 *    counts as a user of every cover above it up to the held lock, so
 *    that is not given back in the middle of it; a revoke makes the
 *    covered objects in use directly under it take their own locks
 *    (glock_revoke), so no operation keeps the directory while it waits
 *    for another lock. A covered directory that gets its own lock keeps
 *    covering what was made in it;
 *  - before a covered object gets a name elsewhere (link, a rename to
 *    another directory) the node takes its own lock, naming the chain up
 *    to the cover it holds: granted at once, and from then on the object
 *    is locked as any other;
 *  - a lock is tied to one object, not only to its inode number: a node
 *    that finds the number it holds a lock for on another object (the
 *    handle differs: the old one was removed and the number reused) gives
 *    the lock back before it uses it for the new one, so a lock held for
 *    a dead object never covers a new one of the same number. Only
 *    objects with a file handle and a birth time are covered.
 *
 * No operation waits for a lock in the calling thread: glock_set_lock
 * either has every lock of the set now, or parks the set and calls back
 * from the operations thread once it has them, or with -EIO after
 * lock_timeout. Sets are taken in one global order (inode number), so
 * holding the first locks of a set while waiting for the next cannot
 * deadlock.
 */
#include "config.h"

#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lockkey.h"
#include "wslock.h"
#include "wsfs.h"

/* A busy node keeps a lock this long even when another node asks. */
#define GLOCK_MIN_HOLD_MS	2
/* How long to wait before asking again during the server's grace period. */
#define GLOCK_RETRY_MS		100
/* A refused quiet request is not repeated before this. */
#define GLOCK_QUIET_RETRY_MS	1000
/* The node's single owner id for object locks. */
#define GLOCK_OWNER		1
/* Kernel timeouts stop this much before the lease could end. */
#define GLOCK_LEASE_MARGIN_MS	200
/* Regular files given back whose pages the next grant drops. */
#define GLOCK_RELEASED_MAX	4096
_Static_assert(GLOCK_CHAIN == WSLOCK_MAX_CHAIN, "a chain is what wslockd takes");

/* A covered directory this deep asks for its own lock too (glock_made). */
#define GLOCK_PROMOTE_DEPTH	4
/* The kernel's notification code, absent from libfuse 3.14's headers. */
#define GLOCK_NOTIFY_INC_EPOCH	8

/* What the request in flight of a glock is for. */
enum glock_ask {
	ASK_NONE,
	ASK_WAIT,	/* queued at the server until granted */
	ASK_QUIET,	/* only if free now: a cache hint or an upgrade */
};

struct glock {
	struct cluster_waiter	 w;		/* must be first */
	ino_t			 ino;		/* const: tree key */
	/*
	 * The object it is for: the inode number and its birth time (0
	 * unknown), both in the key. Changed only while nothing holds,
	 * wants or uses it (glock_prepare_locked).
	 */
	uint64_t		 birth;
	char			 key[LOCKKEY_MAX];
	size_t			 keylen;
	/* All below: guarded by gl.lock. */
	struct file_handle	*fh;		/* to fsync; may be NULL */
	fuse_ino_t		 nodeid;	/* the one FUSE inode cached */
	mode_t			 type;		/* S_IFMT of the inode, 0 unknown */
	uint64_t		 reqid;
	int			 held;		/* 0, WSLOCK_SHARED, _EXCLUSIVE */
	int			 want;		/* mode asked for, 0 if none */
	enum glock_ask		 ask;
	int			 no_upgrade;	/* in-place upgrade refused */
	int			 releasing;	/* being given back */
	int			 revoke;	/* another node waits for it */
	int			 dirty;		/* written since acquired */
	int			 names;		/* names cached under this hold */
	int			 lost;		/* lost while being given back */
	int			 gone;		/* its last name was removed */
	int			 foreign;	/* held for another object */
	/* The directory reached through, then those above it. */
	struct glock_dir	 anc[GLOCK_CHAIN];
	int			 nanc;
	/*
	 * Covered (see the top): the directory it was made in, whose hold
	 * or cover it relies on.
	 */
	struct glock		*cover;
	unsigned int		 cover_users;	/* of users, counted in cover's */
	TAILQ_ENTRY(glock)	 centry;	/* on cover->covered */
	TAILQ_HEAD(, glock)	 covered;	/* directories: what they cover */
	unsigned int		 users;		/* operations holding it */
	unsigned int		 waiters;	/* sets parked on it */
	uint64_t		 acquired_ms;
	uint64_t		 retry_ms;	/* grace: not before this */
	uint64_t		 quiet_ms;	/* quiet refused: not before this */
	uint64_t		 gen;		/* page generation, see glock_open */
	uint64_t		 open_gen;	/* gen whose pages the kernel has */
	TAILQ_ENTRY(glock)	 lru;		/* held, no users */
	int			 on_lru;
	TAILQ_HEAD(, glock_set)	 parked;	/* sets waiting for it */
	TAILQ_ENTRY(glock)	 plink;		/* on gl.parked */
	int			 on_parked;
};

static struct {
	pthread_mutex_t		 lock;
	void			*tree;
	TAILQ_HEAD(glock_lru, glock) lru;	/* most recent first */
	unsigned long		 count;		/* glocks in the tree */
	unsigned long		 nlru;
	uint64_t		 revoke_due;	/* a revoked lock's hold ends */
	TAILQ_HEAD(, glock)	 parked;	/* glocks with parked sets */
	unsigned long long	 invals;	/* cache drops at release */
	unsigned long		 ncovered;	/* glocks with a cover */
	int			 epoch_ok;	/* the kernel knows INC_EPOCH */
	/* Regular files given back since the last application lock grant. */
	fuse_ino_t		 released[GLOCK_RELEASED_MAX];
	unsigned int		 nreleased;
} gl = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.lru = TAILQ_HEAD_INITIALIZER(gl.lru),
	.parked = TAILQ_HEAD_INITIALIZER(gl.parked),
	.epoch_ok = 1,
};

/*
 * The lock history (-o lock_log=FILE): one line per grant, release and
 * loss, "REALTIME_NS NODE EVENT KEY MODE TOKEN", for checking afterwards
 * that no two nodes ever held conflicting locks at once. A grant is logged
 * when this node starts relying on it, a release before the server is
 * told: the logged interval lies inside the server's.
 */
static int	glock_log_fd = -1;

static void
glock_history_open(void)
{
	if (wsfs.conf.lock_log == NULL)
		return;
	glock_log_fd = open(wsfs.conf.lock_log, O_WRONLY | O_APPEND | O_CREAT |
	    O_CLOEXEC, 0600);
	if (glock_log_fd == -1)
		log_warn("lock_log %s: %s", wsfs.conf.lock_log,
		    strerror(errno));
}

static void
glock_history(const char *event, const struct glock *g, int mode,
    uint64_t token)
{
	struct timespec	ts;
	char		line[256];
	int		n;

	if (glock_log_fd < 0)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	n = snprintf(line, sizeof line, "%lld%09ld %s %s %s %s %llu\n",
	    (long long)ts.tv_sec, ts.tv_nsec, wsfs.conf.node, event, g->key,
	    mode == WSLOCK_EXCLUSIVE ? "ex" : mode == WSLOCK_SHARED ? "sh" :
	    "-", (unsigned long long)token);
	if (n > 0 && write(glock_log_fd, line, (size_t)n) == -1)
		(void)0;
}

static int
glock_cmp(const void *a, const void *b)
{
	const struct glock	*x = a, *y = b;

	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static void
glock_range(struct glock *g, struct wslock_range *r)
{
	r->key = g->key;
	r->keylen = g->keylen;
	r->owner = GLOCK_OWNER;
	r->start = 0;
	r->end = WSLOCK_EOF;
}

static void
glock_lru_del_locked(struct glock *g)
{
	if (g->on_lru) {
		TAILQ_REMOVE(&gl.lru, g, lru);
		g->on_lru = 0;
		gl.nlru--;
	}
}

static void
glock_lru_add_locked(struct glock *g)
{
	if (!g->on_lru && g->held && g->users == 0 && !g->releasing) {
		TAILQ_INSERT_HEAD(&gl.lru, g, lru);
		g->on_lru = 1;
		gl.nlru++;
	}
}

/*
 * Whether g is covered by a directory hold the node may rely on now:
 * through the directory it was made in, itself held exclusively or
 * covered in turn, up to a hold (at most GLOCK_CHAIN steps).
 */
static int
glock_covered_locked(const struct glock *g)
{
	const struct glock	*c;

	if (g->held != 0)
		return 0;
	for (c = g->cover; c != NULL; c = c->cover) {
		if (c->releasing || c->foreign)
			return 0;
		if (c->held == WSLOCK_EXCLUSIVE)
			return 1;
		if (c->held != 0)
			return 0;
	}
	return 0;
}

/* How many covered directories lead from g up to the hold: 0 if held. */
static int
glock_cover_depth_locked(const struct glock *g)
{
	int	n = 0;

	for (; g->cover != NULL && g->held == 0; g = g->cover)
		n++;
	return n;
}

/* The hold a covered g relies on in the end (g itself if none). */
static struct glock *
glock_cover_root_locked(struct glock *g)
{
	while (g->cover != NULL && g->held == 0)
		g = g->cover;
	return g;
}

/*
 * Whether the node may rely on g in mode now: held (or covered), not
 * being given back, and the lease not in doubt.
 */
static int
glock_valid_locked(struct glock *g, int mode)
{
	if (g->foreign || wslock_lease_left(cluster_handle()) <= 0)
		return 0;
	return (g->held >= mode && !g->releasing) || glock_covered_locked(g);
}

static void glock_done(struct cluster_waiter *w, int status, uint64_t token);
static int glock_ask_locked(struct glock *g, int mode, enum glock_ask ask);
static void glock_maybe_release_locked(struct glock *g, uint64_t now);
static void glock_kick_locked(struct glock *g, uint64_t now);
static void glock_kick_all_locked(uint64_t now);
static void glock_trim_locked(uint64_t now);

/* g has no users any more: back to the LRU, given back if revoked. */
static void
glock_idle_locked(struct glock *g, uint64_t now, int kick)
{
	if (g->users > 0)
		return;
	glock_lru_add_locked(g);
	glock_maybe_release_locked(g, now);
	if (g->waiters > 0) {
		if (kick)
			glock_kick_locked(g, now);
		else
			cluster_wake();
	}
}

/*
 * A use of covered g is a use of every cover above it up to the hold:
 * none of them is given back in the middle of it.
 */
static void
glock_cover_use_locked(struct glock *g)
{
	struct glock	*c;

	for (; (c = g->cover) != NULL && g->held == 0; g = c) {
		g->cover_users++;
		c->users++;
		glock_lru_del_locked(c);
	}
}

/* n uses of g counted in the covers above it are over. */
static void
glock_cover_unuse_locked(struct glock *g, unsigned int n, uint64_t now,
    int kick)
{
	struct glock	*c;

	for (; (c = g->cover) != NULL && n > 0; g = c) {
		if (g->cover_users < n)
			n = g->cover_users;
		g->cover_users -= n;
		c->users -= n;
		glock_idle_locked(c, now, kick);
	}
}

/*
 * g is no longer covered: it got its own lock, its name was removed, or
 * its cover is being given back. Users it counted in the covers above it
 * rely on g's own lock from now on; what g covers stays covered by it.
 */
static void
glock_uncover_locked(struct glock *g, uint64_t now)
{
	struct glock	*c = g->cover;

	if (c == NULL)
		return;
	glock_cover_unuse_locked(g, g->cover_users, now, 0);
	TAILQ_REMOVE(&c->covered, g, centry);
	g->cover = NULL;
	gl.ncovered--;
}

static struct glock *
glock_find_locked(ino_t ino, int create)
{
	struct glock	key, *g, **slot;

	key.ino = ino;
	if ((slot = tfind(&key, &gl.tree, glock_cmp)) != NULL)
		return *slot;
	if (!create || (g = calloc(1, sizeof *g)) == NULL)
		return NULL;
	g->w.done = glock_done;
	g->ino = ino;
	TAILQ_INIT(&g->parked);
	TAILQ_INIT(&g->covered);
	g->keylen = cluster_key_gen('g', ino, 0, g->key, sizeof g->key);
	if ((slot = tsearch(g, &gl.tree, glock_cmp)) == NULL) {
		free(g);
		return NULL;
	}
	gl.count++;
	return g;
}

static struct glock *
glock_by_key_locked(const void *key, size_t keylen)
{
	struct glock	*g;
	uint64_t	 src, ino, gen;
	char		 kind;

	/* The whole spelling: a lock held under another key is not it. */
	if (lockkey_parse_gen(key, keylen, &kind, &src, &ino, &gen) < 0 ||
	    (g = glock_find_locked((ino_t)ino, 0)) == NULL ||
	    g->keylen != keylen || memcmp(g->key, key, keylen) != 0)
		return NULL;
	return g;
}

/* Forget g if nothing uses, wants or waits for it: memory stays bounded. */
static void
glock_gc_locked(struct glock *g)
{
	if (g->held || g->users || g->waiters || g->want || g->releasing ||
	    g->cover != NULL || !TAILQ_EMPTY(&g->covered))
		return;
	tdelete(g, &gl.tree, glock_cmp);
	gl.count--;
	free(g->fh);
	free(g);
}

/*
 * Tell the kernel that every name it cached may be stale. Lock-free in
 * the kernel: it bumps the connection's epoch, and names looked up before
 * the bump are looked up again on their next use.
 */
static void
glock_inc_epoch(void)
{
	/* The kernel's struct fuse_out_header. */
	struct {
		uint32_t	len;
		int32_t		error;
		uint64_t	unique;
	}			oh;

	if (!__atomic_load_n(&gl.epoch_ok, __ATOMIC_RELAXED))
		return;
	oh.len = sizeof oh;
	oh.error = GLOCK_NOTIFY_INC_EPOCH;
	oh.unique = 0;
	if (write(fuse_session_fd(wsfs.se), &oh, sizeof oh) == -1) {
		log_warn("kernel has no FUSE_NOTIFY_INC_EPOCH (%s): names are "
		    "not cached under locks", strerror(errno));
		__atomic_store_n(&gl.epoch_ok, 0, __ATOMIC_RELAXED);
	}
}

/* Inval thread: drop the pages of a regular file (for mappings). */
static void
glock_drop_pages(void *arg)
{
	fuse_ino_t	nodeid = (fuse_ino_t)(uintptr_t)arg;
	int		r;

	r = fuse_lowlevel_notify_inval_inode(wsfs.se, nodeid, 0, 0);
	if (r < 0 && r != -ENOENT)
		log_debug("invalidate pages: %s", strerror(-r));
}

/*
 * Drop what the kernel may cache under g: its attributes and, for a
 * directory whose names were cached, the names. Called before the server
 * learns the lock is free, or when it is already lost.
 */
static void
glock_drop_caches(fuse_ino_t nodeid, int names)
{
	int	r;

	if (nodeid != 0) {
		r = fuse_lowlevel_notify_inval_inode(wsfs.se, nodeid, -1, 0);
		if (r < 0 && r != -ENOENT)
			log_debug("invalidate attributes: %s", strerror(-r));
	}
	if (names)
		glock_inc_epoch();
	__atomic_add_fetch(&gl.invals, 1, __ATOMIC_RELAXED);
	stats_count(SC_CACHE_INVALS, 1);
}

static void
glock_done(struct cluster_waiter *w, int status, uint64_t token)
{
	struct glock	*g = (struct glock *)w;
	uint64_t	 now = cluster_now_ms();

	pthread_mutex_lock(&gl.lock);
	if (status == 0) {
		if (g->want > g->held) {
			/*
			 * A new hold, unless it upgrades the one we had or
			 * takes over from a cover (the same use goes on).
			 */
			if (g->held == 0 && !glock_covered_locked(g)) {
				g->gen++;
				g->names = 0;
				g->gone = 0;
			}
			if (g->held == 0)
				g->acquired_ms = now;
			g->held = g->want;
		}
		glock_uncover_locked(g, now);
		glock_history("grant", g, g->held, token);
		g->no_upgrade = 0;
		glock_lru_add_locked(g);
	} else if (status == -EAGAIN && g->ask == ASK_QUIET) {
		if (g->held == WSLOCK_SHARED)
			g->no_upgrade = 1;
		else
			g->quiet_ms = now + GLOCK_QUIET_RETRY_MS;
	} else if (status == -EBUSY)
		g->retry_ms = now + GLOCK_RETRY_MS;
	else if (status != -ECANCELED)
		log_limited(LOG_WARNING, "glock-refused", "node %s: lock %s "
		    "refused: %s", wsfs.conf.node, g->key, strerror(-status));
	g->want = 0;
	g->ask = ASK_NONE;
	glock_maybe_release_locked(g, now);
	glock_kick_locked(g, now);
	if (status == 0)
		glock_trim_locked(now);
	glock_gc_locked(g);
	pthread_mutex_unlock(&gl.lock);
}

/*
 * Open by handle, for fsync: only a regular file or a directory, never a
 * device or FIFO someone planted under the inode number (opening those
 * has effects of its own). -errno or an fd.
 */
static int
glock_open_for_sync(const struct file_handle *fh, ino_t ino)
{
	struct stat	st;
	int		pfd, fd;

	pfd = open_by_handle_at(wsfs.source_fd_rd, (struct file_handle *)fh,
	    O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd == -1)
		return -errno;
	if (fstat(pfd, &st) == -1 || !(S_ISREG(st.st_mode) ||
	    S_ISDIR(st.st_mode))) {
		close(pfd);
		return -EINVAL;
	}
	/* A dead GlusterFS handle's node id can name another object now. */
	if (st.st_ino != ino) {
		close(pfd);
		return -ESTALE;
	}
	/*
	 * The magic link leads to pfd's own inode, checked above; with
	 * O_NOFOLLOW it is refused (ELOOP), and every sync was skipped.
	 */
	fd = inode_proc_open(pfd, O_RDONLY | O_NONBLOCK);
	close(pfd);
	return fd;
}

static void
glock_fsync(const char *key, ino_t ino, const struct file_handle *fh)
{
	int	fd;

	if (fh == NULL)
		return;
	/*
	 * Removed (ENOENT; ESTALE on a local filesystem) or neither a file
	 * nor a directory (EINVAL): nothing to make durable. Else, as for
	 * a handle that died with a network client's cache (ESTALE on
	 * GlusterFS), the writes stay where the storage has them, not
	 * synced: say so rather than skip it silently.
	 */
	if ((fd = glock_open_for_sync(fh, ino)) < 0) {
		if (fd != -ENOENT && fd != -EINVAL &&
		    (fd != -ESTALE || !wsfs.source_local))
			log_warn("node %s: %s given back without its fsync: "
			    "reopening it failed: %s", wsfs.conf.node, key,
			    strerror(-fd));
		return;
	}
	if (fsync(fd) == -1)
		log_warn("node %s: fsync before giving back %s: %s",
		    wsfs.conf.node, key, strerror(errno));
	else
		stats_count(SC_RELEASE_SYNCS, 1);
	close(fd);
}

static struct file_handle *
glock_fh_dup(const struct file_handle *fh)
{
	struct file_handle	*c;

	if (fh == NULL || (c = malloc(sizeof *fh + fh->handle_bytes)) == NULL)
		return NULL;
	memcpy(c, fh, sizeof *fh + fh->handle_bytes);
	return c;
}

/*
 * A covered object that nothing uses is removed, or another object has
 * its number: it stops being this node's (nothing to make durable for
 * a removed one; a replaced one was removed too).
 */
static void
glock_forget_cover_locked(struct glock *g)
{
	struct glock	*k;

	glock_history("release", g, WSLOCK_EXCLUSIVE, 0);
	g->dirty = 0;
	g->foreign = 0;
	glock_uncover_locked(g, cluster_now_ms());
	/*
	 * A removed directory was empty: what it still covers has no name
	 * either (a rename out of it took its own lock first).
	 */
	while ((k = TAILQ_FIRST(&g->covered)) != NULL) {
		if (k->held == 0)
			glock_forget_cover_locked(k);
		else
			glock_uncover_locked(k, cluster_now_ms());
		glock_gc_locked(k);
	}
}

/* What giving back a directory's hold must do for an object it covered. */
struct glock_kid {
	char			 key[LOCKKEY_MAX];
	fuse_ino_t		 nodeid;
	ino_t			 ino;
	struct file_handle	*fh;		/* written: fsync it; or NULL */
	int			 reg;
	int			 names;		/* a directory with names cached */
};

/* How many objects d covers, directly or through covered directories. */
static size_t
glock_count_covered_locked(const struct glock *d)
{
	const struct glock	*g;
	size_t			 n = 0;

	TAILQ_FOREACH(g, &d->covered, centry)
		n += 1 + glock_count_covered_locked(g);
	return n;
}

/*
 * Forget what d covers and what that covers in turn, deepest first (a
 * directory's entries are synced after what they name), into v from *i.
 */
static void
glock_take_tree_locked(struct glock *d, struct glock_kid *v, size_t *i,
    int sync, int *nomem, uint64_t now)
{
	struct glock	*g;

	while ((g = TAILQ_FIRST(&d->covered)) != NULL) {
		/* A directory with its own lock keeps what it covers. */
		if (g->held == 0)
			glock_take_tree_locked(g, v, i, sync, nomem, now);
		if (v != NULL) {
			memcpy(v[*i].key, g->key, sizeof v[*i].key);
			v[*i].nodeid = g->nodeid;
			v[*i].ino = g->ino;
			v[*i].reg = g->type == S_IFREG;
			v[*i].names = g->names && g->type == S_IFDIR &&
			    !g->gone && g->held == 0;
			if (sync && g->dirty && !g->gone && g->fh != NULL &&
			    g->held == 0 &&
			    (v[*i].fh = glock_fh_dup(g->fh)) == NULL)
				*nomem = 1;
			(*i)++;
		} else if (g->nodeid != 0) {
			/* Lock-free in the kernel, so safe under gl.lock. */
			(void)fuse_lowlevel_notify_inval_inode(wsfs.se,
			    g->nodeid, -1, 0);
			if (g->type == S_IFDIR && g->names)
				glock_inc_epoch();
			if (g->type == S_IFREG &&
			    gl.nreleased < GLOCK_RELEASED_MAX)
				gl.released[gl.nreleased++] = g->nodeid;
		}
		if (g->held == 0) {
			glock_history("release", g, WSLOCK_EXCLUSIVE, 0);
			g->dirty = 0;
			g->names = 0;
		}
		glock_uncover_locked(g, now);
		glock_gc_locked(g);
	}
}

/*
 * The directory d is being given back or was lost: forget every object
 * its hold covers (they are no longer this node's), returning what must
 * be made durable (sync) and dropped from the kernel before the server
 * learns; *n entries, the caller's to free. *nomem: some could not
 * be recorded, sync the whole filesystem instead.
 */
static struct glock_kid *
glock_take_covered_locked(struct glock *d, int sync, size_t *n, int *nomem)
{
	struct glock_kid	*v;
	size_t			 cnt, i = 0;

	*n = 0;
	*nomem = 0;
	if ((cnt = glock_count_covered_locked(d)) == 0)
		return NULL;
	if ((v = calloc(cnt, sizeof *v)) == NULL)
		*nomem = 1;
	glock_take_tree_locked(d, v, &i, sync, nomem, cluster_now_ms());
	*n = i;
	return v;
}

/*
 * Make the forgotten objects durable and drop the kernel's attributes of
 * them, before the server learns the directory is free. Their pages go
 * after the release, as for a lock of their own (glock_kids_drop_pages).
 */
static void
glock_kids_sync_drop(struct glock_kid *v, size_t n, int nomem)
{
	size_t	i;
	int	names = 0;

	if (nomem && syncfs(wsfs.source_fd_rd) == -1)
		log_warn("node %s: syncfs before giving a lock back: %s",
		    wsfs.conf.node, strerror(errno));
	for (i = 0; i < n; i++) {
		glock_fsync(v[i].key, v[i].ino, v[i].fh);
		free(v[i].fh);
		v[i].fh = NULL;
		if (v[i].nodeid != 0)
			glock_drop_caches(v[i].nodeid, 0);
		names |= v[i].names;
	}
	/* One drop of every cached name serves all the directories. */
	if (names)
		glock_drop_caches(0, 1);
}

/*
 * The directory's release is recorded (gl.lock held): the covered regular
 * files count as given back, so the next application lock grant drops
 * their pages (glock_drop_stale_pages) as it does a released file's.
 */
static void
glock_kids_released_locked(const struct glock_kid *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (v[i].reg && v[i].nodeid != 0 &&
		    gl.nreleased < GLOCK_RELEASED_MAX)
			gl.released[gl.nreleased++] = v[i].nodeid;
}

/* After the release: drop the covered regular files' pages (mappings). */
static void
glock_kids_drop_pages(const struct glock_kid *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (v[i].reg && v[i].nodeid != 0)
			cluster_defer_inval(glock_drop_pages,
			    (void *)(uintptr_t)v[i].nodeid);
}

/* The node no longer holds g: given back or lost. */
static void
glock_hold_over_locked(struct glock *g)
{
	g->held = 0;
	g->revoke = 0;
	g->names = 0;
	g->gone = 0;
}

/*
 * Give a lock back (work thread): make its writes durable, drop the
 * kernel's cache of it, then tell the server.
 */
static void
glock_do_release(void *arg)
{
	struct glock		*g = arg;
	struct wslock_range	 r;
	struct file_handle	*fh = NULL;
	struct glock_kid	*kids;
	size_t			 nkids;
	fuse_ino_t		 nodeid;
	int			 dirty, names, reg, nomem;

	pthread_mutex_lock(&gl.lock);
	/* What this hold covers goes first (see the top). */
	kids = glock_take_covered_locked(g, 1, &nkids, &nomem);
	/*
	 * An object without a name (its last one removed under this lock)
	 * has nothing to make durable for another node, which can reach it
	 * only by a name, and a removed directory can hold no names again.
	 */
	dirty = g->dirty && !g->gone;
	names = g->names && g->type == S_IFDIR && !g->gone;
	nodeid = g->nodeid;
	reg = g->type == S_IFREG;
	if (dirty)
		fh = glock_fh_dup(g->fh);
	pthread_mutex_unlock(&gl.lock);
	glock_kids_sync_drop(kids, nkids, nomem);
	if (dirty)
		glock_fsync(g->key, g->ino, fh);
	free(fh);
	glock_drop_caches(nodeid, names);
	pthread_mutex_lock(&gl.lock);
	/*
	 * Recorded before the server learns it is free: any grant that
	 * follows from this release finds it (glock_drop_stale_pages).
	 */
	if (reg && nodeid != 0 && gl.nreleased < GLOCK_RELEASED_MAX)
		gl.released[gl.nreleased++] = nodeid;
	glock_kids_released_locked(kids, nkids);
	glock_range(g, &r);
	if (!g->lost)
		glock_history("release", g, g->held, 0);
	g->lost = 0;
	(void)wslock_unlock(cluster_handle(), &r);
	stats_count(SC_RELEASES, 1);
	glock_hold_over_locked(g);
	g->dirty = 0;
	g->releasing = 0;
	g->no_upgrade = 0;
	if (g->foreign) {
		/* Held for an object that is gone: free for the new one. */
		g->foreign = 0;
		free(g->fh);
		g->fh = NULL;
		g->nodeid = 0;
	}
	glock_kick_locked(g, cluster_now_ms());
	glock_gc_locked(g);
	pthread_mutex_unlock(&gl.lock);
	cluster_wake();
	if (reg && nodeid != 0)
		cluster_defer_inval(glock_drop_pages, (void *)(uintptr_t)nodeid);
	glock_kids_drop_pages(kids, nkids);
	free(kids);
}

static void
glock_start_release_locked(struct glock *g)
{
	g->releasing = 1;
	glock_lru_del_locked(g);
	cluster_defer(glock_do_release, g);
}

/* Start giving g back if it was revoked, nothing uses it, and its time came. */
static void
glock_maybe_release_locked(struct glock *g, uint64_t now)
{
	uint64_t	due;

	if (!g->held || !g->revoke || g->users > 0 || g->releasing || g->want)
		return;
	if (now < (due = g->acquired_ms + GLOCK_MIN_HOLD_MS)) {
		/* Come back when the minimum hold is over. */
		if (gl.revoke_due == 0 || due < gl.revoke_due) {
			gl.revoke_due = due;
			cluster_wake();
		}
		return;
	}
	glock_start_release_locked(g);
}

/*
 * More idle locks than lock_cache: give back the least recently used,
 * files before directories (a directory's release drops cached names).
 */
static void
glock_trim_locked(uint64_t now)
{
	struct glock	*g, *pick;
	int		 scan;

	while (gl.nlru > (unsigned long)wsfs.conf.lock_cache) {
		pick = NULL;
		scan = 0;
		TAILQ_FOREACH_REVERSE(g, &gl.lru, glock_lru, lru) {
			if (g->type != S_IFDIR || ++scan > 64) {
				pick = g;
				break;
			}
		}
		if (pick == NULL)
			pick = TAILQ_LAST(&gl.lru, glock_lru);
		if (pick == NULL || pick->want)
			break;
		glock_start_release_locked(pick);
	}
}

/*
 * The directory d is revoked while operations use objects it covers:
 * those uses count as users of d, so d cannot go back before they end,
 * and an operation that holds such a use and waits for another lock
 * (taken in inode order after it) would wait for a node that waits for
 * d: a deadlock the order of a set cannot see. So each covered object
 * in use asks for its own lock now, under d, which this node still
 * holds: granted at once, and the grant moves its users from d to it
 * (glock_done), so d can go back when its own users are done.
 */
static void
glock_promote_covers_locked(struct glock *d)
{
	struct glock	*g;

	TAILQ_FOREACH(g, &d->covered, centry)
		if (g->cover_users > 0 && g->want == 0 && !g->foreign &&
		    glock_ask_locked(g, WSLOCK_EXCLUSIVE, ASK_WAIT) < 0)
			log_warn("node %s: asking for %s to give %s back: "
			    "failed", wsfs.conf.node, g->key, d->key);
}

static void
glock_revoke(const void *key, size_t keylen)
{
	struct glock	*g;

	pthread_mutex_lock(&gl.lock);
	stats_count(SC_REVOKES, 1);
	if ((g = glock_by_key_locked(key, keylen)) != NULL) {
		g->revoke = 1;
		glock_promote_covers_locked(g);
		glock_maybe_release_locked(g, cluster_now_ms());
	}
	pthread_mutex_unlock(&gl.lock);
}

/* The lock went with the lease: nothing cached under it may stay. */
static void
glock_lost(const void *key, size_t keylen)
{
	struct glock		*g;
	struct glock_kid	*kids = NULL;
	fuse_ino_t		 nodeid = 0;
	size_t			 nkids = 0;
	int			 names = 0, had = 0, nomem;

	pthread_mutex_lock(&gl.lock);
	/* What a lost directory lock covered is lost with it. */
	if ((g = glock_by_key_locked(key, keylen)) != NULL)
		kids = glock_take_covered_locked(g, 0, &nkids, &nomem);
	if (g != NULL && g->held &&
	    g->releasing && !g->lost) {
		/*
		 * Lost while its release waits (an fsync on storage that
		 * went away): the lease ended now, not when the release is
		 * done; the release then logs nothing more.
		 */
		glock_history("lost", g, g->held, 0);
		g->lost = 1;
	} else if (g != NULL && g->held && !g->releasing) {
		glock_history("lost", g, g->held, 0);
		had = 1;
		nodeid = g->nodeid;
		names = g->names && g->type == S_IFDIR;
		glock_hold_over_locked(g);
		glock_lru_del_locked(g);
		glock_kick_locked(g, cluster_now_ms());
		glock_gc_locked(g);
	}
	glock_kids_released_locked(kids, nkids);
	pthread_mutex_unlock(&gl.lock);
	glock_kids_sync_drop(kids, nkids, 0);
	glock_kids_drop_pages(kids, nkids);
	free(kids);
	if (had)
		glock_drop_caches(nodeid, names);
}

static void
glock_state_changed(void)
{
	pthread_mutex_lock(&gl.lock);
	glock_kick_all_locked(cluster_now_ms());
	pthread_mutex_unlock(&gl.lock);
}

/*
 * Lock thread: give back what was revoked once its minimum hold is over,
 * fail parked sets past their deadline. Returns how many milliseconds may
 * pass before the next call.
 */
static int
glock_tick(void)
{
	struct glock	*g, *prev;
	uint64_t	 now = cluster_now_ms();
	int		 next = 100;

	pthread_mutex_lock(&gl.lock);
	if (gl.revoke_due != 0 && now >= gl.revoke_due) {
		gl.revoke_due = 0;
		for (g = TAILQ_FIRST(&gl.lru); g != NULL; g = prev) {
			prev = TAILQ_NEXT(g, lru);
			if (g->revoke)
				glock_maybe_release_locked(g, now);
		}
	}
	glock_kick_all_locked(now);
	if (gl.revoke_due != 0)
		next = gl.revoke_due > now ? (int)(gl.revoke_due - now) : 0;
	pthread_mutex_unlock(&gl.lock);
	return next < 100 ? next : 100;
}

static void
glock_log_timeout(struct inode *in, const char *key, const char *why)
{
	char	path[PATH_MAX], proc[64];
	ssize_t	n = -1;
	int	fd;

	path[0] = '\0';
	if (in != NULL && (fd = inode_fd_get(in)) >= 0) {
		inode_procpath(fd, proc, sizeof proc);
		n = readlink(proc, path, sizeof path - 1);
		inode_fd_put(in);
	}
	path[n > 0 ? n : 0] = '\0';
	log_limited(LOG_ERR, "glock-timeout", "node %s: no lock from %s %s for "
	    "%s (workspace %llu, lock %s): failing with EIO", wsfs.conf.node,
	    wsfs.conf.lockd, why, path[0] ? path : "?",
	    in ? (unsigned long long)in->ws : 0, key);
}

/* Fill w's directories: from in's, or from dir itself (in NULL). */
static void
glock_where_dirs(struct inode *in, struct inode *dir, struct glock_where *w)
{
	w->nanc = inode_ancestors(in, dir, w->anc, GLOCK_CHAIN);
}

/* Where in is, for its lock: its birth time and the directories above. */
static void
glock_where_of(struct inode *in, struct glock_where *w)
{
	w->birth = 0;
	w->nanc = 0;
	if (in == NULL)
		return;
	w->birth = in->birth;
	glock_where_dirs(in, NULL, w);
}

/* Where the object of birth time birth, named in dir, is. */
static void
glock_where_in(struct inode *dir, uint64_t birth, struct glock_where *w)
{
	w->birth = birth;
	glock_where_dirs(NULL, dir, w);
}

static int
glock_fh_eq(const struct file_handle *a, const struct file_handle *b)
{
	return a->handle_type == b->handle_type &&
	    a->handle_bytes == b->handle_bytes &&
	    memcmp(a->f_handle, b->f_handle, a->handle_bytes) == 0;
}

/*
 * in's file handle, or NULL: a file entered by its name takes it with its
 * first fd (inode.c, inode_fd_get), perhaps after its lock was made, and
 * only a lock that was written needs it (glock_set_unlock).
 */
static const struct file_handle *
glock_in_fh(const struct inode *in)
{
	return __atomic_load_n(&in->fh, __ATOMIC_ACQUIRE);
}

/*
 * Find or make the lock of a backing inode and remember how to reach it;
 * dir: the directory it was reached through (0: the inode's own). A
 * lock held for another object of the same number (its handle differs)
 * is given back before it serves this one (see the top).
 */
static struct glock *
glock_prepare_locked(ino_t ino, struct inode *in, const struct glock_where *w)
{
	const struct file_handle *fh;
	struct glock	*g;
	uint64_t	 birth = w->birth;

	if ((g = glock_find_locked(ino, 1)) == NULL)
		return NULL;
	if (w->nanc > 0) {
		memcpy(g->anc, w->anc, (size_t)w->nanc * sizeof g->anc[0]);
		g->nanc = w->nanc;
	}
	if (birth == 0 && in != NULL)
		birth = in->birth;
	/*
	 * Another object under the number: by its birth time or, where the
	 * storage has none, by its handle.
	 */
	if ((birth != 0 && birth != g->birth) || (in != NULL &&
	    (fh = glock_in_fh(in)) != NULL && g->fh != NULL &&
	    !glock_fh_eq(fh, g->fh))) {
		if (g->cover != NULL && !g->held && !g->want && !g->users)
			glock_forget_cover_locked(g);
		if (g->held || g->want || g->releasing || g->users ||
		    g->cover != NULL) {
			if (!g->foreign)
				log_debug("node %s: lock %s held for another "
				    "object of that number: giving it back",
				    wsfs.conf.node, g->key);
			g->foreign = 1;
			g->revoke = 1;
			g->acquired_ms = 0;
			glock_maybe_release_locked(g, cluster_now_ms());
			return g;
		}
		free(g->fh);
		g->fh = NULL;
		g->nodeid = 0;
		g->foreign = 0;
		if (birth != 0 && birth != g->birth) {
			g->birth = birth;
			g->keylen = cluster_key_gen('g', ino, birth, g->key,
			    sizeof g->key);
		}
	}
	if (in == NULL)
		return g;
	if (g->nodeid == 0)
		g->nodeid = (fuse_ino_t)(uintptr_t)in;
	g->type = in->type;
	if (g->fh == NULL)
		g->fh = glock_fh_dup(glock_in_fh(in));
	return g;
}

/*
 * Whether this node holds, or covers, the directory d of a chain: then
 * no other node covers it, nor anything above it that matters (see the
 * top), and the chain may end there.
 */
static int
glock_chain_ends_locked(const struct glock_dir *d)
{
	struct glock	*g;

	if ((g = glock_find_locked(d->ino, 0)) == NULL || g->foreign ||
	    g->birth != d->birth || d->birth == 0)
		return 0;
	return g->held != 0 || glock_covered_locked(g);
}

/* Send a request for g in mode; the answer comes to glock_done. */
static int
glock_ask_locked(struct glock *g, int mode, enum glock_ask ask)
{
	struct wslock_range	r;
	struct wslock_key	chain[GLOCK_CHAIN];
	char			keys[GLOCK_CHAIN][LOCKKEY_MAX];
	size_t			n = 0;
	int			flags, ret;

	glock_range(g, &r);
	/*
	 * Every object names the directories it was reached through, up to
	 * one this node holds or covers: wslockd holds the request off while
	 * the first of them with a holder is another node's (see the top).
	 */
	while (n < (size_t)g->nanc) {
		chain[n].len = cluster_key_gen('g', g->anc[n].ino,
		    g->anc[n].birth, keys[n], sizeof keys[n]);
		chain[n].key = keys[n];
		if (glock_chain_ends_locked(&g->anc[n++]))
			break;
	}
	/*
	 * A hint or an upgrade is a quiet try-lock: looking at an object
	 * makes no other node give its lock back (a failed upgrade gives the
	 * shared lock back and queues, see glock_step_locked).
	 */
	flags = WSLOCK_CACHED | (ask == ASK_WAIT ? WSLOCK_WAIT : WSLOCK_QUIET);
	g->want = mode;
	g->ask = ask;
	ret = n > 0 ? wslock_lock_chain(cluster_handle(), &r, chain, n, mode,
	    flags, &g->w, &g->reqid) : wslock_lock(cluster_handle(), &r, mode,
	    flags, &g->w, &g->reqid);
	if (ret < 0) {
		g->want = 0;
		g->ask = ASK_NONE;
		return ret;
	}
	cluster_wake();
	return 0;
}

/*
 * One step of taking g in mode: 1 if held now (one more user), 0 if the
 * caller must wait (a request is on its way, or a release), or -errno.
 * own: a cover is not enough (the object gets a name elsewhere).
 */
static int
glock_step_locked(struct glock *g, int mode, int own, uint64_t now)
{
	if (glock_covered_locked(g) && !g->foreign &&
	    wslock_lease_left(cluster_handle()) > 0) {
		struct glock	*root = glock_cover_root_locked(g);

		/*
		 * A use of the cover is a use of the hold it relies on, so
		 * it follows that lock's rule: none once it is revoked and
		 * its minimum hold is over (glock_revoke).
		 */
		if (!own && (!root->revoke ||
		    now < root->acquired_ms + GLOCK_MIN_HOLD_MS)) {
			g->users++;
			glock_cover_use_locked(g);
			return 1;
		}
		/* Under the covering directories, which this node holds. */
		if (g->want == 0)
			return glock_ask_locked(g, WSLOCK_EXCLUSIVE, ASK_WAIT);
		return 0;
	}
	/* A revoked lock takes new users only during its minimum hold. */
	if (glock_valid_locked(g, mode) && (!g->revoke ||
	    now < g->acquired_ms + GLOCK_MIN_HOLD_MS)) {
		g->users++;
		glock_lru_del_locked(g);
		return 1;
	}
	if (g->releasing || g->want != 0 || now < g->retry_ms ||
	    g->held >= mode)
		return 0;
	if (g->held == WSLOCK_SHARED && mode == WSLOCK_EXCLUSIVE) {
		/* First try to upgrade in place, if nobody else holds it. */
		if (!g->no_upgrade)
			return glock_ask_locked(g, mode, ASK_QUIET);
		/*
		 * Two nodes upgrading in turn would wait for each other:
		 * give the shared lock back, once this node's users are
		 * done with it, then queue for the exclusive one.
		 */
		if (g->users == 0)
			glock_start_release_locked(g);
		return 0;
	}
	return glock_ask_locked(g, mode, ASK_WAIT);
}

static void
glock_set_run(void *arg)
{
	struct glock_set	*s = arg;

	s->cont(s->arg, s->err);
}

/* Hand the set's continuation to the operations thread. */
static void
glock_set_finish_locked(struct glock_set *s, int err)
{
	s->err = err;
	cluster_defer_op(glock_set_run, s);
}

/*
 * Give up the locks s holds. Parked sets waiting for one of them are
 * moved on at once when kick is set; inside a kick (no recursion into the
 * lists being walked) the lock thread does it on its next tick.
 */
static void
glock_set_drop_locked(struct glock_set *s, int kick)
{
	struct glock	*g;
	uint64_t	 now = cluster_now_ms();

	while (s->nheld > 0) {
		g = s->g[--s->nheld];
		s->g[s->nheld] = NULL;
		glock_cover_unuse_locked(g, 1, now, kick);
		if (--g->users > 0)
			continue;
		if (g->cover != NULL && g->held == 0 && (g->gone || g->foreign))
			glock_forget_cover_locked(g);
		glock_idle_locked(g, now, kick);
		glock_gc_locked(g);
	}
	glock_trim_locked(now);
}

/*
 * Take the next locks of s. 1: all held; 0: parked on one (s->on); or
 * -errno, with nothing held.
 */
static int
glock_set_advance_locked(struct glock_set *s, uint64_t now)
{
	struct glock	*g;
	int		 r;

	while (s->nheld < s->n) {
		g = glock_prepare_locked(s->ino[s->nheld], s->in[s->nheld],
		    &s->where[s->nheld]);
		if (g == NULL) {
			glock_set_drop_locked(s, 0);
			return -ENOMEM;
		}
		if ((r = glock_step_locked(g, s->mode[s->nheld],
		    s->own[s->nheld], now)) < 0) {
			glock_set_drop_locked(s, 0);
			return r;
		}
		if (r == 0) {
			s->on = g;
			return 0;
		}
		s->g[s->nheld++] = g;
	}
	return 1;
}

static void
glock_park_locked(struct glock_set *s)
{
	struct glock	*g = s->on;

	g->waiters++;
	TAILQ_INSERT_TAIL(&g->parked, s, entry);
	if (!g->on_parked) {
		TAILQ_INSERT_TAIL(&gl.parked, g, plink);
		g->on_parked = 1;
	}
}

/* Move the sets parked on g on: to their next lock, done, or failed. */
static void
glock_kick_locked(struct glock *g, uint64_t now)
{
	struct glock_set	*s, *next;
	int			 r;

	for (s = TAILQ_FIRST(&g->parked); s != NULL; s = next) {
		next = TAILQ_NEXT(s, entry);
		if ((r = glock_set_advance_locked(s, now)) == 0 &&
		    s->on == g && now < s->deadline)
			continue;
		TAILQ_REMOVE(&g->parked, s, entry);
		g->waiters--;
		if (r == 0 && s->on != g)
			glock_park_locked(s);	/* waits for the next lock */
		else if (r == 1)
			glock_set_finish_locked(s, 0);
		else {
			glock_set_drop_locked(s, 0);
			stats_count(SC_LOCK_TIMEOUTS, 1);
			s->timed_out = 1;
			glock_set_finish_locked(s, -EIO);
		}
	}
	if (TAILQ_EMPTY(&g->parked) && g->on_parked) {
		TAILQ_REMOVE(&gl.parked, g, plink);
		g->on_parked = 0;
	}
}

static void
glock_kick_all_locked(uint64_t now)
{
	struct glock	*g, *next;

	for (g = TAILQ_FIRST(&gl.parked); g != NULL; g = next) {
		next = TAILQ_NEXT(g, plink);
		glock_kick_locked(g, now);
		glock_gc_locked(g);
	}
}

void
glock_set_init(struct glock_set *s)
{
	memset(s, 0, sizeof *s);
}

/*
 * Add an inode to the set, keeping the global order and each inode once
 * (exclusive wins). ino 0 is skipped; in may be NULL where only the
 * number is known.
 */
static void
glock_set_put(struct glock_set *s, ino_t ino, struct inode *in,
    const struct glock_where *w, int exclusive, int own)
{
	int	i, j, mode = exclusive ? WSLOCK_EXCLUSIVE : WSLOCK_SHARED;

	if (ino == 0 || !cluster_enabled())
		return;
	for (i = 0; i < s->n; i++) {
		if (s->ino[i] == ino) {
			if (mode > s->mode[i])
				s->mode[i] = mode;
			if (s->in[i] == NULL)
				s->in[i] = in;
			if (s->where[i].nanc == 0)
				s->where[i] = *w;
			s->own[i] |= own;
			return;
		}
		if (s->ino[i] > ino)
			break;
	}
	if (s->n == GLOCK_MAX)
		fatalx("glock_set_add: more than %d locks", GLOCK_MAX);
	for (j = s->n; j > i; j--) {
		s->ino[j] = s->ino[j - 1];
		s->in[j] = s->in[j - 1];
		s->mode[j] = s->mode[j - 1];
		s->where[j] = s->where[j - 1];
		s->own[j] = s->own[j - 1];
	}
	s->ino[i] = ino;
	s->in[i] = in;
	s->mode[i] = mode;
	s->where[i] = *w;
	s->own[i] = own;
	s->n++;
}

void
glock_set_add(struct glock_set *s, ino_t ino, struct inode *in, int exclusive)
{
	struct glock_where	w;

	if (ino == 0 || !cluster_enabled())
		return;
	glock_where_of(in, &w);
	glock_set_put(s, ino, in, &w, exclusive, 0);
}

void
glock_set_add_named(struct glock_set *s, ino_t ino, uint64_t birth,
    struct inode *dir, int own)
{
	struct glock_where	w;

	if (ino == 0 || !cluster_enabled())
		return;
	glock_where_in(dir, birth, &w);
	glock_set_put(s, ino, NULL, &w, 1, own);
}

void
glock_set_add_own(struct glock_set *s, struct inode *in)
{
	struct glock_where	w;

	if (!cluster_enabled())
		return;
	glock_where_of(in, &w);
	glock_set_put(s, in->ino, in, &w, 1, 1);
}

/*
 * The lock service has been away for longer than lock_timeout: waiting
 * again would only add another lock_timeout to every change.
 */
static int
glock_service_gone(void)
{
	return cluster_degraded() &&
	    cluster_degraded_ms() >= (uint64_t)(wsfs.conf.lock_timeout * 1000);
}

int
glock_set_lock(struct glock_set *s, void (*cont)(void *, int), void *arg)
{
	uint64_t	now;
	int		r;

	s->nheld = 0;
	s->timed_out = 0;
	if (s->n == 0)
		return 0;
	if (glock_service_gone()) {
		stats_count(SC_LOCK_TIMEOUTS, 1);
		glock_log_timeout(s->in[0], "(service away)", "for longer than "
		    "lock_timeout");
		return -EIO;
	}
	now = cluster_now_ms();
	s->cont = cont;
	s->arg = arg;
	s->deadline = now + (uint64_t)(wsfs.conf.lock_timeout * 1000);
	pthread_mutex_lock(&gl.lock);
	if ((r = glock_set_advance_locked(s, now)) == 0) {
		stats_count(SC_LOCK_WAITS, 1);
		glock_park_locked(s);
		r = -EINPROGRESS;
	} else if (r == 1)
		r = 0;
	pthread_mutex_unlock(&gl.lock);
	return r;
}

void
glock_set_unlock(struct glock_set *s, int wrote)
{
	int	i;

	if (s->nheld == 0)
		return;
	pthread_mutex_lock(&gl.lock);
	if (wrote)
		for (i = 0; i < s->nheld; i++) {
			s->g[i]->dirty = 1;
			/* What it wrote is synced through the handle. */
			if (s->g[i]->fh == NULL && s->in[i] != NULL &&
			    !s->g[i]->foreign)
				s->g[i]->fh = glock_fh_dup(glock_in_fh(s->in[i]));
		}
	glock_set_drop_locked(s, 1);
	pthread_mutex_unlock(&gl.lock);
}

/* For the log of a set that timed out: which object it waited for. */
void
glock_set_log_timeout(struct glock_set *s)
{
	struct inode	*in = NULL;
	int		 i;

	for (i = 0; i < s->n; i++)
		if (s->in[i] != NULL) {
			in = s->in[i];
			break;
		}
	glock_log_timeout(in, "(parked)", "within lock_timeout");
}

/*
 * Ask quietly (granted only if free) for the lock of an object the node
 * looks at without holding it, so that a later answer may cache: shared,
 * or exclusive for an object other than a directory reached through a
 * directory this node holds exclusively. There a change of it usually
 * follows (rm -rf, a checkout of a tree the node did not make itself),
 * and it then finds the lock held, or on its way, instead of asking
 * again for an upgrade. Another node reaches the object through that
 * directory, whose lock it must have first, or through another link of
 * its own: then the lock is not free and the quiet request fails.
 */
static void
glock_hint_locked(struct glock *g)
{
	struct glock	*d;
	int		 mode = WSLOCK_SHARED;

	if (g->held || g->want || g->releasing ||
	    cluster_now_ms() < g->quiet_ms || cluster_degraded())
		return;
	if (g->type != 0 && g->type != S_IFDIR && g->nanc > 0 &&
	    (d = glock_find_locked(g->anc[0].ino, 0)) != NULL &&
	    d->held == WSLOCK_EXCLUSIVE && !d->releasing && !d->foreign &&
	    d->birth == g->anc[0].birth)
		mode = WSLOCK_EXCLUSIVE;
	(void)glock_ask_locked(g, mode, ASK_QUIET);
}

/*
 * How long the kernel may cache what the lock of in covers, in seconds:
 * 0 unless this node holds it (and in is the FUSE inode it was taken
 * for); then at most the lease left. Without a hold, ask quietly for the
 * shared lock so that a later answer may cache. names: the answer hands
 * out names of the directory in.
 */
static double
glock_timeout(struct inode *in, int names)
{
	struct glock_where	 w;
	struct glock		*g;
	int64_t			 left;
	double			 t = 0;

	if (in == NULL)
		return 0;
	glock_where_of(in, &w);
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(in->ino, in, &w)) == NULL)
		goto out;
	if (glock_valid_locked(g, WSLOCK_SHARED) &&
	    g->nodeid == (fuse_ino_t)(uintptr_t)in) {
		left = wslock_lease_left(cluster_handle()) -
		    GLOCK_LEASE_MARGIN_MS;
		t = left > 0 ? (double)left / 1000 : 0;
		if (t > wsfs.conf.lock_cache_timeout)
			t = wsfs.conf.lock_cache_timeout;
		if (names && t > 0) {
			if (!__atomic_load_n(&gl.epoch_ok, __ATOMIC_RELAXED))
				t = 0;
			else
				g->names = 1;
		}
	} else
		glock_hint_locked(g);
	glock_gc_locked(g);
out:
	pthread_mutex_unlock(&gl.lock);
	return t;
}

double
glock_attr_timeout(struct inode *in)
{
	if (!cluster_enabled())
		return wsfs.conf.attr_timeout;
	return glock_timeout(in, 0);
}

double
glock_entry_timeout(struct inode *parent)
{
	if (!cluster_enabled())
		return wsfs.conf.entry_timeout;
	return glock_timeout(parent, 1);
}

/*
 * An open of in: whether the kernel may keep the pages it has. Only when
 * the node holds the lock and the pages came from this very hold.
 */
int
glock_open_keep_cache(struct inode *in)
{
	struct glock_where	 w;
	struct glock		*g;
	int			 keep = 0;

	if (!cluster_enabled())
		return 1;
	glock_where_of(in, &w);
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(in->ino, in, &w)) != NULL) {
		if (glock_valid_locked(g, WSLOCK_SHARED) &&
		    g->nodeid == (fuse_ino_t)(uintptr_t)in) {
			keep = g->open_gen == g->gen;
			g->open_gen = g->gen;
		} else
			glock_hint_locked(g);
		glock_gc_locked(g);
	}
	pthread_mutex_unlock(&gl.lock);
	return keep;
}

/*
 * A rename done: the kernel moves the old name's dentry, with what is
 * left of its timeout, into the new directory (both ways for an
 * exchange), so a directory that receives a name cached under another's
 * lock has cached names too, and its release must drop them. Seen as a
 * stale name after a handover (coherence checker, seed 483574): the
 * source directory's lock stayed, the target's went back without an
 * epoch bump.
 */
void
glock_renamed(struct inode *from, struct inode *to, int exchange)
{
	struct glock	*gf, *gt;
	int		 nf, nt;

	if (!cluster_enabled() || from == to)
		return;
	pthread_mutex_lock(&gl.lock);
	gf = glock_find_locked(from->ino, 0);
	gt = glock_find_locked(to->ino, 0);
	nf = gf != NULL && gf->names;
	nt = gt != NULL && gt->names;
	if (gt != NULL && nf)
		gt->names = 1;
	if (gf != NULL && exchange && nt)
		gf->names = 1;
	pthread_mutex_unlock(&gl.lock);
}

/* A write that bypassed this node's page cache: its pages are stale. */
void
glock_pages_stale(struct inode *in)
{
	struct glock	*g;

	if (!cluster_enabled())
		return;
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_find_locked(in->ino, 0)) != NULL)
		g->gen++;
	pthread_mutex_unlock(&gl.lock);
}

/*
 * An object this node just made in dir, whose exclusive lock (or cover)
 * the change holds: covered by it (see the top) if it has a file handle,
 * its number has no lock of this node's already and, for a directory,
 * the chain of covers stays within what a request names (GLOCK_CHAIN);
 * else ask for its exclusive lock now, without waiting, so that the
 * grant is usually there when it is first changed.
 */
void
glock_made(struct inode *in, struct inode *dir)
{
	struct glock_where	 w;
	struct glock		*g, *d;
	int			 depth = 0;

	if (!cluster_enabled() || cluster_degraded())
		return;
	glock_where_in(dir, in->birth, &w);
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(in->ino, in, &w)) == NULL)
		goto out;
	d = glock_find_locked(dir->ino, 0);
	if (d != NULL)
		depth = glock_cover_depth_locked(d);
	if (in->fh != NULL && g->birth != 0 &&
	    d != NULL && d != g && d->birth == dir->birth &&
	    d->users > 0 && glock_valid_locked(d, WSLOCK_EXCLUSIVE) &&
	    (d->held == WSLOCK_EXCLUSIVE || glock_covered_locked(d)) &&
	    (in->type != S_IFDIR || depth + 1 < GLOCK_CHAIN) &&
	    w.nanc > depth &&
	    !g->held && !g->want && !g->releasing && !g->users &&
	    !g->waiters && g->cover == NULL && TAILQ_EMPTY(&g->covered) &&
	    !g->foreign &&
	    gl.ncovered < (unsigned long)wsfs.conf.lock_cache) {
		g->cover = d;
		TAILQ_INSERT_TAIL(&d->covered, g, centry);
		gl.ncovered++;
		g->gen++;
		g->names = 0;
		g->gone = 0;
		g->dirty = 0;
		g->acquired_ms = cluster_now_ms();
		glock_history("cover", g, WSLOCK_EXCLUSIVE, 0);
		stats_count(SC_LOCKS_COVERED, 1);
		/*
		 * Halfway down the chain a directory also asks for its own
		 * lock, without waiting: once granted, what is made in it
		 * counts its depth from there, so a deep tree goes on being
		 * covered instead of stopping at GLOCK_CHAIN.
		 */
		if (in->type == S_IFDIR && depth + 1 >= GLOCK_PROMOTE_DEPTH)
			(void)glock_ask_locked(g, WSLOCK_EXCLUSIVE, ASK_WAIT);
	} else if (!g->held && !g->want && !g->releasing && g->cover == NULL)
		(void)glock_ask_locked(g, WSLOCK_EXCLUSIVE, ASK_WAIT);
	glock_gc_locked(g);
out:
	pthread_mutex_unlock(&gl.lock);
}

struct glock_unheld {
	fuse_ino_t	*ids;
	off_t		*sizes;		/* -1: not known */
	size_t		 n, max;
};

/* handles_lock held: note an open file whose lock the node lacks. */
static void
glock_note_unheld(struct inode *in, int fd, void *arg)
{
	struct glock_unheld	*u = arg;
	struct glock		*g;
	struct stat		 st;
	int			 held;

	if (u->n == u->max)
		return;
	pthread_mutex_lock(&gl.lock);
	g = glock_find_locked(in->ino, 0);
	held = g != NULL && glock_valid_locked(g, WSLOCK_SHARED);
	pthread_mutex_unlock(&gl.lock);
	if (held)
		return;
	u->ids[u->n] = (fuse_ino_t)(uintptr_t)in;
	u->sizes[u->n++] = fstat(fd, &st) == 0 ? st.st_size : -1;
}

/*
 * Before a granted application lock is answered: what another node wrote
 * under its lock must show through this node's mappings too. Drop the
 * pages of the files given back since the last grant and of the open
 * files the node holds no lock on; for the open ones also tell the kernel
 * a size that grew (a page fault never asks for attributes; the kernel
 * takes a zero-byte store beyond its size as the new size). A size that
 * shrank shows at the next stat.
 */
void
glock_drop_stale_pages(void)
{
	static fuse_ino_t	 ids[2 * GLOCK_RELEASED_MAX];
	static off_t		 sizes[2 * GLOCK_RELEASED_MAX];
	struct fuse_bufvec	 none = FUSE_BUFVEC_INIT(0);
	struct glock_unheld	 u;
	unsigned int		 i, n;

	if (!cluster_enabled())
		return;
	/* Only the inval thread comes here: the arrays are its own. */
	pthread_mutex_lock(&gl.lock);
	n = gl.nreleased;
	memcpy(ids, gl.released, n * sizeof ids[0]);
	gl.nreleased = 0;
	pthread_mutex_unlock(&gl.lock);
	for (i = 0; i < n; i++)
		sizes[i] = -1;
	u.ids = ids + n;
	u.sizes = sizes + n;
	u.n = 0;
	u.max = GLOCK_RELEASED_MAX;
	handle_files_foreach(glock_note_unheld, &u);
	n += (unsigned int)u.n;
	for (i = 0; i < n; i++) {
		glock_drop_pages((void *)(uintptr_t)ids[i]);
		if (sizes[i] > 0)
			(void)fuse_lowlevel_notify_store(wsfs.se, ids[i],
			    sizes[i], &none, 0);
	}
}

/*
 * The object's last name was removed: give its lock back as soon as the
 * change that removed it is done, rather than keep it in the cache. The
 * backing store hands the inode number out again, and another node's new
 * file would otherwise have to take the lock from us.
 */
void
glock_gone(ino_t ino, uint64_t birth)
{
	struct glock	*g;

	if (!cluster_enabled() || ino == 0)
		return;
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_find_locked(ino, 0)) != NULL && g->birth != birth)
		g = NULL;	/* the lock is another object's now */
	if (g != NULL && g->held) {
		g->gone = 1;
		g->revoke = 1;
		g->acquired_ms = 0;
	} else if (g != NULL && g->cover != NULL) {
		/* Forgotten once its last user is done (glock_set_drop). */
		g->gone = 1;
		if (g->users == 0)
			glock_forget_cover_locked(g);
		glock_gc_locked(g);
	}
	pthread_mutex_unlock(&gl.lock);
}

/* Called with the inode table locked (the one lock taken before ours). */
static void
glock_inode_gone(struct inode *in)
{
	struct glock	*g;

	if (!cluster_enabled())
		return;
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_find_locked(in->ino, 0)) != NULL &&
	    g->nodeid == (fuse_ino_t)(uintptr_t)in)
		g->nodeid = 0;
	pthread_mutex_unlock(&gl.lock);
}

static void
glock_sync_one(const void *nodep, VISIT which, int depth)
{
	struct glock	*g = *(struct glock *const *)nodep;

	if (which != postorder && which != leaf)
		return;
	/* The session ends next, and with it every lock. */
	if (g->held || g->cover != NULL)
		glock_history("release", g, g->held ? g->held :
		    WSLOCK_EXCLUSIVE, 0);
	if (g->dirty)
		glock_fsync(g->key, g->ino, g->fh);
}

/* At unmount: make every written object durable; the session end frees. */
static void
glock_release_all(void)
{
	pthread_mutex_lock(&gl.lock);
	twalk(gl.tree, glock_sync_one);
	pthread_mutex_unlock(&gl.lock);
}

void
glock_stats(unsigned long *count, unsigned long *idle,
    unsigned long *covered)
{
	pthread_mutex_lock(&gl.lock);
	*count = gl.count;
	*idle = gl.nlru;
	*covered = gl.ncovered;
	pthread_mutex_unlock(&gl.lock);
}

/*
 * One lock without parking, for the write path: 0 with *out held (NULL
 * without a lock service), -EWOULDBLOCK with the request on its way (park
 * with glock_set_lock), -EIO when the service is long gone, -errno.
 */
int
glock_try(struct inode *in, int exclusive, struct glock **out)
{
	struct glock_where	 w;
	struct glock		*g;
	int			 r;

	*out = NULL;
	if (!cluster_enabled())
		return 0;
	glock_where_of(in, &w);
	if (glock_service_gone()) {
		stats_count(SC_LOCK_TIMEOUTS, 1);
		glock_log_timeout(in, "(service away)", "for longer than "
		    "lock_timeout");
		return -EIO;
	}
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(in->ino, in, &w)) == NULL)
		r = -ENOMEM;
	else if ((r = glock_step_locked(g, exclusive ? WSLOCK_EXCLUSIVE :
	    WSLOCK_SHARED, 0, cluster_now_ms())) == 1) {
		*out = g;
		r = 0;
	} else if (r == 0)
		r = -EWOULDBLOCK;
	pthread_mutex_unlock(&gl.lock);
	return r;
}

/* Done with a lock of glock_try; wrote: the object changed. */
void
glock_put(struct glock *g, int wrote)
{
	struct glock_set	s;

	if (g == NULL)
		return;
	glock_set_init(&s);
	s.nheld = 1;
	s.g[0] = g;
	pthread_mutex_lock(&gl.lock);
	if (wrote)
		g->dirty = 1;
	glock_set_drop_locked(&s, 1);
	pthread_mutex_unlock(&gl.lock);
}

static const struct cluster_user glock_user = {
	.kind = 'g',
	.opened = glock_history_open,
	.revoke = glock_revoke,
	.lost = glock_lost,
	.state_changed = glock_state_changed,
	.tick = glock_tick,
	.release_all = glock_release_all,
};

void
glock_init(void)
{
	cluster_register(&glock_user);
	inode_on_free(glock_inode_gone);
}

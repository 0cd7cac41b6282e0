/*
 * Object locks of kind=shared mounts, cached like the glocks of a cluster
 * filesystem. Every mutating operation holds the exclusive lock of each
 * object it changes, reads and opens hold the shared lock; the lock is kept
 * after the operation and given back only when another node asks for it
 * (revoke) or after it was idle a while. Before giving a lock back the node
 * makes the object's writes durable and drops the kernel's cached
 * attributes and pages of it; on (re)acquiring it drops them again, so the
 * other node's writes are seen. A lock follows the inode, not its name.
 *
 * A lock whose lease is in jeopardy is not held: an operation then waits
 * for the lock service up to lock_timeout and fails with EIO, never writing
 * unlocked.
 */
#include "config.h"

#include <errno.h>
#include <search.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wslock.h"
#include "wsfs.h"

/* A busy node keeps a lock this long even when another node asks. */
#define GLOCK_MIN_HOLD_MS	20
/* An unused lock goes back after this long. */
#define GLOCK_IDLE_MS		3000
/* How long to wait before asking again during the server's grace period. */
#define GLOCK_RETRY_MS		100
/* The node's single owner id for object locks. */
#define GLOCK_OWNER		1

struct glock {
	struct cluster_waiter	 w;		/* must be first */
	ino_t			 ino;		/* const: tree key */
	char			 key[64];	/* const */
	size_t			 keylen;	/* const */
	/* All below: guarded by gl.lock. */
	struct file_handle	*fh;		/* to fsync; may be NULL */
	fuse_ino_t		 nodeid;	/* to invalidate; may be 0 */
	uint64_t		 reqid;
	int			 held;		/* 0, WSLOCK_SHARED, _EXCLUSIVE */
	int			 want;		/* mode asked for, 0 if none */
	int			 releasing;	/* being given back */
	int			 revoke;	/* another node waits for it */
	int			 dirty;		/* written since acquired */
	unsigned int		 users;		/* operations holding it */
	unsigned int		 waiters;	/* operations waiting for it */
	uint64_t		 acquired_ms;
	uint64_t		 used_ms;
	uint64_t		 retry_ms;	/* grace: not before this */
	uint64_t		 gen;		/* bumped at every acquire */
	TAILQ_ENTRY(glock)	 idle;		/* held, no users */
	int			 on_idle;
	TAILQ_HEAD(, glock_defer) deferred;	/* operations parked on it */
	TAILQ_ENTRY(glock)	 dlink;		/* on gl.deferred */
	int			 on_deferred;
};

/*
 * An operation that must not hold a FUSE worker while it waits: called
 * back from the worker thread once the lock is held or the wait failed.
 */
struct glock_defer {
	void			(*fn)(void *, struct glock *, int);
	void			*arg;
	int			 mode;
	uint64_t		 deadline;
	struct inode		*in;		/* for the log */
	struct glock		*g;		/* result, for the callback */
	int			 err;
	TAILQ_ENTRY(glock_defer) entry;
};

static struct {
	pthread_mutex_t		 lock;
	pthread_cond_t		 cond;
	void			*tree;
	TAILQ_HEAD(glock_idle, glock) idle;	/* oldest use last */
	unsigned long		 count;
	uint64_t		 revoke_due;	/* a revoked lock's hold ends */
	TAILQ_HEAD(, glock)	 deferred;	/* locks with parked operations */
} gl = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.idle = TAILQ_HEAD_INITIALIZER(gl.idle),
	.deferred = TAILQ_HEAD_INITIALIZER(gl.deferred),
};

/*
 * The lock history (-o lock_log=FILE): one line per grant, release and
 * loss, "REALTIME_NS NODE EVENT KEY MODE TOKEN", for checking afterwards
 * that no two nodes ever held conflicting locks at once. A grant is logged
 * when this node starts relying on it, a release before the server is
 * told: the logged interval lies inside the server's.
 */
static int	glock_log_fd = -1;

void
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
glock_idle_del_locked(struct glock *g)
{
	if (g->on_idle) {
		TAILQ_REMOVE(&gl.idle, g, idle);
		g->on_idle = 0;
	}
}

static void
glock_idle_add_locked(struct glock *g)
{
	if (!g->on_idle && g->held && g->users == 0) {
		TAILQ_INSERT_HEAD(&gl.idle, g, idle);
		g->on_idle = 1;
	}
}

/* Whether the session really holds g in mode now, by the library's clock. */
static int
glock_valid_locked(struct glock *g, int mode)
{
	struct wslock_range	r;

	if (g->held < mode || g->releasing)
		return 0;
	glock_range(g, &r);
	if (wslock_held(cluster_handle(), &r, mode, NULL) == 1)
		return 1;
	/* Lost or in jeopardy: it is not ours to use. */
	glock_history("lost", g, g->held, 0);
	g->held = 0;
	glock_idle_del_locked(g);
	return 0;
}

static void glock_done(struct cluster_waiter *w, int status, uint64_t token);
static void glock_kick_locked(struct glock *g, uint64_t now);
static void glock_kick_all_locked(uint64_t now);

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
	TAILQ_INIT(&g->deferred);
	g->keylen = cluster_key('g', ino, g->key, sizeof g->key);
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
	const char		*k = key, *p;
	unsigned long long	 ino;
	char			 buf[64];

	if (keylen >= sizeof buf)
		return NULL;
	memcpy(buf, k, keylen);
	buf[keylen] = '\0';
	if ((p = strrchr(buf, '/')) == NULL)
		return NULL;
	ino = strtoull(p + 1, NULL, 10);
	return glock_find_locked((ino_t)ino, 0);
}

/* Drop the kernel's cached attributes and pages of one inode. */
static void
glock_invalidate(void *arg)
{
	fuse_ino_t	nodeid = (fuse_ino_t)(uintptr_t)arg;
	int		r;

	r = fuse_lowlevel_notify_inval_inode(wsfs.se, nodeid, 0, 0);
	if (r < 0 && r != -ENOENT)
		log_debug("invalidate inode: %s", strerror(-r));
}

static void
glock_done(struct cluster_waiter *w, int status, uint64_t token)
{
	struct glock	*g = (struct glock *)w;
	fuse_ino_t	 nodeid = 0;

	pthread_mutex_lock(&gl.lock);
	if (status == 0) {
		if (g->want > g->held)
			g->held = g->want;
		glock_history("grant", g, g->held, token);
		g->acquired_ms = g->used_ms = cluster_now_ms();
		g->gen++;
		nodeid = g->nodeid;
		glock_idle_add_locked(g);
	} else if (status == -EBUSY)
		g->retry_ms = cluster_now_ms() + GLOCK_RETRY_MS;
	else if (status != -ECANCELED)
		log_limited(LOG_WARNING, "glock-refused", "node %s: lock %s "
		    "refused: %s", wsfs.conf.node, g->key, strerror(-status));
	g->want = 0;
	glock_kick_locked(g, cluster_now_ms());
	pthread_cond_broadcast(&gl.cond);
	pthread_mutex_unlock(&gl.lock);
	/* Another node may have changed it while we did not hold it. */
	if (nodeid != 0)
		cluster_defer_inval(glock_invalidate, (void *)(uintptr_t)nodeid);
}

/*
 * Give a lock back (worker thread): make its writes durable, drop the
 * kernel's cache of it, then tell the server.
 */
static void
glock_do_release(void *arg)
{
	struct glock		*g = arg;
	struct wslock_range	 r;
	struct file_handle	*fh;
	fuse_ino_t		 nodeid;
	int			 fd, dirty;

	pthread_mutex_lock(&gl.lock);
	dirty = g->dirty;
	fh = g->fh;
	nodeid = g->nodeid;
	pthread_mutex_unlock(&gl.lock);
	if (dirty && fh != NULL) {
		fd = open_by_handle_at(wsfs.source_fd_rd, fh, O_RDONLY |
		    O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0) {
			if (fsync(fd) == -1)
				log_warn("node %s: fsync before giving back %s: "
				    "%s", wsfs.conf.node, g->key,
				    strerror(errno));
			close(fd);
		}
	}
	/* Attributes only here: pages may be locked by a waiting request. */
	if (nodeid != 0) {
		(void)fuse_lowlevel_notify_inval_inode(wsfs.se, nodeid, -1, 0);
		cluster_defer_inval(glock_invalidate,
		    (void *)(uintptr_t)nodeid);
	}
	pthread_mutex_lock(&gl.lock);
	glock_range(g, &r);
	glock_history("release", g, g->held, 0);
	(void)wslock_unlock(cluster_handle(), &r);
	stats_count(SC_RELEASES, 1);
	g->held = 0;
	g->dirty = 0;
	g->revoke = 0;
	g->releasing = 0;
	glock_idle_del_locked(g);
	glock_kick_locked(g, cluster_now_ms());
	pthread_cond_broadcast(&gl.cond);
	/* Nobody uses or waits for it: forget it, so memory stays bounded. */
	if (g->users == 0 && g->waiters == 0 && g->want == 0) {
		tdelete(g, &gl.tree, glock_cmp);
		gl.count--;
		free(g->fh);
		free(g);
	}
	pthread_mutex_unlock(&gl.lock);
}

/* Start giving g back if nothing uses it and the time has come. */
static void
glock_maybe_release_locked(struct glock *g, uint64_t now)
{
	uint64_t	due;

	if (!g->held || g->users > 0 || g->releasing || g->want)
		return;
	if (g->revoke && now < (due = g->acquired_ms + GLOCK_MIN_HOLD_MS)) {
		/* Come back when the minimum hold is over. */
		if (gl.revoke_due == 0 || due < gl.revoke_due) {
			gl.revoke_due = due;
			cluster_wake();
		}
		return;
	}
	if (!g->revoke && now < g->used_ms + GLOCK_IDLE_MS)
		return;
	g->releasing = 1;
	glock_idle_del_locked(g);
	cluster_defer(glock_do_release, g);
}

void
glock_revoke(const void *key, size_t keylen)
{
	struct glock	*g;

	pthread_mutex_lock(&gl.lock);
	stats_count(SC_REVOKES, 1);
	if ((g = glock_by_key_locked(key, keylen)) != NULL) {
		g->revoke = 1;
		glock_maybe_release_locked(g, cluster_now_ms());
	}
	pthread_mutex_unlock(&gl.lock);
}

void
glock_lost(const void *key, size_t keylen)
{
	struct glock	*g;

	pthread_mutex_lock(&gl.lock);
	if ((g = glock_by_key_locked(key, keylen)) != NULL && !g->releasing) {
		glock_history("lost", g, g->held, 0);
		g->held = 0;
		glock_idle_del_locked(g);
	}
	pthread_cond_broadcast(&gl.cond);
	pthread_mutex_unlock(&gl.lock);
}

void
glock_state_changed(void)
{
	pthread_mutex_lock(&gl.lock);
	glock_kick_all_locked(cluster_now_ms());
	pthread_cond_broadcast(&gl.cond);
	pthread_mutex_unlock(&gl.lock);
}

/*
 * Lock thread: give back what was revoked or is idle. Returns how many
 * milliseconds may pass before the next call.
 */
int
glock_tick(void)
{
	struct glock	*g, *prev;
	uint64_t	 now = cluster_now_ms();
	int		 next = 100;

	pthread_mutex_lock(&gl.lock);
	if (gl.revoke_due != 0 && now >= gl.revoke_due) {
		gl.revoke_due = 0;
		for (g = TAILQ_FIRST(&gl.idle); g != NULL; g = prev) {
			prev = TAILQ_NEXT(g, idle);
			if (g->revoke)
				glock_maybe_release_locked(g, now);
		}
	}
	for (g = TAILQ_LAST(&gl.idle, glock_idle); g != NULL; g = prev) {
		prev = TAILQ_PREV(g, glock_idle, idle);
		if (!g->revoke && now < g->used_ms + GLOCK_IDLE_MS)
			break;
		glock_maybe_release_locked(g, now);
	}
	/* Parked operations: retries after a grace refusal, and deadlines. */
	glock_kick_all_locked(now);
	if (gl.revoke_due != 0)
		next = gl.revoke_due > now ? (int)(gl.revoke_due - now) : 0;
	pthread_mutex_unlock(&gl.lock);
	return next < 100 ? next : 100;
}

static void
glock_log_timeout(struct inode *in, const char *key)
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
	log_limited(LOG_ERR, "glock-timeout", "node %s: no lock from %s within "
	    "%gs for %s (workspace %llu, lock %s): failing with EIO",
	    wsfs.conf.node, wsfs.conf.lockd, wsfs.conf.lock_timeout,
	    path[0] ? path : "?", in ? (unsigned long long)in->ws : 0, key);
}

/* Find or make the lock of a backing inode and remember how to reach it. */
static struct glock *
glock_prepare_locked(ino_t ino, struct inode *in)
{
	struct glock	*g;

	if ((g = glock_find_locked(ino, 1)) == NULL)
		return NULL;
	if (in != NULL) {
		g->nodeid = (fuse_ino_t)(uintptr_t)in;
		if (g->fh == NULL && in->fh != NULL &&
		    (g->fh = malloc(sizeof *in->fh + in->fh->handle_bytes)))
			memcpy(g->fh, in->fh, sizeof *in->fh +
			    in->fh->handle_bytes);
	}
	return g;
}

/*
 * One step of taking g in mode: 1 if held now (one more user), 0 if the
 * caller must wait (a request is on its way), or -errno.
 */
static int
glock_step_locked(struct glock *g, int mode, uint64_t now)
{
	struct wslock_range	r;
	int			ret;

	if (glock_valid_locked(g, mode) && (!g->revoke ||
	    now < g->acquired_ms + GLOCK_MIN_HOLD_MS || g->users > 0)) {
		g->users++;
		g->used_ms = now;
		glock_idle_del_locked(g);
		return 1;
	}
	if (!g->releasing && g->want == 0 && now >= g->retry_ms &&
	    !(g->held >= mode && g->revoke)) {
		glock_range(g, &r);
		if (g->held != 0 && g->held < mode) {
			/*
			 * No upgrades: two nodes upgrading their shared locks
			 * would each wait for the other's. The shared lock
			 * protects no data (only caches): give it back first,
			 * once this node's readers are done with it.
			 */
			if (g->users > 0)
				return 0;
			glock_history("release", g, g->held, 0);
			(void)wslock_unlock(cluster_handle(), &r);
			g->held = 0;
			glock_idle_del_locked(g);
		}
		g->want = mode;
		ret = wslock_lock(cluster_handle(), &r, g->want,
		    WSLOCK_WAIT | WSLOCK_CACHED, &g->w, &g->reqid);
		if (ret < 0) {
			g->want = 0;
			return ret;
		}
		cluster_wake();
	}
	return 0;
}

static void
glock_defer_run(void *arg)
{
	struct glock_defer	*d = arg;

	if (d->err != 0) {
		stats_count(SC_LOCK_TIMEOUTS, 1);
		glock_log_timeout(d->in, "(deferred)");
	}
	d->fn(d->arg, d->g, d->err);
	free(d);
}

/* Hand parked operations of g their lock, or their failure. */
static void
glock_kick_locked(struct glock *g, uint64_t now)
{
	struct glock_defer	*d, *next;
	int			 r;

	for (d = TAILQ_FIRST(&g->deferred); d != NULL; d = next) {
		next = TAILQ_NEXT(d, entry);
		r = glock_step_locked(g, d->mode, now);
		if (r == 0 && now < d->deadline)
			continue;
		TAILQ_REMOVE(&g->deferred, d, entry);
		g->waiters--;
		d->g = r == 1 ? g : NULL;
		d->err = r == 1 ? 0 : -EIO;
		cluster_defer(glock_defer_run, d);
	}
	if (TAILQ_EMPTY(&g->deferred) && g->on_deferred) {
		TAILQ_REMOVE(&gl.deferred, g, dlink);
		g->on_deferred = 0;
	}
}

static void
glock_kick_all_locked(uint64_t now)
{
	struct glock	*g, *next;

	for (g = TAILQ_FIRST(&gl.deferred); g != NULL; g = next) {
		next = TAILQ_NEXT(g, dlink);
		glock_kick_locked(g, now);
	}
}

/* Hold the lock of one backing inode; in (may be NULL) names it in logs. */
static int
glock_get_ino(ino_t ino, struct inode *in, int mode, struct glock **out)
{
	struct timespec		 ts;
	struct glock		*g;
	uint64_t		 now, deadline;
	char			 key[sizeof g->key];
	int			 ret = 0, unlocked = 0;

	*out = NULL;
	if (!cluster_enabled())
		return 0;
	/*
	 * Reads keep working while the lock service is away: a shared lock
	 * only keeps caches fresh, it protects no data. Changes wait.
	 */
	if (mode == WSLOCK_SHARED && cluster_degraded())
		return 0;
	now = cluster_now_ms();
	deadline = now + (uint64_t)(wsfs.conf.lock_timeout * 1000);
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(ino, in)) == NULL) {
		pthread_mutex_unlock(&gl.lock);
		return -ENOMEM;
	}
	g->waiters++;
	if (!glock_valid_locked(g, mode))
		stats_count(SC_LOCK_WAITS, 1);
	for (;;) {
		now = cluster_now_ms();
		if (mode == WSLOCK_SHARED && cluster_degraded()) {
			unlocked = 1;	/* read unlocked, as above */
			break;
		}
		if ((ret = glock_step_locked(g, mode, now)) != 0)
			break;
		if (now >= deadline) {
			if (g->want != 0)
				(void)wslock_cancel(cluster_handle(), g->reqid);
			ret = -ETIMEDOUT;
			break;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 50 * 1000000L;	/* re-check the lease often */
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&gl.cond, &gl.lock, &ts);
	}
	g->waiters--;
	/* g may be freed once unlocked unless we are among its users. */
	memcpy(key, g->key, sizeof key);
	pthread_mutex_unlock(&gl.lock);
	if (ret < 0) {
		stats_count(SC_LOCK_TIMEOUTS, 1);
		glock_log_timeout(in, key);
		return -EIO;
	}
	if (!unlocked)
		*out = g;
	return 0;
}

/*
 * Take the lock of in if that needs no waiting: 0 with *out (NULL when
 * there is no lock service, or a read while it is away), or -EWOULDBLOCK
 * with a request on its way: then park the operation with glock_defer.
 */
int
glock_try(struct inode *in, int exclusive, struct glock **out)
{
	struct glock	*g;
	int		 mode = exclusive ? WSLOCK_EXCLUSIVE : WSLOCK_SHARED;
	int		 r;

	*out = NULL;
	if (!cluster_enabled() || (mode == WSLOCK_SHARED && cluster_degraded()))
		return 0;
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(in->ino, in)) == NULL)
		r = -ENOMEM;
	else if ((r = glock_step_locked(g, mode, cluster_now_ms())) == 1) {
		*out = g;
		r = 0;
	} else if (r == 0)
		r = -EWOULDBLOCK;
	pthread_mutex_unlock(&gl.lock);
	return r;
}

/*
 * Call fn(arg, g, 0) from the worker thread once in's lock is held (pair
 * with glock_put), or fn(arg, NULL, -EIO) after lock_timeout; the FUSE
 * worker that asked is free meanwhile.
 */
void
glock_defer(struct inode *in, int exclusive,
    void (*fn)(void *, struct glock *, int), void *arg)
{
	struct glock_defer	*d;
	struct glock		*g;
	uint64_t		 now = cluster_now_ms();

	if ((d = calloc(1, sizeof *d)) == NULL) {
		fn(arg, NULL, -ENOMEM);
		return;
	}
	d->fn = fn;
	d->arg = arg;
	d->in = in;
	d->mode = exclusive ? WSLOCK_EXCLUSIVE : WSLOCK_SHARED;
	d->deadline = now + (uint64_t)(wsfs.conf.lock_timeout * 1000);
	pthread_mutex_lock(&gl.lock);
	if ((g = glock_prepare_locked(in->ino, in)) == NULL) {
		pthread_mutex_unlock(&gl.lock);
		free(d);
		fn(arg, NULL, -ENOMEM);
		return;
	}
	stats_count(SC_LOCK_WAITS, 1);
	g->waiters++;
	TAILQ_INSERT_TAIL(&g->deferred, d, entry);
	if (!g->on_deferred) {
		TAILQ_INSERT_TAIL(&gl.deferred, g, dlink);
		g->on_deferred = 1;
	}
	glock_kick_locked(g, now);
	pthread_mutex_unlock(&gl.lock);
}

int
glock_get(struct inode *in, int exclusive, struct glock **out)
{
	return glock_get_ino(in->ino, in, exclusive ? WSLOCK_EXCLUSIVE :
	    WSLOCK_SHARED, out);
}

void
glock_put(struct glock *g, int wrote)
{
	if (g == NULL)
		return;
	pthread_mutex_lock(&gl.lock);
	if (wrote)
		g->dirty = 1;
	g->used_ms = cluster_now_ms();
	if (--g->users == 0) {
		glock_idle_add_locked(g);
		if (g->revoke)
			glock_maybe_release_locked(g, g->used_ms);
		/* Someone may wait for this node's readers to finish. */
		if (g->waiters > 0) {
			glock_kick_locked(g, g->used_ms);
			pthread_cond_broadcast(&gl.cond);
		}
	}
	pthread_mutex_unlock(&gl.lock);
}

/*
 * Exclusive locks on several inodes (0 entries are skipped, duplicates
 * taken once), in one global order, by inode number, so that two nodes
 * renaming cannot deadlock. ins[i] may be NULL where only the number is
 * known. out must have room for GLOCK_MAX entries.
 */
int
glock_get_many(const ino_t *inos, struct inode *const *ins, int n,
    struct glock **out)
{
	int	i, j, k, r, order[GLOCK_MAX];

	for (i = 0; i < GLOCK_MAX; i++)
		out[i] = NULL;
	if (!cluster_enabled() || n > GLOCK_MAX)
		return n > GLOCK_MAX ? -EINVAL : 0;
	for (i = 0; i < n; i++)
		order[i] = i;
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && inos[order[j]] < inos[order[j - 1]]; j--) {
			k = order[j];
			order[j] = order[j - 1];
			order[j - 1] = k;
		}
	for (i = 0, k = 0; i < n; i++) {
		if (inos[order[i]] == 0 ||
		    (i > 0 && inos[order[i]] == inos[order[i - 1]]))
			continue;
		r = glock_get_ino(inos[order[i]], ins[order[i]],
		    WSLOCK_EXCLUSIVE, &out[k]);
		if (r < 0) {
			while (k > 0)
				glock_put(out[--k], 0);
			return r;
		}
		k++;
	}
	return 0;
}

void
glock_put_many(struct glock **gs, int wrote)
{
	int	i;

	for (i = 0; i < GLOCK_MAX; i++) {
		glock_put(gs[i], wrote);
		gs[i] = NULL;
	}
}

static void
glock_sync_one(const void *nodep, VISIT which, int depth)
{
	struct glock	*g = *(struct glock *const *)nodep;
	int		 fd;

	if (which != postorder && which != leaf)
		return;
	/* The session ends next, and with it every lock. */
	if (g->held)
		glock_history("release", g, g->held, 0);
	if (!g->dirty || g->fh == NULL)
		return;
	fd = open_by_handle_at(wsfs.source_fd_rd, g->fh, O_RDONLY | O_NONBLOCK |
	    O_CLOEXEC | O_NOFOLLOW);
	if (fd >= 0) {
		(void)fsync(fd);
		close(fd);
	}
}

/* At unmount: make every written object durable; the session end frees. */
void
glock_release_all(void)
{
	pthread_mutex_lock(&gl.lock);
	twalk(gl.tree, glock_sync_one);
	pthread_mutex_unlock(&gl.lock);
}

void
glock_stats(unsigned long *count, unsigned long *held)
{
	struct glock	*g;
	unsigned long	 h = 0;

	pthread_mutex_lock(&gl.lock);
	TAILQ_FOREACH(g, &gl.idle, idle)
		h++;
	*count = gl.count;
	*held = h;
	pthread_mutex_unlock(&gl.lock);
}

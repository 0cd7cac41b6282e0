/*
 * Application locks of kind=shared mounts: flock(2) and fcntl(2) locks
 * (F_SETLK, F_SETLKW, F_GETLK, OFD locks) are forwarded to wslockd, so two
 * agents on two nodes exclude each other as two processes on one machine
 * would. A blocking request never holds a FUSE worker: the reply is sent
 * when the server grants it, and an interrupt (a signal, Ctrl-C) cancels
 * the wait in wslockd and answers EINTR. POSIX locks go with close (flush
 * with the owner), flock locks with the last close of the open file.
 * fcntl and flock locks use separate keys: they do not interact, as on
 * Linux. They share the node's one session with the object locks, so each
 * uid's locks and waits, and the node's, are capped below the session's
 * quota on the server (plock_max_per_uid and friends): over a cap a
 * request fails with ENOLCK, and writes keep their locks.
 */
#include "config.h"

#include <sys/file.h>

#include <errno.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "wslock.h"
#include "wsfs.h"

/*
 * What each uid holds on the lock server through the node's one session,
 * whose quota of locks and of waiting requests the object locks of every
 * write need too: one user must not use it up with application locks. The
 * ranges of each (kind, inode, owner) are mirrored as the server keeps them
 * (a lock replaces the owner's overlap, adjacent ranges of one mode merge)
 * and charged to the uid that took the first of them. A request that could
 * take its uid, or the node's application locks, past a cap is refused
 * with ENOLCK. A lock request reserves the most it can add until its
 * answer: two ranges, when it splits one of another mode in three.
 */
#define PQ_GROWTH	2

struct pq_range {
	uint64_t	 start;
	uint64_t	 end;
	int		 mode;
};

struct pq_held {
	ino_t		 ino;		/* const: key */
	uint64_t	 owner;		/* const: key */
	char		 kind;		/* const: key */
	uid_t		 uid;		/* const: charged */
	struct pq_range	*r;		/* sorted, disjoint; pq.lock */
	size_t		 n;		/* pq.lock */
};

struct pq_user {
	uid_t		 uid;		/* const: key */
	unsigned long	 locks;		/* held and reserved; pq.lock */
	unsigned long	 waiters;	/* pq.lock */
};

static struct {
	pthread_mutex_t	 lock;
	void		*held;		/* tsearch tree of pq_held */
	void		*users;		/* tsearch tree of pq_user */
	unsigned long	 locks;		/* the node's, held and reserved */
	unsigned long	 waiters;
} pq = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/*
 * One lock request in flight. Two references: the caller's, and the done
 * callback's, which answers the kernel.
 */
struct plock_wait {
	struct cluster_waiter	 w;		/* must be first */
	fuse_req_t		 req;
	struct stats_timing	 st;		/* answered from its copy */
	struct inode		*in;		/* alive while req is */
	int			 locking;	/* a lock, not a test */
	/* What is asked, for the quota: const. */
	ino_t			 ino;
	char			 kind;
	struct pq_range		 range;
	uint64_t		 owner;
	uid_t			 charged;	/* holds the reservation */
	int			 wait;
	uint64_t		 reqid;
	pthread_mutex_t		 lock;
	int			 refs;		/* guarded by lock */
	int			 sent;		/* reqid valid; guarded by lock */
	int			 interrupted;	/* guarded by lock */
	struct glock_set	 locks;		/* the object's, at a grant */
	/* A request that must not wait (F_SETLK, LOCK_NB): plk.lock. */
	uint64_t		 deadline;
	int			 expired;
	int			 listed;
	TAILQ_ENTRY(plock_wait)	 entry;
};

static int
pq_held_cmp(const void *a, const void *b)
{
	const struct pq_held	*x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->owner != y->owner)
		return x->owner < y->owner ? -1 : 1;
	return x->kind - y->kind;
}

static int
pq_user_cmp(const void *a, const void *b)
{
	const struct pq_user	*x = a, *y = b;

	return x->uid == y->uid ? 0 : x->uid < y->uid ? -1 : 1;
}

static struct pq_held *
pq_held_find_locked(char kind, ino_t ino, uint64_t owner)
{
	struct pq_held	 key = { .ino = ino, .owner = owner, .kind = kind };
	struct pq_held	**slot;

	slot = tfind(&key, &pq.held, pq_held_cmp);
	return slot != NULL ? *slot : NULL;
}

static struct pq_user *
pq_user_get_locked(uid_t uid)
{
	struct pq_user	 key = { .uid = uid }, *u, **slot;

	if ((slot = tfind(&key, &pq.users, pq_user_cmp)) != NULL)
		return *slot;
	if ((u = calloc(1, sizeof *u)) == NULL)
		return NULL;
	u->uid = uid;
	if ((slot = tsearch(u, &pq.users, pq_user_cmp)) == NULL) {
		free(u);
		return NULL;
	}
	return u;
}

/* Add delta locks and wdelta waiters to uid's count and the node's. */
static void
pq_charge_locked(uid_t uid, long delta, long wdelta)
{
	struct pq_user	*u;

	if ((u = pq_user_get_locked(uid)) == NULL) {
		/* Out of memory: the node's counts still hold. */
		log_warn("uid %u: lock count lost (out of memory)",
		    (unsigned)uid);
	} else {
		u->locks += (unsigned long)delta;
		u->waiters += (unsigned long)wdelta;
		if (u->locks == 0 && u->waiters == 0) {
			tdelete(u, &pq.users, pq_user_cmp);
			free(u);
		}
	}
	pq.locks += (unsigned long)delta;
	pq.waiters += (unsigned long)wdelta;
}

/*
 * The owner's ranges after giving it [start, end) in mode, or taking it
 * away (mode 0), as the server's table does it. Returns the new count with
 * the ranges in *out, or -ENOMEM.
 */
static long
pq_build(const struct pq_held *h, uint64_t start, uint64_t end, int mode,
    struct pq_range **out)
{
	struct pq_range		*o, nr = { start, end, mode };
	const struct pq_range	*r;
	size_t			 i, n = 0, k = 0;
	int			 put = mode == 0;

	/* Only one range can split in two around the new one. */
	if ((o = calloc((h != NULL ? h->n : 0) + 2, sizeof *o)) == NULL)
		return -ENOMEM;
	for (i = 0; h != NULL && i < h->n; i++) {
		r = &h->r[i];
		if (r->end <= start) {
			o[n++] = *r;
			continue;
		}
		if (r->start >= end) {
			if (!put) {
				o[n++] = nr;
				put = 1;
			}
			o[n++] = *r;
			continue;
		}
		if (r->start < start) {
			o[n] = *r;
			o[n++].end = start;
		}
		if (!put) {
			o[n++] = nr;
			put = 1;
		}
		if (r->end > end) {
			o[n] = *r;
			o[n++].start = end;
		}
	}
	if (!put)
		o[n++] = nr;
	for (i = 0; i < n; i++) {
		if (k > 0 && o[k - 1].end == o[i].start &&
		    o[k - 1].mode == o[i].mode)
			o[k - 1].end = o[i].end;
		else
			o[k++] = o[i];
	}
	*out = o;
	return (long)k;
}

/* Make the owner's ranges o (n of them), charging the difference. */
static void
pq_commit_locked(struct pq_held *h, struct pq_range *o, long n)
{
	pq_charge_locked(h->uid, n - (long)h->n, 0);
	free(h->r);
	h->r = o;
	h->n = (size_t)n;
	if (n == 0) {
		tdelete(h, &pq.held, pq_held_cmp);
		free(h->r);
		free(h);
	}
}

static int
pq_over_locked(uid_t uid, unsigned long locks, unsigned long waiters)
{
	struct pq_user	 key = { .uid = uid }, **slot;
	unsigned long	 ul = 0, uw = 0;

	if ((slot = tfind(&key, &pq.users, pq_user_cmp)) != NULL) {
		ul = (*slot)->locks;
		uw = (*slot)->waiters;
	}
	if (ul + locks > (unsigned long)wsfs.conf.plock_max_per_uid ||
	    uw + waiters > (unsigned long)wsfs.conf.plock_max_waiters_per_uid ||
	    pq.locks + locks > (unsigned long)wsfs.conf.plock_max_total ||
	    pq.waiters + waiters >
	    (unsigned long)wsfs.conf.plock_max_waiters_total) {
		log_limited(LOG_NOTICE, "plock-cap", "uid %u holds %lu "
		    "application locks and waits for %lu on this node (the node "
		    "%lu and %lu): more refused with ENOLCK", (unsigned)uid, ul,
		    uw, pq.locks, pq.waiters);
		return 1;
	}
	return 0;
}

/*
 * Before asking the server for a lock: reserve what it may add, charged to
 * whoever holds the owner's ranges (the caller if no one). 0 or -ENOLCK.
 */
static int
pq_reserve(struct plock_wait *pw, uid_t uid)
{
	struct pq_held	*h;
	int		 r = 0;

	pthread_mutex_lock(&pq.lock);
	if ((h = pq_held_find_locked(pw->kind, pw->ino, pw->owner)) != NULL)
		uid = h->uid;
	if (pq_over_locked(uid, PQ_GROWTH, pw->wait ? 1 : 0))
		r = -ENOLCK;
	else {
		pw->charged = uid;
		pq_charge_locked(uid, PQ_GROWTH, pw->wait ? 1 : 0);
	}
	pthread_mutex_unlock(&pq.lock);
	return r;
}

/* The server answered (status) a reserved request: settle the counts. */
static void
pq_answered(struct plock_wait *pw, int status)
{
	struct pq_held	*h, **slot;
	struct pq_range	*o;
	long		 n;

	pthread_mutex_lock(&pq.lock);
	pq_charge_locked(pw->charged, -PQ_GROWTH, pw->wait ? -1 : 0);
	if (status != 0)
		goto out;
	if ((h = pq_held_find_locked(pw->kind, pw->ino, pw->owner)) == NULL) {
		if ((h = calloc(1, sizeof *h)) == NULL)
			goto lost;
		h->ino = pw->ino;
		h->owner = pw->owner;
		h->kind = pw->kind;
		h->uid = pw->charged;
		if ((slot = tsearch(h, &pq.held, pq_held_cmp)) == NULL) {
			free(h);
			goto lost;
		}
	}
	if ((n = pq_build(h, pw->range.start, pw->range.end, pw->range.mode,
	    &o)) < 0) {
		if (h->n == 0)
			pq_commit_locked(h, NULL, 0);
		goto lost;
	}
	pq_commit_locked(h, o, n);
	goto out;
lost:
	log_warn("uid %u: lock not counted (out of memory)",
	    (unsigned)pw->charged);
out:
	pthread_mutex_unlock(&pq.lock);
}

/*
 * An unlock may split a range in two: past the owner's uid's cap that is
 * refused (-ENOLCK), as POSIX allows. Otherwise the ranges are updated
 * here, before the server is told.
 */
static int
pq_unlock(char kind, ino_t ino, uint64_t owner, uint64_t start, uint64_t end)
{
	struct pq_held	*h;
	struct pq_range	*o;
	long		 n;
	int		 r = 0;

	pthread_mutex_lock(&pq.lock);
	if ((h = pq_held_find_locked(kind, ino, owner)) == NULL)
		goto out;
	if ((n = pq_build(h, start, end, 0, &o)) < 0) {
		r = (int)n;
		goto out;
	}
	if (n > (long)h->n && pq_over_locked(h->uid, (unsigned long)n - h->n,
	    0)) {
		free(o);
		r = -ENOLCK;
		goto out;
	}
	pq_commit_locked(h, o, n);
out:
	pthread_mutex_unlock(&pq.lock);
	return r;
}

/* Every range of the owner is gone (close, release). */
static void
pq_release(char kind, ino_t ino, uint64_t owner)
{
	struct pq_held	*h;

	pthread_mutex_lock(&pq.lock);
	if ((h = pq_held_find_locked(kind, ino, owner)) != NULL)
		pq_commit_locked(h, NULL, 0);
	pthread_mutex_unlock(&pq.lock);
}

struct plock_test;

/*
 * Requests waiting for the server that must be answered within
 * lock_timeout even when it is away: F_GETLK, and F_SETLK or LOCK_NB
 * (which never queue at the server, but wait for a reconnect here). The
 * lock thread cancels them at their deadline and they answer EIO.
 */
static struct {
	pthread_mutex_t			 lock;
	TAILQ_HEAD(, plock_test)	 tests;		/* oldest first */
	TAILQ_HEAD(, plock_wait)	 nowait;	/* oldest first */
} plk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.tests = TAILQ_HEAD_INITIALIZER(plk.tests),
	.nowait = TAILQ_HEAD_INITIALIZER(plk.nowait),
};

/* The lock service has been away for longer than lock_timeout. */
static int
plock_service_gone(void)
{
	return cluster_degraded() && cluster_degraded_ms() >=
	    (uint64_t)(wsfs.conf.lock_timeout * 1000);
}

/*
 * A request that must not wait (what) while the service has been away for
 * longer than lock_timeout: logged (rate-limited under key), answered EIO,
 * and 1 returned; else 0.
 */
static int
plock_gone_reply(fuse_req_t req, const char *key, const char *what)
{
	if (!plock_service_gone())
		return 0;
	log_limited(LOG_ERR, key, "node %s: %s with the lock service %s away "
	    "for longer than lock_timeout: EIO", wsfs.conf.node, what,
	    wsfs.conf.lockd);
	stats_reply_err(req, EIO);
	return 1;
}

static uint64_t
plock_deadline(void)
{
	return cluster_now_ms() + (uint64_t)(wsfs.conf.lock_timeout * 1000);
}

static void
plock_range(char kind, struct inode *in, uint64_t owner, uint64_t start,
    uint64_t end, char *key, size_t keylen, struct wslock_range *r)
{
	r->keylen = cluster_key(kind, in->ino, key, keylen);
	r->key = key;
	r->owner = owner;
	r->start = start;
	r->end = end;
}

static void
plock_unref(struct plock_wait *pw)
{
	int	last;

	pthread_mutex_lock(&pw->lock);
	last = --pw->refs == 0;
	pthread_mutex_unlock(&pw->lock);
	if (last) {
		pthread_mutex_destroy(&pw->lock);
		free(pw);
	}
}

static int
plock_errno(int status)
{
	switch (status) {
	case 0:
		return 0;
	case -ECANCELED:
		return EINTR;
	case -EAGAIN:
	case -EBUSY:
		return EAGAIN;
	case -EDQUOT:
		return ENOLCK;
	default:
		return status < 0 ? -status : EIO;
	}
}

/* Answer the kernel. Clearing the interrupt function first waits for a
 * running one, so none can run after the free. */
static void
plock_reply(struct plock_wait *pw, int status)
{
	stats_resume(&pw->st);
	fuse_req_interrupt_func(pw->req, NULL, NULL);
	stats_reply_err(pw->req, plock_errno(status));
	stats_end();
}

/* Inval thread: drop the kernel's cache of the file, then answer. */
static void
plock_granted_fresh(void *arg)
{
	struct plock_wait	*pw = arg;
	int			 r;

	glock_drop_stale_pages();
	r = fuse_lowlevel_notify_inval_inode(wsfs.se,
	    (fuse_ino_t)(uintptr_t)pw->in, 0, 0);
	if (r < 0 && r != -ENOENT)
		log_debug("invalidate after lock grant: %s", strerror(-r));
	plock_reply(pw, 0);
	plock_unref(pw);
}

/* Worker thread: the object lock changed hands; we need not keep it. */
static void
plock_handed_over(void *arg, int err)
{
	struct plock_wait	*pw = arg;

	glock_set_unlock(&pw->locks, 0);
	cluster_defer_inval(plock_granted_fresh, pw);
}

/*
 * A granted application lock promises the data other nodes wrote under
 * theirs (what NFS does at lock time): take the object's shared lock,
 * which makes a writing node flush and give its lock back, drop the
 * kernel's cache, and only then answer.
 */
static void
plock_done(struct cluster_waiter *w, int status, uint64_t token)
{
	struct plock_wait	*pw = (struct plock_wait *)w;
	int			 r;

	pthread_mutex_lock(&plk.lock);
	if (pw->listed) {
		TAILQ_REMOVE(&plk.nowait, pw, entry);
		pw->listed = 0;
	}
	if (pw->expired && status == -ECANCELED)
		status = -EIO;
	pthread_mutex_unlock(&plk.lock);
	pq_answered(pw, status);
	if (status == 0 && pw->locking && pw->in != NULL) {
		glock_set_init(&pw->locks);
		glock_set_add(&pw->locks, pw->in->ino, pw->in, 0);
		if ((r = glock_set_lock(&pw->locks, plock_handed_over, pw)) !=
		    -EINPROGRESS)
			plock_handed_over(pw, r);
		return;
	}
	plock_reply(pw, status);
	plock_unref(pw);
}

/* Runs with libfuse's request lock held. */
static void
plock_interrupt(fuse_req_t req, void *arg)
{
	struct plock_wait	*pw = arg;

	pthread_mutex_lock(&pw->lock);
	pw->interrupted = 1;
	if (pw->sent)
		(void)wslock_cancel(cluster_handle(), pw->reqid);
	pthread_mutex_unlock(&pw->lock);
	cluster_wake();
}

/* Ask for a lock; the answer comes from plock_done, later if blocking. */
static void
plock_lock(fuse_req_t req, struct inode *in, char kind,
    struct wslock_range *r, int mode, int sleep)
{
	struct plock_wait	*pw;
	int			 ret;

	if (!sleep && plock_gone_reply(req, "plock-timeout", "a lock request"))
		return;
	if ((pw = calloc(1, sizeof *pw)) == NULL) {
		stats_reply_err(req, ENOMEM);
		return;
	}
	pw->w.done = plock_done;
	pw->req = req;
	stats_save(&pw->st);
	pw->in = in;
	pw->locking = 1;
	pw->ino = in->ino;
	pw->kind = kind;
	pw->range.start = r->start;
	pw->range.end = r->end;
	pw->range.mode = mode;
	pw->owner = r->owner;
	pw->wait = sleep;
	if ((ret = pq_reserve(pw, fuse_req_ctx(req)->uid)) < 0) {
		stats_reply_err(req, -ret);
		free(pw);
		return;
	}
	pw->refs = 2;
	pthread_mutex_init(&pw->lock, NULL);
	if (sleep)
		fuse_req_interrupt_func(req, plock_interrupt, pw);
	pthread_mutex_lock(&pw->lock);
	if (!sleep) {
		pw->deadline = plock_deadline();
		pthread_mutex_lock(&plk.lock);
		TAILQ_INSERT_TAIL(&plk.nowait, pw, entry);
		pw->listed = 1;
		pthread_mutex_unlock(&plk.lock);
	}
	__atomic_store_n(&in->plocked, 1, __ATOMIC_SEQ_CST);
	ret = wslock_lock(cluster_handle(), r, mode, sleep ? WSLOCK_WAIT : 0,
	    pw, &pw->reqid);
	if (ret == 0) {
		pw->sent = 1;
		if (pw->interrupted)
			(void)wslock_cancel(cluster_handle(), pw->reqid);
	} else if (!sleep) {
		pthread_mutex_lock(&plk.lock);
		TAILQ_REMOVE(&plk.nowait, pw, entry);
		pw->listed = 0;
		pthread_mutex_unlock(&plk.lock);
	}
	pthread_mutex_unlock(&pw->lock);
	if (ret < 0) {
		/* No done callback will come: answer and drop its reference. */
		pq_answered(pw, ret);
		plock_reply(pw, ret);
		plock_unref(pw);
	} else {
		stats_detach();
		cluster_wake();
	}
	plock_unref(pw);
}

void
plock_setlk(fuse_req_t req, struct inode *in, struct fuse_file_info *fi,
    struct flock *lk, int sleep)
{
	struct wslock_range	r;
	char			key[64];
	uint64_t		start, end;
	int			ret;

	if (lk->l_start < 0 || lk->l_len < 0) {
		stats_reply_err(req, EINVAL);
		return;
	}
	start = (uint64_t)lk->l_start;
	end = lk->l_len == 0 ? WSLOCK_EOF : start + (uint64_t)lk->l_len;
	plock_range('p', in, fi->lock_owner, start, end, key, sizeof key, &r);
	if (lk->l_type == F_UNLCK) {
		if ((ret = pq_unlock('p', in->ino, r.owner, start, end)) == 0)
			ret = wslock_unlock(cluster_handle(), &r);
		stats_reply_err(req, -ret);
		cluster_wake();
		return;
	}
	handle_lock_owner(fi, fi->lock_owner);
	plock_lock(req, in, 'p', &r, lk->l_type == F_RDLCK ? WSLOCK_SHARED :
	    WSLOCK_EXCLUSIVE, sleep);
}

/*
 * An F_GETLK on its way to the server. Answered from the tested callback;
 * one the server does not answer within lock_timeout (the service is
 * away) is cancelled by the lock thread and answered EIO.
 */
struct plock_test {
	struct cluster_tester	 ct;		/* must be first */
	fuse_req_t		 req;
	struct stats_timing	 st;		/* answered from its copy */
	struct flock		 lk;
	uint64_t		 reqid;
	uint64_t		 deadline;
	int			 expired;	/* plk.lock */
	TAILQ_ENTRY(plock_test)	 entry;		/* plk.lock */
};

static void	plock_tested(struct cluster_tester *, int,
		    const struct wslock_conflict *);

void
plock_getlk(fuse_req_t req, struct inode *in, struct fuse_file_info *fi,
    struct flock *lk)
{
	struct wslock_range	 r;
	struct plock_test	*t;
	char			 key[64];
	uint64_t		 start, end;
	int			 ret;

	if (plock_gone_reply(req, "getlk-timeout", "F_GETLK"))
		return;
	if ((t = calloc(1, sizeof *t)) == NULL) {
		stats_reply_err(req, ENOMEM);
		return;
	}
	t->ct.tested = plock_tested;
	t->req = req;
	stats_save(&t->st);
	t->lk = *lk;
	t->deadline = plock_deadline();
	start = lk->l_start < 0 ? 0 : (uint64_t)lk->l_start;
	end = lk->l_len <= 0 ? WSLOCK_EOF : start + (uint64_t)lk->l_len;
	plock_range('p', in, fi->lock_owner, start, end, key, sizeof key, &r);
	/* Listed first: the answer may come before wslock_test returns. */
	pthread_mutex_lock(&plk.lock);
	TAILQ_INSERT_TAIL(&plk.tests, t, entry);
	ret = wslock_test(cluster_handle(), &r, lk->l_type == F_RDLCK ?
	    WSLOCK_SHARED : WSLOCK_EXCLUSIVE, &t->ct, &t->reqid);
	if (ret < 0)
		TAILQ_REMOVE(&plk.tests, t, entry);
	pthread_mutex_unlock(&plk.lock);
	if (ret < 0) {
		free(t);
		stats_reply_err(req, -ret);
		return;
	}
	stats_detach();
	cluster_wake();
}

/* Lock thread: the server answered an F_GETLK (or it was cancelled). */
static void
plock_tested(struct cluster_tester *ct, int status,
    const struct wslock_conflict *c)
{
	struct plock_test	*t = (struct plock_test *)ct;
	struct flock		*lk = &t->lk;
	int			 expired;

	stats_resume(&t->st);
	pthread_mutex_lock(&plk.lock);
	TAILQ_REMOVE(&plk.tests, t, entry);
	expired = t->expired;
	pthread_mutex_unlock(&plk.lock);
	if (status < 0)
		stats_reply_err(t->req, expired ? EIO :
		    plock_errno(status));
	else {
		if (status == 0)
			lk->l_type = F_UNLCK;
		else {
			lk->l_type = c->mode == WSLOCK_SHARED ? F_RDLCK :
			    F_WRLCK;
			lk->l_start = (off_t)c->start;
			lk->l_len = c->end == WSLOCK_EOF ? 0 :
			    (off_t)(c->end - c->start);
			/* The holder may be on another node: no pid to give. */
			lk->l_pid = 0;
		}
		fuse_reply_lock(t->req, lk);
	}
	free(t);
	stats_end();
}

/*
 * Lock thread, plk.lock held: a request past its deadline is cancelled
 * once (the cancel answers it EIO), logged rate-limited under key.
 */
static void
plock_expire(int *expired, uint64_t reqid, const char *key, const char *what)
{
	if (*expired)
		return;
	*expired = 1;
	log_limited(LOG_ERR, key, "node %s: no answer to %s from %s within "
	    "lock_timeout: EIO", wsfs.conf.node, what, wsfs.conf.lockd);
	(void)wslock_cancel(cluster_handle(), reqid);
}

/* Lock thread: cancel what must not wait that the server left too long. */
static int
plock_tick(void)
{
	struct plock_test	*t;
	struct plock_wait	*pw;
	uint64_t		 now = cluster_now_ms();

	pthread_mutex_lock(&plk.lock);
	TAILQ_FOREACH(pw, &plk.nowait, entry) {
		if (pw->deadline > now)
			break;
		plock_expire(&pw->expired, pw->reqid, "plock-timeout",
		    "a lock request");
	}
	TAILQ_FOREACH(t, &plk.tests, entry) {
		if (t->deadline > now)
			break;
		plock_expire(&t->expired, t->reqid, "getlk-timeout", "F_GETLK");
	}
	pthread_mutex_unlock(&plk.lock);
	/* Deadlines are lock_timeout apart: ten checks a second do. */
	return 100;
}

static const struct cluster_user plock_user = {
	.kind = 'p',
	.tick = plock_tick,
};

void
plock_init(void)
{
	cluster_register(&plock_user);
}

void
plock_flock(fuse_req_t req, struct inode *in, struct fuse_file_info *fi,
    int op)
{
	struct wslock_range	r;
	char			key[64];

	plock_range('f', in, fi->lock_owner, 0, WSLOCK_EOF, key, sizeof key,
	    &r);
	if ((op & ~LOCK_NB) == LOCK_UN) {
		pq_release('f', in->ino, r.owner);
		stats_reply_err(req, -wslock_unlock(cluster_handle(),
		    &r));
		cluster_wake();
		return;
	}
	plock_lock(req, in, 'f', &r, (op & LOCK_SH) ? WSLOCK_SHARED :
	    WSLOCK_EXCLUSIVE, !(op & LOCK_NB));
}

/* close(2) drops the owner's POSIX locks; the last close its flock lock. */
void
plock_release_owner(struct inode *in, uint64_t owner, int flock)
{
	struct wslock_range	r;
	char			key[64];

	/* Most files are closed without ever having been locked. */
	if (!cluster_enabled() || !__atomic_load_n(&in->plocked,
	    __ATOMIC_SEQ_CST))
		return;
	plock_range(flock ? 'f' : 'p', in, owner, 0, WSLOCK_EOF, key,
	    sizeof key, &r);
	pq_release(flock ? 'f' : 'p', in->ino, owner);
	(void)wslock_unlock(cluster_handle(), &r);
	cluster_wake();
}

/*
 * Application locks of kind=shared mounts: flock(2) and fcntl(2) locks
 * (F_SETLK, F_SETLKW, F_GETLK, OFD locks) are forwarded to wslockd, so two
 * agents on two nodes exclude each other as two processes on one machine
 * would. A blocking request never holds a FUSE worker: the reply is sent
 * when the server grants it, and an interrupt (a signal, Ctrl-C) cancels
 * the wait in wslockd and answers EINTR. POSIX locks go with close (flush
 * with the owner), flock locks with the last close of the open file.
 * fcntl and flock locks use separate keys: they do not interact, as on
 * Linux.
 */
#include "config.h"

#include <sys/file.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "wslock.h"
#include "wsfs.h"

/*
 * One lock request in flight. Two references: the caller's, and the done
 * callback's, which answers the kernel.
 */
struct plock_wait {
	struct cluster_waiter	 w;		/* must be first */
	fuse_req_t		 req;
	struct inode		*in;		/* alive while req is */
	int			 locking;	/* a lock, not a test */
	uint64_t		 reqid;
	struct glock_set	 locks;		/* the object's, at a grant */
	pthread_mutex_t		 lock;
	int			 refs;		/* guarded by lock */
	int			 sent;		/* reqid valid; guarded by lock */
	int			 interrupted;	/* guarded by lock */
	/* A request that must not wait (F_SETLK, LOCK_NB): plk.lock. */
	uint64_t		 deadline;
	int			 expired;
	int			 listed;
	TAILQ_ENTRY(plock_wait)	 entry;
};

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
	fuse_req_interrupt_func(pw->req, NULL, NULL);
	fuse_reply_err(pw->req, plock_errno(status));
}

/* Inval thread: drop the kernel's cache of the file, then answer. */
static void
plock_granted_fresh(void *arg)
{
	struct plock_wait	*pw = arg;
	int			 r;

	r = fuse_lowlevel_notify_inval_inode(wsfs.se,
	    (fuse_ino_t)(uintptr_t)pw->in, 0, 0);
	if (r < 0 && r != -ENOENT)
		log_debug("invalidate after lock grant: %s", strerror(-r));
	plock_reply(pw, 0);
	plock_unref(pw);
}

/*
 * The object's shared lock changed hands (or did not within
 * lock_timeout); we need not keep it.
 */
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
plock_lock(fuse_req_t req, struct inode *in, struct wslock_range *r, int mode,
    int sleep)
{
	struct plock_wait	*pw;
	int			 ret;

	if (!sleep && plock_service_gone()) {
		log_limited(LOG_ERR, "plock-timeout", "node %s: lock service %s "
		    "away for longer than lock_timeout: EIO", wsfs.conf.node,
		    wsfs.conf.lockd);
		fuse_reply_err(req, EIO);
		return;
	}
	if ((pw = calloc(1, sizeof *pw)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pw->w.done = plock_done;
	pw->req = req;
	pw->in = in;
	pw->locking = 1;
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
		plock_reply(pw, ret);
		plock_unref(pw);
	} else
		cluster_wake();
	plock_unref(pw);
}

void
plock_setlk(fuse_req_t req, struct inode *in, struct fuse_file_info *fi,
    struct flock *lk, int sleep)
{
	struct wslock_range	r;
	char			key[64];
	uint64_t		start, end;

	if (lk->l_start < 0 || lk->l_len < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	start = (uint64_t)lk->l_start;
	end = lk->l_len == 0 ? WSLOCK_EOF : start + (uint64_t)lk->l_len;
	plock_range('p', in, fi->lock_owner, start, end, key, sizeof key, &r);
	if (lk->l_type == F_UNLCK) {
		fuse_reply_err(req, -wslock_unlock(cluster_handle(), &r));
		cluster_wake();
		return;
	}
	ws_file_lock_owner(fi, fi->lock_owner);
	plock_lock(req, in, &r, lk->l_type == F_RDLCK ? WSLOCK_SHARED :
	    WSLOCK_EXCLUSIVE, sleep);
}

/*
 * An F_GETLK on its way to the server. Answered from the tested callback;
 * one the server does not answer within lock_timeout (the service is
 * away) is cancelled by the lock thread and answered EIO.
 */
struct plock_test {
	fuse_req_t		 req;
	struct flock		 lk;
	uint64_t		 reqid;
	uint64_t		 deadline;
	int			 expired;	/* plk.lock */
	TAILQ_ENTRY(plock_test)	 entry;		/* plk.lock */
};

void
plock_getlk(fuse_req_t req, struct inode *in, struct fuse_file_info *fi,
    struct flock *lk)
{
	struct wslock_range	 r;
	struct plock_test	*t;
	char			 key[64];
	uint64_t		 start, end;
	int			 ret;

	if (plock_service_gone()) {
		log_limited(LOG_ERR, "getlk-timeout", "node %s: F_GETLK with "
		    "the lock service %s away for longer than lock_timeout: "
		    "EIO", wsfs.conf.node, wsfs.conf.lockd);
		fuse_reply_err(req, EIO);
		return;
	}
	if ((t = calloc(1, sizeof *t)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	t->req = req;
	t->lk = *lk;
	t->deadline = plock_deadline();
	start = lk->l_start < 0 ? 0 : (uint64_t)lk->l_start;
	end = lk->l_len <= 0 ? WSLOCK_EOF : start + (uint64_t)lk->l_len;
	plock_range('p', in, fi->lock_owner, start, end, key, sizeof key, &r);
	/* Listed first: the answer may come before wslock_test returns. */
	pthread_mutex_lock(&plk.lock);
	TAILQ_INSERT_TAIL(&plk.tests, t, entry);
	ret = wslock_test(cluster_handle(), &r, lk->l_type == F_RDLCK ?
	    WSLOCK_SHARED : WSLOCK_EXCLUSIVE, t, &t->reqid);
	if (ret < 0)
		TAILQ_REMOVE(&plk.tests, t, entry);
	pthread_mutex_unlock(&plk.lock);
	if (ret < 0) {
		free(t);
		fuse_reply_err(req, -ret);
		return;
	}
	cluster_wake();
}

/* Lock thread: the server answered an F_GETLK (or it was cancelled). */
void
plock_tested(void *reqarg, int status, const struct wslock_conflict *c)
{
	struct plock_test	*t = reqarg;
	struct flock		*lk = &t->lk;
	int			 expired;

	pthread_mutex_lock(&plk.lock);
	TAILQ_REMOVE(&plk.tests, t, entry);
	expired = t->expired;
	pthread_mutex_unlock(&plk.lock);
	if (status < 0)
		fuse_reply_err(t->req, expired ? EIO : plock_errno(status));
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
}

/* Lock thread: cancel what must not wait that the server left too long. */
void
plock_tick(void)
{
	struct plock_test	*t;
	struct plock_wait	*pw;
	uint64_t		 now = cluster_now_ms();

	pthread_mutex_lock(&plk.lock);
	TAILQ_FOREACH(pw, &plk.nowait, entry) {
		if (pw->deadline > now)
			break;
		if (!pw->expired) {
			pw->expired = 1;
			log_limited(LOG_ERR, "plock-timeout", "node %s: no answer "
			    "to a lock request from %s within lock_timeout: EIO",
			    wsfs.conf.node, wsfs.conf.lockd);
			(void)wslock_cancel(cluster_handle(), pw->reqid);
		}
	}
	TAILQ_FOREACH(t, &plk.tests, entry) {
		if (t->deadline > now)
			break;
		if (!t->expired) {
			t->expired = 1;
			log_limited(LOG_ERR, "getlk-timeout", "node %s: no answer "
			    "to F_GETLK from %s within lock_timeout: EIO",
			    wsfs.conf.node, wsfs.conf.lockd);
			(void)wslock_cancel(cluster_handle(), t->reqid);
		}
	}
	pthread_mutex_unlock(&plk.lock);
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
		fuse_reply_err(req, -wslock_unlock(cluster_handle(), &r));
		cluster_wake();
		return;
	}
	plock_lock(req, in, &r, (op & LOCK_SH) ? WSLOCK_SHARED :
	    WSLOCK_EXCLUSIVE, !(op & LOCK_NB));
}

/* close(2) drops the owner's POSIX locks; the last close its flock lock. */
void
plock_release_owner(struct inode *in, uint64_t owner, int flock)
{
	struct wslock_range	r;
	char			key[64];

	if (!cluster_enabled())
		return;
	plock_range(flock ? 'f' : 'p', in, owner, 0, WSLOCK_EOF, key,
	    sizeof key, &r);
	(void)wslock_unlock(cluster_handle(), &r);
	cluster_wake();
}

/*
 * The node's session with wslockd (kind=shared with lockd= set). One lock
 * thread polls the client library and runs its callbacks; one worker thread
 * does what must not stall the lock thread (fsync before giving a lock back,
 * kernel cache invalidation, which may wait on the kernel). Object locks
 * (glock.c) and application locks (plock.c) share this session.
 */
#include "config.h"

#include <sys/eventfd.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "lockkey.h"
#include "wslock.h"
#include "wsfs.h"

struct cluster_task {
	void			(*fn)(void *);
	void			*arg;
	STAILQ_ENTRY(cluster_task) entry;
};

/* A queue of tasks run in order by one thread of its own. */
struct cluster_queue {
	pthread_t		 thread;
	pthread_mutex_t		 lock;
	pthread_cond_t		 cond;
	STAILQ_HEAD(, cluster_task) tasks;	/* guarded by lock */
	int			 stop;		/* guarded by lock */
};

#define CLUSTER_USERS_MAX 4

static struct {
	struct wslock		*wl;
	int			 enabled;
	int			 stop;
	int			 wake_fd;	/* eventfd: wake the lock thread */
	pthread_t		 lock_thread;
	/* Giving locks back: fsync may be slow but never waits on us. */
	struct cluster_queue	 work;
	/* Cache invalidation, which may wait for the kernel's page locks. */
	struct cluster_queue	 inval;
	/* Changes that waited for their locks, continued off the workers. */
	struct cluster_queue	 ops;
	int			 state;		/* last WSLOCK_* state */
	uint64_t		 degraded_since; /* ms; 0 while up */
	unsigned long long	 src_id;	/* SOURCE's inode number */
	/* Set before cluster_init, read-only after. */
	const struct cluster_user *users[CLUSTER_USERS_MAX];
	size_t			 nusers;
} cl = {
	.work = { .lock = PTHREAD_MUTEX_INITIALIZER,
	    .cond = PTHREAD_COND_INITIALIZER },
	.inval = { .lock = PTHREAD_MUTEX_INITIALIZER,
	    .cond = PTHREAD_COND_INITIALIZER },
	.ops = { .lock = PTHREAD_MUTEX_INITIALIZER,
	    .cond = PTHREAD_COND_INITIALIZER },
	.wake_fd = -1,
};

void
cluster_register(const struct cluster_user *u)
{
	if (cl.nusers == CLUSTER_USERS_MAX)
		fatalx("%s: more than %d users", __func__, CLUSTER_USERS_MAX);
	cl.users[cl.nusers++] = u;
}

int
cluster_enabled(void)
{
	return cl.enabled;
}

const char *
cluster_state_name(void)
{
	static const char *names[] = { "down", "up", "in jeopardy" };
	int	st = __atomic_load_n(&cl.state, __ATOMIC_ACQUIRE);

	if (!cl.enabled)
		return "embedded";
	return st >= 0 && st <= 2 ? names[st] : "?";
}

long long
cluster_lease_left_ms(void)
{
	return cl.enabled ? (long long)wslock_lease_left(cl.wl) : 0;
}

/* The lock service is unreachable or the lease is overdue. */
int
cluster_degraded(void)
{
	return cl.enabled &&
	    __atomic_load_n(&cl.state, __ATOMIC_ACQUIRE) != WSLOCK_UP;
}

int
cluster_conn_stats(struct wslock_conn_stats *st)
{
	if (!cl.enabled)
		return -ENOENT;
	return wslock_conn_stats(cl.wl, st);
}

struct wslock *
cluster_handle(void)
{
	return cl.wl;
}

uint64_t
cluster_now_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

/* Lock keys name the inode within this SOURCE (lockkey.h). */
size_t
cluster_key(char kind, ino_t ino, char *buf, size_t len)
{
	return lockkey_format(kind, cl.src_id, (uint64_t)ino, buf, len);
}

size_t
cluster_key_gen(char kind, ino_t ino, uint64_t gen, char *buf, size_t len)
{
	return lockkey_format_gen(kind, cl.src_id, (uint64_t)ino, gen, buf,
	    len);
}

static void
cluster_queue_add(struct cluster_queue *q, void (*fn)(void *), void *arg)
{
	struct cluster_task	*t;

	if ((t = malloc(sizeof *t)) == NULL) {
		/* Out of memory: do it here rather than not at all. */
		fn(arg);
		return;
	}
	t->fn = fn;
	t->arg = arg;
	pthread_mutex_lock(&q->lock);
	STAILQ_INSERT_TAIL(&q->tasks, t, entry);
	pthread_cond_signal(&q->cond);
	pthread_mutex_unlock(&q->lock);
}

void
cluster_defer(void (*fn)(void *), void *arg)
{
	cluster_queue_add(&cl.work, fn, arg);
}

void
cluster_defer_inval(void (*fn)(void *), void *arg)
{
	cluster_queue_add(&cl.inval, fn, arg);
}

void
cluster_defer_op(void (*fn)(void *), void *arg)
{
	cluster_queue_add(&cl.ops, fn, arg);
}

uint64_t
cluster_degraded_ms(void)
{
	uint64_t	since = __atomic_load_n(&cl.degraded_since,
			    __ATOMIC_ACQUIRE);
	uint64_t	now = cluster_now_ms();

	return since != 0 && now > since ? now - since : 0;
}

void
cluster_wake(void)
{
	uint64_t	one = 1;

	if (cl.wake_fd >= 0 && write(cl.wake_fd, &one, sizeof one) == -1 &&
	    errno != EAGAIN)
		log_warn("eventfd write: %s", strerror(errno));
}

static void
cluster_done(struct wslock *wl, uint64_t reqid, int status, uint64_t token,
    void *reqarg, void *arg)
{
	struct cluster_waiter	*w = reqarg;

	w->done(w, status, token);
}

/* The user of the key's kind, or NULL (not one of this SOURCE's keys). */
static const struct cluster_user *
cluster_user_of(const struct wslock_range *r)
{
	uint64_t	src, ino;
	size_t		i;
	char		kind;

	if (lockkey_parse(r->key, r->keylen, &kind, &src, &ino) < 0 ||
	    src != cl.src_id)
		return NULL;
	for (i = 0; i < cl.nusers; i++)
		if (cl.users[i]->kind == kind)
			return cl.users[i];
	return NULL;
}

static void
cluster_revoke(struct wslock *wl, const struct wslock_range *r,
    uint64_t token, void *arg)
{
	const struct cluster_user	*u = cluster_user_of(r);

	if (u != NULL && u->revoke != NULL)
		u->revoke(r->key, r->keylen);
}

static void
cluster_lost(struct wslock *wl, const struct wslock_range *r, int mode,
    uint64_t token, int reason, void *arg)
{
	const struct cluster_user	*u = cluster_user_of(r);
	const char			*k = r->key;

	if (u != NULL && u->lost != NULL)
		u->lost(r->key, r->keylen);
	log_limited(LOG_WARNING, "lock-lost", "node %s lost lock %.*s "
	    "(token %llu): %s", wsfs.conf.node, (int)r->keylen, k,
	    (unsigned long long)token, strerror(-reason));
}

static void
cluster_state(struct wslock *wl, int state, void *arg)
{
	size_t	i;
	int	changed = state != cl.state;

	if (state == WSLOCK_UP)
		__atomic_store_n(&cl.degraded_since, 0, __ATOMIC_RELEASE);
	else if (__atomic_load_n(&cl.degraded_since, __ATOMIC_ACQUIRE) == 0)
		__atomic_store_n(&cl.degraded_since, cluster_now_ms(),
		    __ATOMIC_RELEASE);
	__atomic_store_n(&cl.state, state, __ATOMIC_RELEASE);
	if (changed)
		log_notice("node %s: lock service %s (%s)", wsfs.conf.node,
		    cluster_state_name(), wsfs.conf.lockd);
	for (i = 0; i < cl.nusers; i++)
		if (cl.users[i]->state_changed != NULL)
			cl.users[i]->state_changed();
}

static void
cluster_tested(struct wslock *wl, uint64_t reqid, int status,
    const struct wslock_conflict *c, void *reqarg, void *arg)
{
	struct cluster_tester	*t = reqarg;

	t->tested(t, status, c);
}

static const struct wslock_callbacks cluster_cbs = {
	.done = cluster_done,
	.tested = cluster_tested,
	.revoke = cluster_revoke,
	.lost = cluster_lost,
	.state = cluster_state,
};

static void *
cluster_lock_loop(void *arg)
{
	struct pollfd	pfd[2];
	uint64_t	v;
	size_t		i;
	int		t, timeout = 100;

	pfd[0].fd = wslock_fd(cl.wl);
	pfd[0].events = POLLIN;
	pfd[1].fd = cl.wake_fd;
	pfd[1].events = POLLIN;
	while (!cl.stop) {
		/* The library's lease timers want a call at least every 100 ms. */
		if (poll(pfd, 2, timeout) == -1 && errno != EINTR)
			fatal("poll");
		if ((pfd[1].revents & POLLIN) &&
		    read(cl.wake_fd, &v, sizeof v) == -1 && errno != EAGAIN)
			log_warn("eventfd read: %s", strerror(errno));
		if (wslock_process(cl.wl) < 0)
			log_warn("lock client: out of memory");
		timeout = 100;
		for (i = 0; i < cl.nusers; i++)
			if (cl.users[i]->tick != NULL &&
			    (t = cl.users[i]->tick()) < timeout)
				timeout = t;
	}
	return NULL;
}

static void *
cluster_queue_loop(void *arg)
{
	struct cluster_queue	*q = arg;
	struct cluster_task	*t;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (STAILQ_EMPTY(&q->tasks) && !q->stop)
			pthread_cond_wait(&q->cond, &q->lock);
		if ((t = STAILQ_FIRST(&q->tasks)) == NULL)
			break;
		STAILQ_REMOVE_HEAD(&q->tasks, entry);
		pthread_mutex_unlock(&q->lock);
		t->fn(t->arg);
		free(t);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

static void
cluster_queue_start(struct cluster_queue *q)
{
	int	r;

	if ((r = pthread_create(&q->thread, NULL, cluster_queue_loop, q)) != 0)
		fatalx("pthread_create: %s", strerror(r));
}

/* Run what is queued, then end the thread. */
static void
cluster_queue_stop(struct cluster_queue *q)
{
	pthread_mutex_lock(&q->lock);
	q->stop = 1;
	pthread_cond_broadcast(&q->cond);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->thread, NULL);
}

int
cluster_init(void)
{
	struct wslock_params	 p;
	struct stat		 st;
	char			 host[256];
	size_t			 i;
	int			 r;

	STAILQ_INIT(&cl.work.tasks);
	STAILQ_INIT(&cl.inval.tasks);
	STAILQ_INIT(&cl.ops.tasks);
	if (wsfs.conf.kind != CONF_KIND_SHARED || wsfs.conf.lockd == NULL ||
	    strcmp(wsfs.conf.lockd, "off") == 0)
		return 0;
	if (fstat(wsfs.source_fd, &st) == -1)
		return -errno;
	cl.src_id = (unsigned long long)st.st_ino;
	if (wsfs.conf.node == NULL) {
		if (gethostname(host, sizeof host) == -1)
			snprintf(host, sizeof host, "node");
		host[sizeof host - 1] = '\0';
		if ((wsfs.conf.node = strdup(host)) == NULL)
			return -ENOMEM;
	}
	memset(&p, 0, sizeof p);
	p.addr = wsfs.conf.lockd;
	p.keyfile = wsfs.conf.key ? wsfs.conf.key : "/etc/wsfs/cluster.key";
	p.name = wsfs.conf.node;
	p.cb = &cluster_cbs;
	if ((r = wslock_open(&p, &cl.wl)) < 0) {
		log_err("lock service %s (key %s): %s", p.addr, p.keyfile,
		    strerror(-r));
		return r;
	}
	cl.enabled = 1;
	for (i = 0; i < cl.nusers; i++)
		if (cl.users[i]->opened != NULL)
			cl.users[i]->opened();
	return 0;
}

/* Start the threads; after priv_drop, since capabilities are per thread. */
void
cluster_start(void)
{
	int	r;

	if (!cl.enabled)
		return;
	if ((cl.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) == -1)
		fatal("eventfd");
	/* Down until the first session is up. */
	__atomic_store_n(&cl.degraded_since, cluster_now_ms(), __ATOMIC_RELEASE);
	cluster_queue_start(&cl.work);
	cluster_queue_start(&cl.inval);
	cluster_queue_start(&cl.ops);
	if ((r = pthread_create(&cl.lock_thread, NULL, cluster_lock_loop,
	    NULL)) != 0)
		fatalx("pthread_create: %s", strerror(r));
	log_info("node %s: cluster locks from %s", wsfs.conf.node,
	    wsfs.conf.lockd);
}

/* Give every lock back (making writes durable first) and end the session. */
void
cluster_shutdown(void)
{
	size_t	i;

	if (!cl.enabled)
		return;
	cluster_queue_stop(&cl.ops);
	cluster_queue_stop(&cl.work);
	cluster_queue_stop(&cl.inval);
	for (i = 0; i < cl.nusers; i++)
		if (cl.users[i]->release_all != NULL)
			cl.users[i]->release_all();
	cl.stop = 1;
	cluster_wake();
	pthread_join(cl.lock_thread, NULL);
	wslock_close(cl.wl);
	cl.wl = NULL;
	cl.enabled = 0;
}

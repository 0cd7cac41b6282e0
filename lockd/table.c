/*
 * The lock table: which session holds which lock, who waits, and in what
 * order. Pure logic, no I/O and no clock, so it is unit tested on its own
 * and used twice: by wslockd as the authority and by libwslock as the
 * mirror of what one client holds (reclaimed after a reconnect).
 *
 * Semantics. A lock is (key, owner, [start, end), mode). Locks of one owner
 * (a session and a 64-bit owner id, like a POSIX lock owner) never conflict
 * with each other: a new lock replaces the owner's overlapping ranges, so
 * ranges split, merge, upgrade and downgrade as fcntl(2) locks do. Locks of
 * different owners conflict when their ranges overlap and one is exclusive.
 * Waiters queue per key in arrival order, and a request may not pass an
 * earlier conflicting waiter, so a stream of shared requests cannot starve
 * an exclusive one. The exception is an owner that already holds part of
 * the range (an upgrade): it only waits for holders, because making it wait
 * behind a waiter that waits for it would deadlock.
 *
 * Objects under a directory's lock. A request may name the keys of the
 * directories its object was reached through, nearest first: the parent
 * (WSL_LOCK_UNDER) and up to WSL_MAX_CHAIN - 1 of its ancestors
 * (WSL_LOCK_ABOVE). While nobody holds the object's key, the first key of
 * that chain with any holder at all is the decisive ancestor: the request
 * also conflicts with an exclusive lock of another session on it, and
 * waits for, or a non-quiet try revokes, that lock; the ancestors above it
 * play no part. So a node holding a directory exclusively may use what it
 * made there without asking for its own locks, directories too and what
 * it made in those: every other node reaches such an object only through
 * the chain of directories up to the held one, none of which anyone else
 * holds, and is held off until the directory is given back (the holder
 * forgets its use of such objects before). A nearer directory with a
 * holder ends the walk: its own lock is what protects what lies below it.
 * A request of the decisive ancestor's holder itself is not held off by
 * the waiters it holds off, which wait for it. A waiter is linked to
 * every key of its chain, whose holders decide which ancestor is decisive,
 * and is looked at again whenever they change.
 */
#include "config.h"

#include <sys/queue.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "lockd.h"

struct tlock {
	struct tkey		*k;
	struct table_sess	*s;
	uint64_t		 owner;
	uint64_t		 start;
	uint64_t		 end;
	uint64_t		 token;
	uint32_t		 gen;	/* resync generation, see resync_end */
	uint8_t			 mode;
	uint8_t			 cached;
	uint8_t			 revoked; /* revoke already pushed */
	TAILQ_ENTRY(tlock)	 kentry;
	TAILQ_ENTRY(tlock)	 sentry;
};
TAILQ_HEAD(tlocks, tlock);

/* A waiter's place on the children list of one key of its chain. */
struct tlink {
	struct twait		*w;
	struct tkey		*k;
	TAILQ_ENTRY(tlink)	 entry;		/* on k->children */
};
TAILQ_HEAD(tlinks, tlink);

struct twait {
	struct tkey		*k;
	struct table_sess	*s;
	uint64_t		 owner;
	uint64_t		 start;
	uint64_t		 end;
	uint64_t		 reqid;
	uint8_t			 mode;
	uint8_t			 cached;
	TAILQ_ENTRY(twait)	 kentry;
	TAILQ_ENTRY(twait)	 sentry;
	size_t			 nchain;
	struct tlink		 chain[];	/* distinct keys, none k */
};
TAILQ_HEAD(twaits, twait);

struct tkey {
	struct tkey		*next;	/* hash chain */
	uint64_t		 hash;
	struct tlocks		 holders;
	struct twaits		 waiters;
	struct tlinks		 children; /* waiters with it in their chain */
	int			 dirty;	/* on the table's dirty list */
	SLIST_ENTRY(tkey)	 dentry;
	size_t			 keylen;
	uint8_t			 key[];
};

struct table_sess {
	uint64_t		 id;
	void			*udata;
	uint32_t		 nlocks;
	uint32_t		 nwaiters;
	uint32_t		 gen;
	struct tlocks		 locks;
	struct twaits		 waits;
};

struct table {
	const struct table_ops	*ops;
	void			*arg;
	uint32_t		 max_locks;
	uint32_t		 max_waiters;
	int			 grace;
	struct tkey		**buckets;
	size_t			 nbuckets;
	size_t			 nkeys;
	unsigned char		 hkey[crypto_shorthash_KEYBYTES];
	SLIST_HEAD(, tkey)	 dirty;
};

static int
overlap(uint64_t s1, uint64_t e1, uint64_t s2, uint64_t e2)
{
	return s1 < e2 && s2 < e1;
}

static int
same_owner(const struct table_sess *s1, uint64_t o1,
    const struct table_sess *s2, uint64_t o2)
{
	return s1 == s2 && o1 == o2;
}

static int
modes_conflict(uint8_t m1, uint8_t m2)
{
	return m1 == WSL_EXCLUSIVE || m2 == WSL_EXCLUSIVE;
}

struct table *
table_new(const struct table_ops *ops, void *arg, uint32_t max_locks,
    uint32_t max_waiters)
{
	struct table	*t;

	if (sodium_init() < 0)
		return NULL;
	if ((t = calloc(1, sizeof *t)) == NULL)
		return NULL;
	t->nbuckets = 64;
	if ((t->buckets = calloc(t->nbuckets, sizeof *t->buckets)) == NULL) {
		free(t);
		return NULL;
	}
	t->ops = ops;
	t->arg = arg;
	t->max_locks = max_locks;
	t->max_waiters = max_waiters;
	randombytes_buf(t->hkey, sizeof t->hkey);
	SLIST_INIT(&t->dirty);
	return t;
}

static void
key_free(struct tkey *k)
{
	struct tlock	*l;
	struct twait	*w;

	while ((l = TAILQ_FIRST(&k->holders)) != NULL) {
		TAILQ_REMOVE(&k->holders, l, kentry);
		free(l);
	}
	while ((w = TAILQ_FIRST(&k->waiters)) != NULL) {
		TAILQ_REMOVE(&k->waiters, w, kentry);
		free(w);
	}
	free(k);
}

/* Sessions must be freed by their owners; this frees keys and entries. */
void
table_free(struct table *t)
{
	struct tkey	*k, *next;
	size_t		 i;

	if (t == NULL)
		return;
	for (i = 0; i < t->nbuckets; i++) {
		for (k = t->buckets[i]; k != NULL; k = next) {
			next = k->next;
			key_free(k);
		}
	}
	free(t->buckets);
	free(t);
}

size_t
table_nkeys(const struct table *t)
{
	return t->nkeys;
}

int
table_in_grace(const struct table *t)
{
	return t->grace;
}

static uint64_t
key_hash(const struct table *t, const uint8_t *key, size_t len)
{
	unsigned char	h[crypto_shorthash_BYTES];
	uint64_t	v;

	crypto_shorthash(h, key, len, t->hkey);
	memcpy(&v, h, sizeof v);
	return v;
}

static struct tkey *
key_find(struct table *t, const uint8_t *key, size_t len, uint64_t hash)
{
	struct tkey	*k;

	for (k = t->buckets[hash & (t->nbuckets - 1)]; k != NULL; k = k->next)
		if (k->hash == hash && k->keylen == len &&
		    memcmp(k->key, key, len) == 0)
			return k;
	return NULL;
}

/* Double the bucket array; on allocation failure keep the long chains. */
static void
table_grow(struct table *t)
{
	struct tkey	**nb, *k, *next;
	size_t		  n = t->nbuckets * 2, i;

	if ((nb = calloc(n, sizeof *nb)) == NULL)
		return;
	for (i = 0; i < t->nbuckets; i++) {
		for (k = t->buckets[i]; k != NULL; k = next) {
			next = k->next;
			k->next = nb[k->hash & (n - 1)];
			nb[k->hash & (n - 1)] = k;
		}
	}
	free(t->buckets);
	t->buckets = nb;
	t->nbuckets = n;
}

static struct tkey *
key_get(struct table *t, const uint8_t *key, size_t len)
{
	struct tkey	*k;
	uint64_t	 hash = key_hash(t, key, len);

	if ((k = key_find(t, key, len, hash)) != NULL)
		return k;
	if ((k = calloc(1, sizeof *k + len)) == NULL)
		return NULL;
	k->hash = hash;
	k->keylen = len;
	memcpy(k->key, key, len);
	TAILQ_INIT(&k->holders);
	TAILQ_INIT(&k->waiters);
	TAILQ_INIT(&k->children);
	if (t->nkeys >= t->nbuckets)
		table_grow(t);
	k->next = t->buckets[hash & (t->nbuckets - 1)];
	t->buckets[hash & (t->nbuckets - 1)] = k;
	t->nkeys++;
	return k;
}

/* Drop a key nobody holds or waits for. */
static void
key_gc(struct table *t, struct tkey *k)
{
	struct tkey	**pp;

	if (!TAILQ_EMPTY(&k->holders) || !TAILQ_EMPTY(&k->waiters) ||
	    !TAILQ_EMPTY(&k->children) || k->dirty)
		return;
	for (pp = &t->buckets[k->hash & (t->nbuckets - 1)]; *pp != NULL;
	    pp = &(*pp)->next) {
		if (*pp == k) {
			*pp = k->next;
			t->nkeys--;
			free(k);
			return;
		}
	}
}

static void
mark_dirty(struct table *t, struct tkey *k)
{
	if (!k->dirty) {
		k->dirty = 1;
		SLIST_INSERT_HEAD(&t->dirty, k, dentry);
	}
}

/*
 * The holders of k changed: the waiters with k in their chain must look
 * again. Only a change of holders wakes them; were a queue that merely
 * ran to wake them, waiters whose chains name each other's keys (a
 * rename seen at different times) would wake each other forever.
 */
static void
wake_children(struct table *t, struct tkey *k)
{
	struct tlink	*c;

	TAILQ_FOREACH(c, &k->children, entry)
		mark_dirty(t, c->w->k);
}

static void
holders_changed(struct table *t, struct tkey *k)
{
	mark_dirty(t, k);
	wake_children(t, k);
}

static struct tlock *
lock_new(struct tkey *k, struct table_sess *s, uint64_t owner, uint64_t start,
    uint64_t end, uint8_t mode, uint8_t cached, uint64_t token)
{
	struct tlock	*l;

	if ((l = calloc(1, sizeof *l)) == NULL)
		return NULL;
	l->k = k;
	l->s = s;
	l->owner = owner;
	l->start = start;
	l->end = end;
	l->mode = mode;
	l->cached = cached;
	l->token = token;
	l->gen = s->gen;
	TAILQ_INSERT_TAIL(&k->holders, l, kentry);
	TAILQ_INSERT_TAIL(&s->locks, l, sentry);
	s->nlocks++;
	return l;
}

static void
lock_free(struct tlock *l)
{
	TAILQ_REMOVE(&l->k->holders, l, kentry);
	TAILQ_REMOVE(&l->s->locks, l, sentry);
	l->s->nlocks--;
	free(l);
}

static void
wait_free(struct table *t, struct twait *w)
{
	size_t	i;

	for (i = 0; i < w->nchain; i++) {
		TAILQ_REMOVE(&w->chain[i].k->children, &w->chain[i], entry);
		mark_dirty(t, w->chain[i].k);	/* collected by run_dirty */
	}
	TAILQ_REMOVE(&w->k->waiters, w, kentry);
	TAILQ_REMOVE(&w->s->waits, w, sentry);
	w->s->nwaiters--;
	free(w);
}

/*
 * Remove the owner's hold on [start, end) of key k, splitting a lock that
 * sticks out on both sides. Returns -ENOMEM only if a split could not be
 * allocated, in which case nothing was changed for that lock.
 */
static int
punch(struct tkey *k, struct table_sess *s, uint64_t owner, uint64_t start,
    uint64_t end)
{
	struct tlock	*l, *next, *r;

	TAILQ_FOREACH_SAFE(l, &k->holders, kentry, next) {
		if (!same_owner(l->s, l->owner, s, owner) ||
		    !overlap(l->start, l->end, start, end))
			continue;
		if (l->start < start && l->end > end) {
			r = lock_new(k, s, owner, end, l->end, l->mode,
			    l->cached, l->token);
			if (r == NULL)
				return -ENOMEM;
			r->gen = l->gen;
			r->revoked = l->revoked;
			l->end = start;
		} else if (l->start < start)
			l->end = start;
		else if (l->end > end)
			l->start = end;
		else
			lock_free(l);
	}
	return 0;
}

/*
 * Give the owner [start, end) in mode, POSIX style: punch the range, then
 * merge with the owner's adjacent locks of the same mode and generation.
 * A merged lock takes the new token: it is the newest grant covering it.
 */
static int
apply(struct tkey *k, struct table_sess *s, uint64_t owner, uint64_t start,
    uint64_t end, uint8_t mode, uint8_t cached, uint64_t token)
{
	struct tlock	*l, *next;
	int		 r;

	if ((r = punch(k, s, owner, start, end)) < 0)
		return r;
	TAILQ_FOREACH_SAFE(l, &k->holders, kentry, next) {
		if (!same_owner(l->s, l->owner, s, owner) || l->mode != mode ||
		    l->gen != s->gen)
			continue;
		if (l->end == start) {
			start = l->start;
			lock_free(l);
		} else if (l->start == end) {
			end = l->end;
			lock_free(l);
		}
	}
	if (lock_new(k, s, owner, start, end, mode, cached, token) == NULL)
		return -ENOMEM;
	return 0;
}

/* The first holder of another owner that conflicts with the request. */
static struct tlock *
holder_conflict(struct tkey *k, struct table_sess *s, uint64_t owner,
    uint64_t start, uint64_t end, uint8_t mode)
{
	struct tlock	*l;

	TAILQ_FOREACH(l, &k->holders, kentry) {
		if (!same_owner(l->s, l->owner, s, owner) &&
		    overlap(l->start, l->end, start, end) &&
		    modes_conflict(l->mode, mode))
			return l;
	}
	return NULL;
}

/* The first key of a chain with any holder, or NULL. */
static struct tkey *
chain_held(const struct tlink *c, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		if (!TAILQ_EMPTY(&c[i].k->holders))
			return c[i].k;
	return NULL;
}

/*
 * The chain rule (see the top): while nobody holds k, the first
 * exclusive lock of a session other than s on the decisive ancestor.
 */
static struct tlock *
chain_conflict(struct tkey *k, const struct tlink *c, size_t n,
    struct table_sess *s)
{
	struct tkey	*a;
	struct tlock	*l;

	if (!TAILQ_EMPTY(&k->holders) || (a = chain_held(c, n)) == NULL)
		return NULL;
	TAILQ_FOREACH(l, &a->holders, kentry)
		if (l->s != s && l->mode == WSL_EXCLUSIVE)
			return l;
	return NULL;
}

/* Does session s hold a exclusively (the waiters under it wait for s)? */
static int
held_by(struct tkey *a, struct table_sess *s)
{
	struct tlock	*l;

	TAILQ_FOREACH(l, &a->holders, kentry)
		if (l->s == s && l->mode == WSL_EXCLUSIVE)
			return 1;
	return 0;
}

/* Ask the other sessions' cached exclusive holders of a for it, once. */
static void
revoke_ancestor(struct table *t, struct tkey *a, struct table_sess *s)
{
	struct tlock	*l;

	TAILQ_FOREACH(l, &a->holders, kentry) {
		if (!l->cached || l->revoked || l->s == s ||
		    l->mode != WSL_EXCLUSIVE)
			continue;
		l->revoked = 1;
		if (t->ops->revoke != NULL)
			t->ops->revoke(t->arg, l->s, a->key, a->keylen,
			    l->owner, l->start, l->end, l->token);
	}
}

/* Ask every cached holder in the way to give its lock back, once. */
static void
revoke_blockers(struct table *t, struct tkey *k, struct table_sess *s,
    uint64_t owner, uint64_t start, uint64_t end, uint8_t mode)
{
	struct tlock	*l;

	TAILQ_FOREACH(l, &k->holders, kentry) {
		if (!l->cached || l->revoked ||
		    same_owner(l->s, l->owner, s, owner) ||
		    !overlap(l->start, l->end, start, end) ||
		    !modes_conflict(l->mode, mode))
			continue;
		l->revoked = 1;
		if (t->ops->revoke != NULL)
			t->ops->revoke(t->arg, l->s, k->key, k->keylen,
			    l->owner, l->start, l->end, l->token);
	}
}

static int
owner_holds(struct tkey *k, struct table_sess *s, uint64_t owner,
    uint64_t start, uint64_t end)
{
	struct tlock	*l;

	TAILQ_FOREACH(l, &k->holders, kentry)
		if (same_owner(l->s, l->owner, s, owner) &&
		    overlap(l->start, l->end, start, end))
			return 1;
	return 0;
}

/* Does waiter w (or a new request, w == NULL) queue behind an earlier one? */
static int
waiter_conflict(struct tkey *k, struct twait *upto, struct table_sess *s,
    uint64_t owner, uint64_t start, uint64_t end, uint8_t mode)
{
	struct twait	*w;
	struct tkey	*a;

	TAILQ_FOREACH(w, &k->waiters, kentry) {
		if (w == upto)
			break;
		/*
		 * It waits for s to give an ancestor back (or will, once k's
		 * holders are gone): do not wait for it.
		 */
		if (w->s != s &&
		    (a = chain_held(w->chain, w->nchain)) != NULL &&
		    held_by(a, s))
			continue;
		if (!same_owner(w->s, w->owner, s, owner) &&
		    overlap(w->start, w->end, start, end) &&
		    modes_conflict(w->mode, mode))
			return 1;
	}
	return 0;
}

static void
entry_from_lock(struct table_entry *e, const struct tlock *l)
{
	memset(e, 0, sizeof *e);
	e->kind = WSL_ITEM_HOLDER;
	e->sess = l->s;
	e->key = l->k->key;
	e->keylen = l->k->keylen;
	e->owner = l->owner;
	e->start = l->start;
	e->end = l->end;
	e->mode = l->mode;
	e->cached = l->cached;
	e->token = l->token;
}

/* Grant every waiter of k that can go, in FIFO order. */
static void
run_queue(struct table *t, struct tkey *k)
{
	struct twait	*w, *next;
	struct tlock	*l;
	uint64_t	 token;

	if (t->grace)
		return;
	TAILQ_FOREACH_SAFE(w, &k->waiters, kentry, next) {
		l = chain_conflict(k, w->chain, w->nchain, w->s);
		if (l != NULL) {
			revoke_ancestor(t, l->k, w->s);
			continue;
		}
		if (holder_conflict(k, w->s, w->owner, w->start, w->end,
		    w->mode) != NULL) {
			revoke_blockers(t, k, w->s, w->owner, w->start, w->end,
			    w->mode);
			continue;
		}
		if (!owner_holds(k, w->s, w->owner, w->start, w->end) &&
		    waiter_conflict(k, w, w->s, w->owner, w->start, w->end,
		    w->mode))
			continue;
		token = t->ops->token(t->arg);
		if (apply(k, w->s, w->owner, w->start, w->end, w->mode,
		    w->cached, token) < 0)
			continue;	/* out of memory: it keeps waiting */
		if (t->ops->grant != NULL)
			t->ops->grant(t->arg, w->s, w->reqid, token);
		wait_free(t, w);
		wake_children(t, k);
	}
}

/* Run the queues of every key touched by a bulk release, then collect. */
static void
run_dirty(struct table *t)
{
	struct tkey	*k;

	while ((k = SLIST_FIRST(&t->dirty)) != NULL) {
		SLIST_REMOVE_HEAD(&t->dirty, dentry);
		k->dirty = 0;
		run_queue(t, k);
		key_gc(t, k);
	}
}

void
table_set_grace(struct table *t, int on)
{
	struct tkey	*k;
	size_t		 i;

	t->grace = on;
	if (on)
		return;
	for (i = 0; i < t->nbuckets; i++)
		for (k = t->buckets[i]; k != NULL; k = k->next)
			mark_dirty(t, k);
	run_dirty(t);
}

struct table_sess *
table_sess_new(struct table *t, uint64_t id, void *udata)
{
	struct table_sess	*s;

	if ((s = calloc(1, sizeof *s)) == NULL)
		return NULL;
	s->id = id;
	s->udata = udata;
	TAILQ_INIT(&s->locks);
	TAILQ_INIT(&s->waits);
	return s;
}

/* Release everything the session holds and waits for; next waiters go. */
void
table_sess_release(struct table *t, struct table_sess *s)
{
	struct tlock	*l;
	struct twait	*w;

	while ((w = TAILQ_FIRST(&s->waits)) != NULL) {
		mark_dirty(t, w->k);
		wait_free(t, w);
	}
	while ((l = TAILQ_FIRST(&s->locks)) != NULL) {
		holders_changed(t, l->k);
		lock_free(l);
	}
	run_dirty(t);
}

void
table_sess_free(struct table *t, struct table_sess *s)
{
	if (s == NULL)
		return;
	table_sess_release(t, s);
	free(s);
}

/* A connection went away: its waits die with it, its locks stay. */
void
table_sess_drop_waiters(struct table *t, struct table_sess *s)
{
	struct twait	*w;

	while ((w = TAILQ_FIRST(&s->waits)) != NULL) {
		mark_dirty(t, w->k);
		wait_free(t, w);
	}
	run_dirty(t);
}

/*
 * A resumed client re-announces what it believes it holds (table_reclaim)
 * between resync_begin and resync_end; whatever it did not announce, for
 * example an unlock lost with the old connection, is released at the end.
 */
void
table_sess_resync_begin(struct table *t, struct table_sess *s)
{
	s->gen++;
}

void
table_sess_resync_end(struct table *t, struct table_sess *s)
{
	struct tlock	*l, *next;

	TAILQ_FOREACH_SAFE(l, &s->locks, sentry, next) {
		if (l->gen == s->gen)
			continue;
		holders_changed(t, l->k);
		lock_free(l);
	}
	run_dirty(t);
}

uint64_t
table_sess_id(const struct table_sess *s)
{
	return s->id;
}

void *
table_sess_udata(const struct table_sess *s)
{
	return s->udata;
}

uint32_t
table_sess_nlocks(const struct table_sess *s)
{
	return s->nlocks;
}

uint32_t
table_sess_nwaiters(const struct table_sess *s)
{
	return s->nwaiters;
}

/* Collect the keys of a chain that nobody uses any more. */
static void
chain_gc(struct table *t, const struct tlink *c, size_t n)
{
	while (n-- > 0)
		key_gc(t, c[n].k);
}

/*
 * The keys of q's chain into c, in order, each once and without k: k
 * itself or a key named again adds nothing to the walk. 0 with *n set, or
 * -ENOMEM with the keys got so far collected.
 */
static int
chain_get(struct table *t, struct tkey *k, const struct table_req *q,
    struct tlink *c, size_t *n)
{
	struct tkey	*a;
	size_t		 i, j, m = 0;

	for (i = 0; i < q->nchain; i++) {
		if ((a = key_get(t, q->chain[i].key, q->chain[i].len)) ==
		    NULL) {
			chain_gc(t, c, m);
			return -ENOMEM;
		}
		for (j = 0; j < m && c[j].k != a; j++)
			;
		if (a != k && j == m)
			c[m++].k = a;
	}
	*n = m;
	return 0;
}

/*
 * Ask for a lock. Returns 0 with *token set when granted, 1 when queued
 * (grant() follows), -EAGAIN on a conflict without WSL_LOCK_WAIT (with the
 * first conflicting holder in *conflict if not NULL), -EBUSY for a try-lock
 * during grace, -EDQUOT at a per-session limit, -ENOMEM. With
 * WSL_LOCK_TEST nothing changes: 0 means the lock could be had now. With
 * WSL_LOCK_QUIET (and no WAIT) a conflict revokes no cached holder. The
 * conflicting holder may be one of the decisive ancestor's (see the top).
 */
int
table_lock(struct table *t, struct table_sess *s, const struct table_req *q,
    uint64_t *token, struct table_entry *conflict)
{
	struct tlink	 c[WSL_MAX_CHAIN];
	struct tkey	*k;
	struct tlock	*l;
	struct twait	*w;
	uint64_t	 tok;
	size_t		 i, n = 0;
	int		 r, upgrade, blocked;

	if (q->start >= q->end || q->keylen == 0 ||
	    (q->mode != WSL_SHARED && q->mode != WSL_EXCLUSIVE) ||
	    q->nchain > WSL_MAX_CHAIN)
		return -EINVAL;
	for (i = 0; i < q->nchain; i++)
		if (q->chain[i].key == NULL || q->chain[i].len == 0)
			return -EINVAL;
	if ((k = key_get(t, q->key, q->keylen)) == NULL)
		return -ENOMEM;
	if ((r = chain_get(t, k, q, c, &n)) < 0) {
		key_gc(t, k);
		return r;
	}
	if ((l = chain_conflict(k, c, n, s)) == NULL)
		l = holder_conflict(k, s, q->owner, q->start, q->end,
		    q->mode);
	if (q->flags & WSL_LOCK_TEST) {
		r = 0;
		if (l != NULL) {
			if (conflict != NULL)
				entry_from_lock(conflict, l);
			r = -EAGAIN;
		}
		goto out;
	}
	upgrade = owner_holds(k, s, q->owner, q->start, q->end);
	blocked = l != NULL || t->grace || (!upgrade &&
	    waiter_conflict(k, NULL, s, q->owner, q->start, q->end, q->mode));
	if (!blocked) {
		/* A split may add one lock; refuse only growth past the cap. */
		if (!upgrade && s->nlocks >= t->max_locks) {
			r = -EDQUOT;
			goto out;
		}
		tok = t->ops->token(t->arg);
		if ((r = apply(k, s, q->owner, q->start, q->end, q->mode,
		    (q->flags & WSL_LOCK_CACHED) != 0, tok)) < 0)
			goto out;
		*token = tok;
		/* A downgrade may let shared waiters in. */
		holders_changed(t, k);
		r = 0;
		goto out;
	}
	if (!(q->flags & WSL_LOCK_WAIT) || (q->flags & WSL_LOCK_QUIET)) {
		if (t->grace && l == NULL)
			r = -EBUSY;
		else {
			if (l != NULL && conflict != NULL)
				entry_from_lock(conflict, l);
			/* A quiet try-lock leaves the holders alone. */
			if (l != NULL && !(q->flags & WSL_LOCK_QUIET)) {
				if (l->k != k)
					revoke_ancestor(t, l->k, s);
				else
					revoke_blockers(t, k, s, q->owner,
					    q->start, q->end, q->mode);
			}
			r = -EAGAIN;
		}
		goto out;
	}
	if (s->nwaiters >= t->max_waiters) {
		r = -EDQUOT;
		goto out;
	}
	if ((w = calloc(1, sizeof *w + n * sizeof w->chain[0])) == NULL) {
		r = -ENOMEM;
		goto out;
	}
	w->k = k;
	w->s = s;
	w->owner = q->owner;
	w->start = q->start;
	w->end = q->end;
	w->mode = q->mode;
	w->cached = (q->flags & WSL_LOCK_CACHED) != 0;
	w->reqid = q->reqid;
	/* Any of them gaining or losing holders may change its fate. */
	w->nchain = n;
	for (i = 0; i < n; i++) {
		w->chain[i].w = w;
		w->chain[i].k = c[i].k;
		TAILQ_INSERT_TAIL(&c[i].k->children, &w->chain[i], entry);
	}
	TAILQ_INSERT_TAIL(&k->waiters, w, kentry);
	TAILQ_INSERT_TAIL(&s->waits, w, sentry);
	s->nwaiters++;
	if (!t->grace) {
		if (l != NULL && l->k != k)
			revoke_ancestor(t, l->k, s);
		else
			revoke_blockers(t, k, s, q->owner, q->start, q->end,
			    q->mode);
	}
	r = 1;
out:
	key_gc(t, k);
	chain_gc(t, c, n);
	run_dirty(t);
	return r;
}

/*
 * Take back a lock held before a restart or a reconnect, with its old
 * token. Only holders are checked, not waiters: the lock was granted before
 * any of them asked. Returns 0, -EAGAIN when another owner holds a
 * conflicting lock (the reclaim is refused), -EDQUOT, -ENOMEM.
 */
int
table_reclaim(struct table *t, struct table_sess *s, const struct table_req *q)
{
	struct tkey	*k;
	struct tlock	*l;
	int		 r;

	if (q->start >= q->end || q->keylen == 0 ||
	    (q->mode != WSL_SHARED && q->mode != WSL_EXCLUSIVE))
		return -EINVAL;
	if ((k = key_get(t, q->key, q->keylen)) == NULL)
		return -ENOMEM;
	TAILQ_FOREACH(l, &k->holders, kentry) {
		if (same_owner(l->s, l->owner, s, q->owner) &&
		    l->start == q->start && l->end == q->end &&
		    l->mode == q->mode) {
			l->gen = s->gen;
			r = 0;
			goto out;
		}
	}
	if (holder_conflict(k, s, q->owner, q->start, q->end, q->mode)) {
		r = -EAGAIN;
		goto out;
	}
	if (s->nlocks >= t->max_locks) {
		r = -EDQUOT;
		goto out;
	}
	r = apply(k, s, q->owner, q->start, q->end, q->mode,
	    (q->flags & WSL_LOCK_CACHED) != 0, q->token);
	/* A new holder of k ends the chain's part in its waiters. */
	holders_changed(t, k);
out:
	key_gc(t, k);
	run_dirty(t);
	return r;
}

/*
 * Record a grant decided elsewhere, without conflict checks: this is how
 * the client library mirrors what the server gave it.
 */
int
table_insert(struct table *t, struct table_sess *s, const struct table_req *q,
    uint64_t token)
{
	struct tkey	*k;
	int		 r;

	if (q->start >= q->end || q->keylen == 0)
		return -EINVAL;
	if ((k = key_get(t, q->key, q->keylen)) == NULL)
		return -ENOMEM;
	r = apply(k, s, q->owner, q->start, q->end, q->mode,
	    (q->flags & WSL_LOCK_CACHED) != 0, token);
	key_gc(t, k);
	return r;
}

/* Unlock [start, end) for the owner; unlocking nothing is not an error. */
int
table_unlock(struct table *t, struct table_sess *s, const struct table_req *q)
{
	struct tkey	*k;
	int		 r;

	if (q->start >= q->end)
		return -EINVAL;
	if ((k = key_find(t, q->key, q->keylen,
	    key_hash(t, q->key, q->keylen))) == NULL)
		return 0;
	r = punch(k, s, q->owner, q->start, q->end);
	holders_changed(t, k);
	key_gc(t, k);
	run_dirty(t);
	return r;
}

/* Withdraw a waiting request. Returns 0 or -ENOENT if it is not waiting. */
int
table_cancel(struct table *t, struct table_sess *s, uint64_t reqid)
{
	struct twait	*w;
	struct tkey	*k;

	TAILQ_FOREACH(w, &s->waits, sentry) {
		if (w->reqid != reqid)
			continue;
		k = w->k;
		wait_free(t, w);
		run_queue(t, k);
		key_gc(t, k);
		run_dirty(t);
		return 0;
	}
	return -ENOENT;
}

/*
 * Call fn for every holder and waiter, of one session or (s == NULL) all,
 * until it returns non-zero, which is then returned.
 */
int
table_walk(struct table *t, struct table_sess *s,
    int (*fn)(const struct table_entry *, void *), void *arg)
{
	struct table_entry	 e;
	struct tkey		*k;
	struct tlock		*l;
	struct twait		*w;
	size_t			 i;
	int			 r;

	for (i = 0; i < t->nbuckets; i++) {
		for (k = t->buckets[i]; k != NULL; k = k->next) {
			TAILQ_FOREACH(l, &k->holders, kentry) {
				if (s != NULL && l->s != s)
					continue;
				entry_from_lock(&e, l);
				if ((r = fn(&e, arg)) != 0)
					return r;
			}
			TAILQ_FOREACH(w, &k->waiters, kentry) {
				if (s != NULL && w->s != s)
					continue;
				memset(&e, 0, sizeof e);
				e.kind = WSL_ITEM_WAITER;
				e.sess = w->s;
				e.key = k->key;
				e.keylen = k->keylen;
				e.owner = w->owner;
				e.start = w->start;
				e.end = w->end;
				e.mode = w->mode;
				e.cached = w->cached;
				e.reqid = w->reqid;
				if ((r = fn(&e, arg)) != 0)
					return r;
			}
		}
	}
	return 0;
}

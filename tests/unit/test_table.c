/*
 * Unit tests for the lock table (lockd/table.c): conflicts, POSIX byte-range
 * semantics per owner, FIFO fairness, upgrade and downgrade, cancel,
 * revoke of cached locks, release on expiry, grace and reclaim, resync,
 * limits and fencing tokens; objects under a directory's lock (LOCK
 * UNDER a chain of ancestors).
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "lockd.h"

#define MAXEV	64
#define ALL	WSL_RANGE_END
#define SH	WSL_SHARED
#define EX	WSL_EXCLUSIVE

struct ev {
	int			 kind;	/* 'g' grant, 'r' revoke */
	struct table_sess	*s;
	uint64_t		 reqid;
	uint64_t		 token;
	uint64_t		 owner;
	uint64_t		 start;
	uint64_t		 end;
	char			 key[16];	/* revoke */
};

static struct ev	evs[MAXEV];
static int		nev;
static uint64_t		next_token;

static uint64_t
tok(void *arg)
{
	return ++next_token;
}

static void
on_grant(void *arg, struct table_sess *s, uint64_t reqid, uint64_t token)
{
	assert_true(nev < MAXEV);
	evs[nev++] = (struct ev){ 'g', s, reqid, token, 0, 0, 0, "" };
}

static void
on_revoke(void *arg, struct table_sess *s, const uint8_t *key, size_t keylen,
    uint64_t owner, uint64_t start, uint64_t end, uint64_t token)
{
	assert_true(nev < MAXEV);
	assert_true(keylen < sizeof evs[0].key);
	evs[nev] = (struct ev){ 'r', s, 0, token, owner, start, end, "" };
	memcpy(evs[nev++].key, key, keylen);
}

static const struct table_ops ops = { tok, on_grant, on_revoke };

struct fx {
	struct table		*t;
	struct table_sess	*a, *b, *c;
};

static int
setup(void **state)
{
	struct fx	*f = calloc(1, sizeof *f);

	nev = 0;
	next_token = 100;
	f->t = table_new(&ops, NULL, 64, 8);
	f->a = table_sess_new(f->t, 1, NULL);
	f->b = table_sess_new(f->t, 2, NULL);
	f->c = table_sess_new(f->t, 3, NULL);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx	*f = *state;

	table_sess_free(f->t, f->a);
	table_sess_free(f->t, f->b);
	table_sess_free(f->t, f->c);
	assert_int_equal(table_nkeys(f->t), 0);
	table_free(f->t);
	free(f);
	return 0;
}

static int
lk(struct fx *f, struct table_sess *s, uint64_t owner, uint64_t start,
    uint64_t end, uint8_t mode, uint8_t flags, uint64_t reqid)
{
	struct table_req	q = { (const uint8_t *)"k", 1, owner, start,
				    end, mode, flags, reqid, 0, NULL, 0 };
	uint64_t		t = 0;

	return table_lock(f->t, s, &q, &t, NULL);
}

static int
lkey(struct fx *f, struct table_sess *s, const char *key, uint8_t mode,
    uint8_t flags, uint64_t reqid)
{
	struct table_req	q = { (const uint8_t *)key, strlen(key), 0, 0,
				    ALL, mode, flags, reqid, 0, NULL, 0 };
	uint64_t		t = 0;

	return table_lock(f->t, s, &q, &t, NULL);
}

static int
ul(struct fx *f, struct table_sess *s, uint64_t owner, uint64_t start,
    uint64_t end)
{
	struct table_req	q = { (const uint8_t *)"k", 1, owner, start,
				    end, 0, 0, 0, 0, NULL, 0 };

	return table_unlock(f->t, s, &q);
}

/* Collect a session's holds as "start-end:mode" sorted by start. */
struct dump {
	uint64_t	start[32], end[32];
	uint8_t		mode[32];
	int		n, nwait;
};

static int
dump_fn(const struct table_entry *e, void *arg)
{
	struct dump	*d = arg;
	int		 i;

	if (e->kind == WSL_ITEM_WAITER) {
		d->nwait++;
		return 0;
	}
	for (i = d->n; i > 0 && d->start[i - 1] > e->start; i--) {
		d->start[i] = d->start[i - 1];
		d->end[i] = d->end[i - 1];
		d->mode[i] = d->mode[i - 1];
	}
	d->start[i] = e->start;
	d->end[i] = e->end;
	d->mode[i] = e->mode;
	d->n++;
	return 0;
}

static void
expect(struct fx *f, struct table_sess *s, const char *want)
{
	struct dump	d;
	char		got[512] = "";
	int		i;

	memset(&d, 0, sizeof d);
	table_walk(f->t, s, dump_fn, &d);
	for (i = 0; i < d.n; i++) {
		snprintf(got + strlen(got), sizeof got - strlen(got),
		    "%s%llu-%llu:%c", i ? " " : "",
		    (unsigned long long)d.start[i],
		    d.end[i] == ALL ? 0ULL : (unsigned long long)d.end[i],
		    d.mode[i] == SH ? 'S' : 'X');
	}
	assert_string_equal(got, want);
}

static void
t_exclusive_conflict(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, 0, 2), -EAGAIN);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, SH, 0, 3), -EAGAIN);
	/* Same session, other owner: still another owner. */
	assert_int_equal(lk(f, f->a, 2, 0, ALL, SH, 0, 4), -EAGAIN);
	/* Same owner again: no conflict with itself. */
	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 5), 0);
	expect(f, f->a, "0-0:X");
}

static void
t_shared_compatible(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, SH, 0, 2), 0);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, EX, 0, 3), -EAGAIN);
}

static void
t_wait_and_grant(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, WSL_LOCK_WAIT, 7), 1);
	assert_int_equal(nev, 0);
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].kind, 'g');
	assert_ptr_equal(evs[0].s, f->b);
	assert_int_equal(evs[0].reqid, 7);
	expect(f, f->b, "0-0:X");
	expect(f, f->a, "");
}

static void
t_disjoint_ranges(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 10, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 10, 20, EX, 0, 2), 0);
	assert_int_equal(lk(f, f->c, 1, 9, 11, SH, 0, 3), -EAGAIN);
	assert_int_equal(lk(f, f->c, 1, 20, ALL, SH, 0, 4), 0);
}

static void
t_split_on_unlock(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 100, EX, 0, 1), 0);
	assert_int_equal(ul(f, f->a, 1, 40, 60), 0);
	expect(f, f->a, "0-40:X 60-100:X");
	assert_int_equal(lk(f, f->b, 1, 40, 60, EX, 0, 2), 0);
	assert_int_equal(lk(f, f->b, 1, 39, 60, EX, 0, 3), -EAGAIN);
	/* Trim at both edges. */
	assert_int_equal(ul(f, f->a, 1, 30, 45), 0);
	assert_int_equal(ul(f, f->a, 1, 90, 200), 0);
	expect(f, f->a, "0-30:X 60-90:X");
	/* Unlock of nothing is fine. */
	assert_int_equal(ul(f, f->a, 1, 1000, 2000), 0);
	expect(f, f->a, "0-30:X 60-90:X");
	/* Unlock of a range covering several locks. */
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	expect(f, f->a, "");
}

static void
t_merge(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 10, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->a, 1, 20, 30, SH, 0, 2), 0);
	expect(f, f->a, "0-10:S 20-30:S");
	assert_int_equal(lk(f, f->a, 1, 10, 20, SH, 0, 3), 0);
	expect(f, f->a, "0-30:S");
	/* Overlapping same-mode lock extends. */
	assert_int_equal(lk(f, f->a, 1, 25, 40, SH, 0, 4), 0);
	expect(f, f->a, "0-40:S");
	/* Different owners never merge. */
	assert_int_equal(lk(f, f->a, 2, 40, 50, SH, 0, 5), 0);
	expect(f, f->a, "0-40:S 40-50:S");
}

static void
t_mode_change_splits(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 100, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->a, 1, 40, 60, EX, 0, 2), 0);
	expect(f, f->a, "0-40:S 40-60:X 60-100:S");
	/* Back to shared in the middle: the three merge again. */
	assert_int_equal(lk(f, f->a, 1, 40, 60, SH, 0, 3), 0);
	expect(f, f->a, "0-100:S");
	/* Exclusive over the left edge. */
	assert_int_equal(lk(f, f->a, 1, 0, 10, EX, 0, 4), 0);
	expect(f, f->a, "0-10:X 10-100:S");
}

static void
t_upgrade_alone(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 2), 0);
	expect(f, f->a, "0-0:X");
	assert_int_equal(lk(f, f->b, 1, 0, ALL, SH, 0, 3), -EAGAIN);
}

static void
t_upgrade_waits_for_holders(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, SH, 0, 2), 0);
	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 3), -EAGAIN);
	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, WSL_LOCK_WAIT, 4), 1);
	/* While waiting, a keeps its shared lock. */
	expect(f, f->a, "0-0:S");
	assert_int_equal(ul(f, f->b, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 4);
	expect(f, f->a, "0-0:X");
}

/*
 * a and b share; c waits exclusive; then a upgrades. The upgrade must not
 * queue behind c (c waits for a): it waits only for b.
 */
static void
t_upgrade_not_behind_waiter(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, SH, 0, 2), 0);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, EX, WSL_LOCK_WAIT, 3), 1);
	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, WSL_LOCK_WAIT, 4), 1);
	assert_int_equal(ul(f, f->b, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 4);
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(evs[1].reqid, 3);
}

static void
t_downgrade_admits_readers(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, SH, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, SH, WSL_LOCK_WAIT, 3), 1);
	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 4), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(evs[0].reqid, 2);
	assert_int_equal(evs[1].reqid, 3);
	expect(f, f->a, "0-0:S");
}

/* A stream of shared requests must not starve a waiting writer. */
static void
t_fifo_no_writer_starvation(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, WSL_LOCK_WAIT, 2), 1);
	/* A new reader, compatible with the holder, still queues. */
	assert_int_equal(lk(f, f->c, 1, 0, ALL, SH, 0, 3), -EAGAIN);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, SH, WSL_LOCK_WAIT, 4), 1);
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 2);
	assert_int_equal(ul(f, f->b, 1, 0, ALL), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(evs[1].reqid, 4);
}

/* Waiters on disjoint ranges do not block each other. */
static void
t_fifo_disjoint_waiters_pass(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 10, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, 10, EX, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(lk(f, f->c, 1, 10, 20, EX, WSL_LOCK_WAIT, 3), 0);
}

static void
t_fifo_order_many(void **state)
{
	struct fx		*f = *state;
	struct table_sess	*s[6];
	int			 i;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 1), 0);
	for (i = 0; i < 6; i++) {
		s[i] = table_sess_new(f->t, 10 + i, NULL);
		assert_int_equal(lk(f, s[i], 1, 0, ALL, i % 2 ? SH : EX,
		    WSL_LOCK_WAIT, 100 + i), 1);
	}
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	for (i = 0; i < 6; i++) {
		/* X0; S1; X2; S3; X4; S5: one at a time, in order. */
		assert_int_equal(nev, i + 1);
		assert_int_equal(evs[i].reqid, 100 + i);
		assert_int_equal(ul(f, s[i], 1, 0, ALL), 0);
	}
	for (i = 0; i < 6; i++)
		table_sess_free(f->t, s[i]);
}

static void
t_cancel(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, SH, WSL_LOCK_WAIT, 3), 1);
	assert_int_equal(table_cancel(f->t, f->b, 99), -ENOENT);
	/* Cancelling the writer lets the reader behind it in at once. */
	assert_int_equal(table_cancel(f->t, f->b, 2), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 3);
	assert_int_equal(table_cancel(f->t, f->b, 2), -ENOENT);
	assert_int_equal(table_sess_nwaiters(f->b), 0);
}

static void
t_expiry_releases_and_grants(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 10, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->a, 2, 50, 60, EX, 0, 2), 0);
	assert_int_equal(lkey(f, f->a, "other", EX, 0, 3), 0);
	assert_int_equal(lk(f, f->a, 3, 0, ALL, SH, WSL_LOCK_WAIT, 4), 1);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, WSL_LOCK_WAIT, 5), 1);
	assert_int_equal(lkey(f, f->c, "other", SH, WSL_LOCK_WAIT, 6), 1);
	assert_int_equal(table_sess_nlocks(f->a), 3);
	/* The lease of a runs out: everything of a goes, b and c get theirs. */
	table_sess_release(f->t, f->a);
	assert_int_equal(table_sess_nlocks(f->a), 0);
	assert_int_equal(table_sess_nwaiters(f->a), 0);
	assert_int_equal(nev, 2);
	expect(f, f->b, "0-0:X");
	assert_int_equal(table_sess_nlocks(f->c), 1);
}

static void
t_drop_waiters_keeps_locks(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, 10, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, 10, EX, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(lk(f, f->a, 1, 20, 30, EX, 0, 3), 0);
	assert_int_equal(lk(f, f->c, 1, 20, 30, SH, WSL_LOCK_WAIT, 4), 1);
	table_sess_drop_waiters(f->t, f->b);
	expect(f, f->a, "0-10:X 20-30:X");
	assert_int_equal(table_sess_nwaiters(f->b), 0);
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 4);
}

static void
t_revoke_cached(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, WSL_LOCK_CACHED, 1), 0);
	assert_int_equal(nev, 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].kind, 'r');
	assert_ptr_equal(evs[0].s, f->a);
	/* Only once per lock, however many wait. */
	assert_int_equal(lk(f, f->c, 1, 0, ALL, SH, WSL_LOCK_WAIT, 3), 1);
	assert_int_equal(nev, 1);
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(evs[1].kind, 'g');
	assert_int_equal(evs[1].reqid, 2);
}

static void
t_revoke_after_grant(void **state)
{
	struct fx	*f = *state;

	/* b's cached grant is revoked at once because c already waits. */
	assert_int_equal(lk(f, f->a, 1, 0, ALL, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX,
	    WSL_LOCK_WAIT | WSL_LOCK_CACHED, 2), 1);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, EX, WSL_LOCK_WAIT, 3), 1);
	assert_int_equal(nev, 0);	/* a's lock is not cached */
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(evs[0].kind, 'g');
	assert_int_equal(evs[1].kind, 'r');
	assert_ptr_equal(evs[1].s, f->b);
}

static void
t_uncached_no_revoke(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 0, ALL, SH, 0, 1), 0);
	assert_int_equal(lk(f, f->b, 1, 0, ALL, EX, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(nev, 0);
}

static void
t_tokens_grow(void **state)
{
	struct fx		*f = *state;
	struct table_req	 q = { (const uint8_t *)"k", 1, 1, 0, ALL, EX,
				    0, 1, 0, NULL, 0 };
	uint64_t		 t1 = 0, t2 = 0;

	assert_int_equal(table_lock(f->t, f->a, &q, &t1, NULL), 0);
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(table_lock(f->t, f->b, &q, &t2, NULL), 0);
	assert_true(t2 > t1);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, EX, WSL_LOCK_WAIT, 9), 1);
	assert_int_equal(ul(f, f->b, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_true(evs[0].token > t2);
}

static void
t_test_reports_conflict(void **state)
{
	struct fx		*f = *state;
	struct table_req	 q = { (const uint8_t *)"k", 1, 1, 5, 6, SH,
				    WSL_LOCK_TEST, 1, 0, NULL, 0 };
	struct table_entry	 e;
	uint64_t		 t = 0;

	assert_int_equal(table_lock(f->t, f->b, &q, &t, &e), 0);
	assert_int_equal(lk(f, f->a, 7, 0, 10, EX, 0, 1), 0);
	assert_int_equal(table_lock(f->t, f->b, &q, &t, &e), -EAGAIN);
	assert_ptr_equal(e.sess, f->a);
	assert_int_equal(e.owner, 7);
	assert_int_equal(e.start, 0);
	assert_int_equal(e.end, 10);
	assert_int_equal(e.mode, EX);
	/* TEST took nothing. */
	expect(f, f->b, "");
}

static void
t_grace(void **state)
{
	struct fx		*f = *state;
	struct table_req	 q = { (const uint8_t *)"k", 1, 1, 0, ALL, EX,
				    0, 0, 42, NULL, 0 };

	table_set_grace(f->t, 1);
	assert_int_equal(lkey(f, f->c, "fresh", EX, 0, 1), -EBUSY);
	assert_int_equal(lk(f, f->c, 1, 0, ALL, SH, WSL_LOCK_WAIT, 2), 1);
	assert_int_equal(table_reclaim(f->t, f->a, &q), 0);
	/* A conflicting reclaim is refused. */
	assert_int_equal(table_reclaim(f->t, f->b, &q), -EAGAIN);
	assert_int_equal(nev, 0);
	table_set_grace(f->t, 0);
	assert_int_equal(nev, 0);	/* c still waits for a */
	assert_int_equal(ul(f, f->a, 1, 0, ALL), 0);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 2);
}

static int
token_of(const struct table_entry *e, void *arg)
{
	*(uint64_t *)arg = e->token;
	return 1;
}

static void
t_reclaim_keeps_token(void **state)
{
	struct fx		*f = *state;
	struct table_req	 q = { (const uint8_t *)"k", 1, 1, 0, 10, SH,
				    0, 0, 42, NULL, 0 };
	uint64_t		 t = 0;

	table_set_grace(f->t, 1);
	assert_int_equal(table_reclaim(f->t, f->a, &q), 0);
	/* Shared reclaims by two owners coexist. */
	assert_int_equal(table_reclaim(f->t, f->b, &q), 0);
	table_walk(f->t, f->a, token_of, &t);
	assert_int_equal(t, 42);
	table_set_grace(f->t, 0);
}

static void
t_resync_drops_unannounced(void **state)
{
	struct fx		*f = *state;
	struct table_req	 q = { (const uint8_t *)"k", 1, 1, 0, 10, EX,
				    0, 0, 0, NULL, 0 };

	assert_int_equal(lk(f, f->a, 1, 0, 10, EX, 0, 1), 0);
	assert_int_equal(lk(f, f->a, 1, 20, 30, EX, 0, 2), 0);
	assert_int_equal(lk(f, f->b, 1, 20, 30, EX, WSL_LOCK_WAIT, 3), 1);
	table_sess_resync_begin(f->t, f->a);
	assert_int_equal(table_reclaim(f->t, f->a, &q), 0);
	table_sess_resync_end(f->t, f->a);
	expect(f, f->a, "0-10:X");
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].reqid, 3);
}

static void
t_limits(void **state)
{
	struct fx	*f = *state;
	char		 key[16];
	int		 i;

	for (i = 0; i < 64; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(lkey(f, f->a, key, EX, 0, i), 0);
	}
	assert_int_equal(lkey(f, f->a, "one-more", EX, 0, 99), -EDQUOT);
	/* Re-locking what it holds is not growth. */
	assert_int_equal(lkey(f, f->a, "k1", SH, 0, 100), 0);
	for (i = 0; i < 8; i++) {
		snprintf(key, sizeof key, "k%d", i);
		assert_int_equal(lkey(f, f->b, key, EX, WSL_LOCK_WAIT, i), 1);
	}
	assert_int_equal(lkey(f, f->b, "k9", EX, WSL_LOCK_WAIT, 9), -EDQUOT);
	assert_int_equal(table_sess_nwaiters(f->b), 8);
}

static void
t_invalid(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lk(f, f->a, 1, 10, 10, EX, 0, 1), -EINVAL);
	assert_int_equal(lk(f, f->a, 1, 10, 5, EX, 0, 1), -EINVAL);
	assert_int_equal(lk(f, f->a, 1, 0, 5, 3, 0, 1), -EINVAL);
	assert_int_equal(table_nkeys(f->t), 0);
}

static void
t_many_keys(void **state)
{
	struct fx	*f = *state;
	char		 key[16];
	int		 i;

	table_free(f->t);
	f->t = table_new(&ops, NULL, 100000, 10);
	for (i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "key-%d", i);
		assert_int_equal(lkey(f, f->a, key, EX, 0, i), 0);
	}
	assert_int_equal(table_nkeys(f->t), 5000);
	for (i = 0; i < 5000; i++) {
		snprintf(key, sizeof key, "key-%d", i);
		assert_int_equal(lkey(f, f->b, key, SH, 0, i), -EAGAIN);
	}
	table_sess_release(f->t, f->a);
	assert_int_equal(table_nkeys(f->t), 0);
}

/*
 * lkey for an object reached through a chain of directory keys, the
 * parent first (UNDER, ABOVE); chain is NULL-terminated.
 */
static int
lkc(struct fx *f, struct table_sess *s, const char *key,
    const char *const *chain, uint8_t mode, uint8_t flags, uint64_t reqid,
    struct table_entry *c)
{
	struct wsl_key		ch[WSL_MAX_CHAIN + 1];
	struct table_req	q = { (const uint8_t *)key, strlen(key), 0, 0,
				    ALL, mode, flags | WSL_LOCK_UNDER, reqid,
				    0, ch, 0 };
	uint64_t		t = 0;

	for (; chain[q.nchain] != NULL; q.nchain++) {
		assert_true(q.nchain < WSL_MAX_CHAIN + 1);
		ch[q.nchain].key = (const uint8_t *)chain[q.nchain];
		ch[q.nchain].len = strlen(chain[q.nchain]);
	}
	if (q.nchain > 1)
		q.flags |= WSL_LOCK_ABOVE;
	return table_lock(f->t, s, &q, &t, c);
}

/* lkc with the parent alone (UNDER). */
static int
lku(struct fx *f, struct table_sess *s, const char *key, const char *parent,
    uint8_t mode, uint8_t flags, uint64_t reqid, struct table_entry *c)
{
	const char	*chain[] = { parent, NULL };

	return lkc(f, s, key, chain, mode, flags, reqid, c);
}

static int
ulkey(struct fx *f, struct table_sess *s, const char *key)
{
	struct table_req	q = { (const uint8_t *)key, strlen(key), 0, 0,
				    ALL, 0, 0, 0, 0, NULL, 0 };

	return table_unlock(f->t, s, &q);
}

#define CW	(WSL_LOCK_CACHED | WSL_LOCK_WAIT)

/*
 * A object nobody holds, reached through a directory another session
 * holds exclusively, waits for that directory; the directory's holder
 * itself passes those waiters; the waiter then queues for the object.
 */
static void
t_under_waits_for_parent(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "P", EX, CW, 1), 0);
	assert_int_equal(lku(f, f->b, "X", "P", SH, CW, 2, NULL), 1);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].kind, 'r');
	assert_ptr_equal(evs[0].s, f->a);
	/* The parent's holder is not queued behind b, who waits for it. */
	assert_int_equal(lku(f, f->a, "X", "P", EX, CW, 3, NULL), 0);
	/* The directory goes back: b now waits for a's lock on X. */
	assert_int_equal(ulkey(f, f->a, "P"), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(evs[1].kind, 'r');
	assert_ptr_equal(evs[1].s, f->a);
	assert_int_equal(ulkey(f, f->a, "X"), 0);
	assert_int_equal(nev, 3);
	assert_int_equal(evs[2].kind, 'g');
	assert_ptr_equal(evs[2].s, f->b);
	assert_int_equal(evs[2].reqid, 2);
	table_sess_release(f->t, f->b);
}

/* Waiting only while nobody holds the object; a shared parent is no bar. */
static void
t_under_only_unheld_objects(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "P", EX, CW, 1), 0);
	assert_int_equal(lkey(f, f->c, "X", SH, CW, 2), 0);
	assert_int_equal(lku(f, f->b, "X", "P", SH, CW, 3, NULL), 0);
	assert_int_equal(lkey(f, f->a, "Q", SH, CW, 4), 0);
	assert_int_equal(lku(f, f->b, "Y", "Q", EX, CW, 5, NULL), 0);
	/* The parent's holder's own requests pass. */
	assert_int_equal(lku(f, f->a, "Z", "P", EX, CW, 6, NULL), 0);
	assert_int_equal(nev, 0);
}

/* Quiet: refused, nobody disturbed; try: refused, parent revoked; test. */
static void
t_under_try_quiet_test(void **state)
{
	struct fx		*f = *state;
	struct table_entry	 c;

	assert_int_equal(lkey(f, f->a, "P", EX, CW, 1), 0);
	assert_int_equal(lku(f, f->b, "X", "P", SH,
	    WSL_LOCK_CACHED | WSL_LOCK_QUIET, 2, NULL), -EAGAIN);
	assert_int_equal(nev, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(lku(f, f->b, "X", "P", SH, WSL_LOCK_TEST, 3, &c),
	    -EAGAIN);
	assert_ptr_equal(c.sess, f->a);
	assert_int_equal(c.keylen, 1);
	assert_memory_equal(c.key, "P", 1);
	assert_int_equal(nev, 0);
	assert_int_equal(lku(f, f->b, "X", "P", EX, WSL_LOCK_CACHED, 4, NULL),
	    -EAGAIN);
	assert_int_equal(nev, 1);
	assert_int_equal(evs[0].kind, 'r');
	assert_ptr_equal(evs[0].s, f->a);
	/* Once: a second try pushes no second revoke. */
	assert_int_equal(lku(f, f->b, "X", "P", EX, WSL_LOCK_CACHED, 5, NULL),
	    -EAGAIN);
	assert_int_equal(nev, 1);
	assert_int_equal(table_nkeys(f->t), 1);
}

/* The parent's holder expires: the waiters under it go; keys are freed. */
static void
t_under_parent_expires(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "P", EX, CW, 1), 0);
	assert_int_equal(lku(f, f->b, "X", "P", EX, CW, 2, NULL), 1);
	assert_int_equal(lku(f, f->c, "X", "P", SH, CW, 3, NULL), 1);
	table_sess_release(f->t, f->a);
	/* a's revoke, b's grant, then c waits for b (revoke). */
	assert_int_equal(nev, 3);
	assert_int_equal(evs[1].kind, 'g');
	assert_ptr_equal(evs[1].s, f->b);
	assert_int_equal(evs[2].kind, 'r');
	assert_ptr_equal(evs[2].s, f->b);
	assert_int_equal(ulkey(f, f->b, "X"), 0);
	assert_int_equal(nev, 4);
	assert_int_equal(evs[3].kind, 'g');
	assert_ptr_equal(evs[3].s, f->c);
	table_sess_release(f->t, f->c);
	assert_int_equal(table_nkeys(f->t), 0);
	/* A waiter cancelled or dropped leaves no parent key behind. */
	assert_int_equal(lkey(f, f->a, "P", EX, CW, 4), 0);
	assert_int_equal(lku(f, f->b, "X", "P", EX, CW, 5, NULL), 1);
	assert_int_equal(table_cancel(f->t, f->b, 5), 0);
	assert_int_equal(lku(f, f->c, "X", "P", EX, CW, 6, NULL), 1);
	table_sess_drop_waiters(f->t, f->c);
	table_sess_release(f->t, f->a);
	assert_int_equal(table_nkeys(f->t), 0);
}

/*
 * Waiters whose parents name each other (a rename seen by two nodes at
 * different times) are looked at again when a holder changes, and not
 * forever: each queue is rerun only when its keys' holders change.
 */
static void
t_under_parent_cycle(void **state)
{
	struct fx	*f = *state;

	alarm(10);
	assert_int_equal(lkey(f, f->a, "P", EX, CW, 1), 0);
	assert_int_equal(lkey(f, f->a, "X", EX, CW, 2), 0);
	assert_int_equal(lku(f, f->b, "X", "P", EX, CW, 3, NULL), 1);
	assert_int_equal(lku(f, f->b, "P", "X", EX, CW, 4, NULL), 1);
	/* a takes P again: nothing is granted, the call returns. */
	assert_int_equal(lkey(f, f->a, "P", EX, CW, 5), 0);
	assert_int_equal(ulkey(f, f->a, "X"), 0);
	assert_int_equal(ulkey(f, f->a, "P"), 0);
	assert_int_equal(table_sess_nwaiters(f->b), 0);
	alarm(0);
	table_sess_release(f->t, f->b);
}

/* A revoke of key pushed to s is event i. */
static void
revoked(int i, struct table_sess *s, const char *key)
{
	assert_true(i < nev);
	assert_int_equal(evs[i].kind, 'r');
	assert_ptr_equal(evs[i].s, s);
	assert_string_equal(evs[i].key, key);
}

/* A grant of reqid to s is event i. */
static void
granted(int i, struct table_sess *s, uint64_t reqid)
{
	assert_true(i < nev);
	assert_int_equal(evs[i].kind, 'g');
	assert_ptr_equal(evs[i].s, s);
	assert_int_equal(evs[i].reqid, reqid);
}

/* X is reached through D0, its parent, D1 above it, and so on. */
static const char *const chain3[] = { "D0", "D1", "D2", NULL };

/*
 * The decisive ancestor two levels up, the nearer one free: the request
 * waits for it and the server revokes it; given back, the waiter goes.
 */
static void
t_chain_waits_for_ancestor(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "D1", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, CW, 2, NULL), 1);
	assert_int_equal(nev, 1);
	revoked(0, f->a, "D1");
	/* Held shared, D1 still ends the walk, and bars nobody. */
	assert_int_equal(lkey(f, f->a, "D1", SH, CW, 3), 0);
	assert_int_equal(nev, 2);
	granted(1, f->b, 2);
	table_sess_release(f->t, f->a);
	table_sess_release(f->t, f->b);
	assert_int_equal(table_nkeys(f->t), 0);
}

/* Three levels up: quiet disturbs nobody, test names it, try revokes. */
static void
t_chain_try_quiet_test(void **state)
{
	static const char *const chain8[] = { "D0", "D1", "D2", "D3", "D4",
				    "D5", "D6", "D7", NULL };
	struct fx		*f = *state;
	struct table_entry	 c;

	assert_int_equal(lkey(f, f->a, "D2", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, SH,
	    WSL_LOCK_CACHED | WSL_LOCK_QUIET, 2, NULL), -EAGAIN);
	assert_int_equal(nev, 0);
	memset(&c, 0, sizeof c);
	assert_int_equal(lkc(f, f->b, "X", chain3, SH, WSL_LOCK_TEST, 3, &c),
	    -EAGAIN);
	assert_ptr_equal(c.sess, f->a);
	assert_int_equal(c.keylen, 2);
	assert_memory_equal(c.key, "D2", 2);
	assert_int_equal(c.mode, EX);
	assert_int_equal(nev, 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, WSL_LOCK_CACHED, 4,
	    NULL), -EAGAIN);
	assert_int_equal(nev, 1);
	revoked(0, f->a, "D2");
	/* The last of eight keys decides as well; once revoked, once. */
	assert_int_equal(ulkey(f, f->a, "D2"), 0);
	assert_int_equal(lkey(f, f->c, "D7", EX, CW, 5), 0);
	assert_int_equal(lkc(f, f->b, "X", chain8, SH, WSL_LOCK_TEST, 6, &c),
	    -EAGAIN);
	assert_ptr_equal(c.sess, f->c);
	assert_int_equal(lkc(f, f->b, "X", chain8, SH, WSL_LOCK_CACHED, 7,
	    NULL), -EAGAIN);
	assert_int_equal(lkc(f, f->b, "X", chain8, SH, WSL_LOCK_CACHED, 8,
	    NULL), -EAGAIN);
	assert_int_equal(nev, 2);
	revoked(1, f->c, "D7");
	/* Not past the end: with seven keys D7 plays no part. */
	assert_int_equal(lkc(f, f->b, "X", chain8 + 1, SH, WSL_LOCK_CACHED,
	    9, NULL), -EAGAIN);
	assert_int_equal(lkc(f, f->b, "X", chain3, SH, WSL_LOCK_CACHED, 10,
	    NULL), 0);
	assert_int_equal(table_nkeys(f->t), 2);
}

/*
 * A nearer ancestor with any holder ends the walk, even if a farther one
 * is held exclusively by another session: held shared by a third
 * session, or by the requester itself.
 */
static void
t_chain_nearer_holder_ends_walk(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "D2", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, CW, 2, NULL), 1);
	assert_int_equal(table_cancel(f->t, f->b, 2), 0);
	assert_int_equal(lkey(f, f->c, "D0", SH, CW, 3), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, CW, 4, NULL), 0);
	assert_int_equal(ulkey(f, f->c, "D0"), 0);
	assert_int_equal(lkey(f, f->b, "D1", SH, CW, 5), 0);
	assert_int_equal(lkc(f, f->b, "Y", chain3, EX, CW, 6, NULL), 0);
	/* ... exclusively by the requester, the same. */
	assert_int_equal(ulkey(f, f->b, "D1"), 0);
	assert_int_equal(lkey(f, f->b, "D1", EX, CW, 7), 0);
	assert_int_equal(lkc(f, f->b, "Z", chain3, EX, CW, 8, NULL), 0);
	/* Only the revoke of the first, cancelled wait. */
	assert_int_equal(nev, 1);
	revoked(0, f->a, "D2");
}

/*
 * The decisive ancestor's holder passes the waiters it holds off; they
 * then wait for its lock on the object itself.
 */
static void
t_chain_holder_passes(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "D2", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, CW, 2, NULL), 1);
	assert_int_equal(lkc(f, f->c, "X", chain3, SH, CW, 3, NULL), 1);
	assert_int_equal(lkc(f, f->a, "X", chain3, EX, CW, 4, NULL), 0);
	/* Held, X is what they wait for: its holder is asked for it. */
	assert_int_equal(nev, 2);
	revoked(0, f->a, "D2");
	revoked(1, f->a, "X");
	assert_int_equal(ulkey(f, f->a, "D2"), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(ulkey(f, f->a, "X"), 0);
	assert_int_equal(nev, 4);
	granted(2, f->b, 2);
	revoked(3, f->b, "X");		/* c waits for b now */
	assert_int_equal(table_sess_nwaiters(f->c), 1);
}

/*
 * The decisive ancestor of a waiter moves: a nearer key gains a holder,
 * then the decisive one loses its last. b waits for D1 of a; a takes D0
 * (not held off by b, who waits on X), so b now waits for D0 and it is
 * revoked; a gives D1 back: b still waits, for D0; a gives D0 back: b
 * goes. Then the other way: D0 free, the walk goes on to D2.
 */
static void
t_chain_decisive_moves(void **state)
{
	struct fx	*f = *state;

	assert_int_equal(lkey(f, f->a, "D1", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, CW, 2, NULL), 1);
	assert_int_equal(nev, 1);
	revoked(0, f->a, "D1");
	assert_int_equal(lku(f, f->a, "D0", "D1", EX, CW, 3, NULL), 0);
	assert_int_equal(nev, 2);
	revoked(1, f->a, "D0");
	assert_int_equal(ulkey(f, f->a, "D1"), 0);
	assert_int_equal(nev, 2);
	assert_int_equal(table_sess_nwaiters(f->b), 1);
	assert_int_equal(ulkey(f, f->a, "D0"), 0);
	assert_int_equal(nev, 3);
	granted(2, f->b, 2);
	assert_int_equal(ulkey(f, f->b, "X"), 0);

	/* D0 held, D2 held too: D0 decides; D0 gone, D2 decides. */
	assert_int_equal(lkey(f, f->a, "D0", EX, CW, 4), 0);
	assert_int_equal(lkey(f, f->c, "D2", EX, CW, 5), 0);
	assert_int_equal(lkc(f, f->b, "X", chain3, EX, CW, 6, NULL), 1);
	assert_int_equal(nev, 4);
	revoked(3, f->a, "D0");
	assert_int_equal(ulkey(f, f->a, "D0"), 0);
	assert_int_equal(nev, 5);
	revoked(4, f->c, "D2");
	assert_int_equal(table_sess_nwaiters(f->b), 1);
	assert_int_equal(ulkey(f, f->c, "D2"), 0);
	assert_int_equal(nev, 6);
	granted(5, f->b, 6);
}

/*
 * The object's own key in its chain is skipped, a key named twice counts
 * once; neither leaves anything behind.
 */
static void
t_chain_self_and_duplicates(void **state)
{
	static const char *const odd[] = { "X", "D0", "D0", "X", "D1", "D0",
				    NULL };
	static const char *const self[] = { "X", NULL };
	struct fx		*f = *state;

	assert_int_equal(lkey(f, f->a, "D1", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", odd, EX, CW, 2, NULL), 1);
	assert_int_equal(table_nkeys(f->t), 3);
	assert_int_equal(nev, 1);
	revoked(0, f->a, "D1");
	assert_int_equal(lkc(f, f->c, "X", self, EX, CW, 3, NULL), 1);
	assert_int_equal(table_cancel(f->t, f->b, 2), 0);
	/* c was behind b only: nothing holds X or its parent X. */
	assert_int_equal(nev, 2);
	granted(1, f->c, 3);
	assert_int_equal(ulkey(f, f->c, "X"), 0);
	assert_int_equal(table_nkeys(f->t), 1);
	/* A held parent D0 named again after D1 decides once, first. */
	assert_int_equal(lkey(f, f->c, "D0", SH, CW, 4), 0);
	assert_int_equal(lkc(f, f->b, "X", odd, EX, CW, 5, NULL), 0);
}

/* Sessions that end or lose their connection free chained waiters. */
static void
t_chain_waiters_freed(void **state)
{
	static const char *const chain8[] = { "D0", "D1", "D2", "D3", "D4",
				    "D5", "D6", "D7", NULL };
	static const char *const other[] = { "E0", "E1", "D7", NULL };
	struct fx		*f = *state;

	assert_int_equal(lkey(f, f->a, "D7", EX, CW, 1), 0);
	assert_int_equal(lkc(f, f->b, "X", chain8, EX, CW, 2, NULL), 1);
	assert_int_equal(lkc(f, f->b, "Y", chain8, SH, CW, 3, NULL), 1);
	assert_int_equal(lkc(f, f->c, "X", other, SH, CW, 4, NULL), 1);
	assert_int_equal(lkc(f, f->c, "Z", chain8 + 3, SH, CW, 5, NULL), 1);
	assert_int_equal(table_nkeys(f->t), 13);
	table_sess_release(f->t, f->b);
	/* D7 held; c's X, E0, E1 and Z, D3..D6. */
	assert_int_equal(table_nkeys(f->t), 9);
	table_sess_drop_waiters(f->t, f->c);
	assert_int_equal(table_nkeys(f->t), 1);
	/* And a chain waiter still there when a session's holder ends. */
	assert_int_equal(lkc(f, f->b, "X", chain8, EX, CW, 6, NULL), 1);
	table_sess_release(f->t, f->a);
	assert_int_equal(nev, 2);
	granted(1, f->b, 6);
	table_sess_release(f->t, f->b);
	assert_int_equal(table_nkeys(f->t), 0);
}

/* At most WSL_MAX_CHAIN keys, none empty. */
static void
t_chain_invalid(void **state)
{
	static const char *const nine[] = { "1", "2", "3", "4", "5", "6",
				    "7", "8", "9", NULL };
	static const char *const empty[] = { "D0", "", NULL };
	struct fx		*f = *state;

	assert_int_equal(lkc(f, f->a, "X", nine, EX, CW, 1, NULL), -EINVAL);
	assert_int_equal(lkc(f, f->a, "X", nine + 1, EX, CW, 2, NULL), 0);
	assert_int_equal(lkc(f, f->a, "Y", empty, EX, CW, 3, NULL), -EINVAL);
	table_sess_release(f->t, f->a);
	assert_int_equal(table_nkeys(f->t), 0);
}

/* Every test of the table starts from a fresh one. */
#define TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

UNIT_MAIN(1, NULL, NULL,
    TEST(t_exclusive_conflict),
    TEST(t_shared_compatible),
    TEST(t_wait_and_grant),
    TEST(t_disjoint_ranges),
    TEST(t_split_on_unlock),
    TEST(t_merge),
    TEST(t_mode_change_splits),
    TEST(t_upgrade_alone),
    TEST(t_upgrade_waits_for_holders),
    TEST(t_upgrade_not_behind_waiter),
    TEST(t_downgrade_admits_readers),
    TEST(t_fifo_no_writer_starvation),
    TEST(t_fifo_disjoint_waiters_pass),
    TEST(t_fifo_order_many),
    TEST(t_cancel),
    TEST(t_expiry_releases_and_grants),
    TEST(t_drop_waiters_keeps_locks),
    TEST(t_revoke_cached),
    TEST(t_revoke_after_grant),
    TEST(t_uncached_no_revoke),
    TEST(t_tokens_grow),
    TEST(t_test_reports_conflict),
    TEST(t_grace),
    TEST(t_reclaim_keeps_token),
    TEST(t_resync_drops_unannounced),
    TEST(t_limits),
    TEST(t_invalid),
    TEST(t_many_keys),
    TEST(t_under_waits_for_parent),
    TEST(t_under_only_unheld_objects),
    TEST(t_under_try_quiet_test),
    TEST(t_under_parent_expires),
    TEST(t_under_parent_cycle),
    TEST(t_chain_waits_for_ancestor),
    TEST(t_chain_try_quiet_test),
    TEST(t_chain_nearer_holder_ends_walk),
    TEST(t_chain_holder_passes),
    TEST(t_chain_decisive_moves),
    TEST(t_chain_self_and_duplicates),
    TEST(t_chain_waiters_freed),
    TEST(t_chain_invalid))

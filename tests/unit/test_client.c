/*
 * Unit tests for libwslock (lockd/client.c) against a fake server: a
 * thread of the test that listens on a Unix socket in a temporary
 * directory and either answers like wslockd (enough of it for the tests)
 * or accepts and stays silent. The tests check what wslock.h promises
 * about threads and liveness: callbacks run only inside wslock_process(),
 * and a connection that never finishes its handshake is dropped and
 * retried, which wslock_conn_stats() reports. A LOCK's chain of
 * ancestors reaches the server whole, and again after a reconnect.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"

#include "clock.h"
#include "lockd.h"
#include "wslock.h"

enum fake_mode {
	FAKE_ANSWER,	/* speak the protocol */
	FAKE_SILENT,	/* accept, read, never answer */
	FAKE_CROSS,	/* a CANCEL crosses the GRANT, then the link drops */
	FAKE_SECRET,	/* refuse the first HELLO's client id (SECRET) */
};

#define FAKE_MAXCONN	16

struct fake {
	enum fake_mode	 mode;
	char		 dir[64];
	char		 path[96];
	char		 addr[160];
	int		 lfd;
	int		 stop[2];
	pthread_t	 thread;
	pthread_mutex_t	 mu;
	int		 accepted;	/* guarded by mu */
	int		 hellos;	/* guarded by mu */
	int		 closed;	/* guarded by mu: connections ended */
	uint64_t	 ids[4];	/* guarded by mu: HELLOs' client ids */
	int		 nlocks;	/* guarded by mu: LOCKs received */
	char		 locks[4][128];	/* guarded by mu: "key<chain" */
	int		 dropped;	/* a LOCK of "drop" was left unanswered */
};

/* Note a LOCK as "flags key<parent<ancestor..." for the test to check. */
static void
fake_note_lock(struct fake *fk, const struct wsl_lockreq *q)
{
	char	*p;
	size_t	 i;

	pthread_mutex_lock(&fk->mu);
	if (fk->nlocks < 4) {
		p = fk->locks[fk->nlocks];
		snprintf(p, sizeof fk->locks[0], "%02x %.*s", q->flags,
		    (int)q->keylen, (const char *)q->key);
		for (i = 0; i < q->nchain; i++)
			snprintf(p + strlen(p), sizeof fk->locks[0] - strlen(p),
			    "<%.*s", (int)q->chain[i].len,
			    (const char *)q->chain[i].key);
	}
	fk->nlocks++;
	pthread_mutex_unlock(&fk->mu);
}

static void
send_all(int fd, struct wsl_buf *b)
{
	ssize_t	n;

	while (wsl_buf_pending(b) > 0) {
		n = send(fd, b->data + b->off, wsl_buf_pending(b),
		    MSG_NOSIGNAL);
		if (n <= 0)
			break;
		wsl_buf_consume(b, n);
	}
}

/* Answer one frame as wslockd would; 0 to go on, -1 to close. */
static int
fake_frame(struct fake *fk, int fd, const struct wsl_frame *f)
{
	struct wsl_buf		 out = { 0 };
	struct wsl_welcome	 w;
	struct wsl_hello	 h;
	struct wsl_lockreq	 q;
	struct wsl_conflict	 c;
	uint64_t		 target;
	static uint64_t		 token = 1;
	int			 r = 0;

	switch (f->type) {
	case WSL_HELLO:
		if (wsl_dec_hello(f, &h) < 0)
			return -1;
		pthread_mutex_lock(&fk->mu);
		if (fk->hellos < 4)
			fk->ids[fk->hellos] = h.client_id;
		fk->hellos++;
		pthread_mutex_unlock(&fk->mu);
		if (fk->mode == FAKE_SECRET) {
			fk->mode = FAKE_ANSWER;
			wsl_enc_error(&out, f->id, WSL_E_SECRET, "not proven");
			r = -1;
			break;
		}
		memset(&w, 0, sizeof w);
		w.flags = WSL_WELCOME_NEW;
		w.session = 7;
		w.lease_ms = 10000;
		w.max_frame = WSL_MAX_FRAME;
		w.max_locks = 1000;
		w.max_waiters = 1000;
		wsl_enc_welcome(&out, f->id, &w);
		break;
	case WSL_RENEW:
	case WSL_UNLOCK:
	case WSL_RECLAIM_DONE:
		wsl_enc_ok(&out, f->id, 0);
		break;
	case WSL_BYE:
		wsl_enc_ok(&out, f->id, 0);
		r = -1;
		break;
	case WSL_LOCK:
		if (wsl_dec_lock(f, &q) < 0)
			return -1;
		fake_note_lock(fk, &q);
		if (q.keylen == 4 && memcmp(q.key, "drop", 4) == 0 &&
		    !fk->dropped) {
			/* The link drops before the answer. */
			fk->dropped = 1;
			r = -1;
		} else if ((q.flags & WSL_LOCK_TEST) && q.keylen == 4 &&
		    memcmp(q.key, "busy", 4) == 0) {
			/* Someone else holds "busy" exclusively. */
			c = (struct wsl_conflict){ 99, 5, 0, WSL_RANGE_END,
			    WSL_EXCLUSIVE };
			wsl_enc_conflict(&out, f->id, &c);
		} else if (q.flags & WSL_LOCK_TEST)
			wsl_enc_ok(&out, f->id, 0);
		else if (q.flags & WSL_LOCK_WAIT)
			wsl_enc_empty(&out, WSL_QUEUED, f->id);
		else
			wsl_enc_ok(&out, f->id, token++);
		break;
	case WSL_CANCEL:
		if (wsl_dec_cancel(f, &target) < 0)
			return -1;
		if (fk->mode == FAKE_CROSS) {
			/* Granted just before the cancel arrived. */
			wsl_enc_grant(&out, target, token++);
			wsl_enc_error(&out, f->id, WSL_E_NOENT, "not waiting");
			fk->mode = FAKE_ANSWER;
			r = -1;
			break;
		}
		wsl_enc_error(&out, target, WSL_E_CANCELED, "cancelled");
		wsl_enc_ok(&out, f->id, 0);
		break;
	default:
		r = -1;
		break;
	}
	send_all(fd, &out);
	wsl_buf_free(&out);
	return r;
}

static void *
fake_loop(void *arg)
{
	struct fake		*fk = arg;
	struct pollfd		 pfd[FAKE_MAXCONN + 2];
	struct wsl_buf		 in[FAKE_MAXCONN];
	struct wsl_frame	 f;
	int			 conns[FAKE_MAXCONN], n = 0, i, len, fd;
	ssize_t			 got;

	memset(in, 0, sizeof in);
	for (;;) {
		pfd[0].fd = fk->stop[0];
		pfd[0].events = POLLIN;
		pfd[1].fd = fk->lfd;
		pfd[1].events = POLLIN;
		for (i = 0; i < n; i++) {
			pfd[i + 2].fd = conns[i];
			pfd[i + 2].events = POLLIN;
		}
		if (poll(pfd, n + 2, -1) < 0)
			continue;
		if (pfd[0].revents)
			break;
		if ((pfd[1].revents & POLLIN) && n < FAKE_MAXCONN &&
		    (fd = accept(fk->lfd, NULL, NULL)) >= 0) {
			conns[n++] = fd;
			pthread_mutex_lock(&fk->mu);
			fk->accepted++;
			pthread_mutex_unlock(&fk->mu);
			continue;
		}
		for (i = 0; i < n; i++) {
			if (!(pfd[i + 2].revents & (POLLIN | POLLHUP)))
				continue;
			if (wsl_buf_reserve(&in[i], 65536) < 0)
				break;
			got = recv(conns[i], in[i].data + in[i].len,
			    in[i].cap - in[i].len, 0);
			if (got > 0)
				in[i].len += got;
			len = 0;
			while (got > 0 && fk->mode != FAKE_SILENT &&
			    (len = wsl_frame_decode(in[i].data + in[i].off,
			    wsl_buf_pending(&in[i]), WSL_MAX_FRAME, &f)) > 0) {
				if (fake_frame(fk, conns[i], &f) < 0) {
					got = 0;
					break;
				}
				wsl_buf_consume(&in[i], len);
			}
			if (fk->mode == FAKE_SILENT)
				wsl_buf_consume(&in[i], wsl_buf_pending(&in[i]));
			if (got <= 0 || len < 0) {
				pthread_mutex_lock(&fk->mu);
				fk->closed++;
				pthread_mutex_unlock(&fk->mu);
				close(conns[i]);
				wsl_buf_free(&in[i]);
				conns[i] = conns[n - 1];
				in[i] = in[n - 1];
				memset(&in[n - 1], 0, sizeof in[n - 1]);
				n--;
				break;
			}
		}
	}
	for (i = 0; i < n; i++) {
		close(conns[i]);
		wsl_buf_free(&in[i]);
	}
	return NULL;
}

/* A fake server at a fresh path; with listening 0, nothing listens there. */
static struct fake *
fake_new(enum fake_mode mode, int listening)
{
	struct fake		*fk;
	struct sockaddr_un	 sun;

	assert_non_null(fk = calloc(1, sizeof *fk));
	fk->mode = mode;
	fk->lfd = -1;
	pthread_mutex_init(&fk->mu, NULL);
	snprintf(fk->dir, sizeof fk->dir, "/tmp/wslock-test.XXXXXX");
	assert_non_null(mkdtemp(fk->dir));
	snprintf(fk->path, sizeof fk->path, "%s/s", fk->dir);
	snprintf(fk->addr, sizeof fk->addr, "unix:%s", fk->path);
	assert_int_equal(pipe(fk->stop), 0);
	if (!listening)
		return fk;
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", fk->path);
	assert_true((fk->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC,
	    0)) >= 0);
	assert_int_equal(bind(fk->lfd, (struct sockaddr *)&sun, sizeof sun),
	    0);
	assert_int_equal(listen(fk->lfd, 16), 0);
	assert_int_equal(pthread_create(&fk->thread, NULL, fake_loop, fk), 0);
	return fk;
}

static void
fake_free(struct fake *fk)
{
	if (fk->lfd >= 0) {
		assert_int_equal(write(fk->stop[1], "x", 1), 1);
		pthread_join(fk->thread, NULL);
		close(fk->lfd);
		unlink(fk->path);
	}
	close(fk->stop[0]);
	close(fk->stop[1]);
	rmdir(fk->dir);
	pthread_mutex_destroy(&fk->mu);
	free(fk);
}

static int
fake_count(struct fake *fk, const int *what)
{
	int	v;

	pthread_mutex_lock(&fk->mu);
	v = *what;
	pthread_mutex_unlock(&fk->mu);
	return v;
}

/* What the callbacks saw; one test at a time, so globals do. */
static struct {
	int		 inside;	/* the test is inside a library call */
	int		 ran_inside;	/* a callback ran while it was */
	int		 ndone;
	int		 status;
	uint64_t	 reqid;
	void		*reqarg;
	int		 nstate;
	int		 state;
	int		 ntested;
	int		 tstatus;
	uint64_t	 treqid;
	void		*treqarg;
	int		 tconflict;	/* a conflict was given */
	struct wslock_conflict tc;
} seen;

/* A callback ran: count it, and apart if it ran inside a library call. */
static void
seen_call(int *n)
{
	if (seen.inside)
		seen.ran_inside++;
	(*n)++;
}

static void
on_done(struct wslock *wl, uint64_t reqid, int status, uint64_t token,
    void *reqarg, void *arg)
{
	seen_call(&seen.ndone);
	seen.status = status;
	seen.reqid = reqid;
	seen.reqarg = reqarg;
}

static void
on_state(struct wslock *wl, int state, void *arg)
{
	seen_call(&seen.nstate);
	seen.state = state;
}

static void
on_tested(struct wslock *wl, uint64_t reqid, int status,
    const struct wslock_conflict *c, void *reqarg, void *arg)
{
	seen_call(&seen.ntested);
	seen.tstatus = status;
	seen.treqid = reqid;
	seen.treqarg = reqarg;
	seen.tconflict = c != NULL;
	if (c != NULL)
		seen.tc = *c;
}

static const struct wslock_callbacks cbs = {
	.done = on_done,
	.state = on_state,
	.tested = on_tested,
};

static struct wslock *
open_handle(const struct fake *fk)
{
	struct wslock_params	 p;
	struct wslock		*wl = NULL;

	memset(&p, 0, sizeof p);
	p.addr = fk->addr;
	p.name = "test_client";
	p.cb = &cbs;
	assert_int_equal(wslock_open(&p, &wl), 0);
	assert_non_null(wl);
	return wl;
}

/* Poll and process like a caller's event loop until cond or timeout. */
static int
run_until(struct wslock *wl, int (*cond)(void), int timeout_ms)
{
	struct pollfd	pfd = { wslock_fd(wl), POLLIN, 0 };
	uint64_t	end = clock_ms(CLOCK_MONOTONIC) + timeout_ms;

	while (!cond()) {
		if (clock_ms(CLOCK_MONOTONIC) >= end)
			return 0;
		(void)poll(&pfd, 1, 50);
		assert_int_equal(wslock_process(wl), 0);
	}
	return 1;
}

static int
one_done(void)
{
	return seen.ndone >= 1;
}

static int
two_done(void)
{
	return seen.ndone >= 2;
}

static int
got_up(void)
{
	return seen.nstate >= 1 && seen.state == WSLOCK_UP;
}

/*
 * The liveness bug of issue 12: a request never sent (no server) is
 * cancelled by a caller that holds its own mutex, one the done callback
 * takes. The callback must not run inside wslock_cancel(); it comes from
 * the next wslock_process() instead.
 */
static void
t_cancel_unsent_calls_back_later(void **state)
{
	struct fake		*fk = fake_new(FAKE_ANSWER, 0);
	struct wslock		*wl = open_handle(fk);
	struct wslock_range	 rg = { "k", 1, 1, 0, WSLOCK_EOF };
	uint64_t		 id = 0;
	int			 tag;

	memset(&seen, 0, sizeof seen);
	assert_int_equal(wslock_lock(wl, &rg, WSLOCK_EXCLUSIVE,
	    WSLOCK_WAIT, &tag, &id), 0);
	assert_true(id != 0);
	seen.inside = 1;
	assert_int_equal(wslock_cancel(wl, id), 0);
	seen.inside = 0;
	assert_int_equal(seen.ran_inside, 0);
	assert_int_equal(seen.ndone, 0);
	/* The poller hears of it and gets the answer. */
	assert_true(run_until(wl, one_done, 5000));
	assert_int_equal(seen.ndone, 1);
	assert_int_equal(seen.status, -ECANCELED);
	assert_true(seen.reqid == id);
	assert_ptr_equal(seen.reqarg, &tag);
	/* Cancelled once is cancelled: nothing left to withdraw. */
	assert_int_equal(wslock_cancel(wl, id), -ENOENT);
	wslock_close(wl);
	fake_free(fk);
}

/*
 * A blocking call that drives the handle runs no callback either: the
 * state change it saw is delivered by the next wslock_process().
 */
static void
t_blocking_call_runs_no_callback(void **state)
{
	struct fake		*fk = fake_new(FAKE_ANSWER, 1);
	struct wslock		*wl;
	struct wslock_range	 rg = { "k", 1, 1, 0, WSLOCK_EOF };
	uint64_t		 token = 0;

	memset(&seen, 0, sizeof seen);
	wl = open_handle(fk);
	seen.inside = 1;
	assert_int_equal(wslock_connect_wait(wl, 5000), 0);
	assert_int_equal(wslock_lock_wait(wl, &rg, WSLOCK_EXCLUSIVE, 0,
	    5000, &token), 0);
	seen.inside = 0;
	assert_true(token != 0);
	assert_int_equal(seen.ran_inside, 0);
	assert_int_equal(seen.nstate, 0);
	assert_true(run_until(wl, got_up, 5000));
	assert_int_equal(seen.ran_inside, 0);
	wslock_close(wl);
	fake_free(fk);
}

static int	want_tested;

static int
tested_enough(void)
{
	return seen.ntested >= want_tested;
}

/*
 * wslock_test(): answered through the tested callback, from
 * wslock_process() only: free, conflict (with the holder), cancelled.
 */
static void
t_async_test(void **state)
{
	struct fake		*fk = fake_new(FAKE_ANSWER, 1);
	struct fake		*none = fake_new(FAKE_ANSWER, 0);
	struct wslock_range	 free_rg = { "free", 4, 1, 0, WSLOCK_EOF };
	struct wslock_range	 busy_rg = { "busy", 4, 1, 10, 20 };
	struct wslock_params	 p;
	struct wslock		*wl;
	uint64_t		 id = 0;
	int			 tag1, tag2;

	memset(&seen, 0, sizeof seen);
	wl = open_handle(fk);
	assert_int_equal(wslock_connect_wait(wl, 5000), 0);
	assert_int_equal(wslock_test(wl, &free_rg, WSLOCK_SHARED, &tag1, &id),
	    0);
	assert_true(id != 0);
	want_tested = 1;
	assert_true(run_until(wl, tested_enough, 5000));
	assert_int_equal(seen.tstatus, 0);
	assert_true(seen.treqid == id);
	assert_ptr_equal(seen.treqarg, &tag1);
	assert_false(seen.tconflict);
	assert_int_equal(wslock_test(wl, &busy_rg, WSLOCK_EXCLUSIVE, &tag2,
	    &id), 0);
	want_tested = 2;
	assert_true(run_until(wl, tested_enough, 5000));
	assert_int_equal(seen.tstatus, 1);
	assert_ptr_equal(seen.treqarg, &tag2);
	assert_true(seen.tconflict);
	assert_true(seen.tc.session == 99 && seen.tc.owner == 5);
	assert_int_equal(seen.tc.mode, WSLOCK_EXCLUSIVE);
	/* The blocking form agrees, and a test takes nothing. */
	assert_int_equal(wslock_test_wait(wl, &busy_rg, WSLOCK_SHARED, 5000,
	    &seen.tc), 1);
	assert_int_equal(wslock_held(wl, &free_rg, WSLOCK_SHARED, NULL), 0);
	assert_int_equal(wslock_test(wl, &free_rg, 7, NULL, NULL), -EINVAL);
	assert_int_equal(seen.ran_inside, 0);
	wslock_close(wl);

	/* Withdrawn before it was sent: -ECANCELED, not inside the cancel. */
	memset(&seen, 0, sizeof seen);
	wl = open_handle(none);
	assert_int_equal(wslock_test(wl, &free_rg, WSLOCK_SHARED, &tag1, &id),
	    0);
	seen.inside = 1;
	assert_int_equal(wslock_cancel(wl, id), 0);
	seen.inside = 0;
	assert_int_equal(seen.ntested, 0);
	want_tested = 1;
	assert_true(run_until(wl, tested_enough, 5000));
	assert_int_equal(seen.tstatus, -ECANCELED);
	assert_int_equal(seen.ndone, 0);
	assert_int_equal(wslock_cancel(wl, id), -ENOENT);
	wslock_close(wl);

	/* No tested callback, no asynchronous test. */
	memset(&p, 0, sizeof p);
	p.addr = none->addr;
	assert_int_equal(wslock_open(&p, &wl), 0);
	assert_int_equal(wslock_test(wl, &free_rg, WSLOCK_SHARED, NULL, NULL),
	    -EINVAL);
	wslock_close(wl);
	fake_free(none);
	fake_free(fk);
}

static struct wslock	*stats_wl;
static struct fake	*stats_fk;	/* if not NULL, it saw them too */

static int
reconnected(void)
{
	struct wslock_conn_stats	st;

	assert_int_equal(wslock_conn_stats(stats_wl, &st), 0);
	return st.connects >= 2 && st.state == WSLOCK_UP;
}

/*
 * A blocking lock gives up; its grant crosses the cancel and the link
 * drops right after. The library gives the unwanted lock back with an
 * UNLOCK that cannot be sent: that failure must not close the
 * connection under the grant's handler, which then used the request it
 * had just freed (found by tests/lockd/test_threads.py at close).
 */
static void
t_grant_crossing_cancel_then_eof(void **state)
{
	struct fake		*fk = fake_new(FAKE_CROSS, 1);
	struct wslock_range	 rg = { "k", 1, 1, 0, WSLOCK_EOF };
	uint64_t		 token = 0;

	memset(&seen, 0, sizeof seen);
	stats_fk = NULL;
	stats_wl = open_handle(fk);
	assert_int_equal(wslock_connect_wait(stats_wl, 5000), 0);
	assert_int_equal(wslock_lock_wait(stats_wl, &rg, WSLOCK_EXCLUSIVE,
	    WSLOCK_WAIT, 100, &token), -ETIMEDOUT);
	/*
	 * The cancel went out; the grant comes back and the fake closes.
	 * Nothing drives the handle until it has, so the UNLOCK fails.
	 */
	while (fake_count(fk, &fk->closed) == 0)
		usleep(1000);
	assert_true(run_until(stats_wl, reconnected, 10000));
	assert_int_equal(wslock_held(stats_wl, &rg, WSLOCK_EXCLUSIVE, NULL), 0);
	assert_int_equal(wslock_lock_wait(stats_wl, &rg, WSLOCK_EXCLUSIVE, 0,
	    5000, &token), 0);
	assert_int_equal(seen.ndone, 0);
	wslock_close(stats_wl);
	fake_free(fk);
}

static int
two_attempts(void)
{
	struct wslock_conn_stats	st;

	assert_int_equal(wslock_conn_stats(stats_wl, &st), 0);
	return st.attempts >= 2 && (stats_fk == NULL ||
	    fake_count(stats_fk, &stats_fk->accepted) >= 2);
}

/*
 * A server that accepts and never answers (as a HELLO lost in a link
 * cut looks to the client): the attempt is dropped after 3 s and another
 * one made, and the statistics say why.
 */
static void
t_silent_server_is_retried(void **state)
{
	struct fake			*fk = fake_new(FAKE_SILENT, 1);
	struct wslock_conn_stats	 st;
	uint64_t			 t0 = clock_ms(CLOCK_MONOTONIC), took;

	memset(&seen, 0, sizeof seen);
	stats_fk = fk;
	stats_wl = open_handle(fk);
	assert_int_equal(wslock_conn_stats(stats_wl, &st), 0);
	assert_int_equal(st.state, WSLOCK_DOWN);
	assert_true(st.attempts == 1 && st.connects == 0);
	assert_int_equal(st.last_err, 0);
	assert_string_equal(st.last_error, "");
	/* Generous: the deadline is 3 s, the backoff after it 50 ms. */
	assert_true(run_until(stats_wl, two_attempts, 15000));
	took = clock_ms(CLOCK_MONOTONIC) - t0;
	assert_true(took >= 2900);
	assert_int_equal(wslock_conn_stats(stats_wl, &st), 0);
	assert_int_equal(st.state, WSLOCK_DOWN);
	assert_int_equal(st.connects, 0);
	assert_true(st.attempts_down >= 2);
	assert_true(st.state_ms >= 2900);
	assert_int_equal(st.last_err, -ETIMEDOUT);
	assert_non_null(strstr(st.last_error, "handshake"));
	assert_true(fake_count(fk, &fk->accepted) >= 2);
	assert_int_equal(fake_count(fk, &fk->hellos), 0);
	assert_int_equal(wslock_conn_stats(stats_wl, NULL), -EINVAL);
	wslock_close(stats_wl);
	stats_fk = NULL;
	fake_free(fk);
}

/* Statistics of a connection that comes up, then of one refused. */
static void
t_conn_stats(void **state)
{
	struct fake			*fk = fake_new(FAKE_ANSWER, 1);
	struct fake			*none = fake_new(FAKE_ANSWER, 0);
	struct wslock_conn_stats	 st;
	struct wslock			*wl;

	memset(&seen, 0, sizeof seen);
	wl = open_handle(fk);
	assert_int_equal(wslock_connect_wait(wl, 5000), 0);
	assert_int_equal(wslock_conn_stats(wl, &st), 0);
	assert_int_equal(st.state, WSLOCK_UP);
	assert_true(st.connects == 1 && st.attempts == 1);
	assert_int_equal(st.attempts_down, 0);
	assert_int_equal(st.last_err, 0);
	assert_int_equal(fake_count(fk, &fk->hellos), 1);
	wslock_close(wl);

	stats_wl = wl = open_handle(none);
	assert_true(run_until(wl, two_attempts, 5000));
	assert_int_equal(wslock_conn_stats(wl, &st), 0);
	assert_int_equal(st.state, WSLOCK_DOWN);
	assert_int_equal(st.connects, 0);
	assert_true(st.last_err == -ENOENT || st.last_err == -ECONNREFUSED);
	assert_non_null(strstr(st.last_error, "connect: "));
	wslock_close(wl);
	fake_free(none);
	fake_free(fk);
}

/*
 * Refused with SECRET (our client id names a session we cannot prove),
 * the library starts afresh under another client id and gets in.
 */
static void
t_secret_refused_new_id(void **state)
{
	struct fake	*fk = fake_new(FAKE_SECRET, 1);
	struct wslock	*wl;

	memset(&seen, 0, sizeof seen);
	wl = open_handle(fk);
	assert_int_equal(wslock_connect_wait(wl, 5000), 0);
	assert_int_equal(fake_count(fk, &fk->hellos), 2);
	pthread_mutex_lock(&fk->mu);
	assert_true(fk->ids[0] != fk->ids[1]);
	pthread_mutex_unlock(&fk->mu);
	wslock_close(wl);
	fake_free(fk);
}

/*
 * wslock_lock_chain(): the chain goes out whole, with the flags it needs,
 * and goes out again with a request sent again after the link dropped.
 */
static void
t_lock_chain(void **state)
{
	struct fake		*fk = fake_new(FAKE_ANSWER, 1);
	struct wslock		*wl;
	struct wslock_range	 rg = { "drop", 4, 1, 0, WSLOCK_EOF };
	struct wslock_key	 ch[WSLOCK_MAX_CHAIN + 1];
	static char		 big[1025];
	char			 parent[] = "P";
	int			 i, tag;

	for (i = 0; i <= WSLOCK_MAX_CHAIN; i++)
		ch[i] = (struct wslock_key){ "A", 1 };
	memset(&seen, 0, sizeof seen);
	wl = open_handle(fk);
	assert_int_equal(wslock_connect_wait(wl, 5000), 0);
	/* Bad chains are refused before anything is sent. */
	assert_int_equal(wslock_lock_chain(wl, &rg, ch, 0, WSLOCK_SHARED, 0,
	    NULL, NULL), -EINVAL);
	assert_int_equal(wslock_lock_chain(wl, &rg, ch, WSLOCK_MAX_CHAIN + 1,
	    WSLOCK_SHARED, 0, NULL, NULL), -EINVAL);
	assert_int_equal(wslock_lock_chain(wl, &rg, NULL, 1, WSLOCK_SHARED, 0,
	    NULL, NULL), -EINVAL);
	ch[2].len = 0;
	assert_int_equal(wslock_lock_chain(wl, &rg, ch, 3, WSLOCK_SHARED, 0,
	    NULL, NULL), -EINVAL);
	ch[2] = (struct wslock_key){ big, sizeof big };
	assert_int_equal(wslock_lock_chain(wl, &rg, ch, 3, WSLOCK_SHARED, 0,
	    NULL, NULL), -EINVAL);
	ch[2] = (struct wslock_key){ NULL, 1 };
	assert_int_equal(wslock_lock_chain(wl, &rg, ch, 3, WSLOCK_SHARED, 0,
	    NULL, NULL), -EINVAL);
	assert_int_equal(wslock_lock_under(wl, &rg, NULL, 1, WSLOCK_SHARED, 0,
	    NULL, NULL), -EINVAL);
	assert_int_equal(fake_count(fk, &fk->nlocks), 0);

	/* The keys are copied: the caller's buffers may change at once. */
	ch[0] = (struct wslock_key){ parent, 1 };
	ch[1] = (struct wslock_key){ "Q", 1 };
	ch[2] = (struct wslock_key){ "root", 4 };
	assert_int_equal(wslock_lock_chain(wl, &rg, ch, 3, WSLOCK_EXCLUSIVE,
	    WSLOCK_CACHED, &tag, NULL), 0);
	parent[0] = 'x';
	assert_true(run_until(wl, one_done, 10000));
	assert_int_equal(seen.status, 0);
	assert_ptr_equal(seen.reqarg, &tag);
	assert_int_equal(fake_count(fk, &fk->nlocks), 2);
	assert_string_equal(fk->locks[0], "32 drop<P<Q<root");
	assert_string_equal(fk->locks[1], "32 drop<P<Q<root");
	/* The parent alone: UNDER without ABOVE. */
	rg.key = "k";
	rg.keylen = 1;
	assert_int_equal(wslock_lock_under(wl, &rg, "P", 1, WSLOCK_SHARED, 0,
	    NULL, NULL), 0);
	assert_true(run_until(wl, two_done, 5000));
	assert_int_equal(fake_count(fk, &fk->nlocks), 3);
	assert_string_equal(fk->locks[2], "10 k<P");
	wslock_close(wl);
	fake_free(fk);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(t_cancel_unsent_calls_back_later),
    cmocka_unit_test(t_blocking_call_runs_no_callback),
    cmocka_unit_test(t_silent_server_is_retried),
    cmocka_unit_test(t_conn_stats),
    cmocka_unit_test(t_async_test),
    cmocka_unit_test(t_grant_crossing_cancel_then_eof),
    cmocka_unit_test(t_secret_refused_new_id),
    cmocka_unit_test(t_lock_chain))

/*
 * libwslock: the client side of the wslockd protocol (see wslock.h for the
 * contract and PROTOCOL.md for the wire). One handle is one session: a
 * non-blocking socket, a timerfd ticking on CLOCK_BOOTTIME, both behind an
 * epoll descriptor the caller polls. A mirror of what the session holds is
 * kept in a lock table (table.c) so that the library can reclaim it after
 * a reconnect and report it lost when the lease lapses. Over TCP every
 * frame after the handshake is sealed with a MAC (out.seal) and checked on
 * receipt (rx); the session's secret, kept across reconnects, proves to
 * the server that a resume is ours.
 *
 * One mutex guards the whole handle. Work that ends in a user callback is
 * queued as an event while the mutex is held, and only wslock_process()
 * delivers events, after it released the mutex: a callback never runs
 * inside wslock_cancel(), wslock_lock() or a blocking call, whose caller
 * may hold locks of its own that the callback takes. An event queued by
 * any other call makes the handle's descriptor readable (an eventfd in
 * its epoll set), so the caller's poller comes to deliver it.
 */
#include "config.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "clock.h"
#include "lockd.h"
#include "wslock.h"

#define BACKOFF_MIN_MS	50
#define BACKOFF_MAX_MS	2000
/* Between rounds in which a standby refused us: a failover is under way. */
#define STANDBY_RETRY_MS 500
/*
 * A connection not through its handshake by then is dropped and tried
 * again: a SYN or HELLO lost while a link was cut, or a server that
 * accepts and never answers, must not stall the reconnect for good.
 */
#define HANDSHAKE_MS	3000
/* Servers one handle may be given (lockd=A,B,C: replicas of one service). */
#define MAX_SERVERS	16

/* Request flags and modes go on the wire as they are. */
_Static_assert(WSLOCK_WAIT == WSL_LOCK_WAIT &&
    WSLOCK_CACHED == WSL_LOCK_CACHED && WSLOCK_QUIET == WSL_LOCK_QUIET &&
    WSLOCK_SHARED == WSL_SHARED && WSLOCK_EXCLUSIVE == WSL_EXCLUSIVE &&
    WSLOCK_MAX_CHAIN == WSL_MAX_CHAIN,
    "wslock.h flags differ from the wire's");

enum cstate {
	CS_DOWN,	/* waiting to reconnect */
	CS_CONNECTING,	/* non-blocking connect in progress */
	CS_HELLO,	/* HELLO sent */
	CS_AUTH,	/* AUTH sent */
	CS_READY,
};

/* A blocking caller waiting for one request. */
struct bwait {
	int			 done;
	int			 status;
	uint64_t		 token;
	struct wslock_conflict	 conflict;
	struct wslock_item	*items;		/* LIST */
	size_t			 nitems;
	size_t			 capitems;
};

struct creq {
	TAILQ_ENTRY(creq)	 entry;
	uint64_t		 id;
	uint16_t		 type;
	int			 sent;		/* on the current connection */
	uint64_t		 t_send;
	struct table_req	 q;		/* key and chain owned */
	void			*reqarg;
	int			 cancelled;	/* user asked */
	int			 unlock_on_grant; /* blocking wait gave up */
	int			 internal;	/* the library's own LOCK */
	uint64_t		 target;	/* CANCEL */
	struct wslock_conflict	 conflict;	/* TEST answered CONFLICT */
	struct bwait		*bw;		/* blocking caller, or NULL */
};
TAILQ_HEAD(creqs, creq);

enum cev_kind {
	CEV_DONE,
	CEV_REVOKE,
	CEV_LOST,
	CEV_STATE,
	CEV_TESTED,
};

struct cev {
	TAILQ_ENTRY(cev)	 entry;
	enum cev_kind		 kind;
	uint64_t		 reqid;
	int			 status;	/* or state */
	uint64_t		 token;
	void			*reqarg;
	struct wslock_range	 r;		/* key owned */
	int			 mode;
	struct wslock_conflict	 c;		/* TESTED with status 1 */
};
TAILQ_HEAD(cevs, cev);

struct wslock {
	pthread_mutex_t		 mu;
	pthread_cond_t		 cond;
	int			 processing;	/* a thread is in process */
	int			 in_process;	/* ... in wslock_process itself */
	int			 want_process;	/* threads waiting to process */
	int			 delivering;	/* a thread runs callbacks */
	int			 woken;		/* evfd written, not drained */
	struct wslock_callbacks	 cb;
	void			*arg;
	struct addr		 addr;		/* addrs[cur], being used */
	struct addr		 addrs[MAX_SERVERS];
	char			 addr_text[MAX_SERVERS][WSLOCK_ADDR_TEXT];
	size_t			 naddrs;
	size_t			 cur;
	size_t			 round;		/* failed in a row, this cycle */
	int			 hint;		/* 1 + index a standby named */
	char			 name[WSL_MAX_NAME + 1];
	uint8_t			*key;
	size_t			 keylen;
	uint64_t		 client_id;

	int			 reading;	/* read_in dispatches frames */
	int			 epfd;		/* wslock_fd(): ipfd, evfd */
	int			 ipfd;		/* sock, tfd: what we wait on */
	int			 tfd;
	int			 evfd;		/* events wait for delivery */
	int			 sock;
	int			 pollout;
	enum cstate		 cs;
	uint64_t		 reconnect_at;
	uint32_t		 backoff;
	int			 standby_seen;	/* a standby refused, this round */
	int			 last_err;	/* of the last failed attempt */
	uint8_t			 cnonce[WSL_NONCE_LEN];
	uint8_t			 snonce[WSL_NONCE_LEN];
	uint64_t		 t_hello;	/* this attempt started */
	int			 mac_in;	/* frames in carry a MAC */
	struct wsl_seal		 rx;		/* S->C, when mac_in */
	struct wsl_seal		 tx;		/* C->S, out.seal once up */
	uint8_t			 pad[WSL_SECRET_LEN]; /* unmasks the secret */
	uint8_t			 secret[WSL_SECRET_LEN]; /* of the session */
	int			 have_secret;

	/* For wslock_conn_stats(). */
	uint64_t		 n_connects;
	uint64_t		 n_attempts;
	uint64_t		 n_attempts_down;
	uint64_t		 t_updown;	/* last came up or went down */
	int			 stat_err;
	char			 stat_text[WSLOCK_ERR_TEXT];
	struct wsl_buf		 in;
	struct wsl_buf		 out;

	uint64_t		 session;
	uint32_t		 epoch;		/* the server's, from WELCOME */
	int			 session_valid;	/* locks may be reclaimed */
	uint32_t		 lease_ms;
	uint64_t		 lease_base;	/* send time of last answered */
	int			 jeopardy;
	int			 renew_out;	/* a RENEW is unanswered */
	int			 reported;	/* last state given to cb */

	uint64_t		 next_id;
	struct creqs		 reqs;
	struct cevs		 evs;
	struct table		*mirror;
	struct table_sess	*ms;
};

/* Boot time counts a suspended host's sleep, as leases must. */
static uint64_t
now_ms(void)
{
	return clock_ms(CLOCK_BOOTTIME);
}

static uint64_t
mirror_token(void *arg)
{
	return 0;
}

static const struct table_ops mirror_ops = { mirror_token, NULL, NULL };

static void
creq_free(struct creq *r)
{
	if (r == NULL)
		return;
	free((void *)r->q.key);
	free((void *)r->q.chain);
	free(r);
}

static struct creq *
creq_new(struct wslock *wl, uint16_t type, const struct wslock_range *rg)
{
	struct creq	*r;
	uint8_t		*key = NULL;

	if ((r = calloc(1, sizeof *r)) == NULL)
		return NULL;
	if (rg != NULL) {
		if ((key = malloc(rg->keylen)) == NULL) {
			free(r);
			return NULL;
		}
		memcpy(key, rg->key, rg->keylen);
		r->q.key = key;
		r->q.keylen = rg->keylen;
		r->q.owner = rg->owner;
		r->q.start = rg->start;
		r->q.end = rg->end;
	}
	r->type = type;
	r->id = ++wl->next_id;
	r->q.reqid = r->id;
	return r;
}

/* Queue a callback event; on allocation failure the event is dropped. */
static struct cev *
cev_add(struct wslock *wl, enum cev_kind kind, const struct table_req *q)
{
	struct cev	*e;
	uint8_t		*key = NULL;

	if ((e = calloc(1, sizeof *e)) == NULL)
		return NULL;
	if (q != NULL) {
		if ((key = malloc(q->keylen)) == NULL) {
			free(e);
			return NULL;
		}
		memcpy(key, q->key, q->keylen);
		e->r.key = key;
		e->r.keylen = q->keylen;
		e->r.owner = q->owner;
		e->r.start = q->start;
		e->r.end = q->end;
	}
	e->kind = kind;
	TAILQ_INSERT_TAIL(&wl->evs, e, entry);
	/*
	 * Queued outside wslock_process (by a cancel, a blocking call that
	 * drove the handle, ...): the caller's poller must come and deliver.
	 */
	if (!wl->in_process && !wl->woken) {
		uint64_t	one = 1;

		if (write(wl->evfd, &one, sizeof one) == sizeof one)
			wl->woken = 1;
	}
	return e;
}

static void
report_state(struct wslock *wl, int state)
{
	struct cev	*e;

	if (wl->reported == state)
		return;
	wl->reported = state;
	if ((e = cev_add(wl, CEV_STATE, NULL)) != NULL)
		e->status = state;
}

static void
deliver_one(struct wslock *wl, const struct cev *e)
{
	switch (e->kind) {
	case CEV_DONE:
		if (wl->cb.done != NULL)
			wl->cb.done(wl, e->reqid, e->status, e->token,
			    e->reqarg, wl->arg);
		break;
	case CEV_REVOKE:
		if (wl->cb.revoke != NULL)
			wl->cb.revoke(wl, &e->r, e->token, wl->arg);
		break;
	case CEV_LOST:
		if (wl->cb.lost != NULL)
			wl->cb.lost(wl, &e->r, e->mode, e->token, e->status,
			    wl->arg);
		break;
	case CEV_STATE:
		if (wl->cb.state != NULL)
			wl->cb.state(wl, e->status, wl->arg);
		break;
	case CEV_TESTED:
		if (wl->cb.tested != NULL)
			wl->cb.tested(wl, e->reqid, e->status,
			    e->status == 1 ? &e->c : NULL, e->reqarg, wl->arg);
		break;
	}
}

/*
 * Deliver queued events with the mutex released; called only by
 * wslock_process(). One thread delivers at a time, so callbacks never run
 * concurrently and arrive in order; events that callbacks (or other
 * threads) queue meanwhile are delivered by the same loop.
 */
static void
deliver(struct wslock *wl)
{
	struct cevs	 evs;
	struct cev	*e;

	pthread_mutex_lock(&wl->mu);
	if (wl->delivering) {
		pthread_mutex_unlock(&wl->mu);
		return;
	}
	wl->delivering = 1;
	while (!TAILQ_EMPTY(&wl->evs)) {
		TAILQ_INIT(&evs);
		TAILQ_CONCAT(&evs, &wl->evs, entry);
		pthread_mutex_unlock(&wl->mu);
		while ((e = TAILQ_FIRST(&evs)) != NULL) {
			TAILQ_REMOVE(&evs, e, entry);
			deliver_one(wl, e);
			free((void *)e->r.key);
			free(e);
		}
		pthread_mutex_lock(&wl->mu);
	}
	wl->delivering = 0;
	pthread_mutex_unlock(&wl->mu);
}

static void
want_pollout(struct wslock *wl, int on)
{
	struct epoll_event	ev;

	if (wl->sock < 0 || wl->pollout == on)
		return;
	wl->pollout = on;
	ev.events = EPOLLIN | (on ? EPOLLOUT : 0);
	ev.data.fd = wl->sock;
	epoll_ctl(wl->ipfd, EPOLL_CTL_MOD, wl->sock, &ev);
}

static void conn_lost(struct wslock *, int);

static void
flush_out(struct wslock *wl)
{
	ssize_t	n;
	size_t	left;

	/*
	 * Not while frames are dispatched: a failed send would close the
	 * connection and finish requests under the handler's feet (an
	 * UNLOCK sent for a grant nobody waits for any more freed that very
	 * request). The pass flushes once it is done with them.
	 */
	if (wl->sock < 0 || wl->cs == CS_CONNECTING || wl->reading)
		return;
	while ((left = wsl_buf_pending(&wl->out)) > 0) {
		n = send(wl->sock, wl->out.data + wl->out.off, left,
		    MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			conn_lost(wl, -errno);
			return;
		}
		wsl_buf_consume(&wl->out, n);
	}
	want_pollout(wl, wsl_buf_pending(&wl->out) > 0);
}

/* Encode a request onto the current connection. */
static int
creq_send(struct wslock *wl, struct creq *r)
{
	struct wsl_lockreq	lq;
	int			rc;

	lq.owner = r->q.owner;
	lq.start = r->q.start;
	lq.end = r->q.end;
	lq.mode = r->q.mode;
	lq.flags = r->q.flags;
	lq.token = r->q.token;
	lq.key = r->q.key;
	lq.keylen = r->q.keylen;
	lq.nchain = r->q.nchain;
	if (lq.nchain > 0)
		memcpy(lq.chain, r->q.chain, lq.nchain * sizeof lq.chain[0]);
	switch (r->type) {
	case WSL_LOCK:
	case WSL_UNLOCK:
	case WSL_RECLAIM:
		rc = wsl_enc_lock(&wl->out, r->type, r->id, &lq);
		break;
	case WSL_CANCEL:
		rc = wsl_enc_cancel(&wl->out, r->id, r->target);
		break;
	default:
		rc = wsl_enc_empty(&wl->out, r->type, r->id);
		break;
	}
	if (rc < 0)
		return rc;
	r->sent = 1;
	r->t_send = now_ms();
	return 0;
}

/*
 * Finish a request: tell the blocking waiter or queue the done (or
 * tested) callback.
 */
static void
creq_finish(struct wslock *wl, struct creq *r, int status, uint64_t token)
{
	struct cev	*e;
	int		 test = r->type == WSL_LOCK &&
			    (r->q.flags & WSL_LOCK_TEST);

	/* A cancelled test is cancelled, whatever the server answered. */
	if (test && r->cancelled)
		status = -ECANCELED;
	TAILQ_REMOVE(&wl->reqs, r, entry);
	if (r->bw != NULL) {
		r->bw->done = 1;
		r->bw->status = status;
		r->bw->token = token;
		r->bw->conflict = r->conflict;
		pthread_cond_broadcast(&wl->cond);
	} else if (r->type == WSL_LOCK && !r->unlock_on_grant &&
	    !r->internal && (e = cev_add(wl, test ? CEV_TESTED : CEV_DONE,
	    NULL)) != NULL) {
		e->reqid = r->id;
		e->status = status;
		e->token = token;
		e->reqarg = r->reqarg;
		e->c = r->conflict;
	}
	creq_free(r);
}

/* Add a request and send it now if the session is up. */
static int
creq_submit(struct wslock *wl, struct creq *r)
{
	int	rc;

	TAILQ_INSERT_TAIL(&wl->reqs, r, entry);
	if (wl->cs != CS_READY)
		return 0;
	if ((rc = creq_send(wl, r)) < 0) {
		TAILQ_REMOVE(&wl->reqs, r, entry);
		return rc;
	}
	flush_out(wl);
	return 0;
}

struct lost_ctx {
	struct wslock	*wl;
	int		 reason;
};

static int
lost_one(const struct table_entry *te, void *arg)
{
	struct lost_ctx		*lc = arg;
	struct table_req	 q = { te->key, te->keylen, te->owner,
				    te->start, te->end, te->mode, 0, 0, 0,
				    NULL, 0 };
	struct cev		*e;

	if (te->kind != WSL_ITEM_HOLDER)
		return 0;
	if ((e = cev_add(lc->wl, CEV_LOST, &q)) != NULL) {
		e->status = lc->reason;
		e->token = te->token;
		e->mode = te->mode;
	}
	return 0;
}

/* Everything the mirror holds is gone: report it and forget it. */
static void
lose_all(struct wslock *wl, int reason)
{
	struct lost_ctx	lc = { wl, reason };

	table_walk(wl->mirror, wl->ms, lost_one, &lc);
	table_sess_release(wl->mirror, wl->ms);
	wl->session_valid = 0;
	wl->jeopardy = 0;
}

/* Remember why a connection failed, for wslock_conn_stats(). */
static void
note_err(struct wslock *wl, int err, const char *what)
{
	wl->stat_err = err;
	snprintf(wl->stat_text, sizeof wl->stat_text, "%s: %s", what,
	    err == -ETIMEDOUT && wl->cs != CS_READY ?
	    "no answer in time" : err == -EREMCHG ?
	    "a standby, not the active replica" : strerror(-err));
}

/*
 * The server refused our client id: it names a session whose secret we
 * could not prove (ours expired and another took the id, or state lost).
 * Whatever we held is gone; start over under a new id.
 */
static void
forget_session(struct wslock *wl)
{
	if (wl->session_valid || table_sess_nlocks(wl->ms) > 0)
		lose_all(wl, -ENOLCK);
	sodium_memzero(wl->secret, sizeof wl->secret);
	wl->have_secret = 0;
	randombytes_buf(&wl->client_id, sizeof wl->client_id);
}

/*
 * Which server to try after a failure. A connection that was up is tried
 * again at the same address first (a restart, a cut connection); a failed
 * attempt moves on to the next replica at once, or to the one a standby
 * named (or the next one after a silent active replica, see housekeeping),
 * and only a whole round of failures waits for the backoff. Returns 1 to
 * try again now.
 */
static int
next_server(struct wslock *wl, int was_ready)
{
	if (wl->naddrs < 2)
		return 0;
	if (wl->hint == 0 && was_ready) {
		wl->round = 0;
		return 0;
	}
	if (wl->hint > 0) {
		wl->cur = wl->hint - 1;
		wl->hint = 0;
	} else
		wl->cur = (wl->cur + 1) % wl->naddrs;
	if (++wl->round < wl->naddrs)
		return 1;
	wl->round = 0;
	return 0;
}

/*
 * A standby's refusal names the active replica ("not active; active is
 * ADDR"). It comes before any key is agreed, so it is taken only as a
 * hint, and only when it names one of our own servers: at worst a forger
 * makes us try another replica of the list first.
 */
static void
note_hint(struct wslock *wl, const struct wsl_error *e)
{
	static const char	 tag[] = "active is ";
	const char		*p;
	size_t			 i, n;

	if ((p = memmem(e->text, e->textlen, tag, sizeof tag - 1)) == NULL)
		return;
	p += sizeof tag - 1;
	n = e->textlen - (p - (const char *)e->text);
	for (i = 0; i < wl->naddrs; i++)
		if (i != wl->cur && strlen(wl->addr_text[i]) == n &&
		    memcmp(wl->addr_text[i], p, n) == 0) {
			wl->hint = i + 1;
			return;
		}
}

/* The connection is gone; keep the session for a resume if we can. */
static void
conn_lost(struct wslock *wl, int err)
{
	struct creq	*r, *next;

	int		 was_ready = wl->cs == CS_READY;

	if (err != 0)
		note_err(wl, err, wl->cs == CS_READY ? "connection" :
		    wl->cs == CS_CONNECTING ? "connect" : "handshake");
	if (wl->cs == CS_READY) {
		wl->t_updown = now_ms();
		wl->n_attempts_down = 0;
	}
	if (wl->sock >= 0) {
		epoll_ctl(wl->ipfd, EPOLL_CTL_DEL, wl->sock, NULL);
		close(wl->sock);
		wl->sock = -1;
	}
	wl->pollout = 0;
	if (wl->cs != CS_READY && err != 0)
		wl->last_err = err;
	wl->cs = CS_DOWN;
	wl->in.len = wl->in.off = 0;
	wl->out.len = wl->out.off = 0;
	wl->out.seal = NULL;
	wl->mac_in = 0;
	sodium_memzero(&wl->rx, sizeof wl->rx);
	sodium_memzero(&wl->tx, sizeof wl->tx);
	sodium_memzero(wl->pad, sizeof wl->pad);
	wl->renew_out = 0;
	if (next_server(wl, was_ready))
		wl->reconnect_at = now_ms();
	else {
		/*
		 * After a round in which a standby refused us the active
		 * replica is gone or going, and a successor is elected about
		 * when its lease ends: look again at least every
		 * STANDBY_RETRY_MS, whatever the backoff grew to.
		 */
		wl->reconnect_at = now_ms() + (wl->standby_seen &&
		    wl->backoff > STANDBY_RETRY_MS ? STANDBY_RETRY_MS :
		    wl->backoff);
		wl->standby_seen = 0;
		wl->backoff = wl->backoff * 2 > BACKOFF_MAX_MS ?
		    BACKOFF_MAX_MS : wl->backoff * 2;
	}
	/*
	 * Unanswered lock requests are sent again after the reconnect; the
	 * rest (unlocks, renewals, reclaims) were about the old connection
	 * and the resume resynchronises them.
	 */
	TAILQ_FOREACH_SAFE(r, &wl->reqs, entry, next) {
		if (r->type == WSL_LOCK) {
			if (r->cancelled && r->sent)
				creq_finish(wl, r, -ECANCELED, 0);
			else
				r->sent = 0;
			continue;
		}
		if (r->sent)
			creq_finish(wl, r, -ECONNRESET, 0);
	}
	report_state(wl, WSLOCK_DOWN);
}

static int
conn_start(struct wslock *wl)
{
	struct addrinfo		 hints, *res = NULL, *ai;
	struct sockaddr_un	 sun;
	struct epoll_event	 ev;
	struct wsl_hello	 h;
	int			 fd = -1, one = 1, r;

	wl->addr = wl->addrs[wl->cur];
	wl->cs = CS_CONNECTING;
	wl->t_hello = now_ms();
	wl->n_attempts++;
	wl->n_attempts_down++;
	if (wl->addr.family == AF_UNIX) {
		memset(&sun, 0, sizeof sun);
		sun.sun_family = AF_UNIX;
		memcpy(sun.sun_path, wl->addr.host, strlen(wl->addr.host));
		if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, 0)) < 0)
			goto fail;
		if (connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0 &&
		    errno != EINPROGRESS && errno != EAGAIN)
			goto fail;
	} else {
		memset(&hints, 0, sizeof hints);
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		if ((r = getaddrinfo(wl->addr.host[0] ? wl->addr.host :
		    "localhost", wl->addr.port, &hints, &res)) != 0) {
			errno = r == EAI_NONAME ? ENOENT : EHOSTUNREACH;
			goto fail;
		}
		for (ai = res; ai != NULL; ai = ai->ai_next) {
			if ((fd = socket(ai->ai_family, ai->ai_socktype |
			    SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
				continue;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof one);
			if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ||
			    errno == EINPROGRESS)
				break;
			close(fd);
			fd = -1;
		}
		freeaddrinfo(res);
		if (fd < 0)
			goto fail;
	}
	wl->sock = fd;
	ev.events = EPOLLIN | EPOLLOUT;
	ev.data.fd = fd;
	wl->pollout = 1;
	if (epoll_ctl(wl->ipfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		r = -errno;
		conn_lost(wl, r);
		return r;
	}
	/* HELLO goes out as soon as the socket is writable. */
	memset(&h, 0, sizeof h);
	h.flags = wl->session_valid ? WSL_HELLO_RESUME : 0;
	h.client_id = wl->client_id;
	randombytes_buf(wl->cnonce, sizeof wl->cnonce);
	memcpy(h.nonce, wl->cnonce, sizeof h.nonce);
	/* The server lets only the secret's holder speak for our id. */
	if (wl->have_secret)
		auth_resume_proof(wl->secret, wl->cnonce, wl->client_id,
		    h.resume);
	h.name = wl->name;
	h.namelen = strlen(wl->name);
	if ((r = wsl_enc_hello(&wl->out, 0, &h)) < 0) {
		conn_lost(wl, r);
		return r;
	}
	return 0;
fail:
	r = -errno;
	if (fd >= 0)
		close(fd);
	conn_lost(wl, r);
	return r;
}

struct reclaim_ctx {
	struct wslock	*wl;
	int		 err;
};

static int
reclaim_one(const struct table_entry *te, void *arg)
{
	struct reclaim_ctx	*rc = arg;
	struct wslock_range	 rg = { te->key, te->keylen, te->owner,
				    te->start, te->end };
	struct creq		*r;

	if (te->kind != WSL_ITEM_HOLDER)
		return 0;
	if ((r = creq_new(rc->wl, WSL_RECLAIM, &rg)) == NULL)
		return (rc->err = -ENOMEM);
	r->q.mode = te->mode;
	r->q.flags = te->cached ? WSL_LOCK_CACHED : 0;
	r->q.token = te->token;
	TAILQ_INSERT_TAIL(&rc->wl->reqs, r, entry);
	if ((rc->err = creq_send(rc->wl, r)) < 0)
		return rc->err;
	return 0;
}

static int
on_welcome(struct wslock *wl, const struct wsl_frame *f)
{
	struct wsl_welcome	 w;
	struct reclaim_ctx	 rc = { wl, 0 };
	struct creq		*r, *next;
	size_t			 i;
	int			 err;

	if (wsl_dec_welcome(f, &w) < 0)
		return -EPROTO;
	/* The session's secret, hidden on TCP by a pad from the key. */
	for (i = 0; i < sizeof w.secret; i++)
		wl->secret[i] = w.secret[i] ^
		    (wl->addr.family != AF_UNIX ? wl->pad[i] : 0);
	wl->have_secret = 1;
	sodium_memzero(&w.secret, sizeof w.secret);
	sodium_memzero(wl->pad, sizeof wl->pad);
	if (wl->mac_in)
		wl->out.seal = &wl->tx;
	wl->session = w.session;
	wl->epoch = w.epoch;
	wl->lease_ms = w.lease_ms;
	wl->lease_base = wl->t_hello;
	wl->jeopardy = 0;
	wl->cs = CS_READY;
	wl->backoff = BACKOFF_MIN_MS;
	wl->standby_seen = 0;
	wl->round = 0;
	wl->last_err = 0;
	wl->n_connects++;
	wl->t_updown = now_ms();
	if (w.flags & (WSL_WELCOME_RESUMED | WSL_WELCOME_GRACE)) {
		table_walk(wl->mirror, wl->ms, reclaim_one, &rc);
		if (rc.err < 0)
			return rc.err;
		if ((r = creq_new(wl, WSL_RECLAIM_DONE, NULL)) == NULL)
			return -ENOMEM;
		TAILQ_INSERT_TAIL(&wl->reqs, r, entry);
		if ((err = creq_send(wl, r)) < 0)
			return err;
	} else if (table_sess_nlocks(wl->ms) > 0)
		lose_all(wl, -ENOLCK);
	wl->session_valid = 1;
	TAILQ_FOREACH_SAFE(r, &wl->reqs, entry, next) {
		if (r->sent)
			continue;
		if (r->type == WSL_LOCK && r->cancelled) {
			creq_finish(wl, r, -ECANCELED, 0);
			continue;
		}
		if ((err = creq_send(wl, r)) < 0)
			return err;
	}
	report_state(wl, WSLOCK_UP);
	return 0;
}

static struct creq *
creq_find(struct wslock *wl, uint64_t id)
{
	struct creq	*r;

	TAILQ_FOREACH(r, &wl->reqs, entry)
		if (r->id == id && r->sent)
			return r;
	return NULL;
}

#define RESTORE_MAX	64

struct restore_ctx {
	const struct table_req	*q;
	struct table_req	 piece[RESTORE_MAX];
	size_t			 n;
};

static int
restore_collect(const struct table_entry *te, void *arg)
{
	struct restore_ctx	*rc = arg;
	struct table_req	*p;

	if (te->kind != WSL_ITEM_HOLDER || te->owner != rc->q->owner ||
	    te->keylen != rc->q->keylen ||
	    memcmp(te->key, rc->q->key, te->keylen) != 0 ||
	    te->end <= rc->q->start || te->start >= rc->q->end)
		return 0;
	if (rc->n == RESTORE_MAX)
		return 1;
	p = &rc->piece[rc->n++];
	*p = *rc->q;
	p->start = te->start > rc->q->start ? te->start : rc->q->start;
	p->end = te->end < rc->q->end ? te->end : rc->q->end;
	p->mode = te->mode;
	p->flags = te->cached ? WSL_LOCK_CACHED : 0;
	return 0;
}

static int
piece_cmp(const void *a, const void *b)
{
	const struct table_req	*x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Send an UNLOCK (mode 0) or one of the library's own LOCKs for q. */
static void
send_piece(struct wslock *wl, const struct table_req *q, uint64_t start,
    uint64_t end, uint8_t mode, uint8_t flags)
{
	struct wslock_range	 rg = { q->key, q->keylen, q->owner, start,
				    end };
	struct creq		*u;

	if ((u = creq_new(wl, mode ? WSL_LOCK : WSL_UNLOCK, &rg)) == NULL)
		return;
	u->q.mode = mode;
	u->q.flags = flags;
	u->internal = 1;
	if (creq_submit(wl, u) < 0)
		creq_free(u);
}

/*
 * A grant arrived for a request its blocking caller gave up on. Put the
 * owner's range back as it was before the request: unlock where it held
 * nothing, and where it held something (a timed-out upgrade) take that
 * back in its old mode, which the new grant makes always possible.
 */
static void
undo_grant(struct wslock *wl, const struct table_req *q)
{
	struct restore_ctx	rc;
	uint64_t		pos = q->start;
	size_t			i;

	memset(&rc, 0, sizeof rc);
	rc.q = q;
	if (table_walk(wl->mirror, wl->ms, restore_collect, &rc) != 0) {
		/* Too fragmented to restore piecewise: release it all. */
		send_piece(wl, q, q->start, q->end, 0, 0);
		table_unlock(wl->mirror, wl->ms, q);
		return;
	}
	qsort(rc.piece, rc.n, sizeof rc.piece[0], piece_cmp);
	for (i = 0; i < rc.n; i++) {
		if (rc.piece[i].start > pos)
			send_piece(wl, q, pos, rc.piece[i].start, 0, 0);
		send_piece(wl, q, rc.piece[i].start, rc.piece[i].end,
		    rc.piece[i].mode, rc.piece[i].flags);
		pos = rc.piece[i].end;
	}
	if (pos < q->end)
		send_piece(wl, q, pos, q->end, 0, 0);
}

/* A lock request was granted, now or after a wait. */
static void
lock_granted(struct wslock *wl, struct creq *r, uint64_t token)
{
	struct creq	*u;

	if (r->unlock_on_grant) {
		undo_grant(wl, &r->q);
		creq_finish(wl, r, -ECANCELED, 0);
		return;
	}
	if (table_insert(wl->mirror, wl->ms, &r->q, token) < 0) {
		/* Cannot track it, so cannot keep it. */
		if ((u = creq_new(wl, WSL_UNLOCK, NULL)) != NULL) {
			/* The key moves to the UNLOCK; the chain stays. */
			u->q = r->q;
			u->q.chain = NULL;
			u->q.nchain = 0;
			r->q.key = NULL;
			if (creq_submit(wl, u) < 0)
				creq_free(u);
		}
		creq_finish(wl, r, -ENOMEM, 0);
		return;
	}
	creq_finish(wl, r, 0, token);
}

static int
on_reply(struct wslock *wl, const struct wsl_frame *f)
{
	struct creq		*r;
	struct wsl_error	 e;
	struct wsl_conflict	 c;
	struct wsl_item		 it;
	struct wslock_item	*items, *ni;
	uint64_t		 v;
	uint8_t			*copy;

	if ((r = creq_find(wl, f->id)) == NULL)
		return f->type == WSL_ERROR ? 0 : -EPROTO;
	if (f->type != WSL_GRANT && f->type != WSL_LIST_ITEM &&
	    r->t_send > wl->lease_base)
		wl->lease_base = r->t_send;
	switch (f->type) {
	case WSL_OK:
	case WSL_GRANT:
		if (wsl_dec_u64(f, &v) < 0)
			return -EPROTO;
		if (r->type == WSL_LOCK && !(r->q.flags & WSL_LOCK_TEST))
			lock_granted(wl, r, v);
		else {
			if (r->type == WSL_RENEW)
				wl->renew_out = 0;
			creq_finish(wl, r, 0, v);
		}
		break;
	case WSL_QUEUED:
		if (wsl_dec_empty(f) < 0 || r->type != WSL_LOCK)
			return -EPROTO;
		break;
	case WSL_CONFLICT:
		if (wsl_dec_conflict(f, &c) < 0 || r->type != WSL_LOCK ||
		    !(r->q.flags & WSL_LOCK_TEST))
			return -EPROTO;
		r->conflict.session = c.session;
		r->conflict.owner = c.owner;
		r->conflict.start = c.start;
		r->conflict.end = c.end;
		r->conflict.mode = c.mode;
		creq_finish(wl, r, 1, 0);
		break;
	case WSL_ERROR:
		if (wsl_dec_error(f, &e) < 0)
			return -EPROTO;
		if (r->type == WSL_RECLAIM) {
			/* Not ours any more: report it and drop it. */
			struct lost_ctx		lc = { wl, -ESTALE };
			struct table_entry	te;

			memset(&te, 0, sizeof te);
			te.kind = WSL_ITEM_HOLDER;
			te.key = r->q.key;
			te.keylen = r->q.keylen;
			te.owner = r->q.owner;
			te.start = r->q.start;
			te.end = r->q.end;
			te.mode = r->q.mode;
			te.token = r->q.token;
			lost_one(&te, &lc);
			table_unlock(wl->mirror, wl->ms, &r->q);
		}
		if (r->type == WSL_RENEW)
			wl->renew_out = 0;
		creq_finish(wl, r, wsl_err_to_errno(e.code), 0);
		break;
	case WSL_LIST_ITEM:
		if (wsl_dec_item(f, &it) < 0 || r->type != WSL_LIST)
			return -EPROTO;
		if (r->bw == NULL)
			break;
		if (r->bw->nitems == r->bw->capitems) {
			items = reallocarray(r->bw->items,
			    r->bw->capitems ? r->bw->capitems * 2 : 64,
			    sizeof *items);
			if (items == NULL)
				return -ENOMEM;
			r->bw->items = items;
			r->bw->capitems = r->bw->capitems ?
			    r->bw->capitems * 2 : 64;
		}
		if ((copy = malloc(it.datalen + 1)) == NULL)
			return -ENOMEM;
		memcpy(copy, it.data, it.datalen);
		copy[it.datalen] = '\0';
		ni = &r->bw->items[r->bw->nitems++];
		memset(ni, 0, sizeof *ni);
		ni->kind = it.kind;
		ni->session = it.session;
		ni->client_id = it.client_id;
		ni->lease_left_ms = it.lease_left_ms;
		ni->connected = it.connected;
		ni->owner = it.owner;
		ni->start = it.start;
		ni->end = it.end;
		if (it.kind == WSL_ITEM_WAITER)
			ni->reqid = it.token;
		else
			ni->token = it.token;
		ni->mode = it.mode;
		ni->cached = (it.flags & WSL_LOCK_CACHED) != 0;
		ni->data = copy;
		ni->datalen = it.datalen;
		break;
	case WSL_LIST_END:
		if (wsl_dec_empty(f) < 0 || r->type != WSL_LIST)
			return -EPROTO;
		creq_finish(wl, r, 0, 0);
		break;
	}
	return 0;
}

static int
on_frame(struct wslock *wl, const struct wsl_frame *f)
{
	struct wsl_revoke	 v;
	struct wsl_error	 e;
	struct table_req	 q;
	struct cev		*ev;
	uint8_t			 mac[WSL_MAC_LEN];
	uint8_t			 c2s[WSL_MAC_LEN], s2c[WSL_MAC_LEN];

	switch (wl->cs) {
	case CS_HELLO:
	case CS_AUTH:
		if (f->type == WSL_ERROR) {
			if (wsl_dec_error(f, &e) < 0)
				return -EPROTO;
			if (e.code == WSL_E_SECRET)
				forget_session(wl);
			if (e.code == WSL_E_NOTACTIVE) {
				note_hint(wl, &e);
				wl->standby_seen = 1;
			}
			return wsl_err_to_errno(e.code);
		}
		if (f->type == WSL_CHALLENGE && wl->cs == CS_HELLO) {
			if (wsl_dec_nonce(f, wl->snonce) < 0 || wl->key == NULL)
				return -EPROTO;
			auth_mac(wl->key, wl->keylen, WSL_LABEL_CLIENT,
			    wl->snonce, wl->cnonce, wl->client_id, mac);
			if (wsl_enc_auth(&wl->out, 0, mac) < 0)
				return -ENOMEM;
			/*
			 * From WELCOME on every frame carries a MAC; only a
			 * server that knows the key can make WELCOME's.
			 */
			auth_session_keys(wl->key, wl->keylen, wl->cnonce,
			    wl->snonce, wl->client_id, c2s, s2c, wl->pad);
			wsl_seal_init(&wl->tx, c2s);
			wsl_seal_init(&wl->rx, s2c);
			sodium_memzero(c2s, sizeof c2s);
			sodium_memzero(s2c, sizeof s2c);
			wl->mac_in = 1;
			wl->cs = CS_AUTH;
			return 0;
		}
		if (f->type != WSL_WELCOME ||
		    (wl->addr.family != AF_UNIX && wl->cs != CS_AUTH))
			return -EPROTO;
		return on_welcome(wl, f);
	case CS_READY:
		break;
	default:
		return -EPROTO;
	}
	switch (f->type) {
	case WSL_REVOKE:
		if (wsl_dec_revoke(f, &v) < 0)
			return -EPROTO;
		q = (struct table_req){ v.key, v.keylen, v.owner, v.start,
		    v.end, 0, 0, 0, 0, NULL, 0 };
		if ((ev = cev_add(wl, CEV_REVOKE, &q)) != NULL)
			ev->token = v.token;
		return 0;
	case WSL_EXPIRED:
		lose_all(wl, -ENOLCK);
		return -ENOLCK;
	default:
		return on_reply(wl, f);
	}
}

static void
read_in(struct wslock *wl)
{
	struct wsl_frame	f;
	ssize_t			n;
	int			len, r;

	for (;;) {
		if (wsl_buf_reserve(&wl->in, 65536) < 0) {
			conn_lost(wl, -ENOMEM);
			return;
		}
		n = recv(wl->sock, wl->in.data + wl->in.len,
		    wl->in.cap - wl->in.len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			conn_lost(wl, n == 0 ? -ECONNRESET : -errno);
			return;
		}
		wl->in.len += n;
		while ((len = wsl_frame_decode(wl->in.data + wl->in.off,
		    wsl_buf_pending(&wl->in), WSL_MAX_FRAME, &f)) > 0) {
			/*
			 * The server's refusals in the handshake come before
			 * there are keys to MAC them with, so they carry none.
			 */
			if (wl->mac_in && !(wl->cs == CS_AUTH &&
			    f.type == WSL_ERROR) && wsl_frame_open(&wl->rx,
			    wl->in.data + wl->in.off, &f) < 0) {
				/* A WELCOME not from a holder of the key. */
				conn_lost(wl, wl->cs == CS_AUTH ? -EACCES :
				    -EBADMSG);
				return;
			}
			wl->reading = 1;
			r = on_frame(wl, &f);
			wl->reading = 0;
			if (r < 0) {
				conn_lost(wl, r);
				return;
			}
			wsl_buf_consume(&wl->in, len);
		}
		if (len < 0) {
			conn_lost(wl, -EPROTO);
			return;
		}
		/* A short read emptied the socket: spare the EAGAIN call. */
		if (wl->in.cap - wl->in.len > 0 && (size_t)n < 65536)
			return;
	}
}

/* Lease bookkeeping, renewals and reconnects; called on every pass. */
static void
housekeeping(struct wslock *wl)
{
	struct creq	*r;
	uint64_t	 now = now_ms(), age;

	if (wl->session_valid && wl->lease_ms > 0) {
		age = now - wl->lease_base;
		if (age >= (uint64_t)wl->lease_ms * 9 / 10) {
			note_err(wl, -ETIMEDOUT, "lease");
			lose_all(wl, -ETIMEDOUT);
			/* Start afresh: the server frees the old session. */
			if (wl->cs != CS_DOWN)
				conn_lost(wl, 0);
			wl->reconnect_at = now;
		} else if (age >= wl->lease_ms / 2 && !wl->jeopardy) {
			wl->jeopardy = 1;
			report_state(wl, WSLOCK_JEOPARDY);
			/*
			 * A replica that holds the connection and stops
			 * answering (paused, cut off from etcd) may have been
			 * succeeded: try the next one while the lease lasts.
			 */
			if (wl->naddrs > 1 && wl->cs == CS_READY) {
				wl->hint = (wl->cur + 1) % wl->naddrs + 1;
				conn_lost(wl, -ETIMEDOUT);
			}
		} else if (wl->cs == CS_READY && age >= wl->lease_ms / 4 &&
		    !wl->renew_out &&
		    (r = creq_new(wl, WSL_RENEW, NULL)) != NULL) {
			wl->renew_out = 1;
			if (creq_submit(wl, r) < 0)
				creq_free(r);
		}
		if (wl->jeopardy && age < wl->lease_ms / 2 &&
		    wl->cs == CS_READY) {
			wl->jeopardy = 0;
			report_state(wl, WSLOCK_UP);
		}
	}
	if (wl->cs != CS_DOWN && wl->cs != CS_READY &&
	    now - wl->t_hello >= HANDSHAKE_MS)
		conn_lost(wl, -ETIMEDOUT);
	if (wl->cs == CS_DOWN && now >= wl->reconnect_at)
		conn_start(wl);
}

/*
 * Handle what epoll reported (n events in evs), then the clock. Called
 * with wl->mu held by the one thread that is processing.
 */
static void
process_events(struct wslock *wl, const struct epoll_event *evs, int n)
{
	uint64_t	exp;
	int		i, err;
	socklen_t	len = sizeof err;

	for (i = 0; i < n; i++) {
		if (evs[i].data.fd == wl->tfd) {
			if (read(wl->tfd, &exp, sizeof exp) < 0) {
				/* EAGAIN: another pass already read it. */
			}
			continue;
		}
		if (evs[i].data.fd != wl->sock || wl->sock < 0)
			continue;
		if (wl->cs == CS_CONNECTING) {
			if (getsockopt(wl->sock, SOL_SOCKET, SO_ERROR, &err,
			    &len) < 0 || err != 0) {
				conn_lost(wl, err ? -err : -errno);
				continue;
			}
			wl->cs = CS_HELLO;
		}
		if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
			read_in(wl);
	}
	housekeeping(wl);
	if (wl->sock >= 0)
		flush_out(wl);
}

/*
 * Wait up to timeout_ms for the handle's descriptors with wl->mu released,
 * then process. The caller has set wl->processing, so no other thread
 * processes meanwhile; other threads may still submit requests.
 */
static void
process_wait(struct wslock *wl, int timeout_ms)
{
	struct epoll_event	evs[4];
	int			n;

	/* The lease clock first: a process woken from SIGSTOP must see
	 * that its locks are gone before it reads stale grants. */
	housekeeping(wl);
	if (timeout_ms != 0) {
		pthread_mutex_unlock(&wl->mu);
		n = epoll_wait(wl->ipfd, evs, 4, timeout_ms);
		pthread_mutex_lock(&wl->mu);
	} else
		n = epoll_wait(wl->ipfd, evs, 4, 0);
	process_events(wl, evs, n < 0 ? 0 : n);
}

int
wslock_process(struct wslock *wl)
{
	uint64_t	v;

	pthread_mutex_lock(&wl->mu);
	/* Blocking callers let us in first: only we deliver callbacks. */
	wl->want_process++;
	while (wl->processing)
		pthread_cond_wait(&wl->cond, &wl->mu);
	wl->want_process--;
	wl->processing = 1;
	wl->in_process = 1;
	/* Whatever woke us is delivered below. */
	if (wl->woken && read(wl->evfd, &v, sizeof v) == sizeof v)
		wl->woken = 0;
	process_wait(wl, 0);
	wl->in_process = 0;
	wl->processing = 0;
	pthread_cond_broadcast(&wl->cond);
	pthread_mutex_unlock(&wl->mu);
	deliver(wl);
	return 0;
}

int
wslock_fd(const struct wslock *wl)
{
	return wl->epfd;
}

/*
 * "A,B,C": the replicas of one lock service, tried in turn. Each is an
 * address addr_parse() takes; empty items and more than MAX_SERVERS
 * are errors.
 */
static int
addr_list_parse(struct wslock *wl, const char *list)
{
	const char	*p = list, *comma;
	size_t		 len;

	for (;;) {
		comma = strchr(p, ',');
		len = comma != NULL ? (size_t)(comma - p) : strlen(p);
		if (len == 0 || len >= WSLOCK_ADDR_TEXT ||
		    wl->naddrs == MAX_SERVERS)
			return -EINVAL;
		memcpy(wl->addr_text[wl->naddrs], p, len);
		wl->addr_text[wl->naddrs][len] = '\0';
		if (addr_parse(wl->addr_text[wl->naddrs],
		    &wl->addrs[wl->naddrs]) < 0)
			return -EINVAL;
		wl->naddrs++;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	wl->addr = wl->addrs[0];
	return 0;
}

static int
needs_key(const struct wslock *wl)
{
	size_t	i;

	for (i = 0; i < wl->naddrs; i++)
		if (wl->addrs[i].family != AF_UNIX)
			return 1;
	return 0;
}

int
wslock_open(const struct wslock_params *p, struct wslock **out)
{
	struct wslock		*wl;
	struct epoll_event	 ev;
	struct itimerspec	 its;
	int			 r;

	if (p == NULL || p->addr == NULL)
		return -EINVAL;
	if (sodium_init() < 0)
		return -ENOMEM;
	if ((wl = calloc(1, sizeof *wl)) == NULL)
		return -ENOMEM;
	wl->epfd = wl->ipfd = wl->tfd = wl->evfd = wl->sock = -1;
	TAILQ_INIT(&wl->reqs);
	TAILQ_INIT(&wl->evs);
	pthread_mutex_init(&wl->mu, NULL);
	pthread_cond_init(&wl->cond, NULL);
	wl->reported = WSLOCK_DOWN;
	wl->backoff = BACKOFF_MIN_MS;
	wl->t_updown = now_ms();
	if ((r = addr_list_parse(wl, p->addr)) < 0)
		goto fail;
	if (needs_key(wl)) {
		if (p->keyfile == NULL) {
			r = -EINVAL;
			goto fail;
		}
		if ((r = auth_keyfile_load(p->keyfile, &wl->key,
		    &wl->keylen)) < 0)
			goto fail;
	}
	if (p->cb != NULL)
		wl->cb = *p->cb;
	wl->arg = p->arg;
	if (p->name != NULL)
		snprintf(wl->name, sizeof wl->name, "%s", p->name);
	else if (gethostname(wl->name, sizeof wl->name - 1) < 0)
		wl->name[0] = '\0';
	randombytes_buf(&wl->client_id, sizeof wl->client_id);
	if ((wl->mirror = table_new(&mirror_ops, wl, UINT32_MAX,
	    UINT32_MAX)) == NULL ||
	    (wl->ms = table_sess_new(wl->mirror, 0, wl)) == NULL) {
		r = -ENOMEM;
		goto fail;
	}
	if ((wl->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (wl->ipfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (wl->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
	    (wl->tfd = timerfd_create(CLOCK_BOOTTIME,
	    TFD_NONBLOCK | TFD_CLOEXEC)) < 0) {
		r = -errno;
		goto fail;
	}
	/*
	 * The caller polls epfd: readable when the connection or the clock
	 * (ipfd) needs a pass, or when events wait for delivery (evfd). The
	 * library itself waits on ipfd alone, so pending events never make
	 * a blocking call spin.
	 */
	ev.events = EPOLLIN;
	ev.data.fd = wl->ipfd;
	if (epoll_ctl(wl->epfd, EPOLL_CTL_ADD, wl->ipfd, &ev) < 0) {
		r = -errno;
		goto fail;
	}
	ev.data.fd = wl->evfd;
	if (epoll_ctl(wl->epfd, EPOLL_CTL_ADD, wl->evfd, &ev) < 0) {
		r = -errno;
		goto fail;
	}
	/* A steady tick drives renewals, lease checks and reconnects. */
	memset(&its, 0, sizeof its);
	its.it_value.tv_nsec = its.it_interval.tv_nsec = 20 * 1000000;
	ev.data.fd = wl->tfd;
	if (timerfd_settime(wl->tfd, 0, &its, NULL) < 0 ||
	    epoll_ctl(wl->ipfd, EPOLL_CTL_ADD, wl->tfd, &ev) < 0) {
		r = -errno;
		goto fail;
	}
	pthread_mutex_lock(&wl->mu);
	conn_start(wl);
	pthread_mutex_unlock(&wl->mu);
	*out = wl;
	return 0;
fail:
	if (wl->epfd >= 0)
		close(wl->epfd);
	if (wl->ipfd >= 0)
		close(wl->ipfd);
	if (wl->evfd >= 0)
		close(wl->evfd);
	if (wl->tfd >= 0)
		close(wl->tfd);
	table_sess_free(wl->mirror, wl->ms);
	table_free(wl->mirror);
	sodium_free(wl->key);
	pthread_mutex_destroy(&wl->mu);
	pthread_cond_destroy(&wl->cond);
	free(wl);
	return r;
}

static int
range_ok(const struct wslock_range *rg)
{
	return rg != NULL && rg->key != NULL && rg->keylen > 0 &&
	    rg->keylen <= WSL_MAX_KEY && rg->start < rg->end;
}

/*
 * A copy of a chain in one allocation, the keys after the array (freed
 * with the request), or NULL. The keys were checked by the caller.
 */
static struct wsl_key *
chain_copy(const struct wslock_key *chain, size_t n)
{
	struct wsl_key	*c;
	uint8_t		*p;
	size_t		 i, len = n * sizeof *c;

	for (i = 0; i < n; i++)
		len += chain[i].len;
	if ((c = malloc(len)) == NULL)
		return NULL;
	p = (uint8_t *)(c + n);
	for (i = 0; i < n; i++) {
		memcpy(p, chain[i].key, chain[i].len);
		c[i].key = p;
		c[i].len = chain[i].len;
		p += chain[i].len;
	}
	return c;
}

/* At most WSL_MAX_CHAIN keys, each of 1..WSL_MAX_KEY bytes. */
static int
chain_ok(const struct wslock_key *chain, size_t n)
{
	size_t	i;

	if (n > WSL_MAX_CHAIN || (n > 0 && chain == NULL))
		return 0;
	for (i = 0; i < n; i++)
		if (chain[i].key == NULL || chain[i].len == 0 ||
		    chain[i].len > WSL_MAX_KEY)
			return 0;
	return 1;
}

static int
lock_submit_chain(struct wslock *wl, const struct wslock_range *rg,
    const struct wslock_key *chain, size_t n, int mode, int flags,
    void *reqarg, struct bwait *bw, uint64_t *reqid)
{
	struct creq	*r;
	int		 rc;

	if (!range_ok(rg) || (mode != WSLOCK_SHARED &&
	    mode != WSLOCK_EXCLUSIVE) ||
	    (flags & ~(WSL_LOCK_WAIT | WSL_LOCK_CACHED | WSL_LOCK_TEST |
	    WSL_LOCK_QUIET)) || ((flags & WSL_LOCK_QUIET) &&
	    (flags & (WSL_LOCK_WAIT | WSL_LOCK_TEST))) || !chain_ok(chain, n))
		return -EINVAL;
	if ((r = creq_new(wl, WSL_LOCK, rg)) == NULL)
		return -ENOMEM;
	if (n > 0) {
		if ((r->q.chain = chain_copy(chain, n)) == NULL) {
			creq_free(r);
			return -ENOMEM;
		}
		r->q.nchain = n;
		flags |= WSL_LOCK_UNDER | (n > 1 ? WSL_LOCK_ABOVE : 0);
	}
	r->q.mode = mode;
	r->q.flags = flags;
	r->reqarg = reqarg;
	r->bw = bw;
	if ((rc = creq_submit(wl, r)) < 0) {
		creq_free(r);
		return rc;
	}
	if (reqid != NULL)
		*reqid = r->id;
	return 0;
}

static int
lock_submit(struct wslock *wl, const struct wslock_range *rg, int mode,
    int flags, void *reqarg, struct bwait *bw, uint64_t *reqid)
{
	return lock_submit_chain(wl, rg, NULL, 0, mode, flags, reqarg, bw,
	    reqid);
}

int
wslock_lock(struct wslock *wl, const struct wslock_range *rg, int mode,
    int flags, void *reqarg, uint64_t *reqid)
{
	int	r;

	if (flags & ~(WSLOCK_WAIT | WSLOCK_CACHED | WSLOCK_QUIET))
		return -EINVAL;
	pthread_mutex_lock(&wl->mu);
	r = lock_submit(wl, rg, mode, flags, reqarg, NULL, reqid);
	pthread_mutex_unlock(&wl->mu);
	return r;
}

int
wslock_lock_chain(struct wslock *wl, const struct wslock_range *rg,
    const struct wslock_key *chain, size_t n, int mode, int flags,
    void *reqarg, uint64_t *reqid)
{
	int	r;

	if (n == 0 || (flags & ~(WSLOCK_WAIT | WSLOCK_CACHED |
	    WSLOCK_QUIET)))
		return -EINVAL;
	pthread_mutex_lock(&wl->mu);
	r = lock_submit_chain(wl, rg, chain, n, mode, flags, reqarg, NULL,
	    reqid);
	pthread_mutex_unlock(&wl->mu);
	return r;
}

int
wslock_lock_under(struct wslock *wl, const struct wslock_range *rg,
    const void *parent, size_t parentlen, int mode, int flags, void *reqarg,
    uint64_t *reqid)
{
	struct wslock_key	k = { parent, parentlen };

	return wslock_lock_chain(wl, rg, &k, 1, mode, flags, reqarg, reqid);
}

int
wslock_test(struct wslock *wl, const struct wslock_range *rg, int mode,
    void *reqarg, uint64_t *reqid)
{
	int	r;

	/* Without the callback the answer would have nowhere to go. */
	if (wl->cb.tested == NULL)
		return -EINVAL;
	pthread_mutex_lock(&wl->mu);
	r = lock_submit(wl, rg, mode, WSL_LOCK_TEST, reqarg, NULL, reqid);
	pthread_mutex_unlock(&wl->mu);
	return r;
}

static int
unlock_submit(struct wslock *wl, const struct wslock_range *rg,
    struct bwait *bw)
{
	struct creq	*r;
	int		 rc;

	if (!range_ok(rg))
		return -EINVAL;
	if ((r = creq_new(wl, WSL_UNLOCK, rg)) == NULL)
		return -ENOMEM;
	r->bw = bw;
	table_unlock(wl->mirror, wl->ms, &r->q);
	if (wl->cs != CS_READY) {
		/* The resync after the reconnect releases it on the server. */
		if (bw != NULL)
			bw->done = 1;
		creq_free(r);
		return 0;
	}
	if ((rc = creq_submit(wl, r)) < 0)
		creq_free(r);
	return rc;
}

int
wslock_unlock(struct wslock *wl, const struct wslock_range *rg)
{
	int	r;

	pthread_mutex_lock(&wl->mu);
	r = unlock_submit(wl, rg, NULL);
	pthread_mutex_unlock(&wl->mu);
	return r;
}

static int
cancel_locked(struct wslock *wl, uint64_t reqid)
{
	struct creq	*r, *c;
	int		 rc;

	TAILQ_FOREACH(r, &wl->reqs, entry)
		if (r->id == reqid && r->type == WSL_LOCK)
			break;
	if (r == NULL || r->cancelled)
		return -ENOENT;
	r->cancelled = 1;
	if (!r->sent) {
		creq_finish(wl, r, -ECANCELED, 0);
		return 0;
	}
	/* A test never waits on the server: its answer is just dropped. */
	if (r->q.flags & WSL_LOCK_TEST)
		return 0;
	if ((c = creq_new(wl, WSL_CANCEL, NULL)) == NULL)
		return -ENOMEM;
	c->target = reqid;
	if ((rc = creq_submit(wl, c)) < 0)
		creq_free(c);
	return rc;
}

int
wslock_cancel(struct wslock *wl, uint64_t reqid)
{
	int	r;

	pthread_mutex_lock(&wl->mu);
	r = cancel_locked(wl, reqid);
	pthread_mutex_unlock(&wl->mu);
	return r;
}

struct held_ctx {
	const struct wslock_range	*rg;
	int				 mode;
	uint64_t			 pos;
	uint64_t			 token;
	int				 progress;
};

static int
held_one(const struct table_entry *te, void *arg)
{
	struct held_ctx	*hc = arg;

	if (te->kind != WSL_ITEM_HOLDER || te->owner != hc->rg->owner ||
	    te->keylen != hc->rg->keylen ||
	    memcmp(te->key, hc->rg->key, te->keylen) != 0 ||
	    te->mode < hc->mode)
		return 0;
	if (te->start <= hc->pos && te->end > hc->pos) {
		hc->pos = te->end;
		if (te->token > hc->token)
			hc->token = te->token;
		hc->progress = 1;
	}
	return 0;
}

int
wslock_held(struct wslock *wl, const struct wslock_range *rg, int mode,
    uint64_t *token)
{
	struct held_ctx	hc = { rg, mode, 0, 0, 0 };
	int		r = 0;

	if (!range_ok(rg))
		return 0;
	hc.pos = rg->start;
	pthread_mutex_lock(&wl->mu);
	if (wl->session_valid && !wl->jeopardy &&
	    now_ms() - wl->lease_base < (uint64_t)wl->lease_ms / 2) {
		/* Walk until the covered prefix stops growing. */
		do {
			hc.progress = 0;
			table_walk(wl->mirror, wl->ms, held_one, &hc);
		} while (hc.progress && hc.pos < rg->end);
		r = hc.pos >= rg->end;
	}
	pthread_mutex_unlock(&wl->mu);
	if (r && token != NULL)
		*token = hc.token;
	return r;
}

int64_t
wslock_lease_left(struct wslock *wl)
{
	uint64_t	now = now_ms(), lim;
	int64_t		r = 0;

	pthread_mutex_lock(&wl->mu);
	if (wl->session_valid && wl->lease_ms > 0) {
		lim = wl->lease_base + wl->lease_ms / 2;
		if (now < lim)
			r = lim - now;
	}
	pthread_mutex_unlock(&wl->mu);
	return r;
}

int
wslock_conn_stats(struct wslock *wl, struct wslock_conn_stats *st)
{
	if (wl == NULL || st == NULL)
		return -EINVAL;
	memset(st, 0, sizeof *st);
	pthread_mutex_lock(&wl->mu);
	st->state = wl->cs != CS_READY ? WSLOCK_DOWN :
	    wl->jeopardy ? WSLOCK_JEOPARDY : WSLOCK_UP;
	st->connects = wl->n_connects;
	st->attempts = wl->n_attempts;
	st->attempts_down = wl->cs == CS_READY ? 0 : wl->n_attempts_down;
	st->state_ms = now_ms() - wl->t_updown;
	st->last_err = wl->stat_err;
	memcpy(st->last_error, wl->stat_text, sizeof st->last_error);
	memcpy(st->server, wl->addr_text[wl->cur], sizeof st->server);
	st->epoch = wl->epoch;
	pthread_mutex_unlock(&wl->mu);
	return 0;
}

uint64_t
wslock_session(struct wslock *wl)
{
	uint64_t	s;

	pthread_mutex_lock(&wl->mu);
	s = wl->session;
	pthread_mutex_unlock(&wl->mu);
	return s;
}

/*
 * Wait, with wl->mu held, until bw is done or the deadline passes,
 * driving the handle if no other thread does. Returns 0 or -ETIMEDOUT,
 * always with wl->mu held.
 */
static int
wait_locked(struct wslock *wl, struct bwait *bw, int (*until)(struct wslock *),
    int timeout_ms)
{
	struct timespec	ts;
	uint64_t	deadline = timeout_ms < 0 ? UINT64_MAX :
			    now_ms() + timeout_ms, now;
	int		slice;

	for (;;) {
		if (bw != NULL ? bw->done : until(wl))
			return 0;
		now = now_ms();
		if (now >= deadline)
			return -ETIMEDOUT;
		slice = deadline - now > 100 ? 100 : (int)(deadline - now);
		/*
		 * Drive the handle only if nobody else does or wants to: a
		 * thread waiting in wslock_process() goes first, or callbacks
		 * would wait behind a stream of blocking callers. The 20 ms
		 * tick bounds how long a driving pass keeps it waiting.
		 */
		if (!wl->processing && wl->want_process == 0) {
			wl->processing = 1;
			process_wait(wl, slice);
			wl->processing = 0;
			pthread_cond_broadcast(&wl->cond);
		} else {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += slice * 1000000L;
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&wl->cond, &wl->mu, &ts);
		}
	}
}

static int
is_ready(struct wslock *wl)
{
	return wl->cs == CS_READY;
}

static int
is_refused(struct wslock *wl)
{
	return wl->cs == CS_READY || wl->last_err == -EACCES ||
	    wl->last_err == -EPROTO || wl->last_err == -EPROTONOSUPPORT;
}

int
wslock_connect_wait(struct wslock *wl, int timeout_ms)
{
	int	r;

	pthread_mutex_lock(&wl->mu);
	r = wait_locked(wl, NULL, is_refused, timeout_ms);
	if (r == 0 && !is_ready(wl))
		r = wl->last_err;
	else if (r < 0 && wl->last_err != 0)
		r = wl->last_err;
	pthread_mutex_unlock(&wl->mu);
	return r;
}

/* The blocking caller stops waiting for r: cancel or drop it. */
static void
abandon(struct wslock *wl, uint64_t reqid)
{
	struct creq	*r;

	TAILQ_FOREACH(r, &wl->reqs, entry) {
		if (r->id != reqid)
			continue;
		r->bw = NULL;
		if (r->type != WSL_LOCK) {
			r->unlock_on_grant = 1;
			return;
		}
		r->unlock_on_grant = 1;
		cancel_locked(wl, reqid);
		return;
	}
}

int
wslock_lock_wait(struct wslock *wl, const struct wslock_range *rg, int mode,
    int flags, int timeout_ms, uint64_t *token)
{
	struct bwait	bw;
	uint64_t	id;
	int		r;

	if (flags & ~(WSLOCK_WAIT | WSLOCK_CACHED | WSLOCK_QUIET))
		return -EINVAL;
	memset(&bw, 0, sizeof bw);
	pthread_mutex_lock(&wl->mu);
	if ((r = lock_submit(wl, rg, mode, flags, NULL, &bw, &id)) < 0)
		goto out;
	if ((r = wait_locked(wl, &bw, NULL, timeout_ms)) < 0) {
		abandon(wl, id);
		goto out;
	}
	r = bw.status;
	if (r == 0 && token != NULL)
		*token = bw.token;
out:
	pthread_mutex_unlock(&wl->mu);
	return r;
}

int
wslock_unlock_wait(struct wslock *wl, const struct wslock_range *rg,
    int timeout_ms)
{
	struct bwait	bw;
	int		r;

	memset(&bw, 0, sizeof bw);
	pthread_mutex_lock(&wl->mu);
	if ((r = unlock_submit(wl, rg, &bw)) < 0)
		goto out;
	if ((r = wait_locked(wl, &bw, NULL, timeout_ms)) < 0) {
		struct creq *c;

		TAILQ_FOREACH(c, &wl->reqs, entry)
			if (c->bw == &bw)
				c->bw = NULL;
		goto out;
	}
	r = bw.status == -ECONNRESET ? 0 : bw.status;
out:
	pthread_mutex_unlock(&wl->mu);
	return r;
}

int
wslock_test_wait(struct wslock *wl, const struct wslock_range *rg, int mode,
    int timeout_ms, struct wslock_conflict *c)
{
	struct bwait	bw;
	uint64_t	id;
	int		r;

	memset(&bw, 0, sizeof bw);
	pthread_mutex_lock(&wl->mu);
	if ((r = lock_submit(wl, rg, mode, WSL_LOCK_TEST, NULL, &bw,
	    &id)) < 0)
		goto out;
	if ((r = wait_locked(wl, &bw, NULL, timeout_ms)) < 0) {
		abandon(wl, id);
		goto out;
	}
	r = bw.status;
	if (r == 1 && c != NULL)
		*c = bw.conflict;
out:
	pthread_mutex_unlock(&wl->mu);
	return r;
}

int
wslock_list_wait(struct wslock *wl, int timeout_ms,
    void (*fn)(const struct wslock_item *, void *), void *arg)
{
	struct bwait	 bw;
	struct creq	*r;
	size_t		 i;
	int		 rc;

	memset(&bw, 0, sizeof bw);
	pthread_mutex_lock(&wl->mu);
	if ((r = creq_new(wl, WSL_LIST, NULL)) == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	r->bw = &bw;
	if ((rc = creq_submit(wl, r)) < 0) {
		creq_free(r);
		goto out;
	}
	if ((rc = wait_locked(wl, &bw, NULL, timeout_ms)) < 0) {
		TAILQ_FOREACH(r, &wl->reqs, entry)
			if (r->bw == &bw)
				r->bw = NULL;
		goto out;
	}
	rc = bw.status;
out:
	pthread_mutex_unlock(&wl->mu);
	for (i = 0; i < bw.nitems; i++) {
		if (rc == 0)
			fn(&bw.items[i], arg);
		free((void *)bw.items[i].data);
	}
	free(bw.items);
	return rc;
}

void
wslock_close(struct wslock *wl)
{
	struct bwait	 bw;
	struct creq	*r;
	struct cev	*e;

	if (wl == NULL)
		return;
	pthread_mutex_lock(&wl->mu);
	if (wl->cs == CS_READY && (r = creq_new(wl, WSL_BYE, NULL)) != NULL) {
		memset(&bw, 0, sizeof bw);
		r->bw = &bw;
		if (creq_submit(wl, r) < 0)
			creq_free(r);
		else
			wait_locked(wl, &bw, NULL, 1000);
	}
	pthread_mutex_unlock(&wl->mu);
	if (wl->sock >= 0)
		close(wl->sock);
	while ((r = TAILQ_FIRST(&wl->reqs)) != NULL) {
		TAILQ_REMOVE(&wl->reqs, r, entry);
		creq_free(r);
	}
	while ((e = TAILQ_FIRST(&wl->evs)) != NULL) {
		TAILQ_REMOVE(&wl->evs, e, entry);
		free((void *)e->r.key);
		free(e);
	}
	table_sess_free(wl->mirror, wl->ms);
	table_free(wl->mirror);
	wsl_buf_free(&wl->in);
	wsl_buf_free(&wl->out);
	sodium_memzero(wl->secret, sizeof wl->secret);
	sodium_memzero(&wl->rx, sizeof wl->rx);
	sodium_memzero(&wl->tx, sizeof wl->tx);
	close(wl->epfd);
	close(wl->ipfd);
	close(wl->evfd);
	close(wl->tfd);
	sodium_free(wl->key);
	pthread_mutex_destroy(&wl->mu);
	pthread_cond_destroy(&wl->cond);
	free(wl);
}

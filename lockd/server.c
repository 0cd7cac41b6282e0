/*
 * The wslockd server: one epoll loop that owns every listening socket,
 * every client connection, a signalfd and one timerfd. Connections speak
 * the protocol of PROTOCOL.md; frames are dispatched through a table of
 * handlers, and the lock semantics live in table.c. A session outlives its
 * connection until its lease runs out, so a client can reconnect and
 * resume; its locks are freed when the lease expires. After a restart the
 * server runs a grace period in which known clients reclaim their locks.
 *
 * Anything wrong on one connection (a bad frame, a failed handshake, a
 * client that does not read) closes that connection only, with a reason in
 * the log. Closed connections are freed at the end of a loop iteration, so
 * a handler may close any connection, not only its own.
 *
 * With --metrics a thread of its own answers Prometheus scrapes
 * (metrics.c), so that no scraper can delay the loop; for each scrape the
 * loop copies the gauges from the live structures and the counters of
 * struct server_stats into a snapshot the thread renders.
 */
#include "config.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/un.h>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "clock.h"
#include "etcd.h"
#include "lockd.h"
#include "log.h"
#include "metrics.h"

#define MAX_LISTEN	16
#define MAX_EVENTS	256
#define MAX_OUTBUF	(16 * 1024 * 1024)	/* a client that stops reading */
#define READ_CHUNK	(64 * 1024)

/*
 * Connections not through the handshake yet cost the server memory and a
 * descriptor before anyone has proved anything: they get 5 s to finish
 * it, frames of at most 512 bytes (HELLO and AUTH are smaller), and at
 * most 256 of them may be open at once, 32 from one TCP address.
 */
#define HANDSHAKE_MS		5000
#define PREAUTH_MAX_FRAME	512
#define MAX_UNAUTH		256
#define MAX_UNAUTH_PER_ADDR	32

enum ev_kind {
	EV_LISTEN,
	EV_METRICS_REQ,
	EV_CONN,
	EV_SIGNAL,
	EV_TIMER,
	EV_ETCD,
	EV_ETCD_PUT,
};

struct ev {
	enum ev_kind	kind;
};

struct listener {
	struct ev	 ev;
	int		 fd;
	int		 is_unix;
	char		 name[300];
};

enum conn_state {
	C_HELLO,	/* waiting for HELLO */
	C_AUTH,		/* TCP: CHALLENGE sent, waiting for AUTH */
	C_READY,	/* authenticated, attached to a session */
};

struct session;

struct conn {
	struct ev		 ev;
	int			 fd;
	int			 is_unix;
	int			 dead;
	int			 pollout;	/* EPOLLOUT armed */
	int			 dirty;		/* on the flush list */
	enum conn_state		 state;
	char			 peer[96];
	struct wsl_buf		 in;
	struct wsl_buf		 out;
	uint8_t			 snonce[WSL_NONCE_LEN];
	uint8_t			 cnonce[WSL_NONCE_LEN];
	uint8_t			 resume[WSL_MAC_LEN];	/* HELLO's proof */
	int			 mac;		/* frames in carry a MAC */
	struct wsl_seal		 rx;		/* C->S, when mac */
	struct wsl_seal		 tx;		/* S->C, out.seal when mac */
	uint64_t		 client_id;
	uint32_t		 hello_flags;
	char			 name[WSL_MAX_NAME + 1];
	struct session		*sess;
	uint64_t		 deadline;	/* of the handshake, ms */
	int			 unauth;	/* on the unauth list */
	uint8_t			 addr[16];	/* TCP peer address */
	size_t			 addrlen;	/* 0: Unix socket */
	TAILQ_ENTRY(conn)	 entry;		/* all or dead */
	TAILQ_ENTRY(conn)	 dentry;	/* flush list */
	TAILQ_ENTRY(conn)	 uentry;	/* unauth, oldest first */
};
TAILQ_HEAD(conns, conn);

struct session {
	uint64_t		 id;
	uint64_t		 client_id;
	uint8_t			 secret[WSL_SECRET_LEN]; /* resume needs it */
	char			 name[WSL_MAX_NAME + 1];
	struct table_sess	*ts;
	struct conn		*conn;		/* NULL while detached */
	uint64_t		 expires;	/* ms, CLOCK_BOOTTIME */
	int			 reclaiming;	/* until RECLAIM_DONE */
	TAILQ_ENTRY(session)	 entry;		/* by expiry, soonest first */
};
TAILQ_HEAD(sessions, session);

/* Events counted since the start, for the metrics endpoint. */
struct server_stats {
	uint64_t		 grants;
	uint64_t		 revokes;
	uint64_t		 expiries;
	uint64_t		 auth_failures;
	uint64_t		 bad_frames;
	uint64_t		 handshake_timeouts;
	uint64_t		 refused;
};

/* What a scrape sees: the live gauges and the counters, copied at once. */
struct snapshot {
	uint64_t		 connected;
	uint64_t		 detached;
	uint64_t		 conns;
	uint64_t		 locks;
	uint64_t		 waiters;
	uint64_t		 epoch;
	uint64_t		 grace;
	uint64_t		 replicated;	/* --etcd */
	uint64_t		 active;
	uint64_t		 etcd_healthy;
	uint64_t		 etcd_failures;
	uint64_t		 terms;
	uint64_t		 stepdowns;
	uint64_t		 put_out;	/* a known-clients write is out */
	struct server_stats	 stats;
};

/*
 * The metrics endpoint runs in a thread of its own, so that no scraper,
 * slow, silent or many, can delay the loop that renews leases. The thread
 * does all the socket work; the loop only takes a snapshot when the
 * thread asks for one (reqfd) and hands it over under mu.
 */
struct mserv {
	pthread_t		 thread;
	int			 running;
	int			 stopfd;	/* eventfd: the thread ends */
	int			 reqfd;		/* eventfd: a scrape waits */
	struct ev		 reqev;
	pthread_mutex_t		 mu;
	pthread_cond_t		 cond;
	int			 want;		/* mu: a snapshot is asked for */
	uint64_t		 gen;		/* mu: snapshots taken */
	struct snapshot		 snap;		/* mu: the latest */
};

struct server {
	const struct server_conf *conf;
	int			 epfd;
	struct ev		 sigev;
	int			 sigfd;
	struct ev		 timerev;
	int			 timerfd;
	struct listener		 listeners[MAX_LISTEN];
	size_t			 nlisteners;
	struct listener		 mlisteners[MAX_LISTEN];	/* metrics */
	size_t			 nmlisteners;
	struct mserv		 ms;
	struct server_stats	 stats;
	uint64_t		 started;	/* ms, CLOCK_BOOTTIME */
	uint8_t			*key;
	size_t			 keylen;
	struct table		*table;
	struct state		*state;	/* NULL: a standby replica */

	/*
	 * Replicas (--etcd): the loop serves only while active, and only
	 * until valid_until, which the election thread moves on with every
	 * keepalive of the etcd lease.
	 */
	struct etcd		*etcd;
	struct ev		 etcdev;
	struct ev		 putev;
	struct state_store	 store;
	/*
	 * The known clients in etcd: state_changes() as far as etcd has
	 * them (answers wait until it is all of them), whether a write is
	 * out, and for which term.
	 */
	uint64_t		 saved;
	int			 put_out;
	uint64_t		 put_term;
	int			 active;
	uint64_t		 term;
	uint64_t		 valid_until;	/* ms, CLOCK_BOOTTIME */
	uint64_t		 stepdowns;
	struct etcd_view	 view;		/* the latest, clients aside */
	uint32_t		 epoch;
	uint32_t		 counter;
	uint64_t		 last_token;
	uint64_t		 next_session;
	struct conns		 conns;
	struct conns		 dead;
	struct conns		 flush;
	struct conns		 unauth;	/* by handshake deadline */
	size_t			 nunauth;
	size_t			 nconns;
	struct sessions		 sessions;
	size_t			 nsessions;
	int			 grace;
	uint64_t		 grace_end;
	uint64_t		*pending;	/* known clients yet to reclaim */
	uint8_t			*rbuf;		/* shared read buffer */
	size_t			 npending;
	int			 quit;
};

/* Boot time counts a suspended host's sleep, as leases must. */
static uint64_t
now_ms(void)
{
	return clock_ms(CLOCK_BOOTTIME);
}

/*
 * Fencing tokens: epoch in the high 32 bits, a counter in the low 32. The
 * epoch is persisted before its first token, so every token of this run is
 * above every token of any earlier run. When the counter runs out a new
 * epoch starts; if that cannot be persisted no token may be issued.
 */
static uint64_t
srv_token(void *arg)
{
	struct server	*srv = arg;
	int		 r;

	if (srv->counter == UINT32_MAX) {
		/*
		 * A replica that cannot move the epoch in etcd has most
		 * likely lost its term; either way it must not go on.
		 */
		if ((r = state_next_epoch(srv->state)) < 0)
			fatalx("cannot persist a new epoch: %s", strerror(-r));
		srv->epoch = state_epoch(srv->state);
		srv->counter = 0;
	}
	srv->last_token = ((uint64_t)srv->epoch << 32) | ++srv->counter;
	return srv->last_token;
}

static void
conn_dirty(struct server *srv, struct conn *c)
{
	if (!c->dirty && !c->dead) {
		c->dirty = 1;
		TAILQ_INSERT_TAIL(&srv->flush, c, dentry);
	}
}

static void
srv_grant(void *arg, struct table_sess *ts, uint64_t reqid, uint64_t token)
{
	struct server	*srv = arg;
	struct session	*s = table_sess_udata(ts);

	srv->stats.grants++;
	if (s->conn == NULL)
		return;
	if (wsl_enc_grant(&s->conn->out, reqid, token) < 0)
		log_limited(LOG_ERR, "grant", "out of memory queueing a grant");
	conn_dirty(srv, s->conn);
	log_debug("session %" PRIu64 ": grant req %" PRIu64 " token %#" PRIx64,
	    s->id, reqid, token);
}

static void
srv_revoke(void *arg, struct table_sess *ts, const uint8_t *key,
    size_t keylen, uint64_t owner, uint64_t start, uint64_t end,
    uint64_t token)
{
	struct server		*srv = arg;
	struct session		*s = table_sess_udata(ts);
	struct wsl_revoke	 v = { owner, start, end, token, key, keylen };

	srv->stats.revokes++;
	if (s->conn == NULL)
		return;
	if (wsl_enc_revoke(&s->conn->out, &v) < 0)
		log_limited(LOG_ERR, "revoke", "out of memory queueing a revoke");
	conn_dirty(srv, s->conn);
}

static const struct table_ops srv_table_ops = {
	srv_token, srv_grant, srv_revoke,
};

/* Arm the timer for the next lease expiry or the end of grace. */
static void
timer_update(struct server *srv)
{
	struct itimerspec	 its;
	struct session		*s;
	struct conn		*c;
	uint64_t		 next = 0, now = now_ms();

	if ((s = TAILQ_FIRST(&srv->sessions)) != NULL)
		next = s->expires;
	if (srv->grace && (next == 0 || srv->grace_end < next))
		next = srv->grace_end;
	if ((c = TAILQ_FIRST(&srv->unauth)) != NULL &&
	    (next == 0 || c->deadline < next))
		next = c->deadline;
	/* An idle replica too stops serving on time. */
	if (srv->etcd != NULL && srv->active &&
	    (next == 0 || srv->valid_until < next))
		next = srv->valid_until;
	memset(&its, 0, sizeof its);
	if (next != 0) {
		next = next > now ? next - now : 1;
		its.it_value.tv_sec = next / 1000;
		its.it_value.tv_nsec = (next % 1000) * 1000000;
	}
	if (timerfd_settime(srv->timerfd, 0, &its, NULL) < 0)
		fatal("timerfd_settime");
}

/* Free a closed connection, its keys wiped. */
static void
conn_free(struct conn *c)
{
	wsl_buf_free(&c->in);
	wsl_buf_free(&c->out);
	sodium_memzero(&c->rx, sizeof c->rx);
	sodium_memzero(&c->tx, sizeof c->tx);
	free(c);
}

/* The connection is through the handshake (or gone): no deadline. */
static void
conn_authed(struct server *srv, struct conn *c)
{
	if (!c->unauth)
		return;
	TAILQ_REMOVE(&srv->unauth, c, uentry);
	c->unauth = 0;
	srv->nunauth--;
}

static void
conn_close(struct server *srv, struct conn *c, const char *why)
{
	struct session	*s = c->sess;

	if (c->dead)
		return;
	conn_authed(srv, c);
	if (why != NULL)
		log_info("%s: closing connection: %s", c->peer, why);
	c->dead = 1;
	epoll_ctl(srv->epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	if (c->dirty) {
		TAILQ_REMOVE(&srv->flush, c, dentry);
		c->dirty = 0;
	}
	TAILQ_REMOVE(&srv->conns, c, entry);
	TAILQ_INSERT_TAIL(&srv->dead, c, entry);
	srv->nconns--;
	if (s != NULL) {
		/* The session waits for a resume until its lease runs out. */
		s->conn = NULL;
		c->sess = NULL;
		table_sess_drop_waiters(srv->table, s->ts);
	}
}

/*
 * May answers leave now? A replica's answers wait until etcd has every
 * change of the known clients made before them, and none leaves past the
 * end of its term (the loop then steps down).
 */
static int
may_send(struct server *srv)
{
	if (srv->etcd == NULL || !srv->active)
		return 1;
	return srv->saved == state_changes(srv->state) &&
	    now_ms() < srv->valid_until;
}

static void
conn_flush(struct server *srv, struct conn *c)
{
	struct epoll_event	ev;
	ssize_t			n;
	size_t			left;

	if (!may_send(srv)) {
		conn_dirty(srv, c);	/* once the gate opens */
		return;
	}
	while ((left = wsl_buf_pending(&c->out)) > 0) {
		n = send(c->fd, c->out.data + c->out.off, left, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			conn_close(srv, c, strerror(errno));
			return;
		}
		wsl_buf_consume(&c->out, n);
	}
	if (left == 0 && c->out.cap > 65536)
		wsl_buf_free(&c->out);	/* after a burst, e.g. LIST */
	if (wsl_buf_pending(&c->out) > MAX_OUTBUF) {
		conn_close(srv, c, "client does not read its replies");
		return;
	}
	if ((left > 0) != c->pollout) {
		c->pollout = left > 0;
		ev.events = EPOLLIN | (c->pollout ? EPOLLOUT : 0);
		ev.data.ptr = c;
		if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
			conn_close(srv, c, "epoll_ctl failed");
	}
}

/*
 * Send an error, then close: the peer learns why before the EOF. A refusal
 * in the handshake counts as an authentication failure, any other error but
 * running out of resources as a protocol error of the peer.
 */
static int
conn_fail(struct server *srv, struct conn *c, uint64_t id, uint32_t code,
    const char *why)
{
	if (code == WSL_E_PERM || code == WSL_E_SECRET)
		srv->stats.auth_failures++;
	else if (code != WSL_E_LIMIT && code != WSL_E_NOTACTIVE)
		srv->stats.bad_frames++;
	if (wsl_enc_error(&c->out, id, code, why) == 0)
		conn_flush(srv, c);
	conn_close(srv, c, why);
	return -1;
}

static void
session_touch(struct server *srv, struct session *s)
{
	s->expires = now_ms() + srv->conf->lease_ms;
	if (TAILQ_NEXT(s, entry) != NULL) {
		TAILQ_REMOVE(&srv->sessions, s, entry);
		TAILQ_INSERT_TAIL(&srv->sessions, s, entry);
	}
}

static void
pending_remove(struct server *srv, uint64_t client_id)
{
	size_t	i;

	for (i = 0; i < srv->npending; i++) {
		if (srv->pending[i] == client_id) {
			srv->pending[i] = srv->pending[--srv->npending];
			return;
		}
	}
}

static int
pending_has(struct server *srv, uint64_t client_id)
{
	size_t	i;

	for (i = 0; i < srv->npending; i++)
		if (srv->pending[i] == client_id)
			return 1;
	return 0;
}

static void
grace_end(struct server *srv, const char *why)
{
	size_t	i;
	int	r;

	if (!srv->grace)
		return;
	log_info("grace period over: %s", why);
	/* Known clients that did not come back lost their locks. */
	for (i = 0; i < srv->npending; i++)
		if ((r = state_del_client(srv->state, srv->pending[i])) < 0)
			log_err("cannot update state: %s", strerror(-r));
	srv->npending = 0;
	srv->grace = 0;
	table_set_grace(srv->table, 0);
	timer_update(srv);
}

/* End a session: locks freed, next waiters granted, client forgotten. */
static void
session_end(struct server *srv, struct session *s, const char *why)
{
	int	r;

	log_info("session %" PRIu64 " (%s): %s", s->id, s->name, why);
	if (s->conn != NULL) {
		s->conn->sess = NULL;
		conn_close(srv, s->conn, NULL);
		s->conn = NULL;
	}
	TAILQ_REMOVE(&srv->sessions, s, entry);
	srv->nsessions--;
	table_sess_free(srv->table, s->ts);
	if ((r = state_del_client(srv->state, s->client_id)) < 0)
		log_err("cannot update state: %s", strerror(-r));
	if (srv->grace) {
		pending_remove(srv, s->client_id);
		if (srv->npending == 0)
			grace_end(srv, "every known client is back");
	}
	sodium_memzero(s->secret, sizeof s->secret);
	free(s);
	timer_update(srv);
}

static struct session *
session_find(struct server *srv, uint64_t client_id)
{
	struct session	*s;

	TAILQ_FOREACH(s, &srv->sessions, entry)
		if (s->client_id == client_id)
			return s;
	return NULL;
}

static int
session_new(struct server *srv, struct conn *c, struct session **out)
{
	struct session	*s;
	int		 r;

	if ((s = calloc(1, sizeof *s)) == NULL)
		return -ENOMEM;
	s->id = ++srv->next_session;
	s->client_id = c->client_id;
	memcpy(s->name, c->name, sizeof s->name);
	/* Only its holder may resume the session, or start another one. */
	randombytes_buf(s->secret, sizeof s->secret);
	if ((s->ts = table_sess_new(srv->table, s->id, s)) == NULL) {
		sodium_memzero(s->secret, sizeof s->secret);
		free(s);
		return -ENOMEM;
	}
	/* Remember the client before it can hold anything worth reclaiming. */
	if ((r = state_add_client(srv->state, s->client_id, s->secret)) < 0) {
		table_sess_free(srv->table, s->ts);
		sodium_memzero(s->secret, sizeof s->secret);
		free(s);
		return r;
	}
	s->expires = now_ms() + srv->conf->lease_ms;
	TAILQ_INSERT_TAIL(&srv->sessions, s, entry);
	srv->nsessions++;
	*out = s;
	return 0;
}

/*
 * Does the connection prove the secret of the session its client id
 * names, live or listed from before a restart? A client id alone is no
 * proof: LIST shows them to every key holder.
 */
static int
conn_proves(struct server *srv, struct conn *c, const struct session *s)
{
	uint8_t	secret[WSL_SECRET_LEN], want[WSL_MAC_LEN];
	int	ok;

	if (s != NULL)
		memcpy(secret, s->secret, sizeof secret);
	else if (!srv->grace || !pending_has(srv, c->client_id))
		return 1;		/* nobody's client id */
	else if (state_client_secret(srv->state, c->client_id, secret) < 0)
		return 0;
	auth_resume_proof(secret, c->cnonce, c->client_id, want);
	ok = sodium_memcmp(want, c->resume, sizeof want) == 0;
	sodium_memzero(secret, sizeof secret);
	sodium_memzero(want, sizeof want);
	return ok;
}

/*
 * Authenticated: attach the connection to a new or resumed session. On
 * TCP every frame from here on carries a MAC, WELCOME first.
 */
static int
conn_welcome(struct server *srv, struct conn *c, uint64_t id)
{
	struct wsl_welcome	 w;
	struct session		*s;
	uint8_t			 c2s[WSL_MAC_LEN], s2c[WSL_MAC_LEN];
	uint8_t			 pad[WSL_SECRET_LEN];
	uint64_t		 now = now_ms();
	size_t			 i;
	int			 r;

	memset(&w, 0, sizeof w);
	s = session_find(srv, c->client_id);
	if (!conn_proves(srv, c, s)) {
		log_warn("%s: client id %016" PRIx64 " is a session's and the "
		    "session's secret was not proven", c->peer, c->client_id);
		return conn_fail(srv, c, id, WSL_E_SECRET,
		    "session secret not proven");
	}
	if (s != NULL && (c->hello_flags & WSL_HELLO_RESUME)) {
		if (s->conn != NULL)
			conn_close(srv, s->conn, "replaced by a new connection");
		table_sess_resync_begin(srv->table, s->ts);
		s->reclaiming = 1;
		w.flags = WSL_WELCOME_RESUMED;
		session_touch(srv, s);
	} else {
		if (s != NULL)
			session_end(srv, s, "replaced by a fresh session");
		if ((r = session_new(srv, c, &s)) < 0) {
			log_err("cannot create a session: %s", strerror(-r));
			return conn_fail(srv, c, id, WSL_E_LIMIT,
			    "cannot create a session");
		}
		w.flags = WSL_WELCOME_NEW;
		if (srv->grace && (c->hello_flags & WSL_HELLO_RESUME) &&
		    pending_has(srv, c->client_id)) {
			w.flags = WSL_WELCOME_GRACE;
			s->reclaiming = 1;
		} else if (srv->grace) {
			/* A known client starting afresh reclaims nothing. */
			pending_remove(srv, c->client_id);
			if (srv->npending == 0)
				grace_end(srv, "every known client is back");
		}
	}
	if (srv->grace)
		w.grace_ms = srv->grace_end > now ? srv->grace_end - now : 0;
	s->conn = c;
	c->sess = s;
	c->state = C_READY;
	conn_authed(srv, c);
	w.session = s->id;
	w.lease_ms = srv->conf->lease_ms;
	w.epoch = srv->epoch;
	w.max_frame = srv->conf->max_frame;
	w.max_locks = srv->conf->max_locks;
	w.max_waiters = srv->conf->max_waiters;
	memcpy(w.secret, s->secret, sizeof w.secret);
	if (!c->is_unix) {
		auth_session_keys(srv->key, srv->keylen, c->cnonce, c->snonce,
		    c->client_id, c2s, s2c, pad);
		for (i = 0; i < sizeof w.secret; i++)
			w.secret[i] ^= pad[i];
		wsl_seal_init(&c->rx, c2s);
		wsl_seal_init(&c->tx, s2c);
		c->mac = 1;
		c->out.seal = &c->tx;
		sodium_memzero(c2s, sizeof c2s);
		sodium_memzero(s2c, sizeof s2c);
		sodium_memzero(pad, sizeof pad);
	}
	r = wsl_enc_welcome(&c->out, id, &w);
	sodium_memzero(w.secret, sizeof w.secret);
	if (r < 0)
		return conn_fail(srv, c, id, WSL_E_LIMIT, "out of memory");
	log_info("%s: session %" PRIu64 " for client %016" PRIx64 " (%.*s)%s",
	    c->peer, s->id, s->client_id, (int)strlen(s->name), s->name,
	    (w.flags & WSL_WELCOME_RESUMED) ? ", resumed" :
	    (w.flags & WSL_WELCOME_GRACE) ? ", reclaiming" : "");
	timer_update(srv);
	return 0;
}

static int
h_hello(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	struct wsl_hello	h;
	struct ucred		cred;
	socklen_t		len = sizeof cred;

	if (wsl_dec_hello(f, &h) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL, "malformed HELLO");
	if (!srv->active) {
		char	why[300];

		/* The client library tries the replica named here first. */
		if (srv->view.leader[0] != '\0')
			snprintf(why, sizeof why, "not active; active is %s",
			    srv->view.leader);
		else
			snprintf(why, sizeof why, "not active; no active "
			    "replica known");
		log_debug("%s: %s", c->peer, why);
		return conn_fail(srv, c, f->id, WSL_E_NOTACTIVE, why);
	}
	c->client_id = h.client_id;
	c->hello_flags = h.flags;
	memcpy(c->cnonce, h.nonce, WSL_NONCE_LEN);
	memcpy(c->resume, h.resume, WSL_MAC_LEN);
	memcpy(c->name, h.name, h.namelen);
	c->name[h.namelen] = '\0';
	if (c->is_unix) {
		if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred,
		    &len) < 0)
			return conn_fail(srv, c, f->id, WSL_E_PERM,
			    "no peer credentials");
		if (cred.uid != 0 && cred.uid != geteuid()) {
			log_warn("%s: refusing uid %u", c->peer,
			    (unsigned)cred.uid);
			return conn_fail(srv, c, f->id, WSL_E_PERM,
			    "peer uid not allowed");
		}
		return conn_welcome(srv, c, f->id);
	}
	randombytes_buf(c->snonce, sizeof c->snonce);
	if (wsl_enc_challenge(&c->out, f->id, c->snonce) < 0)
		return conn_fail(srv, c, f->id, WSL_E_LIMIT, "out of memory");
	c->state = C_AUTH;
	return 0;
}

static int
h_auth(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	uint8_t	mac[WSL_MAC_LEN], want[WSL_MAC_LEN];

	if (wsl_dec_nonce(f, mac) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL, "malformed AUTH");
	auth_mac(srv->key, srv->keylen, WSL_LABEL_CLIENT, c->snonce, c->cnonce,
	    c->client_id, want);
	if (sodium_memcmp(mac, want, sizeof mac) != 0) {
		log_warn("%s: authentication failed (wrong cluster key?)",
		    c->peer);
		return conn_fail(srv, c, f->id, WSL_E_PERM,
		    "authentication failed");
	}
	return conn_welcome(srv, c, f->id);
}

static int
reply_err(struct conn *c, uint64_t id, int err)
{
	static const struct {
		int		 err;
		uint32_t	 code;
	} map[] = {
		{ -EAGAIN, WSL_E_AGAIN },
		{ -EBUSY, WSL_E_GRACE },
		{ -EDQUOT, WSL_E_LIMIT },
		{ -ENOMEM, WSL_E_LIMIT },
		{ -EINVAL, WSL_E_INVAL },
		{ -ENOENT, WSL_E_NOENT },
	};
	size_t	i;

	for (i = 0; i < sizeof map / sizeof map[0]; i++)
		if (map[i].err == err)
			return wsl_enc_error(&c->out, id, map[i].code,
			    wsl_err_name(map[i].code));
	return wsl_enc_error(&c->out, id, WSL_E_INVAL, strerror(-err));
}

static int
h_renew(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	if (wsl_dec_empty(f) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL, "malformed RENEW");
	return wsl_enc_ok(&c->out, f->id, 0) < 0 ? -1 : 0;
}

static int
h_bye(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	if (wsl_dec_empty(f) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL, "malformed BYE");
	if (wsl_enc_ok(&c->out, f->id, 0) == 0)
		conn_flush(srv, c);
	session_end(srv, c->sess, "ended by the client");
	conn_close(srv, c, NULL);
	return -1;
}

static int
h_lock(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	struct wsl_lockreq	q;
	struct table_req	tq;
	struct table_entry	e;
	struct wsl_conflict	wc;
	uint64_t		token = 0;
	int			r;

	if (wsl_dec_lock(f, &q) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL, "malformed LOCK");
	tq = (struct table_req){ q.key, q.keylen, q.owner, q.start, q.end,
	    q.mode, q.flags, f->id, 0, q.chain, q.nchain };
	memset(&e, 0, sizeof e);
	r = table_lock(srv->table, c->sess->ts, &tq, &token, &e);
	if (r == 0) {
		/* A test that finds no conflict grants nothing. */
		if (!(q.flags & WSL_LOCK_TEST))
			srv->stats.grants++;
		return wsl_enc_ok(&c->out, f->id, token);
	}
	if (r == 1)
		return wsl_enc_empty(&c->out, WSL_QUEUED, f->id);
	if (r == -EAGAIN && (q.flags & WSL_LOCK_TEST) && e.sess != NULL) {
		wc.session = table_sess_id(e.sess);
		wc.owner = e.owner;
		wc.start = e.start;
		wc.end = e.end;
		wc.mode = e.mode;
		return wsl_enc_conflict(&c->out, f->id, &wc);
	}
	return reply_err(c, f->id, r);
}

static int
h_unlock(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	struct wsl_lockreq	q;
	struct table_req	tq;
	int			r;

	if (wsl_dec_lock(f, &q) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL,
		    "malformed UNLOCK");
	tq = (struct table_req){ q.key, q.keylen, q.owner, q.start, q.end,
	    0, 0, f->id, 0, NULL, 0 };
	if ((r = table_unlock(srv->table, c->sess->ts, &tq)) < 0)
		return reply_err(c, f->id, r);
	return wsl_enc_ok(&c->out, f->id, 0);
}

static int
h_cancel(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	uint64_t	target;
	int		r;

	if (wsl_dec_cancel(f, &target) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL,
		    "malformed CANCEL");
	if ((r = table_cancel(srv->table, c->sess->ts, target)) < 0)
		return reply_err(c, f->id, r);
	/* The waiting request is answered first, then the cancel. */
	if (wsl_enc_error(&c->out, target, WSL_E_CANCELED, "cancelled") < 0)
		return -1;
	return wsl_enc_ok(&c->out, f->id, 0);
}

static int
h_reclaim(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	struct wsl_lockreq	q;
	struct table_req	tq;
	int			r;

	if (wsl_dec_lock(f, &q) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL,
		    "malformed RECLAIM");
	if (!c->sess->reclaiming)
		return wsl_enc_error(&c->out, f->id, WSL_E_PROTO,
		    "not reclaiming");
	/* A token from the future was never issued: refuse it. */
	if (q.token == 0 || q.token > srv->last_token)
		return wsl_enc_error(&c->out, f->id, WSL_E_STALE,
		    "unknown token");
	tq = (struct table_req){ q.key, q.keylen, q.owner, q.start, q.end,
	    q.mode, q.flags, f->id, q.token, NULL, 0 };
	r = table_reclaim(srv->table, c->sess->ts, &tq);
	if (r == -EAGAIN) {
		log_warn("session %" PRIu64 ": reclaim of token %#" PRIx64
		    " refused: conflict", c->sess->id, q.token);
		return wsl_enc_error(&c->out, f->id, WSL_E_STALE,
		    "conflicts with another holder");
	}
	if (r < 0)
		return reply_err(c, f->id, r);
	return wsl_enc_ok(&c->out, f->id, q.token);
}

static int
h_reclaim_done(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	struct session	*s = c->sess;

	if (wsl_dec_empty(f) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL,
		    "malformed RECLAIM_DONE");
	if (s->reclaiming) {
		s->reclaiming = 0;
		table_sess_resync_end(srv->table, s->ts);
		if (srv->grace) {
			pending_remove(srv, s->client_id);
			if (srv->npending == 0)
				grace_end(srv, "every known client is back");
		}
	}
	return wsl_enc_ok(&c->out, f->id, 0);
}

struct list_ctx {
	struct server	*srv;
	struct conn	*c;
	uint64_t	 id;
	int		 err;
};

static int
list_entry(const struct table_entry *e, void *arg)
{
	struct list_ctx	*lc = arg;
	struct wsl_item	 it;

	memset(&it, 0, sizeof it);
	it.kind = e->kind;
	it.session = table_sess_id(e->sess);
	it.owner = e->owner;
	it.start = e->start;
	it.end = e->end;
	it.token = e->kind == WSL_ITEM_HOLDER ? e->token : e->reqid;
	it.mode = e->mode;
	it.flags = e->cached ? WSL_LOCK_CACHED : 0;
	it.data = e->key;
	it.datalen = e->keylen;
	return (lc->err = wsl_enc_item(&lc->c->out, lc->id, &it));
}

static int
h_list(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	struct list_ctx	 lc = { srv, c, f->id, 0 };
	struct wsl_item	 it;
	struct session	*s;
	uint64_t	 now = now_ms();
	int		 r;

	if (wsl_dec_empty(f) < 0)
		return conn_fail(srv, c, f->id, WSL_E_INVAL, "malformed LIST");
	TAILQ_FOREACH(s, &srv->sessions, entry) {
		memset(&it, 0, sizeof it);
		it.kind = WSL_ITEM_SESSION;
		it.session = s->id;
		it.client_id = s->client_id;
		it.lease_left_ms = s->expires > now ? s->expires - now : 0;
		it.connected = s->conn != NULL;
		it.data = (const uint8_t *)s->name;
		it.datalen = strlen(s->name);
		if ((r = wsl_enc_item(&c->out, f->id, &it)) < 0)
			return r;
	}
	if (table_walk(srv->table, NULL, list_entry, &lc) != 0)
		return lc.err;
	return wsl_enc_empty(&c->out, WSL_LIST_END, f->id);
}

/* The dispatch table: which message is valid in which state. */
static const struct {
	uint16_t	 type;
	enum conn_state	 state;
	int		 (*fn)(struct server *, struct conn *,
			    const struct wsl_frame *);
} handlers[] = {
	{ WSL_HELLO, C_HELLO, h_hello },
	{ WSL_AUTH, C_AUTH, h_auth },
	{ WSL_RENEW, C_READY, h_renew },
	{ WSL_BYE, C_READY, h_bye },
	{ WSL_RECLAIM_DONE, C_READY, h_reclaim_done },
	{ WSL_LOCK, C_READY, h_lock },
	{ WSL_UNLOCK, C_READY, h_unlock },
	{ WSL_CANCEL, C_READY, h_cancel },
	{ WSL_RECLAIM, C_READY, h_reclaim },
	{ WSL_LIST, C_READY, h_list },
};

/* Returns 0 to go on, -1 when the connection was closed. */
static int
conn_dispatch(struct server *srv, struct conn *c, const struct wsl_frame *f)
{
	char	why[96];
	size_t	i;
	int	r;

	for (i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
		if (handlers[i].type == f->type)
			break;
	if (i == sizeof handlers / sizeof handlers[0]) {
		snprintf(why, sizeof why, "unknown message type %#06x",
		    f->type);
		return conn_fail(srv, c, f->id, WSL_E_PROTO, why);
	}
	if (handlers[i].state != c->state) {
		snprintf(why, sizeof why, "%s not allowed %s",
		    wsl_type_name(f->type), c->state == C_READY ?
		    "after authentication" : "before authentication");
		return conn_fail(srv, c, f->id, WSL_E_PROTO, why);
	}
	if (c->state == C_READY)
		session_touch(srv, c->sess);
	if ((r = handlers[i].fn(srv, c, f)) < 0 && !c->dead)
		return conn_fail(srv, c, f->id, WSL_E_LIMIT, "out of memory");
	if (c->dead)
		return -1;
	conn_dirty(srv, c);
	return 0;
}

/*
 * Dispatch the whole frames in buf; returns the bytes consumed, or -1
 * when the connection was closed.
 */
static ssize_t
conn_frames(struct server *srv, struct conn *c, const uint8_t *buf,
    size_t len)
{
	struct wsl_frame	f;
	size_t			off = 0;
	int			n;
	char			why[64];

	while ((n = wsl_frame_decode(buf + off, len - off,
	    c->state == C_READY ? srv->conf->max_frame : PREAUTH_MAX_FRAME,
	    &f)) > 0) {
		if (c->mac && wsl_frame_open(&c->rx, buf + off, &f) < 0) {
			log_warn("%s: frame with a bad MAC (forged, replayed or "
			    "out of order)", c->peer);
			conn_fail(srv, c, 0, WSL_E_PERM, "bad MAC");
			return -1;
		}
		if (conn_dispatch(srv, c, &f) < 0)
			return -1;
		off += n;
	}
	if (n < 0) {
		snprintf(why, sizeof why, "bad frame: %s",
		    n == -EMSGSIZE ? "oversized" :
		    n == -EPROTONOSUPPORT ? "unsupported version" :
		    "length shorter than header");
		conn_fail(srv, c, 0, n == -EPROTONOSUPPORT ? WSL_E_VERSION :
		    WSL_E_PROTO, why);
		return -1;
	}
	return off;
}

/*
 * Read what the socket has. Data lands in one buffer shared by every
 * connection and is dispatched from there; only the tail of a frame
 * that is not complete yet is kept in the connection's own buffer, so an
 * idle connection costs no read buffer at all.
 */
static void
conn_read(struct server *srv, struct conn *c)
{
	ssize_t	n, used;
	size_t	left;

	for (;;) {
		n = recv(c->fd, srv->rbuf, READ_CHUNK, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n < 0) {
			conn_close(srv, c, strerror(errno));
			return;
		}
		if (n == 0) {
			if (wsl_buf_pending(&c->in) > 0) {
				srv->stats.bad_frames++;
				conn_close(srv, c, "truncated frame at EOF");
			} else
				conn_close(srv, c, c->state == C_READY ?
				    "disconnected" : NULL);
			return;
		}
		if (wsl_buf_pending(&c->in) == 0) {
			if ((used = conn_frames(srv, c, srv->rbuf, n)) < 0)
				return;
			left = n - used;
			if (left > 0) {
				if (wsl_buf_reserve(&c->in, left) < 0) {
					conn_close(srv, c, "out of memory");
					return;
				}
				memcpy(c->in.data + c->in.len,
				    srv->rbuf + used, left);
				c->in.len += left;
			}
		} else {
			/* Rare: a frame split across reads. */
			if (wsl_buf_reserve(&c->in, n) < 0) {
				conn_close(srv, c, "out of memory");
				return;
			}
			memcpy(c->in.data + c->in.len, srv->rbuf, n);
			c->in.len += n;
			if ((used = conn_frames(srv, c, c->in.data + c->in.off,
			    wsl_buf_pending(&c->in))) < 0)
				return;
			wsl_buf_consume(&c->in, used);
		}
		if (wsl_buf_pending(&c->in) == 0 && c->in.cap > 0)
			wsl_buf_free(&c->in);
		if (n < READ_CHUNK)
			break;
	}
}

/* The address of a TCP peer, without its port, as bytes. */
static size_t
peer_addr(const struct sockaddr_storage *ss, uint8_t *out)
{
	const struct sockaddr_in	*sin = (const struct sockaddr_in *)ss;
	const struct sockaddr_in6	*sin6 = (const struct sockaddr_in6 *)ss;

	if (ss->ss_family == AF_INET) {
		memcpy(out, &sin->sin_addr, 4);
		return 4;
	}
	if (ss->ss_family == AF_INET6) {
		memcpy(out, &sin6->sin6_addr, 16);
		return 16;
	}
	return 0;
}

/*
 * May one more connection from this address wait for its handshake? The
 * caps hold TCP peers only: the Unix socket admits root and our own uid,
 * and a flood over TCP must not lock the admin out of it.
 */
static const char *
unauth_refusal(struct server *srv, const uint8_t *addr, size_t addrlen)
{
	struct conn	*c;
	size_t		 n = 0;

	if (addrlen == 0)
		return NULL;
	if (srv->nunauth >= MAX_UNAUTH)
		return "too many connections in the handshake";
	TAILQ_FOREACH(c, &srv->unauth, uentry)
		if (c->addrlen == addrlen && memcmp(c->addr, addr,
		    addrlen) == 0 && ++n >= MAX_UNAUTH_PER_ADDR)
			return "too many connections in the handshake from "
			    "one address";
	return NULL;
}

static void
listener_accept(struct server *srv, struct listener *l)
{
	struct sockaddr_storage	 ss;
	struct epoll_event	 ev;
	struct conn		*c;
	socklen_t		 len;
	char			 host[NI_MAXHOST], serv[NI_MAXSERV];
	const char		*why;
	uint8_t			 addr[16];
	size_t			 addrlen;
	int			 fd, one = 1;

	for (;;) {
		len = sizeof ss;
		fd = accept4(l->fd, (struct sockaddr *)&ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				log_limited(LOG_WARNING, "accept",
				    "accept on %s: %s", l->name,
				    strerror(errno));
			return;
		}
		addrlen = l->is_unix ? 0 : peer_addr(&ss, addr);
		if ((why = unauth_refusal(srv, addr, addrlen)) != NULL) {
			srv->stats.refused++;
			if (getnameinfo((struct sockaddr *)&ss, len, host,
			    sizeof host, NULL, 0, NI_NUMERICHOST) != 0)
				snprintf(host, sizeof host, "?");
			log_limited(LOG_WARNING, "unauth", "refusing a "
			    "connection from %s on %s: %s", host, l->name,
			    why);
			close(fd);
			continue;
		}
		if (srv->nconns >= srv->conf->max_conns ||
		    (c = calloc(1, sizeof *c)) == NULL) {
			srv->stats.refused++;
			log_limited(LOG_WARNING, "maxconns",
			    "refusing a connection on %s: %zu connections",
			    l->name, srv->nconns);
			close(fd);
			continue;
		}
		c->ev.kind = EV_CONN;
		c->fd = fd;
		c->is_unix = l->is_unix;
		c->state = C_HELLO;
		memcpy(c->addr, addr, addrlen);
		c->addrlen = addrlen;
		if (l->is_unix)
			snprintf(c->peer, sizeof c->peer, "unix:%d", fd);
		else {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
			    sizeof one);
			if (getnameinfo((struct sockaddr *)&ss, len, host,
			    sizeof host, serv, sizeof serv,
			    NI_NUMERICHOST | NI_NUMERICSERV) == 0)
				snprintf(c->peer, sizeof c->peer, "%.60s:%s",
				    host, serv);
			else
				snprintf(c->peer, sizeof c->peer, "tcp:%d",
				    fd);
		}
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			log_warn("epoll_ctl: %s", strerror(errno));
			close(fd);
			free(c);
			continue;
		}
		TAILQ_INSERT_TAIL(&srv->conns, c, entry);
		srv->nconns++;
		/* Deadlines grow with accept time: the list stays sorted. */
		c->deadline = now_ms() + HANDSHAKE_MS;
		c->unauth = 1;
		TAILQ_INSERT_TAIL(&srv->unauth, c, uentry);
		srv->nunauth++;
		if (TAILQ_FIRST(&srv->unauth) == c)
			timer_update(srv);
		log_debug("%s: connected on %s", c->peer, l->name);
	}
}

static void
timer_fire(struct server *srv)
{
	struct session	*s;
	uint64_t	 exp, now = now_ms();
	struct conn	*c;

	if (read(srv->timerfd, &exp, sizeof exp) < 0 && errno != EAGAIN)
		log_warn("timerfd read: %s", strerror(errno));
	while ((s = TAILQ_FIRST(&srv->sessions)) != NULL && s->expires <= now) {
		if ((c = s->conn) != NULL) {
			wsl_enc_empty(&c->out, WSL_EXPIRED, 0);
			conn_flush(srv, c);
		}
		srv->stats.expiries++;
		session_end(srv, s, "lease expired");
	}
	if (srv->grace && srv->grace_end <= now)
		grace_end(srv, "timeout");
	while ((c = TAILQ_FIRST(&srv->unauth)) != NULL && c->deadline <= now) {
		srv->stats.handshake_timeouts++;
		conn_close(srv, c, "handshake not finished in time");
	}
	timer_update(srv);
}

static void
signal_fire(struct server *srv)
{
	struct signalfd_siginfo	si;

	while (read(srv->sigfd, &si, sizeof si) == sizeof si) {
		switch (si.ssi_signo) {
		case SIGTERM:
		case SIGINT:
			log_info("signal %d: shutting down", si.ssi_signo);
			srv->quit = 1;
			break;
		default:
			log_debug("signal %d ignored", si.ssi_signo);
			break;
		}
	}
}

/* Refuse to steal the socket of a running server; remove a stale one. */
static int
unix_prepare(const struct sockaddr_un *sun)
{
	int	fd, r;

	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)sun, sizeof *sun);
	close(fd);
	if (r == 0)
		return -EADDRINUSE;
	if (unlink(sun->sun_path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static void
listener_add(struct server *srv, int fd, int is_unix, const char *spec)
{
	struct listener		*l;
	struct epoll_event	 ev;

	if (srv->nlisteners == MAX_LISTEN)
		fatalx("too many listen addresses");
	l = &srv->listeners[srv->nlisteners++];
	l->ev.kind = EV_LISTEN;
	l->fd = fd;
	l->is_unix = is_unix;
	snprintf(l->name, sizeof l->name, "%s", spec);
	ev.events = EPOLLIN;
	ev.data.ptr = l;
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		fatal("epoll_ctl");
}

static void
listen_unix(struct server *srv, const char *spec, const char *path)
{
	struct sockaddr_un	sun;
	mode_t			old;
	int			fd, r;

	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	if (strlen(path) >= sizeof sun.sun_path)
		fatalx("%s: path too long", spec);
	memcpy(sun.sun_path, path, strlen(path));
	if ((r = unix_prepare(&sun)) < 0)
		fatalx("%s: %s", spec, r == -EADDRINUSE ?
		    "another server is listening there" : strerror(-r));
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0)) < 0)
		fatal("socket");
	/* Only root and our own uid may connect; SO_PEERCRED checks again. */
	old = umask(0077);
	r = bind(fd, (struct sockaddr *)&sun, sizeof sun);
	umask(old);
	if (r < 0 || listen(fd, 1024) < 0)
		fatal("%s", spec);
	listener_add(srv, fd, 1, spec);
}

/* With port 0 the kernel picks one; say which, for tests and admins. */
static void
log_tcp_port(int fd, const char *what)
{
	struct sockaddr_storage	ss;
	socklen_t		len = sizeof ss;
	char			host[NI_MAXHOST], serv[NI_MAXSERV];

	if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0 &&
	    getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, serv,
	    sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) == 0)
		log_info("%s %s port %s", what, host, serv);
}

static void
listen_tcp(struct server *srv, const char *spec, const struct addr *a)
{
	struct addrinfo		 hints, *res, *ai;
	int			 fd, one = 1, r;

	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if ((r = getaddrinfo(a->host[0] ? a->host : NULL, a->port, &hints,
	    &res)) != 0)
		fatalx("%s: %s", spec, gai_strerror(r));
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if ((fd = socket(ai->ai_family, ai->ai_socktype |
		    SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol)) < 0)
			fatal("socket");
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (ai->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one,
			    sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
		    listen(fd, 1024) < 0)
			fatal("%s", spec);
		listener_add(srv, fd, 0, spec);
		log_tcp_port(fd, "listening on");
	}
	freeaddrinfo(res);
}

static void
listen_one(struct server *srv, const char *spec)
{
	struct addr	a;

	if (addr_parse(spec, &a) < 0)
		fatalx("bad listen address '%s'", spec);
	if (a.family == AF_UNIX)
		listen_unix(srv, spec, a.host);
	else
		listen_tcp(srv, spec, &a);
	log_info("listening on %s", spec);
}

/*
 * The exposition, one row per sample. Rows of one metric follow each other
 * and the first carries its HELP and TYPE; the names follow the Prometheus
 * conventions (a _total suffix on counters, base units).
 */
static const struct {
	const char	*name;
	const char	*type;
	const char	*help;
	const char	*labels;
	size_t		 off;
} metric_rows[] = {
	{ "wslockd_sessions", "gauge", "Sessions, by whether a connection is "
	    "attached or the session waits for its client to resume.",
	    "state=\"connected\"", offsetof(struct snapshot, connected) },
	{ "wslockd_sessions", NULL, NULL, "state=\"disconnected\"",
	    offsetof(struct snapshot, detached) },
	{ "wslockd_connections", "gauge", "Open client connections, "
	    "authenticated or not.", NULL, offsetof(struct snapshot, conns) },
	{ "wslockd_locks_held", "gauge", "Lock ranges held by all sessions, "
	    "cached ones included.", NULL, offsetof(struct snapshot, locks) },
	{ "wslockd_waiters", "gauge", "Lock requests waiting for a "
	    "conflicting holder.", NULL, offsetof(struct snapshot, waiters) },
	{ "wslockd_grants_total", "counter", "Lock requests granted, at once "
	    "or after a wait.", NULL, offsetof(struct snapshot, stats.grants) },
	{ "wslockd_revokes_total", "counter", "Cached locks whose holders were "
	    "asked to give them back.", NULL,
	    offsetof(struct snapshot, stats.revokes) },
	{ "wslockd_session_expiries_total", "counter", "Sessions ended because "
	    "their lease ran out.", NULL,
	    offsetof(struct snapshot, stats.expiries) },
	{ "wslockd_auth_failures_total", "counter", "Connections refused in the "
	    "handshake: wrong cluster key or Unix peer uid not allowed.", NULL,
	    offsetof(struct snapshot, stats.auth_failures) },
	{ "wslockd_bad_frames_total", "counter", "Connections closed for a "
	    "protocol error of the peer.", NULL,
	    offsetof(struct snapshot, stats.bad_frames) },
	{ "wslockd_handshake_timeouts_total", "counter", "Connections closed "
	    "because they did not finish the handshake in time.", NULL,
	    offsetof(struct snapshot, stats.handshake_timeouts) },
	{ "wslockd_connections_refused_total", "counter", "Connections closed "
	    "at accept: too many open, or too many in the handshake.", NULL,
	    offsetof(struct snapshot, stats.refused) },
	{ "wslockd_epoch", "gauge", "Epoch of the fencing tokens, the high 32 "
	    "bits of every token issued.", NULL,
	    offsetof(struct snapshot, epoch) },
	{ "wslockd_grace_active", "gauge", "1 while the grace period after a "
	    "start runs, else 0.", NULL, offsetof(struct snapshot, grace) },
	{ "wslockd_replicated", "gauge", "1 when this is one of several "
	    "replicas on etcd (--etcd), else 0.", NULL,
	    offsetof(struct snapshot, replicated) },
	{ "wslockd_active", "gauge", "1 while this server serves locks (always "
	    "without --etcd), 0 while a replica stands by.", NULL,
	    offsetof(struct snapshot, active) },
	{ "wslockd_etcd_healthy", "gauge", "1 when the last request to etcd "
	    "succeeded, else 0 (0 without --etcd).", NULL,
	    offsetof(struct snapshot, etcd_healthy) },
	{ "wslockd_etcd_failures_total", "counter", "Requests to etcd that "
	    "failed (every endpoint tried).", NULL,
	    offsetof(struct snapshot, etcd_failures) },
	{ "wslockd_terms_total", "counter", "Terms this replica won as the "
	    "active one.", NULL, offsetof(struct snapshot, terms) },
	{ "wslockd_stepdowns_total", "counter", "Times this replica stopped "
	    "serving: etcd lease not renewed in time, or state not written.",
	    NULL, offsetof(struct snapshot, stepdowns) },
	{ "wslockd_etcd_write_pending", "gauge", "1 while a write of the "
	    "known clients to etcd is out (answers wait for it), else 0.",
	    NULL, offsetof(struct snapshot, put_out) },
};

/* In the loop: the snapshot a scrape asked for (EV_METRICS_REQ). */
static void
metrics_take(struct server *srv)
{
	struct mserv	*m = &srv->ms;
	struct session	*s;
	struct snapshot	 snap;
	uint64_t	 v;

	if (read(m->reqfd, &v, sizeof v) < 0 && errno != EAGAIN)
		log_warn("eventfd read: %s", strerror(errno));
	memset(&snap, 0, sizeof snap);
	TAILQ_FOREACH(s, &srv->sessions, entry) {
		if (s->conn != NULL)
			snap.connected++;
		else
			snap.detached++;
		snap.locks += table_sess_nlocks(s->ts);
		snap.waiters += table_sess_nwaiters(s->ts);
	}
	snap.conns = srv->nconns;
	snap.epoch = srv->epoch;
	snap.grace = srv->grace != 0;
	snap.active = srv->active;
	if (srv->etcd != NULL) {
		snap.replicated = 1;
		etcd_health(srv->etcd, &snap.etcd_healthy, &snap.etcd_failures);
		snap.terms = srv->term;
		snap.stepdowns = srv->stepdowns;
		snap.put_out = srv->put_out;
	}
	snap.stats = srv->stats;
	pthread_mutex_lock(&m->mu);
	m->snap = snap;
	m->gen++;
	m->want = 0;
	pthread_cond_broadcast(&m->cond);
	pthread_mutex_unlock(&m->mu);
}

/*
 * In the metrics thread: a fresh snapshot from the loop. If the loop
 * does not answer within a second (it is stuck, which a scrape should
 * show rather than hang on), the last one it took.
 */
static void
metrics_snapshot(struct server *srv, struct snapshot *out)
{
	struct mserv	*m = &srv->ms;
	struct timespec	 ts;
	uint64_t	 gen, one = 1;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += 1;
	pthread_mutex_lock(&m->mu);
	gen = m->gen;
	if (!m->want) {
		m->want = 1;
		if (write(m->reqfd, &one, sizeof one) != sizeof one)
			m->want = 0;
	}
	while (m->want && m->gen == gen &&
	    pthread_cond_timedwait(&m->cond, &m->mu, &ts) == 0)
		;
	*out = m->snap;
	pthread_mutex_unlock(&m->mu);
}

/* In the metrics thread: the exposition of one scrape. */
static void
srv_render(FILE *f, void *arg)
{
	struct server	*srv = arg;
	struct snapshot	 snap;
	const char	*name;
	uint64_t	 v;
	size_t		 i;

	metrics_snapshot(srv, &snap);
	for (i = 0; i < sizeof metric_rows / sizeof metric_rows[0]; i++) {
		name = metric_rows[i].name;
		if (metric_rows[i].help != NULL)
			fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name,
			    metric_rows[i].help, name, metric_rows[i].type);
		memcpy(&v, (const char *)&snap + metric_rows[i].off, sizeof v);
		if (metric_rows[i].labels != NULL)
			fprintf(f, "%s{%s} %" PRIu64 "\n", name,
			    metric_rows[i].labels, v);
		else
			fprintf(f, "%s %" PRIu64 "\n", name, v);
	}
	/* The only fractional one, so it stays out of the table. */
	fprintf(f, "# HELP wslockd_uptime_seconds Seconds since wslockd "
	    "started.\n# TYPE wslockd_uptime_seconds gauge\n"
	    "wslockd_uptime_seconds %.3f\n",
	    (now_ms() - srv->started) / 1000.0);
}

/* The metrics thread: accept scrapes and answer them, one at a time. */
static void *
metrics_thread(void *arg)
{
	struct server	*srv = arg;
	struct pollfd	 pfd[MAX_LISTEN + 1];
	size_t		 i, n = srv->nmlisteners;

	pfd[0].fd = srv->ms.stopfd;
	pfd[0].events = POLLIN;
	for (i = 0; i < n; i++) {
		pfd[i + 1].fd = srv->mlisteners[i].fd;
		pfd[i + 1].events = POLLIN;
	}
	for (;;) {
		if (poll(pfd, n + 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			log_warn("metrics: poll: %s", strerror(errno));
			break;
		}
		if (pfd[0].revents != 0)
			break;
		for (i = 0; i < n; i++)
			if (pfd[i + 1].revents & POLLIN)
				metrics_serve(pfd[i + 1].fd, srv_render, srv);
	}
	return NULL;
}

/*
 * Listen for scrapes, never taking over the Unix socket of a live
 * server, and start the thread that serves them. Called with the
 * signals blocked, which the thread inherits: they reach the loop.
 */
static void
metrics_open(struct server *srv, const char *spec)
{
	struct mserv		*m = &srv->ms;
	struct addr		 a;
	struct sockaddr_un	 sun;
	struct epoll_event	 ev;
	struct listener		*l;
	pthread_condattr_t	 ca;
	int			 fds[MAX_LISTEN], n, i, r;

	if (addr_parse(spec, &a) < 0)
		fatalx("bad metrics address '%s'", spec);
	if (a.family == AF_UNIX) {
		memset(&sun, 0, sizeof sun);
		sun.sun_family = AF_UNIX;
		memcpy(sun.sun_path, a.host, strlen(a.host));
		if ((r = unix_prepare(&sun)) < 0)
			fatalx("metrics %s: %s", spec, r == -EADDRINUSE ?
			    "another server is listening there" :
			    strerror(-r));
	}
	if ((n = metrics_listen(spec, fds, MAX_LISTEN)) < 0)
		fatalx("metrics %s: %s", spec, n == -EINVAL ?
		    "cannot resolve the address" : strerror(-n));
	for (i = 0; i < n; i++) {
		l = &srv->mlisteners[srv->nmlisteners++];
		l->fd = fds[i];
		l->is_unix = a.family == AF_UNIX;
		snprintf(l->name, sizeof l->name, "%s", spec);
		if (!l->is_unix)
			log_tcp_port(l->fd, "serving metrics on");
	}
	if ((m->stopfd = eventfd(0, EFD_CLOEXEC)) < 0 ||
	    (m->reqfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
		fatal("eventfd");
	m->reqev.kind = EV_METRICS_REQ;
	ev.events = EPOLLIN;
	ev.data.ptr = &m->reqev;
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, m->reqfd, &ev) < 0)
		fatal("epoll_ctl");
	pthread_mutex_init(&m->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->cond, &ca);
	pthread_condattr_destroy(&ca);
	if ((r = pthread_create(&m->thread, NULL, metrics_thread, srv)) != 0)
		fatalx("pthread_create: %s", strerror(r));
	m->running = 1;
	log_info("serving metrics on %s", spec);
}

/* Stop the metrics thread; the listeners are closed after it. */
static void
metrics_close(struct server *srv)
{
	struct mserv	*m = &srv->ms;
	uint64_t	 one = 1;

	if (!m->running)
		return;
	if (write(m->stopfd, &one, sizeof one) != sizeof one)
		fatal("eventfd write");
	pthread_join(m->thread, NULL);
	m->running = 0;
	close(m->stopfd);
	close(m->reqfd);
	pthread_mutex_destroy(&m->mu);
	pthread_cond_destroy(&m->cond);
}

static void	serve_begin(struct server *);

static int
store_put_clients(void *arg, const char *buf, size_t len)
{
	return etcd_put_clients(arg, buf, len);
}

static int
store_next_epoch(void *arg, uint32_t *epoch)
{
	return etcd_next_epoch(arg, epoch);
}

static void
server_init(struct server *srv, const struct server_conf *conf)
{
	struct epoll_event	ev;
	sigset_t		mask;
	const char		**p;
	struct rlimit		rl;
	rlim_t			want;
	int			r, tcp = 0;

	memset(srv, 0, sizeof *srv);
	srv->conf = conf;
	TAILQ_INIT(&srv->conns);
	TAILQ_INIT(&srv->dead);
	TAILQ_INIT(&srv->flush);
	TAILQ_INIT(&srv->unauth);
	TAILQ_INIT(&srv->sessions);
	if (sodium_init() < 0)
		fatalx("libsodium failed to initialise");
	/* Every connection is a descriptor: allow as many as we may. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		want = (rlim_t)conf->max_conns + 64;
		if (rl.rlim_cur < want) {
			rl.rlim_cur = rl.rlim_max < want ? rl.rlim_max : want;
			if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
				log_warn("setrlimit: %s", strerror(errno));
		}
		if (rl.rlim_cur < want)
			log_warn("open file limit %llu allows fewer than %u "
			    "connections", (unsigned long long)rl.rlim_cur,
			    conf->max_conns);
	}
	for (p = conf->listen; *p != NULL; p++)
		if (strncmp(*p, "unix:", 5) != 0)
			tcp = 1;
	if (tcp || conf->keyfile != NULL) {
		if (conf->keyfile == NULL)
			fatalx("TCP listening needs a cluster key (--key)");
		if ((r = auth_keyfile_load(conf->keyfile, &srv->key,
		    &srv->keylen)) < 0)
			fatalx("key file %s: %s", conf->keyfile,
			    r == -EPERM ? "readable by others; chmod 600 it" :
			    r == -EINVAL ? "must be a file of 32 to 4096 bytes" :
			    strerror(-r));
	}
	if (conf->etcd == NULL) {
		if ((r = state_open(conf->statedir, &srv->state)) < 0)
			fatalx("state directory %s: %s", conf->statedir,
			    strerror(-r));
		if ((r = state_next_epoch(srv->state)) < 0)
			fatalx("state directory %s: cannot persist the epoch: "
			    "%s", conf->statedir, strerror(-r));
	}
	if ((srv->rbuf = malloc(READ_CHUNK)) == NULL)
		fatalx("out of memory");
	if ((srv->table = table_new(&srv_table_ops, srv, conf->max_locks,
	    conf->max_waiters)) == NULL)
		fatalx("out of memory");
	if ((srv->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
		fatal("epoll_create1");

	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
		fatal("sigprocmask");
	signal(SIGPIPE, SIG_IGN);
	if ((srv->sigfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0)
		fatal("signalfd");
	srv->sigev.kind = EV_SIGNAL;
	ev.events = EPOLLIN;
	ev.data.ptr = &srv->sigev;
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->sigfd, &ev) < 0)
		fatal("epoll_ctl");
	if ((srv->timerfd = timerfd_create(CLOCK_BOOTTIME,
	    TFD_NONBLOCK | TFD_CLOEXEC)) < 0)
		fatal("timerfd_create");
	srv->timerev.kind = EV_TIMER;
	ev.data.ptr = &srv->timerev;
	if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->timerfd, &ev) < 0)
		fatal("epoll_ctl");

	for (p = conf->listen; *p != NULL; p++)
		listen_one(srv, *p);
	if (conf->metrics != NULL)
		metrics_open(srv, conf->metrics);
	srv->started = now_ms();
	if (conf->etcd != NULL) {
		srv->store.put_clients = store_put_clients;
		srv->store.next_epoch = store_next_epoch;
		if ((r = etcd_start(conf->etcd, &srv->etcd)) < 0)
			fatalx("etcd: %s", strerror(-r));
		srv->store.arg = srv->etcd;
		srv->etcdev.kind = EV_ETCD;
		ev.events = EPOLLIN;
		ev.data.ptr = &srv->etcdev;
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, etcd_fd(srv->etcd),
		    &ev) < 0)
			fatal("epoll_ctl");
		srv->putev.kind = EV_ETCD_PUT;
		ev.data.ptr = &srv->putev;
		if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, etcd_put_fd(srv->etcd),
		    &ev) < 0)
			fatal("epoll_ctl");
		log_info("replica on etcd %s (prefix %s, advertised as %s): "
		    "standing by", conf->etcd->endpoints, conf->etcd->prefix,
		    conf->etcd->advertise);
		timer_update(srv);
		return;
	}
	serve_begin(srv);
}

/*
 * Start serving with the state just read (a start, or a replica's new
 * term): clients that had sessions before may reclaim in a grace period.
 */
static void
serve_begin(struct server *srv)
{
	const struct server_conf *conf = srv->conf;

	srv->active = 1;
	srv->saved = state_changes(srv->state);
	srv->epoch = state_epoch(srv->state);
	srv->counter = 0;
	srv->last_token = (uint64_t)srv->epoch << 32;
	srv->npending = state_nclients(srv->state);
	if (srv->npending > 0) {
		if ((srv->pending = calloc(srv->npending,
		    sizeof *srv->pending)) == NULL)
			fatalx("out of memory");
		memcpy(srv->pending, state_clients(srv->state),
		    srv->npending * sizeof *srv->pending);
		srv->grace = 1;
		srv->grace_end = now_ms() + conf->grace_ms;
		table_set_grace(srv->table, 1);
		log_info("epoch %u: grace period of %u ms for %zu known "
		    "clients", srv->epoch, conf->grace_ms, srv->npending);
	} else
		log_info("epoch %u: no known clients, no grace period",
		    srv->epoch);
	timer_update(srv);
}

/*
 * Stop serving: a replica whose etcd lease may have run out, or that
 * cannot write its state, drops every connection and session unanswered
 * and forgets its table; a successor reclaims from the clients. Nothing
 * queued is sent: the output of the batch goes with the connections.
 */
static void
step_down(struct server *srv, const char *why)
{
	struct conn	*c;
	struct session	*s;

	if (!srv->active)
		return;
	log_warn("stepping down as the active replica (term %" PRIu64
	    ", epoch %u): %s", srv->term, srv->epoch, why);
	srv->active = 0;
	srv->stepdowns++;
	while ((c = TAILQ_FIRST(&srv->conns)) != NULL)
		conn_close(srv, c, NULL);
	while ((s = TAILQ_FIRST(&srv->sessions)) != NULL) {
		TAILQ_REMOVE(&srv->sessions, s, entry);
		table_sess_free(srv->table, s->ts);
		sodium_memzero(s->secret, sizeof s->secret);
		free(s);
	}
	srv->nsessions = 0;
	table_free(srv->table);
	if ((srv->table = table_new(&srv_table_ops, srv, srv->conf->max_locks,
	    srv->conf->max_waiters)) == NULL)
		fatalx("out of memory");
	state_close(srv->state);
	srv->state = NULL;
	free(srv->pending);
	srv->pending = NULL;
	srv->npending = 0;
	srv->grace = 0;
	srv->valid_until = 0;
	srv->view.leader[0] = '\0';
	etcd_resign(srv->etcd, srv->term);
	timer_update(srv);
}

/* Is this replica still sure no successor can have been elected? */
static int
still_active(struct server *srv)
{
	if (srv->etcd == NULL)
		return 1;
	if (srv->active && now_ms() >= srv->valid_until)
		step_down(srv, "etcd lease not renewed in time");
	return srv->active;
}

/* The election thread has news: a term won or lost, a leader, health. */
static void
etcd_fire(struct server *srv)
{
	struct etcd_view	 v;
	int			 r;

	etcd_view(srv->etcd, &v);
	srv->view = v;
	srv->view.clients = NULL;
	if (srv->active && (!v.active || v.term != srv->term))
		step_down(srv, "the term ended");
	else if (srv->active)
		srv->valid_until = v.valid_until;
	if (!srv->active && v.active && v.term != srv->term &&
	    v.clients != NULL && now_ms() < v.valid_until) {
		srv->term = v.term;
		if ((r = state_open_store(&srv->store, v.epoch, v.clients,
		    &srv->state)) < 0) {
			log_err("etcd: known clients unreadable: %s",
			    strerror(-r));
			etcd_resign(srv->etcd, v.term);
		} else {
			log_info("active replica, term %" PRIu64, v.term);
			srv->valid_until = v.valid_until;
			serve_begin(srv);
		}
	} else if (!srv->active && v.active && v.term != srv->term) {
		/* Won, but too late to serve it: let it go. */
		srv->term = v.term;
		etcd_resign(srv->etcd, v.term);
	}
	if (v.clients != NULL)
		sodium_memzero(v.clients, strlen(v.clients));
	free(v.clients);
	timer_update(srv);
}

/*
 * Hand the known clients to etcd's writer if they changed and no write is
 * out; answers wait for it (may_send). The file store is written here and
 * now, as before.
 */
static void
clients_sync(struct server *srv)
{
	char		*buf;
	size_t		 len;
	uint64_t	 changes;
	int		 r;

	if (srv->state == NULL)
		return;
	if (srv->etcd == NULL) {
		if ((r = state_sync(srv->state)) < 0)
			log_limited(LOG_ERR, "state", "cannot write the state "
			    "directory: %s", strerror(-r));
		return;
	}
	/* Past the term, nothing is written (nor sent): step down. */
	if (srv->put_out || !still_active(srv))
		return;
	if ((r = state_take(srv->state, &buf, &len, &changes)) == 0)
		return;
	if (r < 0 || (r = etcd_put_start(srv->etcd, buf, len, changes)) < 0) {
		step_down(srv, "cannot write the known clients to etcd");
		return;
	}
	srv->put_out = 1;
	srv->put_term = srv->term;
}

/* etcd's writer is done with the known clients. */
static void
put_fire(struct server *srv)
{
	uint64_t	changes;
	int		result;

	if (!etcd_put_done(srv->etcd, &changes, &result))
		return;
	srv->put_out = 0;
	if (!srv->active || srv->put_term != srv->term)
		return;			/* a write of a term now over */
	if (result < 0) {
		step_down(srv, "cannot write the known clients to etcd");
		return;
	}
	srv->saved = changes;	/* the loop's pass sends what waited */
}

static void
server_shutdown(struct server *srv)
{
	struct conn	*c;
	struct session	*s;
	size_t		 i;

	for (i = 0; i < srv->nlisteners; i++) {
		close(srv->listeners[i].fd);
		if (srv->listeners[i].is_unix)
			unlink(srv->listeners[i].name + 5);
	}
	metrics_close(srv);
	for (i = 0; i < srv->nmlisteners; i++) {
		close(srv->mlisteners[i].fd);
		if (srv->mlisteners[i].is_unix)
			unlink(srv->mlisteners[i].name + 5);
	}
	while ((c = TAILQ_FIRST(&srv->conns)) != NULL)
		conn_close(srv, c, NULL);
	while ((c = TAILQ_FIRST(&srv->dead)) != NULL) {
		TAILQ_REMOVE(&srv->dead, c, entry);
		conn_free(c);
	}
	/*
	 * Sessions are not ended: their clients stay in the state directory
	 * and reclaim in the grace period of the next start.
	 */
	while ((s = TAILQ_FIRST(&srv->sessions)) != NULL) {
		TAILQ_REMOVE(&srv->sessions, s, entry);
		table_sess_free(srv->table, s->ts);
		sodium_memzero(s->secret, sizeof s->secret);
		free(s);
	}
	table_free(srv->table);
	if (srv->state != NULL && state_sync(srv->state) < 0)
		log_err("cannot write the state directory");
	state_close(srv->state);
	etcd_stop(srv->etcd);
	sodium_free(srv->key);
	free(srv->pending);
	free(srv->rbuf);
	close(srv->timerfd);
	close(srv->sigfd);
	close(srv->epfd);
}

int
server_run(const struct server_conf *conf)
{
	struct server		 srv;
	struct epoll_event	 evs[MAX_EVENTS];
	struct ev		*e;
	struct conn		*c;
	int			 n, i;

	server_init(&srv, conf);
	while (!srv.quit) {
		if ((n = epoll_wait(srv.epfd, evs, MAX_EVENTS, -1)) < 0) {
			if (errno == EINTR)
				continue;
			fatal("epoll_wait");
		}
		for (i = 0; i < n; i++) {
			e = evs[i].data.ptr;
			switch (e->kind) {
			case EV_LISTEN:
				listener_accept(&srv, (struct listener *)e);
				break;
			case EV_METRICS_REQ:
				metrics_take(&srv);
				break;
			case EV_SIGNAL:
				signal_fire(&srv);
				break;
			case EV_TIMER:
				timer_fire(&srv);
				break;
			case EV_ETCD:
				etcd_fire(&srv);
				break;
			case EV_ETCD_PUT:
				put_fire(&srv);
				break;
			case EV_CONN:
				c = (struct conn *)e;
				if (c->dead)
					break;
				if (evs[i].events & (EPOLLIN | EPOLLERR |
				    EPOLLHUP))
					conn_read(&srv, c);
				if (!c->dead && (evs[i].events & EPOLLOUT))
					conn_dirty(&srv, c);
				break;
			}
		}
		/*
		 * Known clients reach the disk before any answer leaves; on
		 * etcd the write goes to a thread of its own and the answers
		 * wait for it (may_send), while the loop goes on.
		 */
		clients_sync(&srv);
		/*
		 * A replica checks its term right before anything leaves,
		 * so one that wakes up from a pause grants nothing.
		 */
		still_active(&srv);
		while (may_send(&srv) && (c = TAILQ_FIRST(&srv.flush)) != NULL) {
			TAILQ_REMOVE(&srv.flush, c, dentry);
			c->dirty = 0;
			conn_flush(&srv, c);
		}
		while ((c = TAILQ_FIRST(&srv.dead)) != NULL) {
			TAILQ_REMOVE(&srv.dead, c, entry);
			conn_free(c);
		}
	}
	server_shutdown(&srv);
	return 0;
}

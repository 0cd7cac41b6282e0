/*
 * The election of wslockd's active replica, on etcd (wslockd --etcd). A
 * thread of its own holds an etcd lease, keeps it alive and campaigns: a
 * txn creates PREFIX/leader with the lease iff the key does not exist.
 * The winner bumps PREFIX/epoch with a compare-and-swap and reads
 * PREFIX/clients before it tells the main loop that its term began; the
 * main loop hands PREFIX/clients to a writer thread of its own
 * (etcd_put_start, etcd_put_done), each write guarded by the leader key's
 * create revision as it was when the write was handed over, so that a
 * replica that lost its term can write nothing; the main loop holds back
 * every answer until the write it may depend on is done (server.c).
 *
 * The main loop never waits for this thread: it reads a view (etcd_view)
 * when the eventfd says it changed. The view's valid_until is measured on
 * CLOCK_BOOTTIME from the moment the keepalive that proved the lease was
 * SENT, shortened by the clock-rate bound, so that the replica stops
 * serving before etcd can have let the lease expire (PROTOCOL.md, "Replicas
 * on etcd").
 */
#include "config.h"

#include <sys/eventfd.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <sodium.h>

#include "clock.h"
#include "etcd.h"
#include "log.h"

#define MAX_ENDPOINTS	16
#define CAMPAIGN_MS	200	/* how often a standby tries to win */
#define RETRY_MS	200	/* after a failed request */
#define REQUEST_MS	1000	/* one request, connect included */
/* Our clock may run this much slower than etcd's: 10 %, as for clients. */
#define RATE_NUM	9
#define RATE_DEN	10

struct http {
	CURL		*curl;
	char		*eps[MAX_ENDPOINTS];
	size_t		 neps;
	size_t		 cur;
	const struct etcd_conf *conf;
	struct curl_slist *hdrs;
};

struct etcd {
	struct etcd_conf conf;
	char		 k_leader[512];
	char		 k_epoch[512];
	char		 k_clients[512];
	pthread_t	 thread;
	int		 running;
	int		 evfd;		/* readable: the view changed */

	pthread_mutex_t	 mu;
	pthread_cond_t	 cond;
	struct etcd_view v;		/* mu */
	int		 stop;		/* mu */
	uint64_t	 resign_term;	/* mu: the main loop ended it */
	int64_t		 term_rev;	/* mu: our leader key's create rev */

	/* The thread's own. */
	struct http	 th;
	int64_t		 lease;
	uint64_t	 lease_valid;	/* ms: etcd cannot have expired it */
	uint64_t	 next_ka;

	/* The main loop's own. */
	struct http	 mh;

	/* The known-clients writer: one write at a time, under mu. */
	pthread_t	 wthread;
	int		 wrunning;
	int		 wfd;		/* readable: a write is done */
	pthread_cond_t	 wcond;
	char		*w_buf;		/* to write; NULL: none waiting */
	size_t		 w_len;
	int64_t		 w_rev;		/* the guard: our leader key's rev */
	uint64_t	 w_seq;
	int		 w_busy;	/* handed over, result not taken */
	int		 w_done;	/* the result is there */
	int		 w_result;
	struct http	 wh;		/* the writer thread's own */
};

struct body {
	char	*data;
	size_t	 len;
};

/* CLOCK_BOOTTIME, as the server's leases: it counts through suspend. */
static uint64_t
now_ms(void)
{
	return clock_ms(CLOCK_BOOTTIME);
}

static size_t
on_data(char *p, size_t size, size_t n, void *arg)
{
	struct body	*b = arg;
	char		*d;

	/* Answers are small; a huge one is not etcd's. */
	if (b->len + size * n > 16 * 1024 * 1024 ||
	    (d = realloc(b->data, b->len + size * n + 1)) == NULL)
		return 0;
	memcpy(d + b->len, p, size * n);
	b->len += size * n;
	d[b->len] = '\0';
	b->data = d;
	return size * n;
}

static int
http_init(struct http *h, const struct etcd_conf *conf)
{
	char	*list, *p, *save = NULL;

	memset(h, 0, sizeof *h);
	h->conf = conf;
	if ((list = strdup(conf->endpoints)) == NULL)
		return -ENOMEM;
	for (p = strtok_r(list, ",", &save); p != NULL;
	    p = strtok_r(NULL, ",", &save)) {
		if (h->neps == MAX_ENDPOINTS ||
		    (h->eps[h->neps] = strdup(p)) == NULL) {
			free(list);
			return h->neps == MAX_ENDPOINTS ? -E2BIG : -ENOMEM;
		}
		/* Trailing slashes would double in the URL. */
		while (strlen(h->eps[h->neps]) > 0 &&
		    h->eps[h->neps][strlen(h->eps[h->neps]) - 1] == '/')
			h->eps[h->neps][strlen(h->eps[h->neps]) - 1] = '\0';
		h->neps++;
	}
	free(list);
	if (h->neps == 0)
		return -EINVAL;
	if ((h->curl = curl_easy_init()) == NULL ||
	    (h->hdrs = curl_slist_append(NULL,
	    "Content-Type: application/json")) == NULL)
		return -ENOMEM;
	return 0;
}

static void
http_free(struct http *h)
{
	size_t	i;

	for (i = 0; i < h->neps; i++)
		free(h->eps[i]);
	curl_slist_free_all(h->hdrs);
	if (h->curl != NULL)
		curl_easy_cleanup(h->curl);
	memset(h, 0, sizeof *h);
}

/*
 * POST json to path at the current endpoint; on any failure the next
 * endpoint is tried, each at most once. *out is the answer's body (the
 * caller frees it) when the status was 200.
 */
static int
http_post(struct http *h, const char *path, const char *json,
    struct body *out, char *err, size_t errlen)
{
	struct body	 b;
	char		 url[1024];
	long		 status;
	size_t		 tries;
	CURLcode	 cc;

	if (json == NULL) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (tries = 0; tries < h->neps; tries++) {
		memset(&b, 0, sizeof b);
		snprintf(url, sizeof url, "%s%s", h->eps[h->cur], path);
		curl_easy_reset(h->curl);
		curl_easy_setopt(h->curl, CURLOPT_URL, url);
		curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, h->hdrs);
		curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, json);
		curl_easy_setopt(h->curl, CURLOPT_TIMEOUT_MS, (long)REQUEST_MS);
		curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT_MS,
		    (long)REQUEST_MS);
		curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, on_data);
		curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &b);
		if (h->conf->ca != NULL)
			curl_easy_setopt(h->curl, CURLOPT_CAINFO, h->conf->ca);
		if (h->conf->cert != NULL)
			curl_easy_setopt(h->curl, CURLOPT_SSLCERT,
			    h->conf->cert);
		if (h->conf->key != NULL)
			curl_easy_setopt(h->curl, CURLOPT_SSLKEY, h->conf->key);
		cc = curl_easy_perform(h->curl);
		status = 0;
		curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
		if (cc == CURLE_OK && status == 200 && b.data != NULL) {
			*out = b;
			return 0;
		}
		if (cc != CURLE_OK)
			snprintf(err, errlen, "%s: %s", h->eps[h->cur],
			    curl_easy_strerror(cc));
		else
			snprintf(err, errlen, "%s: HTTP %ld: %.200s",
			    h->eps[h->cur], status, b.data ? b.data : "");
		free(b.data);
		h->cur = (h->cur + 1) % h->neps;
	}
	return -EIO;
}

/* POST and free json; the answer's body in *out. */
static int
call(struct etcd *e, struct http *h, const char *path, char *json,
    struct body *out)
{
	char	err[512];
	int	r;

	r = http_post(h, path, json, out, err, sizeof err);
	free(json);
	pthread_mutex_lock(&e->mu);
	e->v.healthy = r == 0;
	if (r < 0)
		e->v.failures++;
	pthread_mutex_unlock(&e->mu);
	if (r < 0)
		log_limited(LOG_WARNING, "etcd", "etcd %s: %s", path, err);
	return r;
}

static void
notify(struct etcd *e)
{
	uint64_t	one = 1;

	if (write(e->evfd, &one, sizeof one) < 0) {
		/* The counter is full: the main loop has a wakeup anyway. */
	}
}

/* Range one key; kv->found says whether it exists. */
static int
get_key(struct etcd *e, struct http *h, const char *key, struct etcdj_kv *kv)
{
	struct body	b;
	char		err[256];
	int		r;

	if ((r = call(e, h, "/v3/kv/range", etcdj_req_range(key), &b)) < 0)
		return r;
	if ((r = etcdj_range(b.data, b.len, kv, err, sizeof err)) < 0)
		log_warn("etcd range %s: %s", key, err);
	free(b.data);
	return r;
}

/* A guarded put; 1 done, 0 a compare failed, or -errno. */
static int
txn_put(struct etcd *e, struct http *h, const struct etcdj_cmp *cmp,
    size_t ncmp, const char *key, const void *val, size_t len, int64_t lease,
    int64_t *rev)
{
	struct body	b;
	char		err[256];
	int64_t		revision;
	int		ok, r;

	if ((r = call(e, h, "/v3/kv/txn", etcdj_req_txn(cmp, ncmp, key, val,
	    len, lease), &b)) < 0)
		return r;
	r = etcdj_txn(b.data, b.len, &ok, &revision, err, sizeof err);
	free(b.data);
	if (r < 0) {
		log_warn("etcd txn on %s: %s", key, err);
		return r;
	}
	if (rev != NULL)
		*rev = revision;
	return ok;
}

/*
 * The epoch goes up by one with a compare-and-swap, guarded by our
 * leader key: only the active replica moves it, and never back.
 */
static int
bump_epoch(struct etcd *e, struct http *h, int64_t leader_rev, uint32_t *out)
{
	struct etcdj_kv		kv;
	struct etcdj_cmp	cmp[2];
	unsigned long		v = 0;
	char			buf[16], *end;
	int			r, tries;

	for (tries = 0; tries < 3; tries++) {
		if ((r = get_key(e, h, e->k_epoch, &kv)) < 0)
			return r;
		if (kv.found) {
			errno = 0;
			v = strtoul(kv.value, &end, 10);
			if (errno != 0 || end == kv.value || *end != '\0' ||
			    v >= UINT32_MAX) {
				log_err("etcd key %s: bad epoch '%.20s'",
				    e->k_epoch, kv.value);
				etcdj_kv_free(&kv);
				return -EINVAL;
			}
		}
		cmp[0] = (struct etcdj_cmp){ e->k_leader, 0, leader_rev };
		cmp[1] = (struct etcdj_cmp){ e->k_epoch, 1, kv.mod_rev };
		etcdj_kv_free(&kv);
		snprintf(buf, sizeof buf, "%lu", v + 1);
		if ((r = txn_put(e, h, cmp, 2, e->k_epoch, buf, strlen(buf), 0,
		    NULL)) < 0)
			return r;
		if (r == 1) {
			*out = v + 1;
			return 0;
		}
		/* Lost our leader key, or raced: look again. */
	}
	return -ESTALE;
}

static void
lease_drop(struct etcd *e)
{
	struct body	b;
	char		json[64];

	if (e->lease == 0)
		return;
	/* Best effort: a successor need not wait for the TTL. */
	snprintf(json, sizeof json, "{\"ID\":\"%" PRId64 "\"}", e->lease);
	if (call(e, &e->th, "/v3/lease/revoke", strdup(json), &b) == 0)
		free(b.data);
	e->lease = 0;
	e->lease_valid = 0;
}

/* Grant or keep alive our lease; the time it was SENT bounds its life. */
static int
lease_refresh(struct etcd *e)
{
	struct body	 b;
	char		 err[256];
	uint64_t	 sent = now_ms();
	int64_t		 id, ttl;
	int		 r;

	if (e->lease == 0)
		r = call(e, &e->th, "/v3/lease/grant",
		    etcdj_req_lease(0, e->conf.ttl_s), &b);
	else
		r = call(e, &e->th, "/v3/lease/keepalive",
		    etcdj_req_lease(e->lease, 0), &b);
	if (r < 0)
		return r;
	r = etcdj_lease(b.data, b.len, &id, &ttl, err, sizeof err);
	free(b.data);
	if (r < 0) {
		log_warn("etcd lease: %s", err);
		return r;
	}
	if (ttl <= 0 || id == 0 || (e->lease != 0 && id != e->lease)) {
		log_warn("etcd lease %" PRId64 " is gone", e->lease);
		e->lease = 0;
		e->lease_valid = 0;
		return -ENOENT;
	}
	e->lease = id;
	e->lease_valid = sent + (uint64_t)ttl * 1000 * RATE_NUM / RATE_DEN;
	e->next_ka = sent + (uint64_t)ttl * 1000 / 3;
	return 0;
}

/* Try to become active; 1 won (the view is updated), 0 not, -errno. */
static int
campaign(struct etcd *e)
{
	struct etcdj_cmp	cmp = { e->k_leader, 0, 0 };
	struct etcdj_kv		kv;
	int64_t			rev;
	uint32_t		epoch;
	char			*clients;
	int			r;

	if ((r = txn_put(e, &e->th, &cmp, 1, e->k_leader, e->conf.advertise,
	    strlen(e->conf.advertise), e->lease, &rev)) < 0)
		return r;
	if (r == 0) {
		/* Someone is active: remember where, for the clients. */
		if (get_key(e, &e->th, e->k_leader, &kv) < 0)
			return 0;
		pthread_mutex_lock(&e->mu);
		if (strncmp(e->v.leader, kv.found ? kv.value : "",
		    sizeof e->v.leader) != 0) {
			snprintf(e->v.leader, sizeof e->v.leader, "%s",
			    kv.found ? kv.value : "");
			notify(e);
		}
		pthread_mutex_unlock(&e->mu);
		etcdj_kv_free(&kv);
		return 0;
	}
	log_info("etcd: won the election (leader key revision %" PRId64 ")",
	    rev);
	if ((r = bump_epoch(e, &e->th, rev, &epoch)) < 0) {
		log_err("etcd: cannot bump the epoch: %s", strerror(-r));
		return r;
	}
	if ((r = get_key(e, &e->th, e->k_clients, &kv)) < 0)
		return r;
	clients = kv.found ? kv.value : strdup("");
	kv.value = NULL;
	if (clients == NULL)
		return -ENOMEM;
	pthread_mutex_lock(&e->mu);
	free(e->v.clients);
	e->v.clients = clients;
	e->v.term++;
	e->v.active = 1;
	e->v.epoch = epoch;
	e->v.valid_until = e->lease_valid;
	e->term_rev = rev;
	snprintf(e->v.leader, sizeof e->v.leader, "%s", e->conf.advertise);
	notify(e);
	pthread_mutex_unlock(&e->mu);
	return 1;
}

static void *
etcd_thread(void *arg)
{
	struct etcd	*e = arg;
	struct timespec	 ts;
	uint64_t	 now, next, next_campaign = 0, wait;
	int		 active, r;

	pthread_mutex_lock(&e->mu);
	while (!e->stop) {
		active = e->v.active;
		if (active && e->resign_term == e->v.term) {
			/* The main loop stepped down: end the term. */
			e->v.active = 0;
			e->v.valid_until = 0;
			e->v.leader[0] = '\0';	/* not us; learnt anew */
			e->term_rev = 0;
			active = 0;
			pthread_mutex_unlock(&e->mu);
			log_info("etcd: term %" PRIu64 " over, resigning",
			    e->v.term);
			lease_drop(e);
			pthread_mutex_lock(&e->mu);
			continue;
		}
		pthread_mutex_unlock(&e->mu);
		now = now_ms();
		r = 0;
		if (e->lease == 0 || now >= e->next_ka) {
			if ((r = lease_refresh(e)) < 0) {
				/* Keep trying while it may still live. */
				e->next_ka = now + RETRY_MS;
				if (now_ms() >= e->lease_valid)
					e->lease = 0;
			}
			pthread_mutex_lock(&e->mu);
			if (e->v.active && (r == 0 || e->lease == 0)) {
				/* Lost (0): the main loop steps down now. */
				e->v.valid_until = e->lease == 0 ? 0 :
				    e->lease_valid;
				notify(e);
			}
			pthread_mutex_unlock(&e->mu);
		}
		if (!active && e->lease != 0 && now_ms() >= next_campaign) {
			if ((r = campaign(e)) < 0) {
				/* Half a term is no term: start over. */
				lease_drop(e);
			}
			next_campaign = now_ms() + CAMPAIGN_MS;
		}
		now = now_ms();
		next = e->lease == 0 ? now + RETRY_MS : e->next_ka;
		if (!active && e->lease != 0 && next_campaign < next)
			next = next_campaign;
		wait = next > now ? next - now : 0;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += wait / 1000;
		ts.tv_nsec += (wait % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&e->mu);
		/* Not while a resignation waits to be carried out. */
		if (!e->stop && !(e->v.active && e->resign_term == e->v.term) &&
		    wait > 0)
			pthread_cond_timedwait(&e->cond, &e->mu, &ts);
	}
	pthread_mutex_unlock(&e->mu);
	lease_drop(e);
	return NULL;
}

/*
 * The known-clients writer: takes the buffer the main loop handed over,
 * writes it in a txn guarded by the leader key's create revision taken at
 * hand-over, and reports through wfd.
 */
static void *
writer_thread(void *arg)
{
	struct etcd		*e = arg;
	struct etcdj_cmp	 cmp;
	uint64_t		 one = 1;
	char			*buf;
	size_t			 len;
	int			 r;

	pthread_mutex_lock(&e->mu);
	for (;;) {
		while (!e->stop && e->w_buf == NULL)
			pthread_cond_wait(&e->wcond, &e->mu);
		if (e->stop)
			break;
		buf = e->w_buf;
		len = e->w_len;
		cmp = (struct etcdj_cmp){ e->k_leader, 0, e->w_rev };
		e->w_buf = NULL;
		pthread_mutex_unlock(&e->mu);
		r = txn_put(e, &e->wh, &cmp, 1, e->k_clients, buf, len, 0,
		    NULL);
		sodium_memzero(buf, len);
		free(buf);
		pthread_mutex_lock(&e->mu);
		e->w_result = r < 0 ? r : r == 1 ? 0 : -ESTALE;
		e->w_done = 1;
		if (write(e->wfd, &one, sizeof one) < 0) {
			/* Full: the main loop has a wakeup anyway. */
		}
	}
	if (e->w_buf != NULL) {
		sodium_memzero(e->w_buf, e->w_len);
		free(e->w_buf);
		e->w_buf = NULL;
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

static int
keyname(char *buf, size_t len, const char *prefix, const char *name)
{
	return snprintf(buf, len, "%s%s", prefix, name) >= (int)len ?
	    -ENAMETOOLONG : 0;
}

int
etcd_start(const struct etcd_conf *conf, struct etcd **out)
{
	struct etcd	*e;
	int		 r;

	if (curl_global_init(CURL_GLOBAL_DEFAULT) != 0)
		return -ENOMEM;
	if ((e = calloc(1, sizeof *e)) == NULL)
		return -ENOMEM;
	e->conf = *conf;
	e->evfd = -1;
	e->wfd = -1;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cond, NULL);
	pthread_cond_init(&e->wcond, NULL);
	if ((r = keyname(e->k_leader, sizeof e->k_leader, conf->prefix,
	    "leader")) < 0 || (r = keyname(e->k_epoch, sizeof e->k_epoch,
	    conf->prefix, "epoch")) < 0 || (r = keyname(e->k_clients,
	    sizeof e->k_clients, conf->prefix, "clients")) < 0)
		goto fail;
	if ((r = http_init(&e->th, &e->conf)) < 0 ||
	    (r = http_init(&e->mh, &e->conf)) < 0 ||
	    (r = http_init(&e->wh, &e->conf)) < 0)
		goto fail;
	if ((e->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0 ||
	    (e->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
		r = -errno;
		goto fail;
	}
	if ((r = pthread_create(&e->thread, NULL, etcd_thread, e)) != 0) {
		r = -r;
		goto fail;
	}
	e->running = 1;
	if ((r = pthread_create(&e->wthread, NULL, writer_thread, e)) != 0) {
		r = -r;
		goto fail;
	}
	e->wrunning = 1;
	*out = e;
	return 0;
fail:
	etcd_stop(e);
	return r;
}

void
etcd_stop(struct etcd *e)
{
	if (e == NULL)
		return;
	pthread_mutex_lock(&e->mu);
	e->stop = 1;
	pthread_cond_signal(&e->cond);
	pthread_cond_signal(&e->wcond);
	pthread_mutex_unlock(&e->mu);
	if (e->running)
		pthread_join(e->thread, NULL);
	if (e->wrunning)
		pthread_join(e->wthread, NULL);
	http_free(&e->th);
	http_free(&e->mh);
	http_free(&e->wh);
	if (e->evfd >= 0)
		close(e->evfd);
	if (e->wfd >= 0)
		close(e->wfd);
	free(e->v.clients);
	pthread_mutex_destroy(&e->mu);
	pthread_cond_destroy(&e->cond);
	pthread_cond_destroy(&e->wcond);
	free(e);
}

int
etcd_fd(const struct etcd *e)
{
	return e->evfd;
}

/*
 * Copy the view; the clients text moves to the caller (who frees it),
 * so it is handed over once per term.
 */
void
etcd_view(struct etcd *e, struct etcd_view *out)
{
	uint64_t	v;

	if (read(e->evfd, &v, sizeof v) < 0) {
		/* EAGAIN: nothing new, the copy is still current. */
	}
	pthread_mutex_lock(&e->mu);
	*out = e->v;
	e->v.clients = NULL;
	pthread_mutex_unlock(&e->mu);
}

/* Did the last request to etcd succeed; how many failed so far. */
void
etcd_health(struct etcd *e, uint64_t *healthy, uint64_t *failures)
{
	pthread_mutex_lock(&e->mu);
	*healthy = e->v.healthy;
	*failures = e->v.failures;
	pthread_mutex_unlock(&e->mu);
}

/* The main loop stopped serving term: let a successor be elected. */
void
etcd_resign(struct etcd *e, uint64_t term)
{
	pthread_mutex_lock(&e->mu);
	e->resign_term = term;
	pthread_cond_signal(&e->cond);
	pthread_mutex_unlock(&e->mu);
}

/* Our leader key's create revision; 0 while we hold no term. */
static int64_t
etcd_term_rev(struct etcd *e)
{
	int64_t	rev;

	pthread_mutex_lock(&e->mu);
	rev = e->term_rev;
	pthread_mutex_unlock(&e->mu);
	return rev;
}

/* Write the known clients, if our term still holds; main loop only. */
int
etcd_put_clients(struct etcd *e, const char *buf, size_t len)
{
	struct etcdj_cmp	cmp;
	int64_t			rev;
	int			r;

	if ((rev = etcd_term_rev(e)) == 0)
		return -ESTALE;
	cmp = (struct etcdj_cmp){ e->k_leader, 0, rev };
	if ((r = txn_put(e, &e->mh, &cmp, 1, e->k_clients, buf, len, 0,
	    NULL)) < 0)
		return r;
	return r == 1 ? 0 : -ESTALE;
}

/*
 * Hand the known clients (buf, len; taken over: zeroed and freed by the
 * writer) to the writer thread, to be written if the term that is ours
 * now still holds; seq comes back with the result. -EBUSY while a write
 * is out (its result not taken), -ESTALE without a term; main loop only.
 */
int
etcd_put_start(struct etcd *e, char *buf, size_t len, uint64_t seq)
{
	int	r = 0;

	pthread_mutex_lock(&e->mu);
	if (e->w_busy)
		r = -EBUSY;
	else if (e->term_rev == 0)
		r = -ESTALE;
	else {
		e->w_buf = buf;
		e->w_len = len;
		e->w_rev = e->term_rev;
		e->w_seq = seq;
		e->w_busy = 1;
		e->w_done = 0;
		pthread_cond_signal(&e->wcond);
	}
	pthread_mutex_unlock(&e->mu);
	if (r < 0) {
		sodium_memzero(buf, len);
		free(buf);
	}
	return r;
}

/*
 * The result of the write handed over: 1 with *seq and *result (0 or
 * -errno; -ESTALE when the term was over), 0 while it is still out or
 * none was.
 */
int
etcd_put_done(struct etcd *e, uint64_t *seq, int *result)
{
	uint64_t	v;
	int		done;

	if (read(e->wfd, &v, sizeof v) < 0) {
		/* EAGAIN: look anyway. */
	}
	pthread_mutex_lock(&e->mu);
	if ((done = e->w_busy && e->w_done)) {
		*seq = e->w_seq;
		*result = e->w_result;
		e->w_busy = e->w_done = 0;
	}
	pthread_mutex_unlock(&e->mu);
	return done;
}

int
etcd_put_fd(const struct etcd *e)
{
	return e->wfd;
}

/* A new epoch for the active term (its counter ran out); main loop only. */
int
etcd_next_epoch(struct etcd *e, uint32_t *epoch)
{
	int64_t	rev;

	if ((rev = etcd_term_rev(e)) == 0)
		return -ESTALE;
	return bump_epoch(e, &e->mh, rev, epoch);
}

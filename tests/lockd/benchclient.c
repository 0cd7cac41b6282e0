/*
 * Load generator for scripts/bench-lockd: N threads, each with its own
 * connection, take and release locks as fast as they can for a while and
 * report cycles per second, latency percentiles and each thread's share.
 * The same program drives wslockd (libwslock), redis (SET NX PX plus a
 * compare-and-delete script, spoken in RESP) and etcd (a lease and a
 * create-revision transaction through its JSON gateway), so that the
 * three are measured with the same threads, timing and arithmetic.
 *
 * usage: benchclient wslock|redis|etcd ADDR THREADS SECONDS uncontended|contended [KEYFILE]
 * Output: one JSON object on stdout.
 */
#include "config.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "clock.h"
#include "wslock.h"

#define MAXLAT	(4 * 1024 * 1024)

static const char	*kind, *addr, *keyfile;
static int		 nthreads, contended;
static double		 seconds;
static volatile int	 stop;
static pthread_barrier_t barrier;

struct worker {
	pthread_t	 tid;
	int		 n;
	uint64_t	 cycles;
	uint64_t	 retries;
	uint32_t	*lat;		/* microseconds */
	size_t		 nlat;
	int		 err;
};

static void
record(struct worker *w, uint64_t t0)
{
	if (w->nlat < MAXLAT)
		w->lat[w->nlat++] = (clock_ns(CLOCK_MONOTONIC) - t0) / 1000;
	w->cycles++;
}

static int
tcp_connect(const char *hostport)
{
	struct sockaddr_in	sin;
	char			host[64];
	const char		*c = strrchr(hostport, ':');
	int			fd, one = 1;

	if (c == NULL || (size_t)(c - hostport) >= sizeof host)
		return -1;
	memcpy(host, hostport, c - hostport);
	host[c - hostport] = '\0';
	memset(&sin, 0, sizeof sin);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(atoi(c + 1));
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		return -1;
	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static int
send_all(int fd, const char *buf, size_t len)
{
	ssize_t	n;

	while (len > 0) {
		if ((n = write(fd, buf, len)) <= 0)
			return -1;
		buf += n;
		len -= n;
	}
	return 0;
}

/* ---- wslockd ---- */

static void *
run_wslock(void *arg)
{
	struct worker		*w = arg;
	struct wslock_params	 p = { addr, keyfile, "bench", NULL, NULL };
	struct wslock		*wl;
	struct wslock_range	 rg;
	char			 key[32];
	uint64_t		 t0, token;
	int			 r;

	if ((r = wslock_open(&p, &wl)) < 0 ||
	    (r = wslock_connect_wait(wl, 5000)) < 0) {
		w->err = r;
		pthread_barrier_wait(&barrier);
		return NULL;
	}
	snprintf(key, sizeof key, contended ? "hot" : "k%d", w->n);
	rg = (struct wslock_range){ key, strlen(key), 1, 0, WSLOCK_EOF };
	pthread_barrier_wait(&barrier);
	while (!stop) {
		t0 = clock_ns(CLOCK_MONOTONIC);
		if ((r = wslock_lock_wait(wl, &rg, WSLOCK_EXCLUSIVE,
		    WSLOCK_WAIT, 10000, &token)) < 0 ||
		    (r = wslock_unlock_wait(wl, &rg, 10000)) < 0) {
			w->err = r;
			break;
		}
		record(w, t0);
	}
	wslock_close(wl);
	return NULL;
}

/* ---- redis: RESP ---- */

struct conn {
	int	fd;
	char	buf[65536];
	size_t	len;
};

static int
resp_cmd(struct conn *c, int argc, const char **argv)
{
	char	out[4096];
	size_t	n = 0;
	int	i;

	n += snprintf(out + n, sizeof out - n, "*%d\r\n", argc);
	for (i = 0; i < argc; i++)
		n += snprintf(out + n, sizeof out - n, "$%zu\r\n%s\r\n",
		    strlen(argv[i]), argv[i]);
	return send_all(c->fd, out, n);
}

/* Read one simple reply line ("+OK", "$-1", ":1", "$2" + data). */
static int
resp_reply(struct conn *c, char *line, size_t size)
{
	char	*nl;
	ssize_t	 n;
	size_t	 l;
	long	 blen;

	for (;;) {
		if ((nl = memchr(c->buf, '\n', c->len)) != NULL)
			break;
		if ((n = read(c->fd, c->buf + c->len,
		    sizeof c->buf - c->len)) <= 0)
			return -1;
		c->len += n;
	}
	l = nl - c->buf + 1;
	snprintf(line, size, "%.*s", (int)(l - 2), c->buf);
	memmove(c->buf, c->buf + l, c->len - l);
	c->len -= l;
	if (line[0] == '$' && (blen = atol(line + 1)) >= 0) {
		while (c->len < (size_t)blen + 2) {
			if ((n = read(c->fd, c->buf + c->len,
			    sizeof c->buf - c->len)) <= 0)
				return -1;
			c->len += n;
		}
		memmove(c->buf, c->buf + blen + 2, c->len - blen - 2);
		c->len -= blen + 2;
	}
	return 0;
}

/*
 * The measured loop of a backend that does not queue (redis, etcd): ask
 * for the lock until it is ours, then give it back, one round timed.
 * ask sends one request and returns 1 if it succeeded, 0 if refused (the
 * lock is another's), -1 on error. Frees c.
 */
static void *
poll_loop(struct worker *w, struct conn *c,
    int (*ask)(struct conn *, const void *), const void *take,
    const void *give)
{
	uint64_t	t0;
	int		r;

	while (!stop) {
		t0 = clock_ns(CLOCK_MONOTONIC);
		/* Retry at once until it is ours: no queue, no push. */
		while ((r = ask(c, take)) == 0) {
			w->retries++;
			if (stop)
				goto out;
		}
		if (r < 0 || ask(c, give) != 1)
			goto fail;
		record(w, t0);
	}
	goto out;
fail:
	w->err = -EIO;
out:
	close(c->fd);
	free(c);
	return NULL;
}

/* One redis command and the reply that means it succeeded. */
struct resp_req {
	int		 argc;
	const char	**argv;
	const char	*ok;
};

static int
resp_ask(struct conn *c, const void *arg)
{
	const struct resp_req	*q = arg;
	char			 line[256];

	if (resp_cmd(c, q->argc, q->argv) < 0 ||
	    resp_reply(c, line, sizeof line) < 0)
		return -1;
	return strcmp(line, q->ok) == 0;
}

static const char release_lua[] =
    "if redis.call('get',KEYS[1])==ARGV[1] then "
    "return redis.call('del',KEYS[1]) else return 0 end";

static void *
run_redis(void *arg)
{
	struct worker	*w = arg;
	struct conn	*c = calloc(1, sizeof *c);
	char		 key[32], val[32];
	const char	*set[] = { "SET", key, val, "NX", "PX", "10000" };
	const char	*del[] = { "EVAL", release_lua, "1", key, val };
	struct resp_req	 take = { 6, set, "+OK" }, give = { 5, del, ":1" };

	if ((c->fd = tcp_connect(addr)) < 0) {
		w->err = -ECONNREFUSED;
		pthread_barrier_wait(&barrier);
		free(c);
		return NULL;
	}
	snprintf(key, sizeof key, contended ? "hot" : "k%d", w->n);
	snprintf(val, sizeof val, "owner-%d-%d", getpid(), w->n);
	pthread_barrier_wait(&barrier);
	return poll_loop(w, c, resp_ask, &take, &give);
}

/* ---- etcd: JSON gateway over HTTP/1.1 keep-alive ---- */

static int
http_post(struct conn *c, const char *path, const char *body, char *resp,
    size_t size)
{
	char	 req[4096], *hdr_end, *cl;
	size_t	 n, need;
	ssize_t	 r;
	long	 clen;

	n = snprintf(req, sizeof req, "POST %s HTTP/1.1\r\nHost: %s\r\n"
	    "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
	    path, addr, strlen(body), body);
	if (send_all(c->fd, req, n) < 0)
		return -1;
	for (;;) {
		c->buf[c->len] = '\0';
		if ((hdr_end = strstr(c->buf, "\r\n\r\n")) != NULL) {
			if ((cl = strcasestr(c->buf, "Content-Length:")) ==
			    NULL || cl > hdr_end)
				return -1;
			clen = atol(cl + 15);
			need = hdr_end + 4 - c->buf + clen;
			if (c->len >= need)
				break;
		}
		if ((r = read(c->fd, c->buf + c->len,
		    sizeof c->buf - 1 - c->len)) <= 0)
			return -1;
		c->len += r;
	}
	snprintf(resp, size, "%.*s", (int)clen, hdr_end + 4);
	memmove(c->buf, c->buf + need, c->len - need);
	c->len -= need;
	return 0;
}

/* One transaction of the JSON gateway: 1 if it succeeded. */
static int
etcd_ask(struct conn *c, const void *body)
{
	char	resp[8192];

	if (http_post(c, "/v3/kv/txn", body, resp, sizeof resp) < 0)
		return -1;
	return strstr(resp, "\"succeeded\":true") != NULL;
}

static void *
run_etcd(void *arg)
{
	struct worker	*w = arg;
	struct conn	*c = calloc(1, sizeof *c);
	char		 key[32], k64[64], v64[64], val[32], resp[8192];
	char		 acq[1024], rel[1024], *p;
	long long	 lease;

	if ((c->fd = tcp_connect(addr)) < 0 ||
	    http_post(c, "/v3/lease/grant", "{\"TTL\": 60}", resp,
	    sizeof resp) < 0 || (p = strstr(resp, "\"ID\":\"")) == NULL) {
		w->err = -ECONNREFUSED;
		pthread_barrier_wait(&barrier);
		free(c);
		return NULL;
	}
	lease = atoll(p + 6);
	snprintf(key, sizeof key, contended ? "bench/hot" : "bench/k%d", w->n);
	snprintf(val, sizeof val, "owner-%d-%d", getpid(), w->n);
	sodium_bin2base64(k64, sizeof k64, (unsigned char *)key, strlen(key),
	    sodium_base64_VARIANT_ORIGINAL);
	sodium_bin2base64(v64, sizeof v64, (unsigned char *)val, strlen(val),
	    sodium_base64_VARIANT_ORIGINAL);
	/* Acquire: create the key with our lease if nobody has it. */
	snprintf(acq, sizeof acq, "{\"compare\":[{\"key\":\"%s\",\"target\":"
	    "\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],"
	    "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\","
	    "\"lease\":\"%lld\"}}]}", k64, k64, v64, lease);
	/* Release: delete it only if it is still ours. */
	snprintf(rel, sizeof rel, "{\"compare\":[{\"key\":\"%s\",\"target\":"
	    "\"VALUE\",\"result\":\"EQUAL\",\"value\":\"%s\"}],\"success\":"
	    "[{\"request_delete_range\":{\"key\":\"%s\"}}]}", k64, v64, k64);
	pthread_barrier_wait(&barrier);
	return poll_loop(w, c, etcd_ask, acq, rel);
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t	x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

int
main(int argc, char **argv)
{
	struct worker	*w;
	uint32_t	*all;
	uint64_t	 total = 0, retries = 0, t0, t1;
	size_t		 nall = 0, i;
	void		*(*fn)(void *);
	int		 n, errs = 0;

	if (argc < 6) {
		fprintf(stderr, "usage: benchclient wslock|redis|etcd ADDR "
		    "THREADS SECONDS uncontended|contended [KEYFILE]\n");
		return 2;
	}
	kind = argv[1];
	addr = argv[2];
	nthreads = atoi(argv[3]);
	seconds = atof(argv[4]);
	contended = strcmp(argv[5], "contended") == 0;
	keyfile = argc > 6 ? argv[6] : NULL;
	fn = strcmp(kind, "wslock") == 0 ? run_wslock :
	    strcmp(kind, "redis") == 0 ? run_redis : run_etcd;
	if (sodium_init() < 0 || nthreads < 1)
		return 1;
	w = calloc(nthreads, sizeof *w);
	pthread_barrier_init(&barrier, NULL, nthreads + 1);
	for (n = 0; n < nthreads; n++) {
		w[n].n = n;
		w[n].lat = malloc(MAXLAT * sizeof *w[n].lat);
		pthread_create(&w[n].tid, NULL, fn, &w[n]);
	}
	pthread_barrier_wait(&barrier);
	t0 = clock_ns(CLOCK_MONOTONIC);
	usleep(seconds * 1e6);
	stop = 1;
	for (n = 0; n < nthreads; n++)
		pthread_join(w[n].tid, NULL);
	t1 = clock_ns(CLOCK_MONOTONIC);
	all = malloc(MAXLAT * sizeof *all * 2);
	for (n = 0; n < nthreads; n++) {
		total += w[n].cycles;
		retries += w[n].retries;
		errs += w[n].err != 0;
		for (i = 0; i < w[n].nlat && nall < MAXLAT * 2; i++)
			all[nall++] = w[n].lat[i];
	}
	qsort(all, nall, sizeof *all, cmp_u32);
	printf("{\"kind\": \"%s\", \"threads\": %d, \"contended\": %s, "
	    "\"seconds\": %.3f, \"cycles\": %" PRIu64 ", \"per_s\": %.1f, "
	    "\"retries\": %" PRIu64 ", \"errors\": %d, \"p50_us\": %u, "
	    "\"p99_us\": %u, \"max_us\": %u, \"shares\": [", kind,
	    nthreads, contended ? "true" : "false", (t1 - t0) / 1e9, total,
	    total / ((t1 - t0) / 1e9), retries, errs,
	    nall ? all[nall / 2] : 0, nall ? all[nall * 99 / 100] : 0,
	    nall ? all[nall - 1] : 0);
	for (n = 0; n < nthreads; n++)
		printf("%s%" PRIu64, n ? ", " : "", w[n].cycles);
	printf("]}\n");
	return errs ? 1 : 0;
}

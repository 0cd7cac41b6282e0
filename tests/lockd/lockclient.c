/*
 * A scriptable libwslock client for the integration tests: it reads one
 * command per line on stdin and prints one line per answer or event on
 * stdout, each prefixed with the CLOCK_MONOTONIC time in seconds, so a
 * Python test can drive many of them and check the history they record.
 *
 *   lock ID KEY OWNER START END s|x FLAGS   FLAGS: any of w c q, or -
 *   unlock KEY OWNER START END
 *   cancel REQID          (REQID from "T sent ID REQID")
 *   held KEY OWNER START END s|x
 *   test KEY OWNER START END s|x          (blocking: wslock_test_wait)
 *   atest ID KEY OWNER START END s|x      (wslock_test, answer by callback)
 *   lease | session | stats | server | quit
 *
 * Output: "T ready", "T done ID STATUS TOKEN", "T revoke KEY OWNER START
 * END TOKEN", "T lost KEY OWNER START END TOKEN REASON", "T state N",
 * "T unlocked", "T cancel ID RC", "T held 0|1 TOKEN", "T test RC ...",
 * "T tested ID STATUS [SESSION OWNER START END MODE]",
 * "T lease MS", "T session ID", "T server ADDR", "T stats STATE CONNECTS ATTEMPTS DOWN MS
 * ERR TEXT...". END "-" means the whole object.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "wslock.h"

static void
out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
out(const char *fmt, ...)
{
	va_list	ap;

	printf("%.6f ", clock_s(CLOCK_MONOTONIC));
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void
on_done(struct wslock *wl, uint64_t reqid, int status, uint64_t token,
    void *reqarg, void *arg)
{
	out("done %s %d %" PRIu64, (char *)reqarg, status, token);
	free(reqarg);
}

static void
on_revoke(struct wslock *wl, const struct wslock_range *r, uint64_t token,
    void *arg)
{
	out("revoke %.*s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64,
	    (int)r->keylen, (const char *)r->key, r->owner, r->start, r->end,
	    token);
}

static void
on_lost(struct wslock *wl, const struct wslock_range *r, int mode,
    uint64_t token, int reason, void *arg)
{
	out("lost %.*s %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %d",
	    (int)r->keylen, (const char *)r->key, r->owner, r->start, r->end,
	    token, reason);
}

static void
on_state(struct wslock *wl, int state, void *arg)
{
	out("state %d", state);
}

static void
on_tested(struct wslock *wl, uint64_t reqid, int status,
    const struct wslock_conflict *c, void *reqarg, void *arg)
{
	if (c != NULL)
		out("tested %s %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64
		    " %d", (char *)reqarg, status, c->session, c->owner,
		    c->start, c->end, c->mode);
	else
		out("tested %s %d", (char *)reqarg, status);
	free(reqarg);
}

static int
parse_range(char **tok, struct wslock_range *r)
{
	if (tok[0] == NULL || tok[1] == NULL || tok[2] == NULL ||
	    tok[3] == NULL)
		return -1;
	r->key = tok[0];
	r->keylen = strlen(tok[0]);
	r->owner = strtoull(tok[1], NULL, 0);
	r->start = strtoull(tok[2], NULL, 0);
	r->end = strcmp(tok[3], "-") == 0 ? WSLOCK_EOF :
	    strtoull(tok[3], NULL, 0);
	return 0;
}

static int
command(struct wslock *wl, char *line)
{
	struct wslock_range	 r;
	struct wslock_conflict	 c;
	char			*tok[10], *save, *p;
	uint64_t		 token = 0;
	int			 n = 0, mode, flags, rc;

	for (p = strtok_r(line, " \t\n", &save); p != NULL && n < 9;
	    p = strtok_r(NULL, " \t\n", &save))
		tok[n++] = p;
	tok[n] = NULL;
	if (n == 0)
		return 0;
	if (strcmp(tok[0], "quit") == 0)
		return 1;
	if (strcmp(tok[0], "lock") == 0 && n == 8) {
		parse_range(tok + 2, &r);
		mode = tok[6][0] == 's' ? WSLOCK_SHARED : WSLOCK_EXCLUSIVE;
		flags = (strchr(tok[7], 'w') ? WSLOCK_WAIT : 0) |
		    (strchr(tok[7], 'c') ? WSLOCK_CACHED : 0) |
		    (strchr(tok[7], 'q') ? WSLOCK_QUIET : 0);
		if ((rc = wslock_lock(wl, &r, mode, flags, strdup(tok[1]),
		    &token)) < 0)
			out("done %s %d 0", tok[1], rc);
		else
			out("sent %s %" PRIu64, tok[1], token);
	} else if (strcmp(tok[0], "unlock") == 0 && n == 5) {
		parse_range(tok + 1, &r);
		rc = wslock_unlock(wl, &r);
		out("unlocked %d", rc);
	} else if (strcmp(tok[0], "cancel") == 0 && n == 2) {
		/* Test ids are request ids: the library numbers from 1. */
		rc = wslock_cancel(wl, strtoull(tok[1], NULL, 0));
		out("cancel %s %d", tok[1], rc);
	} else if (strcmp(tok[0], "held") == 0 && n == 6) {
		parse_range(tok + 1, &r);
		mode = tok[5][0] == 's' ? WSLOCK_SHARED : WSLOCK_EXCLUSIVE;
		rc = wslock_held(wl, &r, mode, &token);
		out("held %d %" PRIu64, rc, token);
	} else if (strcmp(tok[0], "test") == 0 && n == 6) {
		parse_range(tok + 1, &r);
		mode = tok[5][0] == 's' ? WSLOCK_SHARED : WSLOCK_EXCLUSIVE;
		rc = wslock_test_wait(wl, &r, mode, 5000, &c);
		if (rc == 1)
			out("test 1 %" PRIu64 " %" PRIu64 " %" PRIu64 " %"
			    PRIu64 " %d", c.session, c.owner, c.start, c.end,
			    c.mode);
		else
			out("test %d", rc);
	} else if (strcmp(tok[0], "atest") == 0 && n == 7) {
		parse_range(tok + 2, &r);
		mode = tok[6][0] == 's' ? WSLOCK_SHARED : WSLOCK_EXCLUSIVE;
		if ((rc = wslock_test(wl, &r, mode, strdup(tok[1]),
		    &token)) < 0)
			out("tested %s %d", tok[1], rc);
		else
			out("sent %s %" PRIu64, tok[1], token);
	} else if (strcmp(tok[0], "lease") == 0) {
		out("lease %" PRId64, wslock_lease_left(wl));
	} else if (strcmp(tok[0], "session") == 0) {
		out("session %" PRIu64, wslock_session(wl));
	} else if (strcmp(tok[0], "server") == 0) {
		struct wslock_conn_stats	st;

		if ((rc = wslock_conn_stats(wl, &st)) < 0)
			out("server error %d", rc);
		else
			out("server %s", st.server);
	} else if (strcmp(tok[0], "stats") == 0) {
		struct wslock_conn_stats	st;

		if ((rc = wslock_conn_stats(wl, &st)) < 0)
			out("stats error %d", rc);
		else
			out("stats %d %" PRIu64 " %" PRIu64 " %" PRIu64 " %"
			    PRIu64 " %d %s", st.state, st.connects,
			    st.attempts, st.attempts_down, st.state_ms,
			    st.last_err, st.last_error);
	} else
		out("error bad command '%s'", tok[0]);
	return 0;
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "addr", required_argument, NULL, 'a' },
		{ "key", required_argument, NULL, 'k' },
		{ "name", required_argument, NULL, 'n' },
		{ NULL, 0, NULL, 0 }
	};
	static const struct wslock_callbacks cb = {
		.done = on_done,
		.revoke = on_revoke,
		.lost = on_lost,
		.state = on_state,
		.tested = on_tested,
	};
	struct wslock_params	 p = { NULL, NULL, "lockclient", &cb, NULL };
	struct wslock		*wl;
	struct pollfd		 pfd[2];
	char			 line[4096];
	int			 ch, r;

	while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (ch) {
		case 'a':
			p.addr = optarg;
			break;
		case 'k':
			p.keyfile = optarg;
			break;
		case 'n':
			p.name = optarg;
			break;
		default:
			return 2;
		}
	}
	/* poll() must see every line: no stdio buffering ahead of it. */
	setvbuf(stdin, NULL, _IONBF, 0);
	if ((r = wslock_open(&p, &wl)) < 0) {
		out("error open %s", strerror(-r));
		return 1;
	}
	if ((r = wslock_connect_wait(wl, 5000)) < 0) {
		out("error connect %s", strerror(-r));
		wslock_close(wl);
		return 1;
	}
	out("ready %" PRIu64, wslock_session(wl));
	pfd[0].fd = 0;
	pfd[0].events = POLLIN;
	pfd[1].fd = wslock_fd(wl);
	pfd[1].events = POLLIN;
	for (;;) {
		if (poll(pfd, 2, -1) < 0 && errno != EINTR)
			break;
		if (pfd[1].revents & POLLIN)
			wslock_process(wl);
		if (pfd[0].revents & (POLLIN | POLLHUP)) {
			if (fgets(line, sizeof line, stdin) == NULL)
				break;
			if (command(wl, line))
				break;
		}
	}
	wslock_close(wl);
	return 0;
}

/*
 * wsctl locks: what the lock server knows right now: its sessions, the
 * holders of each lock with their fencing tokens, and the waiters, as a
 * table or as JSON. Keys are opaque bytes; anything unprintable is shown
 * escaped.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "wslock.h"
#include "wsctl.h"

struct locks_out {
	uint64_t self;		/* our own session: not worth listing */
	int	json;
	int	nsess, nhold, nwait;
	int	first;
};

/* Print bytes for a table, with C escapes for anything unprintable. */
static void
put_bytes(const void *data, size_t len)
{
	const unsigned char	*p = data;
	size_t			 i;

	for (i = 0; i < len; i++) {
		if (p[i] == '"' || p[i] == '\\')
			printf("\\%c", p[i]);
		else if (p[i] >= 0x20 && p[i] < 0x7f)
			putchar(p[i]);
		else
			printf("\\x%02x", p[i]);
	}
}

static void
put_range(uint64_t start, uint64_t end)
{
	if (start == 0 && end == WSLOCK_EOF)
		printf("all");
	else if (end == WSLOCK_EOF)
		printf("%" PRIu64 "-", start);
	else
		printf("%" PRIu64 "-%" PRIu64, start, end);
}

static void
item_json(const struct wslock_item *it, struct locks_out *o)
{
	static const char *kinds[] = { "", "session", "holder", "waiter" };

	printf("%s\n  {\"type\": \"%s\", \"session\": %" PRIu64,
	    o->first ? "" : ",", kinds[it->kind], it->session);
	o->first = 0;
	if (it->kind == 1) {
		printf(", \"client\": \"%016" PRIx64 "\", \"name\": ",
		    it->client_id);
		json_put_bytes(stdout, it->data, it->datalen);
		printf(", \"lease_left_ms\": %u, \"connected\": %s}",
		    it->lease_left_ms, it->connected ? "true" : "false");
		return;
	}
	printf(", \"key\": ");
	json_put_bytes(stdout, it->data, it->datalen);
	printf(", \"owner\": %" PRIu64 ", \"start\": %" PRIu64 ", \"end\": ",
	    it->owner, it->start);
	if (it->end == WSLOCK_EOF)
		printf("null");
	else
		printf("%" PRIu64, it->end);
	printf(", \"mode\": \"%s\"", it->mode == WSLOCK_SHARED ? "shared" :
	    "exclusive");
	if (it->kind == 2)
		printf(", \"token\": %" PRIu64 ", \"cached\": %s}", it->token,
		    it->cached ? "true" : "false");
	else
		printf(", \"request\": %" PRIu64 "}", it->reqid);
}

static void
item_text(const struct wslock_item *it, struct locks_out *o)
{
	if (it->kind == 1) {
		if (o->nsess++ == 0)
			printf("%-8s %-16s %-10s %-9s %s\n", "SESSION",
			    "CLIENT", "LEASE_MS", "CONNECTED", "NAME");
		printf("%-8" PRIu64 " %016" PRIx64 " %-10u %-9s ",
		    it->session, it->client_id, it->lease_left_ms,
		    it->connected ? "yes" : "no");
		put_bytes(it->data, it->datalen);
		putchar('\n');
		return;
	}
	if (it->kind == 2 && o->nhold++ == 0)
		printf("\n%-6s %-8s %-10s %-5s %-20s %-6s %s\n", "STATE",
		    "SESSION", "OWNER", "MODE", "TOKEN/REQUEST", "RANGE", "KEY");
	if (it->kind == 3 && o->nwait++ == 0 && o->nhold == 0)
		printf("\n%-6s %-8s %-10s %-5s %-20s %-6s %s\n", "STATE",
		    "SESSION", "OWNER", "MODE", "TOKEN/REQUEST", "RANGE", "KEY");
	printf("%-6s %-8" PRIu64 " %-10" PRIu64 " %-5s %-20" PRIu64 " ",
	    it->kind == 2 ? (it->cached ? "cached" : "held") : "wait",
	    it->session, it->owner, it->mode == WSLOCK_SHARED ? "S" : "X",
	    it->kind == 2 ? it->token : it->reqid);
	put_range(it->start, it->end);
	putchar(' ');
	put_bytes(it->data, it->datalen);
	putchar('\n');
}

static void
item(const struct wslock_item *it, void *arg)
{
	struct locks_out	*o = arg;

	if (it->kind == 1 && it->session == o->self)
		return;
	if (o->json)
		item_json(it, o);
	else
		item_text(it, o);
}

int
cmd_locks(int argc, char **argv)
{
	static const struct option longopts[] = {
		WSCTL_LOCKD_LONGOPTS,
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 }
	};
	struct wsctl_lockd	 lo;
	struct locks_out	 o = { 0, 0, 0, 0, 0, 1 };
	struct wslock		*wl;
	struct wslock_conn_stats st;
	int			 ch, r;

	wsctl_lockd_init(&lo);
	while ((ch = wsctl_getopt("locks", argc, argv, "", longopts)) != -1) {
		if (wsctl_lockd_option(ch, &lo))
			continue;
		if (ch != 'j')
			return WSCTL_EXIT_USAGE;
		o.json = 1;
	}
	if ((r = wsctl_no_operands("locks", argc, argv)) != 0)
		return r;
	if (wsctl_lockd_open("locks", lo.addr, lo.keyfile, &wl) < 0)
		return WSCTL_EXIT_FAIL;
	o.self = wslock_session(wl);
	if (o.json)
		printf("[");
	else if (wslock_conn_stats(wl, &st) == 0)
		/* With replicas (lockd=A,B), the one that answered. */
		printf("lock server %s, epoch %u\n\n", st.server, st.epoch);
	r = wslock_list_wait(wl, 10000, item, &o);
	wslock_close(wl);
	if (r < 0) {
		if (o.json)
			printf("]\n");
		fprintf(stderr, "wsctl locks: %s\n", strerror(-r));
		return WSCTL_EXIT_FAIL;
	}
	if (o.json)
		printf("\n]\n");
	else if (o.nhold == 0 && o.nwait == 0)
		printf("\nno locks held or waited for\n");
	return WSCTL_EXIT_OK;
}

/*
 * wsctl sweep: one sweep of a scratch base on demand, the same sweep wsfs
 * runs on its timer. Prints every decision, then "removed N".
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"
#include "scratch.h"
#include "sweep.h"
#include "wsctl.h"

static void
cmd_sweep_report(void *arg, enum sweep_event ev, const char *id,
    const char *detail)
{
	static const char	*what[] = {
		[SWEEP_EV_REMOVED] = "removed",
		[SWEEP_EV_WOULD_REMOVE] = "would remove",
		[SWEEP_EV_KEPT] = "kept",
		[SWEEP_EV_TRASH] = "trash",
		[SWEEP_EV_MOUNT] = "skipped",
		[SWEEP_EV_ERROR] = "error",
	};

	printf("%s %s: %s\n", what[ev], id, detail);
	fflush(stdout);
}

int
cmd_sweep(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "base",	required_argument,	NULL, 'b' },
		{ "dry-run",	no_argument,		NULL, 'n' },
		{ "ttl-hours",	required_argument,	NULL, 't' },
		/* Removed; kept to say so rather than "unknown option". */
		{ "uring",	no_argument,		NULL, 'U' },
		{ NULL,		0,			NULL, 0 }
	};
	struct scratch_base	*sb = NULL;
	struct sweep_params	 p;
	struct sweep_result	 res;
	const char		*base_opt = NULL, *ttl_opt = NULL;
	char			*base = NULL;
	double			 ttl;
	int			 c, r, ret = WSCTL_EXIT_FAIL;

	memset(&p, 0, sizeof p);
	while ((c = wsctl_getopt("sweep", argc, argv, "", opts)) != -1) {
		switch (c) {
		case 'b':
			base_opt = optarg;
			break;
		case 'n':
			p.dry_run = 1;
			break;
		case 't':
			ttl_opt = optarg;
			break;
		case 'U':
			return wsctl_usage_error("sweep", "--uring is gone: "
			    "io_uring batches of unlinkat measured slower "
			    "than one unlinkat at a time, which every sweep "
			    "now uses");
		default:
			return WSCTL_EXIT_USAGE;
		}
	}
	if (wsctl_no_operands("sweep", argc, argv) != 0)
		return WSCTL_EXIT_USAGE;
	if (cmd_scratch_conf(base_opt, &base, &ttl) < 0)
		goto out;
	if (ttl_opt != NULL && conf_parse_double(ttl_opt, 0, 876000,
	    &ttl) < 0) {
		ret = wsctl_usage_error("sweep", "--ttl-hours must be a "
		    "decimal number of hours from 0 to 876000, not '%s'",
		    ttl_opt);
		goto out;
	}
	if (cmd_scratch_open(base, 0, &sb) < 0)
		goto out;
	p.ttl_hours = ttl;
	p.report = cmd_sweep_report;
	/* Decisions go to stdout; the log of them goes where wsfs's goes. */
	log_open("wsctl", LOG_TO_SYSLOG, 0);
	if ((r = sweep_run(sb, &p, &res)) < 0) {
		if (r == -EWOULDBLOCK)
			fprintf(stderr, "wsctl: another sweep of %s is "
			    "running; nothing done\n", base);
		else
			fprintf(stderr, "wsctl: sweep of %s failed: %s\n",
			    base, strerror(-r));
		goto out;
	}
	if (p.dry_run) {
		printf("would remove %llu\n", (unsigned long long)res.removed);
		printf("removed 0\n");
	} else
		printf("removed %llu\n", (unsigned long long)res.removed);
	ret = WSCTL_EXIT_OK;
out:
	free(base);
	scratch_base_free(sb);
	return ret;
}

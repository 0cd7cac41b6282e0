/*
 * wslockd entry point: command line, daemonising and logging; the server
 * itself is server.c.
 */
#include "config.h"

#include <sys/socket.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "defaults.h"
#include "lockd.h"
#include "log.h"

#define DEFAULT_UNIX	WS_DEFAULT_LOCKD
#define DEFAULT_TCP	WS_DEFAULT_LOCKD_TCP
/* The same place wsfs and wsctl use, whatever the prefix. */
#define DEFAULT_KEY	WS_DEFAULT_KEY
#define DEFAULT_STATE	WS_DEFAULT_LOCKD_STATE
#define MAX_LISTEN	16

static const char usage_text[] =
"usage: wslockd [-f] [-v] [--listen ADDR]... [--key FILE] [--lease-ms N]\n"
"               [--grace-ms N] [--state-dir DIR] [--max-locks N]\n"
"               [--max-waiters N] [--max-conns N] [--metrics ADDR]\n"
"\n"
"  -f, --foreground   stay in the foreground and log to stderr\n"
"  -v, --verbose      log debug messages\n"
"  --listen ADDR      HOST:PORT, :PORT or unix:PATH; repeatable\n"
"                     (default " DEFAULT_UNIX " and " DEFAULT_TCP ")\n"
"  --key FILE         cluster key for TCP clients (default " DEFAULT_KEY ")\n"
"  --lease-ms N       session lease (default 10000)\n"
"  --grace-ms N       grace period after a restart (default lease * 1.5)\n"
"  --state-dir DIR    epoch and known clients (default " DEFAULT_STATE ")\n"
"  --max-locks N      locks one session may hold (default 100000)\n"
"  --max-waiters N    waiting requests per session (default 10000)\n"
"  --max-conns N      connections (default 16384)\n"
"  --metrics ADDR     serve Prometheus metrics on HOST:PORT, :PORT or\n"
"                     unix:PATH (default: none)\n"
"  --help, --version\n";

static int usage_error(const char *, ...)
	    __attribute__((format(printf, 1, 2)));

static int
usage_error(const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "wslockd: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'wslockd --help'.\n");
	return 2;
}

static int
parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long	v;
	char		*end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (*s == '\0' || *s == '-' || *end != '\0' || errno != 0 ||
	    v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

/*
 * A metrics address needs its port spelled out: wsl_addr_parse would
 * quietly give a bare host the lock port, and a scraper must be pointed at
 * a port of its own.
 */
static int
metrics_addr_ok(const char *s)
{
	struct wsl_addr	 a;
	const char	*colon, *bracket;

	if (wsl_addr_parse(s, &a) < 0)
		return 0;
	if (a.family == AF_UNIX)
		return 1;
	colon = strrchr(s, ':');
	bracket = strchr(s, ']');
	return colon != NULL && colon[1] != '\0' &&
	    (bracket == NULL || colon > bracket);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "foreground", no_argument, NULL, 'f' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "listen", required_argument, NULL, 'l' },
		{ "key", required_argument, NULL, 'k' },
		{ "lease-ms", required_argument, NULL, 'L' },
		{ "grace-ms", required_argument, NULL, 'G' },
		{ "state-dir", required_argument, NULL, 's' },
		{ "max-locks", required_argument, NULL, 'M' },
		{ "max-waiters", required_argument, NULL, 'W' },
		{ "max-conns", required_argument, NULL, 'C' },
		{ "metrics", required_argument, NULL, 'm' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct server_conf	 conf;
	const char		*listen[MAX_LISTEN + 1];
	size_t			 nlisten = 0, i;
	int			 ch, foreground = 0, verbose = 0, grace_set = 0;
	int			 tcp = 0;

	memset(&conf, 0, sizeof conf);
	conf.statedir = DEFAULT_STATE;
	conf.lease_ms = 10000;
	conf.max_frame = WSL_MAX_FRAME;
	conf.max_locks = 100000;
	conf.max_waiters = 10000;
	conf.max_conns = 16384;
	while ((ch = getopt_long(argc, argv, "fvh", longopts, NULL)) != -1) {
		switch (ch) {
		case 'f':
			foreground = 1;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'l':
			if (nlisten == MAX_LISTEN)
				return usage_error("too many --listen (max %s)",
				    "16");
			listen[nlisten++] = optarg;
			break;
		case 'k':
			conf.keyfile = optarg;
			break;
		case 'L':
			if (parse_u32(optarg, 100, 3600000, &conf.lease_ms) < 0)
				return usage_error("--lease-ms: '%s' is not "
				    "100..3600000", optarg);
			break;
		case 'G':
			if (parse_u32(optarg, 0, 3600000, &conf.grace_ms) < 0)
				return usage_error("--grace-ms: '%s' is not "
				    "0..3600000", optarg);
			grace_set = 1;
			break;
		case 's':
			conf.statedir = optarg;
			break;
		case 'M':
			if (parse_u32(optarg, 1, 100000000, &conf.max_locks) < 0)
				return usage_error("--max-locks: bad number '%s'",
				    optarg);
			break;
		case 'W':
			if (parse_u32(optarg, 0, 100000000,
			    &conf.max_waiters) < 0)
				return usage_error("--max-waiters: bad number "
				    "'%s'", optarg);
			break;
		case 'C':
			if (parse_u32(optarg, 1, 1000000, &conf.max_conns) < 0)
				return usage_error("--max-conns: bad number '%s'",
				    optarg);
			break;
		case 'm':
			if (conf.metrics != NULL)
				return usage_error("--metrics given twice");
			if (!metrics_addr_ok(optarg))
				return usage_error("--metrics: bad address '%s' "
				    "(HOST:PORT, :PORT or unix:PATH)", optarg);
			conf.metrics = optarg;
			break;
		case 'h':
			fputs(usage_text, stdout);
			return 0;
		case 'V':
			printf("wslockd %s (protocol %d)\n", PACKAGE_VERSION,
			    WSL_PROTO_VERSION);
			return 0;
		default:
			fprintf(stderr, "Try 'wslockd --help'.\n");
			return 2;
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (nlisten == 0) {
		listen[nlisten++] = DEFAULT_UNIX;
		listen[nlisten++] = DEFAULT_TCP;
	}
	listen[nlisten] = NULL;
	for (i = 0; i < nlisten; i++) {
		struct wsl_addr a;

		if (wsl_addr_parse(listen[i], &a) < 0)
			return usage_error("--listen: bad address '%s'",
			    listen[i]);
		if (a.family != AF_UNIX)
			tcp = 1;
	}
	if (tcp && conf.keyfile == NULL)
		conf.keyfile = DEFAULT_KEY;
	if (!grace_set)
		conf.grace_ms = conf.lease_ms + conf.lease_ms / 2;
	conf.listen = listen;

	log_open("wslockd", foreground ? LOG_TO_STDERR : LOG_TO_SYSLOG,
	    verbose);
	if (!foreground && daemon(0, 0) < 0)
		fatal("daemon");
	return server_run(&conf) == 0 ? 0 : 1;
}

/*
 * wslockd entry point: command line, daemonising and logging; the server
 * itself is server.c.
 */
#include "config.h"

#include <sys/socket.h>

#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "defaults.h"
#include "etcd.h"
#include "lockd.h"
#include "log.h"
#include "number.h"

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
"               [--etcd URLS [--etcd-prefix P] [--etcd-ttl S]\n"
"                [--advertise HOST:PORT] [--etcd-ca F --etcd-cert F\n"
"                --etcd-key F]]\n"
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
"  --etcd URLS        run as one of several replicas, the active one\n"
"                     elected on etcd (http[s]://HOST:PORT,...); epoch\n"
"                     and known clients live in etcd (--state-dir unused)\n"
"  --etcd-prefix P    etcd key prefix (default /wslockd/)\n"
"  --etcd-ttl S       etcd lease of the active replica (default 3 s)\n"
"  --advertise ADDR   this replica's HOST:PORT for clients (default: the\n"
"                     first --listen HOST:PORT)\n"
"  --etcd-ca FILE, --etcd-cert FILE, --etcd-key FILE   TLS to etcd\n"
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

/* The options that take a number: one row each, checked alike. */
static const struct num_opt {
	int		 ch;
	const char	*name;
	uint32_t	 min, max;
	const char	*unit;		/* said after the range */
} num_opts[] = {
	{ 'L', "--lease-ms", 100, 3600000, "" },
	{ 'G', "--grace-ms", 0, 3600000, "" },
	{ 'T', "--etcd-ttl", 2, 600, " seconds" },
	{ 'M', "--max-locks", 1, 100000000, "" },
	{ 'W', "--max-waiters", 0, 100000000, "" },
	{ 'C', "--max-conns", 1, 1000000, "" },
};

/*
 * If ch is a numeric option: 1 with its value in *v, or -1 for a bad one,
 * told to the user. 0 for any other option.
 */
static int
num_opt_parse(int ch, const char *arg, uint32_t *v)
{
	const struct num_opt	*o;
	uint64_t		 n;

	for (o = num_opts; o < num_opts + sizeof num_opts / sizeof *o; o++) {
		if (o->ch != ch)
			continue;
		if (number_parse(arg, 0, o->max, &n) < 0 || n < o->min) {
			(void)usage_error("%s: '%s' is not %u..%u%s", o->name,
			    arg, o->min, o->max, o->unit);
			return -1;
		}
		*v = (uint32_t)n;
		return 1;
	}
	return 0;
}

/*
 * A metrics address needs its port spelled out: addr_parse would
 * quietly give a bare host the lock port, and a scraper must be pointed at
 * a port of its own.
 */
static int
metrics_addr_ok(const char *s)
{
	struct addr	 a;
	const char	*colon, *bracket;

	if (addr_parse(s, &a) < 0)
		return 0;
	if (a.family == AF_UNIX)
		return 1;
	colon = strrchr(s, ':');
	bracket = strchr(s, ']');
	return colon != NULL && colon[1] != '\0' &&
	    (bracket == NULL || colon > bracket);
}

/* --etcd URL,URL,...: each http:// or https:// and something after it. */
static int
etcd_urls_ok(const char *s)
{
	const char	*p = s, *comma;
	size_t		 len, n;

	for (;;) {
		comma = strchr(p, ',');
		len = comma ? (size_t)(comma - p) : strlen(p);
		n = strncmp(p, "http://", 7) == 0 ? 7 :
		    strncmp(p, "https://", 8) == 0 ? 8 : 0;
		if (n == 0 || len <= n || len > 512)
			return 0;
		if (comma == NULL)
			return 1;
		p = comma + 1;
	}
}

/* What clients can connect to: a host and a port, both spelled out. */
static int
advertise_ok(const char *s)
{
	struct addr	a;

	return addr_parse(s, &a) == 0 && a.family != AF_UNIX &&
	    a.host[0] != '\0' && metrics_addr_ok(s) && strlen(s) < 200;
}

/* The options that mean nothing without --etcd, by their val. */
#define ETCD_ONLY	"PTA123"

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
		{ "etcd", required_argument, NULL, 'E' },
		{ "etcd-prefix", required_argument, NULL, 'P' },
		{ "etcd-ttl", required_argument, NULL, 'T' },
		{ "advertise", required_argument, NULL, 'A' },
		{ "etcd-ca", required_argument, NULL, '1' },
		{ "etcd-cert", required_argument, NULL, '2' },
		{ "etcd-key", required_argument, NULL, '3' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct server_conf	 conf;
	struct etcd_conf	 ec;
	const char		*listen[MAX_LISTEN + 1];
	size_t			 nlisten = 0, i;
	int			 ch, foreground = 0, verbose = 0, grace_set = 0;
	int			 tcp = 0, state_set = 0;
	const struct option	*o;
	int			 etcd_only = 0;
	uint32_t		 v = 0;

	memset(&conf, 0, sizeof conf);
	conf.statedir = DEFAULT_STATE;
	conf.lease_ms = 10000;
	conf.max_frame = WSL_MAX_FRAME;
	conf.max_locks = 100000;
	conf.max_waiters = 10000;
	conf.max_conns = 16384;
	memset(&ec, 0, sizeof ec);
	ec.prefix = "/wslockd/";
	ec.ttl_s = 3;
	while ((ch = getopt_long(argc, argv, "fvh", longopts, NULL)) != -1) {
		if (num_opt_parse(ch, optarg, &v) < 0)
			return 2;
		if (strchr(ETCD_ONLY, ch) != NULL)
			etcd_only = ch;
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
			conf.lease_ms = v;
			break;
		case 'G':
			conf.grace_ms = v;
			grace_set = 1;
			break;
		case 's':
			conf.statedir = optarg;
			state_set = 1;
			break;
		case 'E':
			if (!etcd_urls_ok(optarg))
				return usage_error("--etcd: '%s' is not a list "
				    "of http:// or https:// URLs", optarg);
			ec.endpoints = optarg;
			break;
		case 'P':
			if (optarg[0] != '/' || strlen(optarg) > 400)
				return usage_error("--etcd-prefix: '%s' must "
				    "start with '/'", optarg);
			ec.prefix = optarg;
			break;
		case 'T':
			ec.ttl_s = v;
			break;
		case 'A':
			if (!advertise_ok(optarg))
				return usage_error("--advertise: '%s' is not "
				    "HOST:PORT", optarg);
			ec.advertise = optarg;
			break;
		case '1':
			ec.ca = optarg;
			break;
		case '2':
			ec.cert = optarg;
			break;
		case '3':
			ec.key = optarg;
			break;
		case 'M':
			conf.max_locks = v;
			break;
		case 'W':
			conf.max_waiters = v;
			break;
		case 'C':
			conf.max_conns = v;
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
		struct addr a;

		if (addr_parse(listen[i], &a) < 0)
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
	for (o = longopts; etcd_only != 0 && ec.endpoints == NULL; o++)
		if (o->val == etcd_only)
			return usage_error("--%s needs --etcd", o->name);
	if (ec.endpoints != NULL) {
		if ((ec.cert == NULL) != (ec.key == NULL))
			return usage_error("--etcd-cert and --etcd-key go "
			    "together");
		/*
		 * A successor's grace must outlast every client lease the
		 * old active replica renewed (PROTOCOL.md, Replicas).
		 */
		if (conf.grace_ms < conf.lease_ms + conf.lease_ms / 10)
			return usage_error("--grace-ms must be at least 1.1 "
			    "times --lease-ms with --etcd");
		for (i = 0; ec.advertise == NULL && i < nlisten; i++)
			if (advertise_ok(listen[i]))
				ec.advertise = listen[i];
		if (ec.advertise == NULL)
			return usage_error("--etcd needs --advertise HOST:PORT "
			    "(no --listen HOST:PORT to take it from)");
		conf.etcd = &ec;
	}

	log_open("wslockd", foreground ? LOG_TO_STDERR : LOG_TO_SYSLOG,
	    verbose);
	/* Said, not refused: a unit file passes one for the single case. */
	if (conf.etcd != NULL && state_set)
		log_notice("--state-dir %s is not used with --etcd: the epoch "
		    "and the known clients live in etcd", conf.statedir);
	if (!foreground && daemon(0, 0) < 0)
		fatal("daemon");
	return server_run(&conf) == 0 ? 0 : 1;
}

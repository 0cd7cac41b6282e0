/*
 * wsctl entry point: global options and the subcommand table. Adding a
 * subcommand is one function in its own cmd-*.c and one row here.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "wsctl.h"

static const struct wsctl_cmd wsctl_cmds[] = {
	{ "workspace", "create SOURCE/NAME [--owner USER] | rm SOURCE/NAME | "
	    "list SOURCE [--json]", "create, remove and list workspaces",
	    cmd_workspace },
	{ "scratch", "create|hold|end|list [--base DIR] ...",
	    "create, hold, end and list scratch workspaces", cmd_scratch },
	{ "sweep", "[--base DIR] [--dry-run] [--ttl-hours H]",
	    "remove ended and idle scratch workspaces now", cmd_sweep },
	{ "lock", "[--lockd ADDR] [--key FILE] [--shared] [--wait SECONDS] "
	    "KEY -- COMMAND...\n       wsctl lock [--shared] [--wait SECONDS] "
	    "--workspace MOUNT/WS -- COMMAND...", "run a command holding a cluster-wide lock",
	    cmd_lock },
	{ "locks", "[--lockd ADDR] [--key FILE] [--json]",
	    "list the lock server's sessions, holders and waiters",
	    cmd_locks },
	{ "keygen", "FILE", "write a new random cluster key (mode 0600)",
	    cmd_keygen },
	{ "status", "MOUNTPOINT [--json] [--socket PATH]",
	    "show what a running wsfs is doing", cmd_status },
	{ NULL, NULL, NULL, NULL }
};

static void
wsctl_help(FILE *f)
{
	const struct wsctl_cmd	*c;

	fprintf(f, "usage: wsctl [--version] [--help] COMMAND [ARGS]\n\n"
	    "commands:\n");
	for (c = wsctl_cmds; c->name != NULL; c++)
		fprintf(f, "  %-10s %s\n", c->name, c->summary);
	fprintf(f, "\nRun 'wsctl COMMAND --help' for a command's options.\n");
}

int
wsctl_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list	ap;

	fprintf(stderr, "wsctl%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'wsctl %s%s--help'.\n", cmd ? cmd : "",
	    cmd ? " " : "");
	return WSCTL_EXIT_USAGE;
}

const struct wsctl_cmd *
wsctl_cmd_find(const struct wsctl_cmd *table, const char *name)
{
	const struct wsctl_cmd	*c;

	for (c = table; c->name != NULL; c++) {
		if (strcmp(c->name, name) == 0)
			return c;
	}
	return NULL;
}

int
wsctl_dispatch(const char *parent, const struct wsctl_cmd *table, int argc,
    char **argv)
{
	const struct wsctl_cmd	*c;
	char			 names[256];
	size_t			 n = 0;

	if (argc >= 2 && (c = wsctl_cmd_find(table, argv[1])) != NULL)
		return c->exec(argc - 1, argv + 1);
	if (argc >= 2)
		return wsctl_usage_error(parent, "unknown subcommand '%s'",
		    argv[1]);
	/* "create, hold, end or list" */
	names[0] = '\0';
	for (c = table; c->name != NULL; c++, n++)
		snprintf(names + strlen(names), sizeof names - strlen(names),
		    "%s%s", n == 0 ? "" : c[1].name == NULL ? " or " : ", ",
		    c->name);
	return wsctl_usage_error(parent, "missing subcommand (%s)", names);
}

void
wsctl_sub_usage(const char *parent, const struct wsctl_cmd *table,
    const char *name)
{
	const struct wsctl_cmd	*c;

	if ((c = wsctl_cmd_find(table, name)) != NULL)
		printf("usage: wsctl %s %s %s\n", parent, c->name, c->usage);
}

int
main(int argc, char **argv)
{
	const struct wsctl_cmd	*c;

	log_open("wsctl", LOG_TO_STDERR, 0);
	if (argc < 2)
		return wsctl_usage_error(NULL, "missing command");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		wsctl_help(stdout);
		return WSCTL_EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("wsctl %s\n", PACKAGE_VERSION);
		return WSCTL_EXIT_OK;
	}
	if ((c = wsctl_cmd_find(wsctl_cmds, argv[1])) == NULL)
		return wsctl_usage_error(NULL, "unknown command '%s'",
		    argv[1]);
	if (argc > 2 && strcmp(argv[2], "--help") == 0) {
		printf("usage: wsctl %s %s\n\n%s\n", c->name, c->usage,
		    c->summary);
		return WSCTL_EXIT_OK;
	}
	return c->exec(argc - 1, argv + 1);
}

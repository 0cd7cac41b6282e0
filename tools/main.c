/*
 * wsctl entry point: global options and the command table. Adding a
 * command is one function in its own cmd-*.c and one row here.
 */
#include "config.h"

#include <stdio.h>
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
	    "--workspace MOUNT/WS -- COMMAND...",
	    "run a command holding a cluster-wide lock", cmd_lock },
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

/*
 * wsctl's helpers for its commands: usage errors, subcommand tables and
 * their dispatch. A leaf of wsctl: main.c and the cmd-*.c files call it.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "wsctl.h"

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

/*
 * wsctl's helpers for its commands: usage errors, subcommand tables and
 * their dispatch. A leaf of wsctl: main.c and the cmd-*.c files call it.
 */
#include "config.h"

#include <getopt.h>
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

int
wsctl_getopt(const char *cmd, int argc, char **argv, const char *shortopts,
    const struct option *longopts)
{
	static char	**started;
	char		  opts[32];
	int		  c, plus = shortopts[0] == '+';

	if (argv != started) {
		started = argv;
		optind = 1;
		opterr = 0;
	}
	/* A leading ':' makes a missing value ':', not '?'; after any '+'. */
	snprintf(opts, sizeof opts, "%s:%s", plus ? "+" : "", shortopts + plus);
	if ((c = getopt_long(argc, argv, opts, longopts, NULL)) == '?') {
		if (optopt != 0)
			wsctl_usage_error(cmd, "unknown option '-%c'", optopt);
		else
			wsctl_usage_error(cmd, "unknown option '%s'",
			    argv[optind - 1]);
	} else if (c == ':')
		wsctl_usage_error(cmd, "option '%s' needs a value",
		    argv[optind - 1]);
	return c == ':' ? '?' : c;
}

int
wsctl_opt_refused(const char *cmd, const struct option *longopts, int c)
{
	const struct option	*o;

	for (o = longopts; o->name != NULL; o++)
		if (o->flag == NULL && o->val == c)
			return wsctl_usage_error(cmd, "option '--%s' does not "
			    "go with this command", o->name);
	return wsctl_usage_error(cmd, "unknown option '-%c'", c);
}

int
wsctl_no_operands(const char *cmd, int argc, char **argv)
{
	if (optind < argc)
		return wsctl_usage_error(cmd, "unexpected argument '%s'",
		    argv[optind]);
	return 0;
}

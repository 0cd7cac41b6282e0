/*
 * wsctl: the admin and task-runner tool. Each subcommand lives in its own
 * cmd-*.c file and is one row of the table in main.c.
 */
#ifndef WSCTL_H
#define WSCTL_H

#include <sys/types.h>

#include <stddef.h>
#include <time.h>

/*
 * One row of a command table: wsctl's commands (main.c) and the
 * subcommands of wsctl scratch and wsctl workspace. A table ends with a
 * row whose name is NULL.
 */
struct wsctl_cmd {
	const char	*name;
	const char	*usage;		/* one line, after "wsctl [PARENT] NAME" */
	const char	*summary;	/* may be NULL for a subcommand */
	/* argv[0] is the (sub)command name; returns the exit status. */
	int		(*exec)(int argc, char **argv);
};

/* Exit statuses shared by every subcommand. */
#define WSCTL_EXIT_OK		0
#define WSCTL_EXIT_FAIL		1	/* the operation failed */
#define WSCTL_EXIT_USAGE	2	/* wrong usage */

/* wsctl.c */
int	wsctl_usage_error(const char *cmd, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));
/* The row of table named name, or NULL. */
const struct wsctl_cmd *wsctl_cmd_find(const struct wsctl_cmd *table,
	    const char *name);
/*
 * Run the subcommand argv[1] of parent ("scratch") from table with argv
 * shifted by one, or report a missing or unknown one (exit status 2).
 */
int	wsctl_dispatch(const char *parent, const struct wsctl_cmd *table,
	    int argc, char **argv);
/* Print "usage: wsctl PARENT NAME USAGE" of the row named name. */
void	wsctl_sub_usage(const char *parent, const struct wsctl_cmd *table,
	    const char *name);
struct option;
/*
 * The next option of a command's argv (argv[0] its name), as getopt_long
 * with shortopts and longopts: the option's value, or -1 after the last
 * one (argv[optind] is then the first operand). An unknown option or a
 * missing value is told to the user as an error of cmd ("scratch create")
 * and returns '?': the caller then returns WSCTL_EXIT_USAGE. A new argv
 * starts at argv[1]; getopt's own messages are off.
 */
int	wsctl_getopt(const char *cmd, int argc, char **argv,
	    const char *shortopts, const struct option *longopts);
/*
 * An option of longopts (val c) that cmd does not take, told to the
 * user: returns WSCTL_EXIT_USAGE.
 */
int	wsctl_opt_refused(const char *cmd, const struct option *longopts,
	    int c);
/* After the options: 0, or the usage error of an operand left over. */
int	wsctl_no_operands(const char *cmd, int argc, char **argv);

/* cmd-workspace.c */
int	cmd_workspace(int, char **);

/* marker.c */
#define MARKER_MAX		4096	/* bytes of one marker file */
#define MARKER_OWNER_MAX	64	/* bytes of an owner name */
#define MARKER_HANDLE_MAX	128	/* bytes of a file handle */
/* What wsctl recorded when it created a workspace. */
struct marker {
	char		 owner[MARKER_OWNER_MAX + 1];
	uid_t		 uid;
	gid_t		 gid;
	int		 account;	/* the owner had an account */
	mode_t		 mode;
	dev_t		 dev;
	ino_t		 ino;
	/* The directory's file handle as "TYPE:HEX", or "". */
	char		 handle[2 * MARKER_HANDLE_MAX + 16];
	time_t		 created;	/* 0: not recorded */
};
/*
 * Parse the text of a marker file (NUL-terminated; split in place). Owner,
 * uid and ino are required, unknown keys are ignored. 0, or -EINVAL for a
 * damaged marker; *m is set only on success.
 */
int	marker_parse(char *text, struct marker *m);
/* The text of m into buf: its length, or -ENAMETOOLONG if len is short. */
int	marker_format(const struct marker *m, char *buf, size_t len);
/* Why owner cannot be recorded as one (a static string), or NULL. */
const char *marker_owner_invalid(const char *owner);
/* t as the marker writes it, 2006-01-02T15:04:05Z. */
void	marker_time_format(time_t t, char *buf, size_t len);

/* cmd-scratch.c */
struct scratch_base;
int	cmd_scratch(int, char **);
/* The scratch base (--base, else scratch_dir, else the default) and ttl. */
int	cmd_scratch_conf(const char *, char **, double *);
/* scratch_base_open with an error message for the user. */
int	cmd_scratch_open(const char *, int, struct scratch_base **);

/* cmd-sweep.c */
int	cmd_sweep(int, char **);

/* cmd-keygen.c */
int	cmd_keygen(int, char **);

/* cmd-lock.c */
struct wslock;
int	cmd_lock(int, char **);
/*
 * The options of every command that talks to wslockd: rows of its
 * longopts, and where they go. wsctl_lockd_option stores c's value and
 * returns 1 if c is one of them, else 0; addr and keyfile are the
 * defaults until then, and point into argv after.
 */
#define WSCTL_LOCKD_LONGOPTS						\
	{ "lockd", required_argument, NULL, 'l' },			\
	{ "key", required_argument, NULL, 'k' }
struct wsctl_lockd {
	const char	*addr;
	const char	*keyfile;
	int		 addr_given;	/* --lockd was on the command line */
};
void	wsctl_lockd_init(struct wsctl_lockd *lo);
int	wsctl_lockd_option(int c, struct wsctl_lockd *lo);
/* Connect to wslockd, telling the user what went wrong; 0 or -errno. */
int	wsctl_lockd_open(const char *, const char *, const char *,
	    struct wslock **);

/* cmd-locks.c */
int	cmd_locks(int, char **);

/* cmd-status.c */
int	cmd_status(int, char **);
/* One request to a wsfs control socket; answer in buf; length or -errno. */
ssize_t	wsctl_control(const char *, const char *, const char *,
	    const char *, char *, size_t);

#endif

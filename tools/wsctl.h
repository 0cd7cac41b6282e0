/*
 * wsctl: the admin and task-runner tool. Each subcommand lives in its own
 * cmd-*.c file and is one row of the table in wsctl.c.
 */
#ifndef WSCTL_H
#define WSCTL_H

#include <sys/types.h>

struct wsctl_cmd {
	const char	*name;
	const char	*usage;		/* one line, without "wsctl NAME" */
	const char	*summary;
	/* argv[0] is the subcommand name; returns the process exit status. */
	int		(*exec)(int argc, char **argv);
};

/* Exit statuses shared by every subcommand. */
#define WSCTL_EXIT_OK		0
#define WSCTL_EXIT_FAIL		1	/* the operation failed */
#define WSCTL_EXIT_USAGE	2	/* wrong usage */

/* wsctl.c */
int	wsctl_usage_error(const char *cmd, const char *fmt, ...)
	    __attribute__((format(printf, 2, 3)));

/* cmd-workspace.c */
int	cmd_workspace(int, char **);

/* cmd-scratch.c */
struct scratch_base;
int	cmd_scratch(int, char **);
/* The scratch base (--base, else scratch_dir, else the default) and ttl. */
int	scratch_cmd_conf(const char *, char **, double *);
/* scratch_base_open with an error message for the user. */
int	scratch_cmd_open(const char *, int, struct scratch_base **);

/* cmd-sweep.c */
int	cmd_sweep(int, char **);

/* cmd-keygen.c */
int	cmd_keygen(int, char **);

/* cmd-lock.c */
#define WSCTL_DEFAULT_LOCKD	"unix:/run/wslockd/wslockd.sock"
#define WSCTL_DEFAULT_KEY	"/etc/wsfs/cluster.key"
struct wslock;
int	cmd_lock(int, char **);
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

/*
 * wsctl lock: run a command while holding a cluster-wide lock from
 * wslockd, as flock(1) does on one machine. The lock is held by this
 * process's session; the command runs as a child, and while it runs this
 * process keeps the lease alive. If the lock is lost (the lease lapsed,
 * for example because this host was cut off), the command is told with
 * SIGTERM, since it no longer runs under the lock, and wsctl exits 1.
 *
 * Also home of the --lockd and --key options and wsctl_lockd_open(),
 * shared with wsctl locks.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "defaults.h"
#include "lockkey.h"
#include "wslock.h"
#include "wsctl.h"

#define CONNECT_TIMEOUT_MS	10000

static int	lock_lost;

static void
on_lost(struct wslock *wl, const struct wslock_range *r, int mode,
    uint64_t token, int reason, void *arg)
{
	lock_lost = reason ? reason : -ENOLCK;
}

static const struct wslock_callbacks lock_cb = { .lost = on_lost };

void
wsctl_lockd_init(struct wsctl_lockd *lo)
{
	lo->addr = WS_DEFAULT_LOCKD;
	lo->keyfile = WS_DEFAULT_KEY;
	lo->addr_given = 0;
}

int
wsctl_lockd_option(int c, struct wsctl_lockd *lo)
{
	if (c == 'l') {
		lo->addr = optarg;
		lo->addr_given = 1;
	} else if (c == 'k')
		lo->keyfile = optarg;
	else
		return 0;
	return 1;
}

/* Connect to wslockd with a message for the user on failure. */
int
wsctl_lockd_open(const char *cmd, const char *addr, const char *keyfile,
    struct wslock **out)
{
	struct wslock_params	 p;
	struct wslock		*wl;
	int			 r;

	memset(&p, 0, sizeof p);
	p.addr = addr;
	p.keyfile = keyfile;
	p.name = NULL;
	p.cb = &lock_cb;
	if ((r = wslock_open(&p, &wl)) < 0) {
		if (strncmp(addr, "unix:", 5) != 0 && (r == -EPERM ||
		    r == -EINVAL || r == -ENOENT || r == -EACCES))
			fprintf(stderr, "wsctl %s: key file %s: %s\n", cmd,
			    keyfile, r == -EPERM ? "readable by others "
			    "(chmod 600)" : r == -EINVAL ? "not a key (must "
			    "be 32 to 4096 bytes)" : strerror(-r));
		else
			fprintf(stderr, "wsctl %s: %s: %s\n", cmd, addr,
			    r == -EINVAL ? "bad address" : strerror(-r));
		return r;
	}
	if ((r = wslock_connect_wait(wl, CONNECT_TIMEOUT_MS)) < 0) {
		fprintf(stderr, "wsctl %s: cannot reach wslockd at %s: %s\n",
		    cmd, addr, r == -EACCES ? "refused (wrong cluster key "
		    "or not allowed)" : r == -EREMCHG ? "only standby replicas "
		    "answered (no active one)" : strerror(-r));
		wslock_close(wl);
		return r;
	}
	*out = wl;
	return 0;
}

/* Wait for the child while keeping the lease; returns its exit status. */
static int
supervise(struct wslock *wl, pid_t pid)
{
	struct pollfd			 pfd[3] = { { .fd = -1 }, { .fd = -1 },
					    { .fd = -1 } };
	struct signalfd_siginfo		 si;
	sigset_t			 mask;
	int				 pidfd, sfd, status, told = 0;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	pidfd = syscall(SYS_pidfd_open, pid, 0);
	pfd[0].fd = wslock_fd(wl);
	pfd[0].events = POLLIN;
	pfd[1].fd = pidfd;
	pfd[1].events = POLLIN;
	pfd[2].fd = sfd;
	pfd[2].events = POLLIN;
	for (;;) {
		if (pidfd < 0) {
			/* Without a pidfd, poll the child every 100 ms. */
			if (waitpid(pid, &status, WNOHANG) == pid)
				break;
		} else if (pfd[1].revents & POLLIN) {
			if (waitpid(pid, &status, 0) == pid)
				break;
		}
		if (poll(pfd, 3, pidfd < 0 ? 100 : -1) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents & POLLIN)
			wslock_process(wl);
		if (sfd >= 0 && (pfd[2].revents & POLLIN) &&
		    read(sfd, &si, sizeof si) == sizeof si)
			kill(pid, si.ssi_signo);
		if (lock_lost && !told) {
			fprintf(stderr, "wsctl lock: the lock was lost (%s); "
			    "stopping the command\n", lock_lost == -ETIMEDOUT ?
			    "lease expired" : strerror(-lock_lost));
			kill(pid, SIGTERM);
			told = 1;
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	if (sfd >= 0)
		close(sfd);
	if (lock_lost)
		return WSCTL_EXIT_FAIL;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WSCTL_EXIT_FAIL;
}

/*
 * The lock of a whole workspace, the same on every node: named by the
 * inode numbers of SOURCE and of the workspace, which a wsfs mount shows
 * as the backing store's. The lock service is the mount's own, asked from
 * its control socket unless --lockd was given; a mount with none gets
 * *localfd, a directory fd to flock instead.
 */
static int
workspace_lock(const char *ws, const char **addr, const char **keyfile,
    char *key, size_t keylen, int *localfd)
{
	static char	 answer[PATH_MAX * 2 + 4];
	struct stat	 st_root, st_ws;
	char		 wspath[PATH_MAX], root[PATH_MAX], *slash, *nl;

	if (realpath(ws, wspath) == NULL || stat(wspath, &st_ws) == -1) {
		fprintf(stderr, "wsctl lock: %s: %s\n", ws, strerror(errno));
		return -errno;
	}
	snprintf(root, sizeof root, "%s", wspath);
	if ((slash = strrchr(root, '/')) == NULL || slash == root ||
	    !S_ISDIR(st_ws.st_mode)) {
		fprintf(stderr, "wsctl lock: %s is not a workspace of a wsfs "
		    "mount\n", ws);
		return -EINVAL;
	}
	*slash = '\0';
	if (stat(root, &st_root) == -1) {
		fprintf(stderr, "wsctl lock: %s: %s\n", root, strerror(errno));
		return -errno;
	}
	if (lockkey_format('w', (uint64_t)st_root.st_ino,
	    (uint64_t)st_ws.st_ino, key, keylen) == 0)
		return -ENAMETOOLONG;
	if (addr == NULL)
		return 0;
	if (wsctl_control("lock", root, NULL, "lockd", answer,
	    sizeof answer) < 0) {
		fprintf(stderr, "wsctl lock: is %s a wsfs mount? (or give "
		    "--lockd)\n", root);
		return -ENOENT;
	}
	if ((nl = strchr(answer, '\n')) == NULL)
		return -EPROTO;
	*nl = '\0';
	if (answer[0] == '\0') {
		if ((*localfd = open(wspath, O_RDONLY | O_DIRECTORY |
		    O_CLOEXEC)) == -1) {
			fprintf(stderr, "wsctl lock: %s: %s\n", wspath,
			    strerror(errno));
			return -errno;
		}
		return 0;
	}
	*addr = answer;
	*keyfile = nl + 1;
	if ((nl = strchr(nl + 1, '\n')) != NULL)
		*nl = '\0';
	return 0;
}

/* Run argv holding flock(fd): the one-node form of wsctl lock. */
static int
local_lock_run(int fd, int mode, double wait, char **cmd)
{
	struct timespec	 ts = { 0, 20 * 1000000L };
	double		 waited = 0;
	pid_t		 pid;
	int		 op = mode == WSLOCK_SHARED ? LOCK_SH : LOCK_EX, status;

	while (flock(fd, op | LOCK_NB) == -1) {
		if (errno != EWOULDBLOCK || (wait >= 0 && waited >= wait)) {
			fprintf(stderr, "wsctl lock: workspace: %s\n",
			    errno == EWOULDBLOCK ? "held by someone else" :
			    strerror(errno));
			return WSCTL_EXIT_FAIL;
		}
		nanosleep(&ts, NULL);
		waited += 0.02;
	}
	fflush(NULL);
	if ((pid = fork()) < 0) {
		fprintf(stderr, "wsctl lock: fork: %s\n", strerror(errno));
		return WSCTL_EXIT_FAIL;
	}
	if (pid == 0) {
		execvp(cmd[0], cmd);
		fprintf(stderr, "wsctl lock: %s: %s\n", cmd[0],
		    strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	while (waitpid(pid, &status, 0) == -1 && errno == EINTR)
		;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WSCTL_EXIT_FAIL;
}

int
cmd_lock(int argc, char **argv)
{
	static const struct option longopts[] = {
		WSCTL_LOCKD_LONGOPTS,
		{ "shared", no_argument, NULL, 's' },
		{ "wait", required_argument, NULL, 'w' },
		{ "workspace", required_argument, NULL, 'W' },
		{ NULL, 0, NULL, 0 }
	};
	const char		*workspace = NULL;
	char			 wskey[96];
	int			 localfd = -1;
	struct wsctl_lockd	 lo;
	struct wslock		*wl = NULL;
	struct wslock_range	 rg;
	sigset_t		 mask, old;
	uint64_t		 token = 0;
	double			 wait = -1;
	char			*end, tokstr[32];
	pid_t			 pid;
	int			 ch, mode = WSLOCK_EXCLUSIVE, r, ret;
	int			 timeout_ms = -1, flags = WSLOCK_WAIT;

	wsctl_lockd_init(&lo);
	while ((ch = wsctl_getopt("lock", argc, argv, "+", longopts)) != -1) {
		if (wsctl_lockd_option(ch, &lo))
			continue;
		switch (ch) {
		case 'W':
			workspace = optarg;
			break;
		case 's':
			mode = WSLOCK_SHARED;
			break;
		case 'w':
			errno = 0;
			wait = strtod(optarg, &end);
			if (*optarg == '\0' || *end != '\0' || errno != 0 ||
			    !isfinite(wait) || wait < 0 || wait > 86400 * 365)
				return wsctl_usage_error("lock", "--wait: "
				    "'%s' is not a number of seconds", optarg);
			break;
		default:
			return WSCTL_EXIT_USAGE;
		}
	}
	if (workspace != NULL) {
		/* The '--' stands where KEY would: argv[optind] is "--". */
		if (optind < argc && strcmp(argv[optind - 1], "--") == 0)
			optind--;
		if (optind >= argc || strcmp(argv[optind], "--") != 0)
			return wsctl_usage_error("lock", "with --workspace, no "
			    "KEY: wsctl lock --workspace MOUNT/WS -- COMMAND");
		if (optind + 1 >= argc)
			return wsctl_usage_error("lock", "missing COMMAND");
		r = workspace_lock(workspace, lo.addr_given ? NULL : &lo.addr,
		    &lo.keyfile, wskey, sizeof wskey, &localfd);
		if (r < 0)
			return WSCTL_EXIT_FAIL;
		optind--;	/* argv[optind + 2] is the command, as below */
		rg.key = wskey;
		rg.keylen = strlen(wskey);
	} else {
		if (optind >= argc)
			return wsctl_usage_error("lock", "missing KEY");
		if (strlen(argv[optind]) == 0 || strlen(argv[optind]) > 1024)
			return wsctl_usage_error("lock", "KEY must be 1 to "
			    "1024 bytes");
		if (optind + 1 >= argc || strcmp(argv[optind + 1], "--") != 0)
			return wsctl_usage_error("lock", "missing '--' after "
			    "KEY");
		if (optind + 2 >= argc)
			return wsctl_usage_error("lock", "missing COMMAND");
		rg.key = argv[optind];
		rg.keylen = strlen(argv[optind]);
	}
	rg.owner = 0;
	rg.start = 0;
	rg.end = WSLOCK_EOF;
	if (wait == 0)
		flags = 0;
	else if (wait > 0)
		timeout_ms = (int)ceil(wait * 1000);

	if (localfd >= 0) {
		/*
		 * A mount without a lock service is one node: the kernel's
		 * flock on the workspace serves.
		 */
		ret = local_lock_run(localfd, mode, wait, argv + optind + 2);
		close(localfd);
		return ret;
	}
	if (wsctl_lockd_open("lock", lo.addr, lo.keyfile, &wl) < 0)
		return WSCTL_EXIT_FAIL;
	r = wslock_lock_wait(wl, &rg, mode, flags, timeout_ms, &token);
	if (r < 0) {
		fprintf(stderr, "wsctl lock: %s: %s\n", argv[optind],
		    r == -EAGAIN ? "held by someone else" :
		    r == -ETIMEDOUT ? "not granted in time" : r == -EBUSY ?
		    "the lock server is in its grace period; try again" :
		    strerror(-r));
		ret = WSCTL_EXIT_FAIL;
		goto out;
	}
	/* Signals for the command arrive through a signalfd while it runs. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old);
	snprintf(tokstr, sizeof tokstr, "%" PRIu64, token);
	fflush(NULL);
	if ((pid = fork()) < 0) {
		fprintf(stderr, "wsctl lock: fork: %s\n", strerror(errno));
		ret = WSCTL_EXIT_FAIL;
		goto out;
	}
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		/* The fencing token, for commands that can use one. */
		setenv("WSLOCK_TOKEN", tokstr, 1);
		execvp(argv[optind + 2], argv + optind + 2);
		fprintf(stderr, "wsctl lock: %s: %s\n", argv[optind + 2],
		    strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	ret = supervise(wl, pid);
	sigprocmask(SIG_SETMASK, &old, NULL);
out:
	wslock_close(wl);
	return ret;
}

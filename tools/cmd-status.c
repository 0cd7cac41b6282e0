/*
 * wsctl status: ask a running wsfs what it is doing, through its control
 * socket (root only): kind, SOURCE, workspaces, lock service and session,
 * operation counts, errors and latencies, lock waits and revokes, sweeper.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "wsctl.h"

/*
 * Send one request to the control socket of the wsfs mounted at mnt (a
 * resolved path) or at sock, and read the whole answer into buf. Returns
 * the answer's length, or -errno with a message printed for cmd.
 */
ssize_t
wsctl_control(const char *cmd, const char *mnt, const char *sock,
    const char *req, char *buf, size_t len)
{
	struct sockaddr_un	sun;
	char			path[sizeof sun.sun_path];
	char			line[128];
	size_t			got = 0;
	ssize_t			n;
	int			fd, r;

	if (sock != NULL)
		snprintf(path, sizeof path, "%s", sock);
	else
		conf_control_path(mnt, path, sizeof path);
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
	    connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		r = -errno;
		fprintf(stderr, "wsctl %s: no wsfs answers for %s (control "
		    "socket %s: %s)\n", cmd, mnt, path, strerror(-r));
		if (fd >= 0)
			close(fd);
		return r;
	}
	snprintf(line, sizeof line, "%s\n", req);
	/* A wsfs that hangs up is an error to report, not a SIGPIPE. */
	if (send(fd, line, strlen(line), MSG_NOSIGNAL) !=
	    (ssize_t)strlen(line)) {
		r = -errno;
		fprintf(stderr, "wsctl %s: %s: %s\n", cmd, path, strerror(-r));
		close(fd);
		return r;
	}
	while (got < len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
		got += (size_t)n;
	buf[got] = '\0';
	close(fd);
	if (got == 0) {
		fprintf(stderr, "wsctl %s: %s closed the connection without "
		    "an answer (only root may ask)\n", cmd, path);
		return -EACCES;
	}
	return (ssize_t)got;
}

int
cmd_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 }
	};
	const char		*sock = NULL, *req = "status";
	static char		 buf[1 << 20];
	char			 mnt[PATH_MAX];
	ssize_t			 n;
	int			 c;

	while ((c = wsctl_getopt("status", argc, argv, "", longopts)) != -1) {
		switch (c) {
		case 'j':
			req = "status json";
			break;
		case 's':
			sock = optarg;
			break;
		default:
			return WSCTL_EXIT_USAGE;
		}
	}
	if (argc - optind != 1)
		return wsctl_usage_error("status", "expected MOUNTPOINT");
	if (realpath(argv[optind], mnt) == NULL) {
		fprintf(stderr, "wsctl status: %s: %s\n", argv[optind],
		    strerror(errno));
		return WSCTL_EXIT_FAIL;
	}
	if ((n = wsctl_control("status", mnt, sock, req, buf,
	    sizeof buf)) < 0)
		return WSCTL_EXIT_FAIL;
	fwrite(buf, 1, (size_t)n, stdout);
	return WSCTL_EXIT_OK;
}

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

int
cmd_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ NULL, 0, NULL, 0 }
	};
	struct sockaddr_un	 sun;
	const char		*sock = NULL, *req = "status\n";
	char			 mnt[PATH_MAX], path[sizeof sun.sun_path];
	char			 buf[8192];
	ssize_t			 n;
	int			 c, fd, got = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			req = "status json\n";
			break;
		case 's':
			sock = optarg;
			break;
		default:
			return wsctl_usage_error("status", "bad option");
		}
	}
	if (argc - optind != 1)
		return wsctl_usage_error("status", "expected MOUNTPOINT");
	if (realpath(argv[optind], mnt) == NULL) {
		fprintf(stderr, "wsctl status: %s: %s\n", argv[optind],
		    strerror(errno));
		return WSCTL_EXIT_FAIL;
	}
	if (sock != NULL)
		snprintf(path, sizeof path, "%s", sock);
	else
		conf_control_path(mnt, path, sizeof path);
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1 ||
	    connect(fd, (struct sockaddr *)&sun, sizeof sun) == -1) {
		fprintf(stderr, "wsctl status: no wsfs answers for %s (control "
		    "socket %s: %s)\n", mnt, path, strerror(errno));
		return WSCTL_EXIT_FAIL;
	}
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) {
		fprintf(stderr, "wsctl status: %s: %s\n", path, strerror(errno));
		close(fd);
		return WSCTL_EXIT_FAIL;
	}
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		fwrite(buf, 1, (size_t)n, stdout);
		got = 1;
	}
	close(fd);
	if (!got) {
		fprintf(stderr, "wsctl status: %s closed the connection without "
		    "an answer (only root may ask)\n", path);
		return WSCTL_EXIT_FAIL;
	}
	return WSCTL_EXIT_OK;
}

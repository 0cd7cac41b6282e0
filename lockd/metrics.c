/*
 * Prometheus text exposition over HTTP/1.0. Only enough HTTP to answer a
 * scraper: one request per connection, GET /metrics, a bounded read with a
 * short timeout so that a silent client cannot stall the caller's loop.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fdio.h"
#include "lockd.h"
#include "log.h"
#include "metrics.h"

int
metrics_listen(const char *addr, int *fds, int max)
{
	struct addrinfo		 hints, *res, *ai;
	struct sockaddr_un	 sun;
	struct addr		 a;
	mode_t			 old;
	int			 fd, n = 0, r, one = 1;

	if (addr_parse(addr, &a) < 0 || (a.family != AF_UNIX &&
	    a.port[0] == '\0'))
		return -EINVAL;
	if (a.family == AF_UNIX) {
		if (strlen(a.host) >= sizeof sun.sun_path)
			return -EINVAL;
		memset(&sun, 0, sizeof sun);
		sun.sun_family = AF_UNIX;
		memcpy(sun.sun_path, a.host, strlen(a.host));
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, 0);
		if (fd == -1)
			return -errno;
		(void)unlink(sun.sun_path);
		/*
		 * Owner only: the endpoint has no authentication, and a
		 * socket made under the daemons' umask(0) would be
		 * connectable by everyone. A chmod after bind would leave a
		 * window; the umask is process-wide, hence the rule in
		 * metrics.h.
		 */
		old = umask(0177);
		r = bind(fd, (struct sockaddr *)&sun, sizeof sun);
		umask(old);
		if (r == -1 || listen(fd, 16) == -1) {
			r = -errno;
			close(fd);
			return r;
		}
		fds[0] = fd;
		return 1;
	}
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	if ((r = getaddrinfo(a.host[0] ? a.host : NULL, a.port, &hints,
	    &res)) != 0)
		return -EINVAL;
	for (ai = res; ai != NULL && n < max; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK |
		    SOCK_CLOEXEC, ai->ai_protocol);
		if (fd == -1)
			continue;
		(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
		    sizeof one);
		/* Wake the caller only once a request has arrived. */
		(void)setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &one,
		    sizeof one);
		if (ai->ai_family == AF_INET6)
			(void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one,
			    sizeof one);
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == -1 ||
		    listen(fd, 16) == -1) {
			close(fd);
			continue;
		}
		fds[n++] = fd;
	}
	r = errno;
	freeaddrinfo(res);
	return n > 0 ? n : -(r ? r : EADDRNOTAVAIL);
}

/*
 * The caller's thread may serve other things too (wsfs's control socket)
 * and later scrapers: a scraper gets 20 ms in all to send its request
 * (TCP listeners wake us only once data is there) and a non-blocking
 * socket for the answer, which fits its buffer.
 */
void
metrics_serve(int listen_fd, void (*render)(FILE *, void *), void *arg)
{
	struct pollfd	 pfd;
	char		 req[2048], *body = NULL, head[256];
	size_t		 got = 0, blen = 0;
	ssize_t		 n;
	FILE		*f;
	int		 fd, ok, waited = 0;

	if ((fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC |
	    SOCK_NONBLOCK)) == -1)
		return;
	pfd.fd = fd;
	pfd.events = POLLIN;
	while (got < sizeof req - 1) {
		n = read(fd, req + got, sizeof req - 1 - got);
		if (n == -1 && errno == EAGAIN && waited < 20) {
			(void)poll(&pfd, 1, 5);
			waited += 5;
			continue;
		}
		if (n <= 0)
			break;
		got += (size_t)n;
		req[got] = '\0';
		if (strstr(req, "\r\n\r\n") != NULL ||
		    strstr(req, "\n\n") != NULL)
			break;
	}
	req[got] = '\0';
	ok = strncmp(req, "GET /metrics ", 13) == 0 ||
	    strncmp(req, "GET /metrics\r", 13) == 0 ||
	    strncmp(req, "GET / ", 6) == 0;
	if (ok && (f = open_memstream(&body, &blen)) != NULL) {
		render(f, arg);
		fclose(f);
		snprintf(head, sizeof head, "HTTP/1.0 200 OK\r\n"
		    "Content-Type: text/plain; version=0.0.4\r\n"
		    "Content-Length: %zu\r\nConnection: close\r\n\r\n", blen);
		(void)fdio_write_all(fd, head, strlen(head));
		(void)fdio_write_all(fd, body, blen);
	} else {
		snprintf(head, sizeof head, "HTTP/1.0 404 Not Found\r\n"
		    "Content-Length: 0\r\nConnection: close\r\n\r\n");
		(void)fdio_write_all(fd, head, strlen(head));
	}
	free(body);
	close(fd);
}

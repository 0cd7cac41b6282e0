/*
 * A minimal HTTP/1.0 endpoint serving Prometheus text-format metrics,
 * shared by wslockd and wsfs, each serving it in a thread of its own.
 */
#ifndef WS_METRICS_H
#define WS_METRICS_H

#include <stdio.h>

/*
 * Listen on ADDR ("HOST:PORT", ":PORT" or "unix:PATH"). Fills fds with up
 * to max non-blocking listening sockets (the caller owns them) and returns
 * how many, or -errno (-EINVAL for a bad address). A Unix socket is made
 * mode 0600 (the umask is set around its bind: call this before other
 * threads create files).
 */
int	metrics_listen(const char *addr, int *fds, int max);
/*
 * Accept one connection on a listening fd, read its request (20 ms at
 * most), answer GET /metrics with what render writes and anything else
 * with 404, and close it. Never blocks when nobody is waiting.
 */
void	metrics_serve(int listen_fd, void (*render)(FILE *out, void *arg),
	    void *arg);

#endif

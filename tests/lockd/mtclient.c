/*
 * Thread-safety test of libwslock, the way wsfs will use it: one thread
 * runs the event loop (poll on wslock_fd, wslock_process), many worker
 * threads take exclusive locks with the blocking layer, each as its own
 * owner, and check inside the critical section that nobody else is in
 * it. Some waits time out and are cancelled; some locks are taken
 * asynchronously and released from the done callback. Several processes
 * can run this at once against one server (the critical section is then
 * also checked across processes through a shared file).
 *
 * usage: mtclient ADDR [KEYFILE] THREADS SECONDS SHAREDFILE
 * Exit 0 and a line "ok CYCLES TIMEOUTS ASYNC" on success.
 */
#include "config.h"

#include <sys/mman.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wslock.h"

static struct wslock	*wl;
static volatile int	 stop;
static _Atomic int	*inside;	/* shared between processes */
static atomic_ulong	 cycles, timeouts, asyncs, failures;
static atomic_int	 async_busy;
static const char	 key[] = "mt/critical";

static void
critical(const char *who)
{
	if (atomic_fetch_add(inside, 1) != 0) {
		fprintf(stderr, "mtclient: two holders in the critical "
		    "section (%s)\n", who);
		atomic_fetch_add(&failures, 1);
	}
	usleep(100);
	atomic_fetch_sub(inside, 1);
}

static void
on_done(struct wslock *h, uint64_t reqid, int status, uint64_t token,
    void *reqarg, void *arg)
{
	struct wslock_range	rg = { key, sizeof key - 1, 999, 0, WSLOCK_EOF };

	if (status == 0) {
		critical("async");
		/* Unlocking from a callback is allowed. */
		if (wslock_unlock(h, &rg) < 0)
			atomic_fetch_add(&failures, 1);
		atomic_fetch_add(&asyncs, 1);
	} else if (status != -ECANCELED) {
		fprintf(stderr, "mtclient: async lock: %s\n",
		    strerror(-status));
		atomic_fetch_add(&failures, 1);
	}
	atomic_store(&async_busy, 0);
}

static const struct wslock_callbacks cb = { .done = on_done };

static void *
loop(void *arg)
{
	struct pollfd		 pfd = { wslock_fd(wl), POLLIN, 0 };
	struct wslock_range	 rg = { key, sizeof key - 1, 999, 0, WSLOCK_EOF };
	int			 expected = 0;

	while (!stop) {
		poll(&pfd, 1, 50);
		wslock_process(wl);
		/* Now and then an asynchronous request from the loop thread. */
		if (atomic_compare_exchange_strong(&async_busy, &expected, 1) &&
		    wslock_lock(wl, &rg, WSLOCK_EXCLUSIVE, WSLOCK_WAIT, NULL,
		    NULL) < 0)
			atomic_store(&async_busy, 0);
		expected = 0;
	}
	return NULL;
}

static void *
worker(void *arg)
{
	struct wslock_range	rg = { key, sizeof key - 1,
				    (uint64_t)(uintptr_t)arg, 0, WSLOCK_EOF };
	uint64_t		token;
	int			r, n = 0;

	while (!stop) {
		/* Every fifth wait is too short on purpose. */
		r = wslock_lock_wait(wl, &rg, WSLOCK_EXCLUSIVE, WSLOCK_WAIT,
		    ++n % 5 == 0 ? 1 : 10000, &token);
		if (r == -ETIMEDOUT) {
			atomic_fetch_add(&timeouts, 1);
			continue;
		}
		if (r < 0) {
			fprintf(stderr, "mtclient: lock: %s\n", strerror(-r));
			atomic_fetch_add(&failures, 1);
			break;
		}
		if (wslock_held(wl, &rg, WSLOCK_EXCLUSIVE, NULL) != 1) {
			fprintf(stderr, "mtclient: granted but not held\n");
			atomic_fetch_add(&failures, 1);
		}
		critical("worker");
		if ((r = wslock_unlock_wait(wl, &rg, 10000)) < 0) {
			fprintf(stderr, "mtclient: unlock: %s\n",
			    strerror(-r));
			atomic_fetch_add(&failures, 1);
			break;
		}
		atomic_fetch_add(&cycles, 1);
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	struct wslock_params	 p = { NULL, NULL, "mtclient", &cb, NULL };
	pthread_t		 lt, *wt;
	int			 i, nthreads, fd, r, base = 2;
	double			 seconds;

	if (argc < 5) {
		fprintf(stderr, "usage: mtclient ADDR [KEYFILE] THREADS "
		    "SECONDS SHAREDFILE\n");
		return 2;
	}
	p.addr = argv[1];
	if (argc == 6)
		p.keyfile = argv[base++];
	nthreads = atoi(argv[base]);
	seconds = atof(argv[base + 1]);
	if ((fd = open(argv[base + 2], O_RDWR | O_CREAT, 0600)) < 0 ||
	    ftruncate(fd, 4096) < 0 ||
	    (inside = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED,
	    fd, 0)) == MAP_FAILED) {
		perror("mtclient: shared file");
		return 1;
	}
	if ((r = wslock_open(&p, &wl)) < 0 ||
	    (r = wslock_connect_wait(wl, 5000)) < 0) {
		fprintf(stderr, "mtclient: connect: %s\n", strerror(-r));
		return 1;
	}
	pthread_create(&lt, NULL, loop, NULL);
	wt = calloc(nthreads, sizeof *wt);
	for (i = 0; i < nthreads; i++)
		pthread_create(&wt[i], NULL, worker, (void *)(uintptr_t)(i + 1));
	usleep(seconds * 1e6);
	stop = 1;
	for (i = 0; i < nthreads; i++)
		pthread_join(wt[i], NULL);
	pthread_join(lt, NULL);
	wslock_close(wl);
	free(wt);
	printf("ok %lu %lu %lu\n", (unsigned long)cycles,
	    (unsigned long)timeouts, (unsigned long)asyncs);
	return failures ? 1 : 0;
}

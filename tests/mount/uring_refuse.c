/*
 * LD_PRELOAD shim for tests/mount/test_uring.py: every WSFS_URING_REFUSE-th
 * io_uring_submit() submits nothing and fails with -EAGAIN, as the kernel
 * does when it cannot allocate for a request. The SQEs stay queued on the
 * ring, which is the case the daemon must get right: those requests belong
 * to the ring and are submitted later, never also done another way.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct io_uring;

int io_uring_submit(struct io_uring *);

static int		(*real_submit)(struct io_uring *);
static unsigned long	 every;
static unsigned long	 calls;

__attribute__((constructor)) static void
init(void)
{
	const char	*e = getenv("WSFS_URING_REFUSE");

	real_submit = (int (*)(struct io_uring *))dlsym(RTLD_NEXT,
	    "io_uring_submit");
	every = e != NULL ? strtoul(e, NULL, 10) : 0;
}

int
io_uring_submit(struct io_uring *ring)
{
	unsigned long	n = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);

	if (every != 0 && n % every == 0) {
		if (n == every)
			dprintf(2, "uring_refuse: refusing every %luth "
			    "io_uring_submit\n", every);
		return -EAGAIN;
	}
	return real_submit(ring);
}

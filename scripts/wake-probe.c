/*
 * A FUSE round trip without FUSE, to tell the scheduler's share of a
 * request's cost from the daemon's. One server thread is pinned to each
 * CPU, as wsfs's ring threads are; the client, not pinned, hands each
 * request to the server of the CPU it is running on (the kernel queues a
 * FUSE-over-io_uring request on the caller's CPU) and sleeps on a futex
 * until the server, after -w microseconds of work, wakes it. Printed:
 * the time per round trip and how many round trips ended with the client
 * on another CPU, which is where the kernel woke it: on a VM, a wake onto
 * a halted vCPU costs far more than the request.
 *
 * Usage: wake-probe [-n ROUNDS] [-w WORK_US] [-p]
 *   -p  pin the client to CPU 0 too (the no-migration baseline)
 */
#define _GNU_SOURCE
#include <linux/futex.h>

#include <sys/syscall.h>

#include <err.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define MAX_CPUS	256

static int	 req[MAX_CPUS];		/* atomic: 1 = a request for that CPU */
static int	 ans;			/* atomic: 1 = the answer is there */
static double	 work_s;

static double
now(void)
{
	struct timespec	ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
futex_wait(int *word, int val)
{
	syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void
futex_wake(int *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void
pin(pthread_t t, int cpu)
{
	cpu_set_t	set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if ((errno = pthread_setaffinity_np(t, sizeof set, &set)) != 0)
		err(1, "pin to CPU %d", cpu);
}

/* Serve this CPU's requests: wait, work, answer. */
static void *
server(void *arg)
{
	int	cpu = (int)(intptr_t)arg;
	double	t;

	pin(pthread_self(), cpu);
	for (;;) {
		while (__atomic_load_n(&req[cpu], __ATOMIC_ACQUIRE) == 0)
			futex_wait(&req[cpu], 0);
		__atomic_store_n(&req[cpu], 0, __ATOMIC_RELAXED);
		for (t = now(); now() - t < work_s;)
			;
		__atomic_store_n(&ans, 1, __ATOMIC_RELEASE);
		futex_wake(&ans);
	}
	return NULL;
}

int
main(int argc, char **argv)
{
	pthread_t	t;
	long		ncpu;
	int		ch, i, n = 20000, pinned = 0, cpu, last, moved = 0;
	double		t0, dt;
	char		*end;

	while ((ch = getopt(argc, argv, "n:w:p")) != -1) {
		switch (ch) {
		case 'n':
			n = atoi(optarg);
			break;
		case 'w':
			errno = 0;
			work_s = strtod(optarg, &end) / 1e6;
			if (errno != 0 || end == optarg || *end != '\0')
				errx(2, "-w %s: not a number of microseconds",
				    optarg);
			break;
		case 'p':
			pinned = 1;
			break;
		default:
			fprintf(stderr, "usage: wake-probe [-n ROUNDS] "
			    "[-w WORK_US] [-p]\n");
			return 2;
		}
	}
	if (n <= 0 || work_s < 0)
		errx(2, "-n must be positive and -w not negative");
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	if (ncpu < 1 || ncpu > MAX_CPUS)
		errx(1, "%ld CPUs: expected 1 to %d", ncpu, MAX_CPUS);
	for (i = 0; i < ncpu; i++)
		if ((errno = pthread_create(&t, NULL, server,
		    (void *)(intptr_t)i)) != 0)
			err(1, "pthread_create");
	if (pinned)
		pin(pthread_self(), 0);
	usleep(10000);
	last = sched_getcpu();
	t0 = now();
	for (i = 0; i < n; i++) {
		if ((cpu = sched_getcpu()) != last)
			moved++;
		last = cpu;
		__atomic_store_n(&ans, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&req[cpu], 1, __ATOMIC_RELEASE);
		futex_wake(&req[cpu]);
		while (__atomic_load_n(&ans, __ATOMIC_ACQUIRE) == 0)
			futex_wait(&ans, 0);
	}
	dt = now() - t0;
	printf("%d round trips, %.0f us of work each: %.1f us per round trip,"
	    " client woken on another CPU %d times (%.0f%%)\n", n,
	    work_s * 1e6, dt / n * 1e6, moved, 100.0 * moved / n);
	return 0;
}

/*
 * Operation counters and latency histograms, for `wsctl status` and the
 * Prometheus endpoint. Updates are lock-free atomic adds on the hot path;
 * a reader sees each counter consistent on its own, which is all a
 * monitoring view needs.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "wsfs.h"

static const char *const stats_names[OP_NOPS] = {
	[OP_LOOKUP] = "lookup", [OP_FORGET] = "forget",
	[OP_GETATTR] = "getattr", [OP_SETATTR] = "setattr",
	[OP_READLINK] = "readlink", [OP_MKNOD] = "mknod",
	[OP_MKDIR] = "mkdir", [OP_SYMLINK] = "symlink",
	[OP_UNLINK] = "unlink", [OP_RMDIR] = "rmdir",
	[OP_RENAME] = "rename", [OP_LINK] = "link", [OP_OPEN] = "open",
	[OP_CREATE] = "create", [OP_READ] = "read", [OP_WRITE] = "write",
	[OP_FLUSH] = "flush", [OP_RELEASE] = "release", [OP_FSYNC] = "fsync",
	[OP_OPENDIR] = "opendir", [OP_READDIR] = "readdir",
	[OP_RELEASEDIR] = "releasedir", [OP_FSYNCDIR] = "fsyncdir",
	[OP_STATFS] = "statfs", [OP_XATTR] = "xattr",
	[OP_FALLOCATE] = "fallocate", [OP_LSEEK] = "lseek",
	[OP_COPY] = "copy_file_range", [OP_LOCK] = "lock",
};

/* Latency buckets: bucket i counts times below 2^i microseconds. */
#define LAT_BUCKETS 24

static struct {
	unsigned long long	count[OP_NOPS];
	unsigned long long	errors[OP_NOPS];
	unsigned long long	hist[OP_NOPS][LAT_BUCKETS];
	unsigned long long	counters[SC_NCOUNTERS];
} st;

/*
 * The operation the calling thread serves, from its handler's start; op
 * -1 when none. A thread that hands an operation on (parked for a lock,
 * queued on the ring, sent to the lock server) keeps a copy with the
 * operation and detaches; the thread that answers later resumes it.
 */
static __thread struct stats_timing stats_cur = { .op = -1 };

const char *
stats_op_name(int op)
{
	return op >= 0 && op < OP_NOPS ? stats_names[op] : "?";
}

void
stats_begin(int op)
{
	stats_cur.op = op;
	stats_cur.t0 = clock_ns(CLOCK_MONOTONIC);
}

void
stats_save(struct stats_timing *o)
{
	*o = stats_cur;
}

void
stats_detach(void)
{
	stats_cur.op = -1;
}

void
stats_resume(const struct stats_timing *o)
{
	stats_cur = *o;
}

/* The operation is answered: its latency, from its handler's start. */
void
stats_end(void)
{
	uint64_t	us;
	int		op = stats_cur.op, b = 0;

	if (op < 0 || op >= OP_NOPS)
		return;
	us = (clock_ns(CLOCK_MONOTONIC) - stats_cur.t0) / 1000;
	while (b < LAT_BUCKETS - 1 && us >= (1ULL << b))
		b++;
	__atomic_add_fetch(&st.count[op], 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&st.hist[op][b], 1, __ATOMIC_RELAXED);
	stats_cur.op = -1;
}

int
stats_reply_err(fuse_req_t req, int err)
{
	int	op = stats_cur.op;

	if (err != 0 && op >= 0 && op < OP_NOPS)
		__atomic_add_fetch(&st.errors[op], 1, __ATOMIC_RELAXED);
	return fuse_reply_err(req, err);
}

void
stats_count(int counter, unsigned long long n)
{
	__atomic_add_fetch(&st.counters[counter], n, __ATOMIC_RELAXED);
}

unsigned long long
stats_counter(int counter)
{
	return __atomic_load_n(&st.counters[counter], __ATOMIC_RELAXED);
}

/* The upper bound, in microseconds, below which a fraction q of calls was. */
static unsigned long long
stats_percentile(int op, double q)
{
	unsigned long long	total = 0, seen = 0, h[LAT_BUCKETS];
	int			b;

	for (b = 0; b < LAT_BUCKETS; b++) {
		h[b] = __atomic_load_n(&st.hist[op][b], __ATOMIC_RELAXED);
		total += h[b];
	}
	if (total == 0)
		return 0;
	for (b = 0; b < LAT_BUCKETS; b++) {
		seen += h[b];
		if ((double)seen >= q * (double)total)
			return 1ULL << b;
	}
	return 1ULL << (LAT_BUCKETS - 1);
}

void
stats_foreach(void (*fn)(void *, const char *, unsigned long long,
    unsigned long long, unsigned long long, unsigned long long), void *arg)
{
	int	op;

	for (op = 0; op < OP_NOPS; op++)
		fn(arg, stats_names[op],
		    __atomic_load_n(&st.count[op], __ATOMIC_RELAXED),
		    __atomic_load_n(&st.errors[op], __ATOMIC_RELAXED),
		    stats_percentile(op, 0.5), stats_percentile(op, 0.99));
}

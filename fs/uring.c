/*
 * The io_uring data path, and the FUSE channel through io_uring (at the
 * end): every liburing call of wsfs lives here. A FUSE
 * worker submits a read, write or fsync and returns at once; the kernel's
 * io_uring workers do the I/O, and one completion thread reaps the results
 * and answers the kernel, so no worker sits blocked on backing I/O. Short
 * transfers are resubmitted for the rest. Where the kernel refuses io_uring
 * (io_uring_disabled), the same calls run as plain syscalls in the worker.
 */
#include "config.h"

#include <linux/fuse.h>

#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wsfs.h"

#define URING_ENTRIES	512
#define URING_WORKERS	64	/* kernel workers per submitting thread */

enum uring_kind {
	UOP_READ,
	UOP_WRITE,
	UOP_FSYNC,
};

/* One request in flight; owned by the ring until its final completion. */
struct uring_op {
	fuse_req_t	 req;
	struct stats_timing st;		/* timed to the answer (stats.c) */
	enum uring_kind	 kind;
	int		 fd;
	int		 datasync;
	char		*buf;
	size_t		 size;		/* bytes wanted */
	size_t		 done;		/* bytes transferred so far */
	off_t		 off;
	uring_done_fn	 fn;		/* called once before the reply */
	void		*fn_arg;
};

static struct io_uring	ring;
static int		ring_on;
static pthread_mutex_t	sq_lock = PTHREAD_MUTEX_INITIALIZER;	/* the SQ */
static int		sq_stuck;	/* queued, not yet taken; set under sq_lock */
static pthread_t	cq_thread;

int
uring_active(void)
{
	return ring_on;
}

static void
uring_prep(struct io_uring_sqe *sqe, struct uring_op *op)
{
	switch (op->kind) {
	case UOP_READ:
		io_uring_prep_read(sqe, op->fd, op->buf + op->done,
		    (unsigned)(op->size - op->done), op->off + op->done);
		break;
	case UOP_WRITE:
		io_uring_prep_write(sqe, op->fd, op->buf + op->done,
		    (unsigned)(op->size - op->done), op->off + op->done);
		break;
	case UOP_FSYNC:
		io_uring_prep_fsync(sqe, op->fd,
		    op->datasync ? IORING_FSYNC_DATASYNC : 0);
		break;
	}
	/*
	 * Never issue in the submitting thread: a buffered read that finds
	 * its data cached still updates the atime, and that can wait for the
	 * disk to read the inode's block, inside io_uring_enter, with the
	 * kernel's submission lock and sq_lock held, stalling every worker's
	 * I/O and the completion thread behind one cold inode. The kernel's
	 * workers do it instead, each blocking only itself.
	 */
	io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	io_uring_sqe_set_data(sqe, op);
}

/*
 * Hand what is queued on the SQ to the kernel: 0 once it took all of it,
 * -EAGAIN or -EBUSY when it could not for now (out of memory, completions
 * not yet reaped). What it did not take stays queued for the next call.
 */
static int
uring_flush_locked(void)
{
	int	r;

	while (io_uring_sq_ready(&ring) > 0) {
		r = io_uring_submit(&ring);
		if (r == -EINTR)
			continue;
		if (r == -EAGAIN || r == -EBUSY || r == 0)
			return r == 0 ? -EAGAIN : r;
		if (r < 0)
			/* Queued requests could never be answered. */
			fatalx("io_uring_submit: %s", strerror(-r));
	}
	__atomic_store_n(&sq_stuck, 0, __ATOMIC_RELAXED);
	return 0;
}

/*
 * Queue op on the ring. Returns -EBUSY if there is no room, and the caller
 * does the I/O itself. Once its SQE is filled in, op belongs to the ring,
 * even if the kernel does not take it at once: a worker waits for the ring
 * to take it; the completion thread, which is what makes room, leaves it
 * queued and submits it again after reaping.
 */
static int
uring_submit(struct uring_op *op, int reaper)
{
	struct io_uring_sqe	*sqe;

	pthread_mutex_lock(&sq_lock);
	if ((sqe = io_uring_get_sqe(&ring)) == NULL) {
		(void)uring_flush_locked();
		sqe = io_uring_get_sqe(&ring);
	}
	if (sqe == NULL) {
		pthread_mutex_unlock(&sq_lock);
		return -EBUSY;
	}
	uring_prep(sqe, op);
	while (uring_flush_locked() < 0) {
		if (reaper) {
			__atomic_store_n(&sq_stuck, 1, __ATOMIC_RELAXED);
			break;
		}
		pthread_mutex_unlock(&sq_lock);
		usleep(1000);
		pthread_mutex_lock(&sq_lock);
	}
	pthread_mutex_unlock(&sq_lock);
	return 0;
}

/* Tell the caller the I/O is over, before the kernel hears of it. */
static void
uring_finish(struct uring_op *op, int res)
{
	if (op->fn != NULL) {
		op->fn(op->fn_arg, res);
		op->fn = NULL;
	}
}

static void
uring_op_free(struct uring_op *op)
{
	free(op->buf);
	free(op);
}

/*
 * The storage answered err to op and the caller gets it: an EIO or
 * ESTALE names the object (as inode.c does for what it passes on), by
 * its number and its path below SOURCE, whose first name is the
 * workspace: an fd knows no inode.
 */
static void
uring_log_error(const struct uring_op *op, int err)
{
	char		 proc[64], path[PATH_MAX];
	const char	*rel = path;
	struct stat	 st;
	size_t		 len = strlen(wsfs.source);
	ssize_t		 n;

	if (err != -EIO && err != -ESTALE)
		return;
	snprintf(proc, sizeof proc, "/proc/self/fd/%d", op->fd);
	if ((n = readlink(proc, path, sizeof path - 1)) < 0)
		n = 0;
	path[n] = '\0';
	if (strncmp(path, wsfs.source, len) == 0 && path[len] == '/')
		rel = path + len + 1;
	if (fstat(op->fd, &st) == -1)
		st.st_ino = 0;
	log_limited(LOG_ERR, "storage-error", "%s: inode %llu (%s): %s: the "
	    "storage answered %s", wsfs.source, (unsigned long long)st.st_ino,
	    rel[0] != '\0' ? rel : "?", op->kind == UOP_READ ? "read" :
	    op->kind == UOP_WRITE ? "write" : "fsync", strerror(-err));
}

/*
 * Answer the kernel (err 0: with what was transferred) and free op. The
 * answer ends the operation, in whichever thread it comes.
 */
static void
uring_done(struct uring_op *op, int err)
{
	stats_resume(&op->st);
	uring_finish(op, err < 0 ? err : (int)op->done);
	if (err < 0) {
		uring_log_error(op, err);
		stats_reply_err(op->req, -err);
	} else if (op->kind == UOP_READ)
		fuse_reply_buf(op->req, op->buf, op->done);
	else if (op->kind == UOP_WRITE)
		fuse_reply_write(op->req, op->done);
	else
		fuse_reply_err(op->req, 0);
	uring_op_free(op);
	stats_end();
}

/* The same operation as plain syscalls, answering in the calling thread. */
static void
uring_sync(struct uring_op *op)
{
	ssize_t	n;

	while (op->kind != UOP_FSYNC && op->done < op->size) {
		if (op->kind == UOP_READ)
			n = pread(op->fd, op->buf + op->done,
			    op->size - op->done, op->off + (off_t)op->done);
		else
			n = pwrite(op->fd, op->buf + op->done,
			    op->size - op->done, op->off + (off_t)op->done);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			if (op->done == 0)
				goto err;
			break;
		}
		if (n == 0)
			break;
		op->done += (size_t)n;
	}
	if (op->kind == UOP_FSYNC &&
	    (op->datasync ? fdatasync(op->fd) : fsync(op->fd)) == -1)
		goto err;
	uring_done(op, 0);
	return;
err:
	uring_done(op, -errno);
}

/* The ring answers op from now on, or this thread does at once. */
static void
uring_start(struct uring_op *op)
{
	if (!ring_on || uring_submit(op, 0) < 0)
		uring_sync(op);
	else
		stats_detach();
}

/* Handle one completion: finish the request or resubmit the remainder. */
static void
uring_complete(struct uring_op *op, int res)
{
	if (res == -EINTR || res == -EAGAIN)
		goto again;
	if (res < 0) {
		if (op->kind != UOP_FSYNC && op->done > 0)
			goto reply;
		uring_done(op, res);
		return;
	}
	if (op->kind != UOP_FSYNC) {
		op->done += (size_t)res;
		if (res > 0 && op->done < op->size)
			goto again;
	}
reply:
	uring_done(op, 0);
	return;
again:
	if (uring_submit(op, 1) < 0)
		uring_sync(op);
}

static void *
uring_reaper(void *arg)
{
	struct __kernel_timespec  retry = { .tv_nsec = 1000000 };
	struct io_uring_cqe	 *cqe;
	struct uring_op		 *op;
	int			  r, res, stuck;

	for (;;) {
		stuck = 0;
		if (__atomic_load_n(&sq_stuck, __ATOMIC_RELAXED)) {
			pthread_mutex_lock(&sq_lock);
			stuck = uring_flush_locked() < 0;
			pthread_mutex_unlock(&sq_lock);
		}
		/* With requests left queued, come back to submit them. */
		if (stuck)
			r = io_uring_wait_cqe_timeout(&ring, &cqe, &retry);
		else
			r = io_uring_wait_cqe(&ring, &cqe);
		if (r == -EINTR || r == -EAGAIN || r == -ETIME)
			continue;
		if (r < 0)
			fatalx("io_uring_wait_cqe: %s", strerror(-r));
		op = io_uring_cqe_get_data(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&ring, cqe);
		if (op == NULL)		/* the shutdown nop */
			break;
		uring_complete(op, res);
	}
	return NULL;
}

void
uring_init(int enable)
{
	unsigned int	workers[2] = { URING_WORKERS, 0 };
	int		r;

	if (!enable) {
		log_info("io_uring off by configuration; using plain syscalls");
		return;
	}
	if ((r = io_uring_queue_init(URING_ENTRIES, &ring, 0)) < 0) {
		log_warn("io_uring unavailable (%s); falling back to plain "
		    "syscalls", strerror(-r));
		return;
	}
	/*
	 * Each thread that submits gets its own kernel workers, for regular
	 * files min(entries, 4 * CPUs) by default: 8 on 2 cores, which 8
	 * reads from slow storage would hold while the thread's next read,
	 * cached or not, waited behind them. Workers start on demand.
	 */
	if ((r = io_uring_register_iowq_max_workers(&ring, workers)) < 0)
		log_warn("io_uring: cannot raise the worker limit to %u (%s)",
		    workers[0], strerror(-r));
	if ((r = pthread_create(&cq_thread, NULL, uring_reaper, NULL)) != 0)
		fatalx("pthread_create: %s", strerror(r));
	ring_on = 1;
}

void
uring_shutdown(void)
{
	struct io_uring_sqe	*sqe;

	if (!ring_on)
		return;
	pthread_mutex_lock(&sq_lock);
	while ((sqe = io_uring_get_sqe(&ring)) == NULL) {
		pthread_mutex_unlock(&sq_lock);
		usleep(1000);
		pthread_mutex_lock(&sq_lock);
		(void)uring_flush_locked();
	}
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data(sqe, NULL);
	while (uring_flush_locked() < 0) {
		pthread_mutex_unlock(&sq_lock);
		usleep(1000);
		pthread_mutex_lock(&sq_lock);
	}
	pthread_mutex_unlock(&sq_lock);
	pthread_join(cq_thread, NULL);
	io_uring_queue_exit(&ring);
	ring_on = 0;
}

/* A new request, or NULL when out of memory: then req is answered. */
static struct uring_op *
uring_op_new(fuse_req_t req, enum uring_kind kind, int fd, size_t size,
    off_t off, uring_done_fn fn, void *fn_arg)
{
	struct uring_op	*op;

	if ((op = calloc(1, sizeof *op)) == NULL ||
	    (size > 0 && (op->buf = malloc(size)) == NULL)) {
		free(op);
		if (fn != NULL)
			fn(fn_arg, -ENOMEM);
		stats_reply_err(req, ENOMEM);
		return NULL;
	}
	op->req = req;
	stats_save(&op->st);
	op->kind = kind;
	op->fd = fd;
	op->size = size;
	op->off = off;
	op->fn = fn;
	op->fn_arg = fn_arg;
	return op;
}

void
uring_read(fuse_req_t req, int fd, size_t size, off_t off, uring_done_fn fn,
    void *fn_arg)
{
	struct uring_op	*op;

	if ((op = uring_op_new(req, UOP_READ, fd, size, off, fn,
	    fn_arg)) == NULL)
		return;
	if (size == 0)
		uring_done(op, 0);
	else
		uring_start(op);
}

/*
 * A write into the backing page cache, as one pwrite in the calling worker
 * from the request's own buffer. Through the ring the same 4 KiB write
 * cost a copy, a hand-off to a kernel worker (ext4 buffered writes are
 * always punted) and a reply from the completion thread: about five
 * context switches and twice the daemon CPU of the pwrite (README,
 * Performance). What can wait for the disk here (dirty-page throttling,
 * a cold inode's time update) blocks this one worker only, not the ring's
 * submission lock.
 */
void
uring_write_now(fuse_req_t req, int fd, const char *buf, size_t size,
    off_t off, uring_done_fn fn, void *fn_arg)
{
	size_t	done = 0;
	ssize_t	n;
	int	err = 0;

	while (done < size) {
		n = pwrite(fd, buf + done, size - done, off + (off_t)done);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			if (done == 0)
				err = -errno;
			break;
		}
		if (n == 0)
			break;
		done += (size_t)n;
	}
	if (fn != NULL)
		fn(fn_arg, err < 0 ? err : (int)done);
	if (err < 0)
		stats_reply_err(req, -err);
	else
		fuse_reply_write(req, done);
}

/*
 * A write through the ring, answered from the completion thread: for
 * storage that can stall for long (a network filesystem whose server went
 * away), where a pwrite would hold the calling thread as long.
 */
void
uring_write(fuse_req_t req, int fd, const char *buf, size_t size, off_t off,
    uring_done_fn fn, void *fn_arg)
{
	struct uring_op	*op;

	/* The request buffer is reused once the worker returns: copy it. */
	if ((op = uring_op_new(req, UOP_WRITE, fd, size, off, fn,
	    fn_arg)) == NULL)
		return;
	if (size == 0) {
		uring_done(op, 0);
		return;
	}
	memcpy(op->buf, buf, size);
	uring_start(op);
}

void
uring_fsync(fuse_req_t req, int fd, int datasync)
{
	struct uring_op	*op;

	if ((op = uring_op_new(req, UOP_FSYNC, fd, 0, 0, NULL, NULL)) == NULL)
		return;
	op->datasync = datasync;
	uring_start(op);
}

/*
 * The FUSE channel through io_uring (FUSE-over-io_uring, Linux 6.14).
 * The kernel hands a request to a free ring entry of the queue of the
 * CPU its caller runs on, and takes the answer with that entry's next
 * fetch, in one io_uring_enter. The threads that serve a queue are pinned
 * to its CPU, so the caller and wsfs hand that CPU to each other instead
 * of waking the other one: through /dev/fuse the reader is woken on
 * whichever CPU is idle, and on a VM waking an idle CPU is the larger
 * part of a request's cost (README, Performance).
 *
 * The kernel uses the rings only once every queue has an entry, and
 * still sends FORGET and INTERRUPT through /dev/fuse, which loop.c keeps
 * reading. A thread keeps FR_ARMED entries armed (registered, waiting
 * for a request): a request answered later from another thread (an I/O
 * on the data ring, a change waiting for a cluster lock) parks its
 * entry, and the thread arms a new one, so waiting requests hold
 * entries, never threads; the answer wakes the thread through its
 * eventfd, which commits it.
 *
 * Why several: a request that finds no armed entry on its CPU's queue
 * waits in the kernel's list of the queue, and only a commit takes the
 * next one from that list; a newly registered entry does not (Linux
 * 6.14-6.18, fuse_uring_do_register). With one armed entry per thread,
 * a burst of changes that all wait for a lock can leave a stat behind
 * them in that list until the first of them is answered, lock_timeout
 * later (the likely cause of a 6 s stat test_parked.py saw once in CI;
 * not reproduced). Several armed entries per thread
 * keep the list empty unless more requests arrive at once on one CPU
 * than its threads have armed, and then any request answered at once
 * on that CPU takes the next one from it. When a queue's last waiting
 * thread takes a request, another starts, up to the limit, so that one
 * that blocks (a slow disk) holds up its own request alone.
 *
 * Entries are never given back, and their number is bounded: a thread
 * that cannot arm one takes no more requests, and a CPU whose threads
 * all have none leaves its callers waiting in the kernel until a parked
 * request ends. What parks is bounded too: I/O in flight, and with a
 * lock service the waiters for application locks
 * (plock_max_waiters_total) and changes waiting for cluster locks (until
 * lock_timeout); the bound leaves room for all of them.
 */

/* Linux 6.14 uapi, missing from Debian 12's headers. */
#define FR_OVER_IO_URING	(1U << 9)	/* INIT flags2: 1ULL << 41 */
#define FR_CMD_REGISTER		1
#define FR_CMD_COMMIT_AND_FETCH	2
struct fr_ent_in_out {
	uint64_t	flags;
	uint64_t	commit_id;
	uint32_t	payload_sz;
	uint32_t	padding;
	uint64_t	reserved;
};
struct fr_req_header {
	char			in_out[128];	/* fuse_in/out_header */
	char			op_in[128];	/* the request's first argument */
	struct fr_ent_in_out	ent;
};
struct fr_cmd_req {
	uint64_t	flags;
	uint64_t	commit_id;
	uint16_t	qid;
	uint8_t		padding[6];
};

#define FR_STAGE	256	/* before the payload: header + first argument */
#define FR_MAX_CHANS	256
#define FR_ARMED	8	/* entries each thread keeps armed */
#define FR_ENTS_FREE	4096	/* entries beyond the lock waiters'; */
					/* FR_ARMED * FR_MAX_CHANS at most armed */
#define FR_ENTS_MAX	60000	/* below vm.max_map_count's default */
#define FR_UD_STOP	1
#define FR_UD_WAKE	2	/* user_data of CMDs: their fr_ent */

#define FR_SETUP	(IORING_SETUP_SQE128 | IORING_SETUP_SINGLE_ISSUER | \
			 IORING_SETUP_DEFER_TASKRUN)

enum fr_state {
	FE_ARMED,		/* with the kernel, for a request */
	FE_BUSY,		/* its request is being served */
	FE_PARKED,		/* served, its answer comes from elsewhere */
	FE_ANSWERED,		/* its answer is in place, to be committed */
};

/* A ring entry: the buffers the kernel puts a request and takes its answer. */
struct fr_ent {
	struct fr_chan		*chan;		/* the thread that commits it */
	struct fr_req_header	*hdr;
	char			*payload;	/* FR_STAGE bytes before it too */
	struct iovec		 iov[2];
	uint64_t		 unique;	/* atomic: unanswered request, 0 */
	uint64_t		 commit_id;	/* chan's thread */
	int			 state;		/* atomic: enum fr_state */
};

/* A ring thread. */
struct fr_chan {
	struct io_uring		 ring;		/* its thread's alone */
	unsigned int		 qid;
	int			 first;		/* its queue's first thread */
	int			 efd;		/* eventfd: a parked entry answered */
	uint64_t		 efd_val;	/* the ring reads it here */
	struct fr_ent		**ents;		/* its thread's alone */
	unsigned int		 nents;
	unsigned int		 armed;
	uint64_t		 taken;		/* atomic: requests it served */
};

static struct {
	pthread_mutex_t	 lock;
	int		 on;		/* atomic: asked for in INIT */
	int		 devfd;
	size_t		 payload;	/* bytes per entry */
	unsigned int	 nq;		/* queues: one per possible CPU */
	unsigned int	 max_per_q;
	unsigned int	*nthreads;	/* lock to raise: started, per queue */
	int		*waiting;	/* atomic: threads waiting, per queue */
	struct fr_chan	*chans[FR_MAX_CHANS];	/* lock; never freed */
	pthread_t	 tids[FR_MAX_CHANS];	/* lock */
	unsigned int	 nchans;	/* lock */
	struct fr_ent	**ents;		/* [max_ents]; lock to add; never freed */
	unsigned int	 nents;		/* atomic; lock to raise */
	unsigned int	 max_ents;
	int		 stop_fd;	/* eventfd: every ring polls it */
	int		 stopping;	/* atomic */
	int		 warned;	/* lock: a failure was logged */
	char		 why[128];	/* lock: why /dev/fuse, or "" */
} fr = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.stop_fd = -1,
	.why = "not mounted yet",
};

/* The entry whose request this thread is serving. */
static __thread struct fr_ent *fr_current;

static void	*fr_main(void *);
static void	 fr_why(const char *, ...)
		    __attribute__((__format__(__printf__, 1, 2)));

static void
fr_why(const char *fmt, ...)
{
	va_list	ap;

	va_start(ap, fmt);
	pthread_mutex_lock(&fr.lock);
	vsnprintf(fr.why, sizeof fr.why, fmt, ap);
	pthread_mutex_unlock(&fr.lock);
	va_end(ap);
}

static void
fr_warn(const char *what, int err)
{
	pthread_mutex_lock(&fr.lock);
	if (!fr.warned)
		log_warn("FUSE over io_uring: %s: %s", what, strerror(err));
	fr.warned = 1;
	pthread_mutex_unlock(&fr.lock);
}

/* Whether this process may make a ring as the channel's threads do. */
static int
fr_probe(void)
{
	struct io_uring_params	p;
	struct io_uring		r;
	int			e;

	memset(&p, 0, sizeof p);
	p.flags = FR_SETUP;
	if ((e = io_uring_queue_init_params(2, &r, &p)) < 0) {
		log_debug("FUSE over io_uring not asked for: %s", strerror(-e));
		fr_why("io_uring refused: %s", strerror(-e));
		return 0;
	}
	io_uring_queue_exit(&r);
	return 1;
}

/*
 * Once INIT asked for the channel, the kernel holds every request until
 * each queue has an entry, and gives up on the channel only when an
 * entry's registration fails. A queue left without its first thread
 * must therefore fail one: a registration for a queue that does not
 * exist is refused, and requests go on through /dev/fuse.
 */
static void
fr_give_up(const char *what, int err)
{
	struct io_uring_params	 p;
	struct io_uring		 r;
	struct io_uring_sqe	*sqe;
	struct io_uring_cqe	*cqe;
	struct fr_cmd_req	*cmd;
	struct fr_req_header	 hdr;
	struct iovec		 iov[2];
	int			 e;

	log_warn("FUSE over io_uring: %s: %s; requests go on through "
	    "/dev/fuse", what, strerror(err));
	fr_why("FUSE over io_uring could not be set up: %s", strerror(err));
	__atomic_store_n(&fr.on, 0, __ATOMIC_RELEASE);
	memset(&p, 0, sizeof p);
	p.flags = IORING_SETUP_SQE128;
	if ((e = io_uring_queue_init_params(2, &r, &p)) < 0)
		fatalx("FUSE over io_uring: the kernel waits for a channel "
		    "that cannot be set up (%s); mount with fuse_uring=off",
		    strerror(-e));
	iov[0].iov_base = &hdr;
	iov[0].iov_len = sizeof hdr;
	iov[1].iov_base = NULL;
	iov[1].iov_len = 0;
	sqe = io_uring_get_sqe(&r);
	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fr.devfd, iov, 2, 0);
	sqe->cmd_op = FR_CMD_REGISTER;
	cmd = (struct fr_cmd_req *)sqe->cmd;
	memset(cmd, 0, sizeof *cmd);
	cmd->qid = UINT16_MAX;
	if ((e = io_uring_submit_and_wait(&r, 1)) < 0 ||
	    (e = io_uring_wait_cqe(&r, &cqe)) < 0)
		fatalx("FUSE over io_uring: cannot give the channel up (%s)",
		    strerror(-e));
	io_uring_cqe_seen(&r, cqe);
	io_uring_queue_exit(&r);
}

/*
 * Ask for the channel in the INIT reply (loop.c) when the kernel offered
 * it (the fuse module's enable_uring) and the configuration allows it;
 * an entry's payload must hold the largest request and answer this reply
 * allows.
 */
void
uring_fuse_init(struct fuse_init_out *init, size_t len, uint32_t kernel_flags2)
{
	size_t	p;

	fr.max_ents = FR_ENTS_FREE + (cluster_enabled() ?
	    (unsigned int)wsfs.conf.plock_max_waiters_total : 0);
	if (!wsfs.conf.fuse_uring)
		fr_why("fuse_uring=off");
	else if (wsfs.conf.uring == CONF_URING_OFF)
		fr_why("uring=off");
	else if (fr.max_ents > FR_ENTS_MAX)
		fr_why("plock_max_waiters_total is over %u: more requests "
		    "could wait than ring entries can be made",
		    FR_ENTS_MAX - FR_ENTS_FREE);
	else if (!(kernel_flags2 & FR_OVER_IO_URING))
		fr_why("the kernel offers no FUSE over io_uring: "
		    "/sys/module/fuse/parameters/enable_uring");
	else if (len < offsetof(struct fuse_init_out, max_pages) +
	    sizeof init->max_pages)
		fr_why("INIT reply too short");
	else if (fr_probe())
		goto ask;
	return;
ask:
	p = init->max_write;
	if (p < 8192)
		p = 8192;
	if (init->max_pages > 0 &&
	    p < (size_t)init->max_pages * (size_t)sysconf(_SC_PAGESIZE))
		p = (size_t)init->max_pages * (size_t)sysconf(_SC_PAGESIZE);
	fr.payload = p;
	init->flags |= FUSE_INIT_EXT;
	init->flags2 |= FR_OVER_IO_URING;
	__atomic_store_n(&fr.on, 1, __ATOMIC_RELEASE);
}

/* Start a thread for queue q; the caller holds fr.lock. 0 or -errno. */
static int
fr_start_locked(unsigned int q)
{
	struct fr_chan	*c;
	sigset_t	 all, old;
	int		 r;

	if (fr.nchans == FR_MAX_CHANS || fr.nthreads[q] >= fr.max_per_q ||
	    __atomic_load_n(&fr.stopping, __ATOMIC_ACQUIRE))
		return -EAGAIN;
	if ((c = calloc(1, sizeof *c)) == NULL)
		return -ENOMEM;
	if ((c->efd = eventfd(0, EFD_CLOEXEC)) == -1) {
		r = -errno;
		free(c);
		return r;
	}
	c->qid = q;
	c->first = fr.nthreads[q] == 0;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&fr.tids[fr.nchans], NULL, fr_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		close(c->efd);
		free(c);
		return -r;
	}
	fr.chans[fr.nchans++] = c;
	__atomic_store_n(&fr.nthreads[q], fr.nthreads[q] + 1,
	    __ATOMIC_RELEASE);
	return 0;
}

/* The number of possible CPUs, which is the kernel's number of queues. */
static unsigned int
fr_possible_cpus(void)
{
	char		 buf[256], *p, *end;
	unsigned long	 hi = 0, v;
	ssize_t		 n;
	int		 fd;

	if ((fd = open("/sys/devices/system/cpu/possible",
	    O_RDONLY | O_CLOEXEC)) == -1)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* "0-3,6-7": the highest number given. */
	for (p = buf; *p != '\0' && *p != '\n'; p = end) {
		v = strtoul(p, &end, 10);
		if (end == p)
			return 0;
		if (v > hi)
			hi = v;
		if (*end == '-' || *end == ',')
			end++;
	}
	return hi >= 4096 ? 0 : (unsigned int)hi + 1;
}

/*
 * After the INIT reply reached the kernel (devfd: /dev/fuse): one thread
 * per queue registers its entry; more start as requests need them.
 */
void
uring_fuse_start(int devfd, unsigned int max_threads)
{
	unsigned int	q;
	int		r;

	if (!__atomic_load_n(&fr.on, __ATOMIC_ACQUIRE))
		return;
	fr.devfd = devfd;
	if ((fr.nq = fr_possible_cpus()) == 0) {
		fr_give_up("cannot read /sys/devices/system/cpu/possible",
		    EINVAL);
		return;
	}
	if ((fr.stop_fd = eventfd(0, EFD_CLOEXEC)) == -1) {
		fr_give_up("eventfd", errno);
		return;
	}
	fr.max_per_q = max_threads / fr.nq;
	if (fr.max_per_q < 2)
		fr.max_per_q = 2;
	if ((fr.nthreads = calloc(fr.nq, sizeof *fr.nthreads)) == NULL ||
	    (fr.waiting = calloc(fr.nq, sizeof *fr.waiting)) == NULL ||
	    (fr.ents = calloc(fr.max_ents, sizeof *fr.ents)) == NULL) {
		fr_give_up("a queue table", ENOMEM);
		return;
	}
	pthread_mutex_lock(&fr.lock);
	for (q = 0; q < fr.nq; q++)
		if ((r = fr_start_locked(q)) < 0) {
			pthread_mutex_unlock(&fr.lock);
			fr_give_up("a ring thread", -r);
			return;
		}
	pthread_mutex_unlock(&fr.lock);
	pthread_mutex_lock(&fr.lock);
	fr.why[0] = '\0';
	pthread_mutex_unlock(&fr.lock);
	log_info("requests through FUSE over io_uring: %u queues", fr.nq);
}

/* A new entry of c's, for its thread to register; NULL: none left. */
static struct fr_ent *
fr_ent_new(struct fr_chan *c)
{
	struct fr_ent	*e, **v;

	if ((v = realloc(c->ents, (c->nents + 1) * sizeof *v)) == NULL)
		return NULL;
	c->ents = v;
	if ((e = calloc(1, sizeof *e)) == NULL)
		return NULL;
	if ((e->hdr = calloc(1, sizeof *e->hdr)) == NULL ||
	    (e->payload = malloc(FR_STAGE + fr.payload)) == NULL) {
		free(e->hdr);
		free(e);
		return NULL;
	}
	e->payload += FR_STAGE;
	e->chan = c;
	e->iov[0].iov_base = e->hdr;
	e->iov[0].iov_len = sizeof *e->hdr;
	e->iov[1].iov_base = e->payload;
	e->iov[1].iov_len = fr.payload;
	pthread_mutex_lock(&fr.lock);
	if (fr.nents == fr.max_ents) {
		pthread_mutex_unlock(&fr.lock);
		free(e->payload - FR_STAGE);
		free(e->hdr);
		free(e);
		return NULL;
	}
	fr.ents[fr.nents] = e;
	__atomic_store_n(&fr.nents, fr.nents + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&fr.lock);
	c->ents[c->nents++] = e;
	return e;
}

/* A free submission entry of c's ring; submits what is queued to free one. */
static struct io_uring_sqe *
fr_sqe(struct fr_chan *c)
{
	struct io_uring_sqe	*sqe;
	int			 r;

	while ((sqe = io_uring_get_sqe(&c->ring)) == NULL)
		if ((r = io_uring_submit(&c->ring)) < 0) {
			/* The kernel's resources, short for a moment. */
			if (r != -EAGAIN && r != -EBUSY && r != -EINTR)
				fatalx("FUSE ring: io_uring_submit: %s",
				    strerror(-r));
			usleep(1000);
		}
	return sqe;
}

/* Queue the registration of e, or the commit of its answer. */
static void
fr_arm(struct fr_ent *e, uint32_t op)
{
	struct io_uring_sqe	*sqe = fr_sqe(e->chan);
	struct fr_cmd_req	*cmd;

	io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fr.devfd, e->iov, 2, 0);
	sqe->cmd_op = op;
	cmd = (struct fr_cmd_req *)sqe->cmd;
	memset(cmd, 0, sizeof *cmd);
	cmd->commit_id = op == FR_CMD_COMMIT_AND_FETCH ? e->commit_id : 0;
	cmd->qid = (uint16_t)e->chan->qid;
	io_uring_sqe_set_data(sqe, e);
	__atomic_store_n(&e->state, FE_ARMED, __ATOMIC_RELEASE);
	e->chan->armed++;
}

static void
fr_wake_read(struct fr_chan *c)
{
	struct io_uring_sqe	*sqe = fr_sqe(c);

	io_uring_prep_read(sqe, c->efd, &c->efd_val, sizeof c->efd_val, 0);
	io_uring_sqe_set_data64(sqe, FR_UD_WAKE);
}

/* Keep FR_ARMED entries of c armed: new ones for those that park. */
static void
fr_keep_armed(struct fr_chan *c)
{
	struct fr_ent	*e;

	while (c->armed < FR_ARMED) {
		if ((e = fr_ent_new(c)) == NULL) {
			/*
			 * Those armed serve on; with none, this thread takes
			 * no request until one of its parked ones ends.
			 */
			if (__atomic_load_n(&fr.nents, __ATOMIC_ACQUIRE) ==
			    fr.max_ents)
				fr_warn("every ring entry waits for an answer",
				    EBUSY);
			else
				fr_warn("a ring entry", ENOMEM);
			return;
		}
		fr_arm(e, FR_CMD_REGISTER);
	}
}

/* Serve the request the kernel put in e. */
static void
fr_serve(struct fr_ent *e)
{
	struct fr_chan		*c = e->chan;
	struct fuse_out_header	*out;
	struct fuse_in_header	 in;
	struct fuse_buf		 buf;
	size_t			 psz, first;
	char			*mem;
	int			 st, r;

	c->armed--;
	/* The lock only while a thread could still be started. */
	if (__atomic_load_n(&fr.waiting[c->qid], __ATOMIC_ACQUIRE) == 0 &&
	    __atomic_load_n(&fr.nthreads[c->qid], __ATOMIC_ACQUIRE) <
	    fr.max_per_q) {
		pthread_mutex_lock(&fr.lock);
		if ((r = fr_start_locked(c->qid)) < 0 && r != -EAGAIN &&
		    !fr.warned) {
			log_warn("FUSE over io_uring: cannot start a ring "
			    "thread: %s", strerror(-r));
			fr.warned = 1;
		}
		pthread_mutex_unlock(&fr.lock);
	}
	/* Its own counter: no cache line shared by the CPUs per request. */
	__atomic_store_n(&c->taken, __atomic_load_n(&c->taken,
	    __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	memcpy(&in, e->hdr->in_out, sizeof in);
	psz = e->hdr->ent.payload_sz;
	e->commit_id = in.unique;
	/*
	 * /dev/fuse would give header, first argument and the rest in one
	 * buffer: put the first two just before the payload.
	 */
	if (in.len < sizeof in || psz > fr.payload || in.len - sizeof in <
	    psz || (first = in.len - sizeof in - psz) > sizeof e->hdr->op_in) {
		log_warn("FUSE ring: a request of %u bytes with %zu of payload",
		    in.len, psz);
		out = (struct fuse_out_header *)e->hdr->in_out;
		memset(out, 0, sizeof *out);
		out->len = sizeof *out;
		out->error = -EIO;
		out->unique = in.unique;
		e->hdr->ent.payload_sz = 0;
		fr_arm(e, FR_CMD_COMMIT_AND_FETCH);
		return;
	}
	mem = e->payload - sizeof in - first;
	memcpy(mem, &in, sizeof in);
	memcpy(mem + sizeof in, e->hdr->op_in, first);
	__atomic_store_n(&e->state, FE_BUSY, __ATOMIC_RELAXED);
	__atomic_store_n(&e->unique, in.unique, __ATOMIC_RELEASE);
	memset(&buf, 0, sizeof buf);
	buf.mem = mem;
	buf.size = in.len;
	fr_current = e;
	fuse_session_process_buf(wsfs.se, &buf);
	fr_current = NULL;
	/* Answered already, or parked until uring_fuse_answer wakes us. */
	st = FE_BUSY;
	if (!__atomic_compare_exchange_n(&e->state, &st, FE_PARKED, 0,
	    __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		fr_arm(e, FR_CMD_COMMIT_AND_FETCH);
	else
		fr_keep_armed(c);
}

/* The eventfd said: commit the parked entries of c that were answered. */
static void
fr_commit_answered(struct fr_chan *c)
{
	unsigned int	i;

	for (i = 0; i < c->nents; i++)
		if (__atomic_load_n(&c->ents[i]->state, __ATOMIC_ACQUIRE) ==
		    FE_ANSWERED)
			fr_arm(c->ents[i], FR_CMD_COMMIT_AND_FETCH);
}

static void *
fr_main(void *arg)
{
	struct fr_chan		*c = arg;
	struct io_uring_params	 p;
	struct io_uring_sqe	*sqe;
	struct io_uring_cqe	*cqe;
	struct fr_ent		*e;
	cpu_set_t		 cpus;
	uint64_t		 ud;
	int			 r, res, registered = 0;

	/* Not allowed on that CPU (cpusets): served from elsewhere. */
	CPU_ZERO(&cpus);
	CPU_SET(c->qid, &cpus);
	(void)pthread_setaffinity_np(pthread_self(), sizeof cpus, &cpus);
	/* Entries armed at once can outnumber the submission entries. */
	memset(&p, 0, sizeof p);
	p.flags = FR_SETUP | IORING_SETUP_CQSIZE;
	p.cq_entries = 256;
	if ((r = io_uring_queue_init_params(8, &c->ring, &p)) < 0 ||
	    (e = fr_ent_new(c)) == NULL) {
		r = r < 0 ? -r : ENOMEM;
		/* A queue's first thread: the kernel waits for its entry. */
		if (c->first)
			fr_give_up("a ring thread's setup", r);
		else
			fr_warn("a ring thread's setup", r);
		return NULL;
	}
	sqe = fr_sqe(c);
	io_uring_prep_poll_add(sqe, fr.stop_fd, POLLIN);
	io_uring_sqe_set_data64(sqe, FR_UD_STOP);
	fr_wake_read(c);
	fr_arm(e, FR_CMD_REGISTER);
	fr_keep_armed(c);
	for (;;) {
		__atomic_add_fetch(&fr.waiting[c->qid], 1, __ATOMIC_ACQ_REL);
		r = io_uring_submit_and_wait(&c->ring, 1);
		__atomic_sub_fetch(&fr.waiting[c->qid], 1, __ATOMIC_ACQ_REL);
		if (r < 0 && r != -EINTR) {
			if (c->first && !registered)
				fr_give_up("io_uring_enter", -r);
			else
				fr_warn("io_uring_enter", -r);
			break;
		}
		registered = 1;
		while (io_uring_peek_cqe(&c->ring, &cqe) == 0) {
			ud = cqe->user_data;
			res = cqe->res;
			io_uring_cqe_seen(&c->ring, cqe);
			if (ud == FR_UD_STOP)
				goto out;
			if (ud == FR_UD_WAKE) {
				if (res < 0 && res != -EINTR)
					fatalx("FUSE ring: eventfd: %s",
					    strerror(-res));
				fr_commit_answered(c);
				fr_wake_read(c);
				continue;
			}
			e = (struct fr_ent *)(uintptr_t)ud;
			if (res < 0) {
				/* The connection's end takes the entries. */
				if (res == -ENOTCONN || res == -ECONNABORTED ||
				    res == -ECANCELED)
					goto out;
				fr_warn("an entry", -res);
				c->armed--;
				fr_keep_armed(c);
				continue;
			}
			fr_serve(e);
		}
	}
out:
	io_uring_queue_exit(&c->ring);
	return NULL;
}

/*
 * The answer in iov (loop.c's hook on every reply): if it is for a
 * request taken from a ring, put it into that entry, to go with the
 * entry's next fetch, and return 1; else 0, for /dev/fuse.
 */
int
uring_fuse_answer(const struct iovec *iov, int count)
{
	const struct fuse_out_header	*out = iov[0].iov_base;
	struct fr_ent			*e = fr_current;
	struct fuse_out_header		*h;
	unsigned int			 i, n;
	size_t				 len = 0;
	uint64_t			 one = 1;

	if (count < 1 || iov[0].iov_len < sizeof *out || out->unique == 0 ||
	    !__atomic_load_n(&fr.on, __ATOMIC_ACQUIRE))
		return 0;
	if (e == NULL ||
	    __atomic_load_n(&e->unique, __ATOMIC_ACQUIRE) != out->unique) {
		n = __atomic_load_n(&fr.nents, __ATOMIC_ACQUIRE);
		for (i = 0, e = NULL; i < n; i++)
			if (__atomic_load_n(&fr.ents[i]->unique,
			    __ATOMIC_ACQUIRE) == out->unique) {
				e = fr.ents[i];
				break;
			}
		if (e == NULL)
			return 0;
	}
	__atomic_store_n(&e->unique, 0, __ATOMIC_RELAXED);
	h = (struct fuse_out_header *)e->hdr->in_out;
	memcpy(h, out, sizeof *out);
	for (i = 1; i < (unsigned int)count; i++) {
		if (iov[i].iov_len > fr.payload - len) {
			log_warn("FUSE ring: an answer over %zu bytes",
			    fr.payload);
			h->error = -EIO;
			h->len = sizeof *h;
			len = 0;
			break;
		}
		memcpy(e->payload + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	e->hdr->ent.payload_sz = (uint32_t)len;
	/* Its thread commits it: at once if it still serves it, else woken. */
	if (__atomic_exchange_n(&e->state, FE_ANSWERED, __ATOMIC_ACQ_REL) ==
	    FE_PARKED && write(e->chan->efd, &one, sizeof one) == -1)
		fatal("FUSE ring: eventfd");
	return 1;
}

/*
 * How requests come: 1 through the rings (queues, ring threads and
 * requests served so far in *q, *t, *taken), 0 through /dev/fuse, and
 * why in why (len bytes).
 */
int
uring_fuse_channel(char *why, size_t len, unsigned int *q, unsigned int *t,
    uint64_t *taken)
{
	unsigned int	i;
	int		on;

	pthread_mutex_lock(&fr.lock);
	snprintf(why, len, "%s", fr.why);
	on = fr.why[0] == '\0';
	*q = fr.nq;
	*t = fr.nchans;
	for (i = 0, *taken = 0; i < fr.nchans; i++)
		*taken += __atomic_load_n(&fr.chans[i]->taken,
		    __ATOMIC_RELAXED);
	pthread_mutex_unlock(&fr.lock);
	return on;
}

/* Stop and join the ring threads; entries stay (late answers). */
void
uring_fuse_stop(void)
{
	uint64_t	one = 1;
	unsigned int	i, n;

	if (fr.stop_fd == -1)
		return;
	__atomic_store_n(&fr.stopping, 1, __ATOMIC_RELEASE);
	if (write(fr.stop_fd, &one, sizeof one) == -1)
		log_warn("FUSE ring: eventfd: %s", strerror(errno));
	pthread_mutex_lock(&fr.lock);
	n = fr.nchans;
	pthread_mutex_unlock(&fr.lock);
	for (i = 0; i < n; i++)
		pthread_join(fr.tids[i], NULL);
}

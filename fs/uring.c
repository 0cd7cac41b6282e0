/*
 * The io_uring data path: every liburing call of wsfs lives here. A FUSE
 * worker submits a read, write or fsync and returns at once; the kernel's
 * io_uring workers do the I/O, and one completion thread reaps the results
 * and answers the kernel, so no worker sits blocked on backing I/O. Short
 * transfers are resubmitted for the rest. Where the kernel refuses io_uring
 * (io_uring_disabled), the same calls run as plain syscalls in the worker.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <limits.h>
#include <liburing.h>
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

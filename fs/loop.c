/*
 * The FUSE request loop: a pool of up to max_threads threads serving
 * /dev/fuse, of which at most LOOP_READERS wait in read() at a time; the
 * other idle ones park here until every reader is busy.
 *
 * Why not libfuse's fuse_session_loop_mt: it keeps every idle thread in
 * read(), and the kernel wakes the waiters of /dev/fuse in turn, oldest
 * first. One process making one call after another, as git, tar and rm
 * do, then has its requests answered by each thread of the pool in
 * rotation. On the 2-core VM of README's tables, an unlink through a pool
 * of 3 or 4 rotating threads took 70-100 µs, through 2 threads 51-59 µs,
 * as through bindfs's single thread. Two readers keep that pace for one
 * caller and still take the next request while one is being served;
 * parked threads serve overlapping requests (a lock wait, a slow disk)
 * without the cost of starting and ending threads per burst.
 */
#include "config.h"

#include <linux/fuse.h>

#include <sys/uio.h>

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wsfs.h"

/* Threads at most in read() of /dev/fuse at a time. */
#define LOOP_READERS	2

struct loop_worker {
	pthread_t	 tid;
	struct fuse_buf	 buf;		/* the thread's own, until joined */
};

static struct {
	struct fuse_session	*se;
	pthread_mutex_t		 lock;
	pthread_cond_t		 park;		/* a reader is wanted; lock */
	unsigned int		 max;
	unsigned int		 nthreads;	/* started; lock */
	unsigned int		 readers;	/* in or bound for read(); atomic */
	unsigned int		 parked;	/* waiting on park; lock */
	unsigned int		 forgetting;	/* serving a FORGET; atomic */
	int			 error;		/* first receive error; lock */
	int			 start_failed;	/* logged once; lock */
	int			 ending;	/* no new threads; lock */
	struct loop_worker	*w;		/* [max]; first nthreads used */
	sem_t			 done;		/* posted when the loop ends */
	uint64_t		 init_unique;	/* the INIT request's; atomic */
	uint32_t		 init_flags;	/* what the kernel offered */
	uint32_t		 init_flags2;	/* its flags2 (FUSE_INIT_EXT) */
} loop = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.park = PTHREAD_COND_INITIALIZER,
};

static void	*loop_worker(void *);

/*
 * The session's reads and writes of /dev/fuse, through libfuse's
 * custom-I/O hook, for one thing libfuse 3.14 cannot ask for:
 * FUSE_HANDLE_KILLPRIV_V2 (kernel protocol 7.33). Without it the kernel
 * asks for security.capability (GETXATTR) before every write to learn
 * whether the write must remove it: a round trip per write() (README,
 * Performance). With it the kernel leaves clearing setuid, setgid and
 * the capability on write, truncate and chown to the server, and once
 * it has found an inode without any of them it stops asking (S_NOSEC,
 * until it next takes the inode's attributes). wsfs does that clearing
 * itself (wsfs.server_kills_priv; perm_write_kill_priv), and the backing
 * filesystem removes a capability on every write and chown the daemon
 * makes there. The flag is added to wsfs's INIT reply when the kernel
 * offered it.
 */
static ssize_t
loop_io_read(int fd, void *buf, size_t len, void *userdata)
{
	const struct fuse_in_header	*in = buf;
	const struct fuse_init_in	*init;
	ssize_t				 n;

	(void)userdata;
	n = read(fd, buf, len);
	/* Its first four fields are in every protocol's INIT. */
	if (n >= (ssize_t)(sizeof *in + offsetof(struct fuse_init_in, flags) +
	    sizeof init->flags) && in->opcode == FUSE_INIT &&
	    __atomic_load_n(&loop.init_unique, __ATOMIC_ACQUIRE) == 0) {
		init = (const struct fuse_init_in *)(in + 1);
		loop.init_flags = init->minor >= 33 ? init->flags : 0;
		if ((loop.init_flags & FUSE_INIT_EXT) && n >=
		    (ssize_t)(sizeof *in + offsetof(struct fuse_init_in,
		    flags2) + sizeof init->flags2))
			loop.init_flags2 = init->flags2;
		__atomic_store_n(&loop.init_unique, in->unique,
		    __ATOMIC_RELEASE);
	}
	return n;
}

static ssize_t
loop_io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	const struct fuse_out_header	*out = iov[0].iov_base;
	struct fuse_init_out		*init;
	uint64_t			 u;
	ssize_t				 n;
	int				 i;

	(void)userdata;
	u = __atomic_load_n(&loop.init_unique, __ATOMIC_ACQUIRE);
	if (u != 0 && u != UINT64_MAX && count == 2 &&
	    iov[0].iov_len == sizeof *out && out->unique == u &&
	    out->error == 0 && iov[1].iov_len >=
	    offsetof(struct fuse_init_out, flags) + sizeof init->flags) {
		init = iov[1].iov_base;
		if (loop.init_flags & FUSE_HANDLE_KILLPRIV_V2) {
			init->flags |= FUSE_HANDLE_KILLPRIV_V2;
			init->flags &= ~FUSE_HANDLE_KILLPRIV;
			/* Before the kernel can send a write. */
			__atomic_store_n(&wsfs.server_kills_priv, 1,
			    __ATOMIC_RELEASE);
		}
		passthrough_init(init, iov[1].iov_len, loop.init_flags2);
		uring_fuse_init(init, iov[1].iov_len, loop.init_flags2);
		__atomic_store_n(&loop.init_unique, UINT64_MAX,
		    __ATOMIC_RELEASE);
		/* The kernel takes ring entries once it has the reply. */
		if ((n = writev(fd, iov, count)) != -1)
			uring_fuse_start(fd, loop.max);
		return n;
	}
	passthrough_reply(iov, count);
	if (uring_fuse_answer(iov, count)) {
		for (i = 0, n = 0; i < count; i++)
			n += (ssize_t)iov[i].iov_len;
		return n;
	}
	return writev(fd, iov, count);
}

static const struct fuse_custom_io loop_io = {
	.read = loop_io_read,
	.writev = loop_io_writev,
};

/* Whether the request in buf is a FORGET or a BATCH_FORGET. */
static int
loop_forget(const struct fuse_buf *buf)
{
	const struct fuse_in_header	*in = buf->mem;

	if ((buf->flags & FUSE_BUF_IS_FD) || buf->size < sizeof *in)
		return 0;
	return in->opcode == FUSE_FORGET || in->opcode == FUSE_BATCH_FORGET;
}

/* Start one more thread; the caller holds loop.lock. */
static int
loop_start_thread(void)
{
	struct loop_worker	*w;
	sigset_t		 all, old;
	int			 r;

	if (loop.nthreads == loop.max || loop.ending)
		return -EAGAIN;
	w = &loop.w[loop.nthreads];
	memset(&w->buf, 0, sizeof w->buf);
	/*
	 * Signals go to the other threads of the daemon; the stop handler
	 * wakes the main one through loop_wake, whichever thread it runs in.
	 */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&w->tid, NULL, loop_worker, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0) {
		if (!loop.start_failed)
			log_warn("cannot start a request thread (%u running): "
			    "%s", loop.nthreads, strerror(r));
		loop.start_failed = 1;
		return -r;
	}
	loop.nthreads++;
	return 0;
}

/* The loop is over: wake every thread that waits for it. */
static void
loop_end(int error)
{
	if (error < 0 && loop.error == 0)
		loop.error = error;
	fuse_session_exit(loop.se);
	pthread_cond_broadcast(&loop.park);
	sem_post(&loop.done);
}

/*
 * Take a reader's place: without the lock while there is room, since
 * every request passes here; parked on loop.park while there is none.
 * Returns 0, or -1 once the session has ended.
 */
static int
loop_take_read(void)
{
	unsigned int	n;

	for (;;) {
		if (fuse_session_exited(loop.se))
			return -1;
		n = __atomic_load_n(&loop.readers, __ATOMIC_ACQUIRE);
		if (n < LOOP_READERS) {
			if (__atomic_compare_exchange_n(&loop.readers, &n, n + 1,
			    0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				return 0;
			continue;
		}
		/*
		 * A reader that leaves none behind signals under the lock,
		 * after its count went down: checked under the lock here,
		 * the count is either seen down or the signal comes later.
		 */
		pthread_mutex_lock(&loop.lock);
		if (__atomic_load_n(&loop.readers, __ATOMIC_ACQUIRE) >=
		    LOOP_READERS && !fuse_session_exited(loop.se)) {
			loop.parked++;
			pthread_cond_wait(&loop.park, &loop.lock);
			loop.parked--;
		}
		pthread_mutex_unlock(&loop.lock);
	}
}

static void *
loop_worker(void *arg)
{
	struct loop_worker	*w = arg;
	unsigned int		 left;
	int			 r, forget;

	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	while (loop_take_read() == 0) {
		/* The one place the main thread may cancel a worker. */
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		r = fuse_session_receive_buf(loop.se, &w->buf);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);

		/*
		 * A FORGET, which the kernel sends beside the calls of one
		 * process, never waits: its thread counts as a reader, from
		 * before it stops counting as one.
		 */
		forget = r > 0 && loop_forget(&w->buf);
		if (forget)
			__atomic_add_fetch(&loop.forgetting, 1,
			    __ATOMIC_ACQ_REL);
		left = __atomic_sub_fetch(&loop.readers, 1, __ATOMIC_ACQ_REL);
		if (r == -EINTR)
			continue;
		if (r <= 0) {		/* 0: unmounted */
			pthread_mutex_lock(&loop.lock);
			loop_end(r);
			pthread_mutex_unlock(&loop.lock);
			break;
		}
		/*
		 * Serving this request may take long (a lock, a slow disk):
		 * if no other thread is left to read the next, one must be.
		 */
		if (!forget && left + __atomic_load_n(&loop.forgetting,
		    __ATOMIC_ACQUIRE) == 0) {
			pthread_mutex_lock(&loop.lock);
			if (loop.parked > 0)
				pthread_cond_signal(&loop.park);
			else
				(void)loop_start_thread();
			pthread_mutex_unlock(&loop.lock);
		}
		fuse_session_process_buf(loop.se, &w->buf);
		if (forget)
			__atomic_sub_fetch(&loop.forgetting, 1,
			    __ATOMIC_ACQ_REL);
	}
	return NULL;
}

void
loop_wake(void)
{
	sem_post(&loop.done);
}

int
loop_run(struct fuse_session *se, unsigned int max_threads)
{
	unsigned int	 i, n;
	int		 r;

	loop.se = se;
	loop.max = max_threads > 0 ? max_threads : 1;
	if ((r = fuse_session_custom_io(se, &loop_io, fuse_session_fd(se))) < 0)
		log_warn("no custom FUSE I/O (%s): the kernel will ask for "
		    "security.capability before every write", strerror(-r));
	if ((loop.w = calloc(loop.max, sizeof *loop.w)) == NULL)
		return -ENOMEM;
	if (sem_init(&loop.done, 0, 0) == -1) {
		free(loop.w);
		return -errno;
	}
	pthread_mutex_lock(&loop.lock);
	for (i = 0; i < LOOP_READERS && i < loop.max; i++)
		if ((r = loop_start_thread()) < 0 && i == 0) {
			pthread_mutex_unlock(&loop.lock);
			sem_destroy(&loop.done);
			free(loop.w);
			return r;
		}
	pthread_mutex_unlock(&loop.lock);

	/* Woken by a worker at the end, or by a signal (loop_wake). */
	while (!fuse_session_exited(se))
		(void)sem_wait(&loop.done);
	uring_fuse_stop();

	/*
	 * Threads in read() are cancelled there; the others see the end
	 * after their request or wake from the park to it.
	 */
	pthread_mutex_lock(&loop.lock);
	loop.ending = 1;
	pthread_cond_broadcast(&loop.park);
	n = loop.nthreads;
	pthread_mutex_unlock(&loop.lock);
	for (i = 0; i < n; i++)
		pthread_cancel(loop.w[i].tid);
	for (i = 0; i < n; i++) {
		pthread_join(loop.w[i].tid, NULL);
		free(loop.w[i].buf.mem);
	}
	r = loop.error;
	sem_destroy(&loop.done);
	free(loop.w);
	loop.w = NULL;
	return r;
}

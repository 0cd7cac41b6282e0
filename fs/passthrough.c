/*
 * Kernel passthrough of reads and writes (FUSE_PASSTHROUGH, Linux 6.9):
 * an open regular file is bound to its backing file, and the kernel then
 * reads, writes and maps the backing file itself, without a request to
 * wsfs, through the backing store's own page cache. Only without a lock
 * service: under cluster locks the daemon sees every write (fences,
 * appends) and drops pages on revoke.
 *
 * libfuse 3.14 knows none of it. Through loop.c's hook on /dev/fuse,
 * passthrough_init asks for it in the INIT reply, and passthrough_reply
 * sets the backing id into the reply of an OPEN or CREATE that
 * passthrough_open bound. The kernel takes a file's backing through an
 * id that FUSE_DEV_IOC_BACKING_OPEN returns; it allows one backing per
 * inode at a time, and no open that uses its own page cache
 * (cached) beside one that passes through. So each inode keeps one id
 * while it has passthrough opens, and an inode opened cached stays cached
 * until all its opens are released: the counts below lag the kernel's
 * (a RELEASE arrives after the kernel let go), never lead it.
 *
 * Clearing set-id bits: the kernel's write path calls file_remove_privs
 * on the FUSE file with the writer's credentials, which with
 * FUSE_HANDLE_KILLPRIV_V2 leaves the work to the server, and the server
 * sees no write. The backing write runs with the credentials the id was
 * registered with: the daemon's, less CAP_FSETID, so the backing
 * filesystem clears setuid (and setgid with group execute) on every
 * write, as it does for any unprivileged writer. A file that has set-id
 * bits when it is opened is opened cached instead, so that root's writes
 * keep them and a group member's keep setgid, as natively; only a bit
 * set while the file is open through wsfs goes with root's next write.
 */
#include "config.h"

#include <linux/capability.h>
#include <linux/fuse.h>

#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "wsfs.h"

/* Linux 6.9 uapi, missing from Debian 12's headers (protocol 7.38). */
#define PT_FUSE_PASSTHROUGH	(1ULL << 37)	/* INIT flags2 bit 5 */
#ifndef FOPEN_PASSTHROUGH
#define FOPEN_PASSTHROUGH	(1 << 7)
#endif
struct pt_backing_map {
	int32_t		fd;
	uint32_t	flags;
	uint64_t	padding;
};
#define PT_IOC_MAGIC		229
#define PT_IOC_BACKING_OPEN	_IOW(PT_IOC_MAGIC, 1, struct pt_backing_map)
#define PT_IOC_BACKING_CLOSE	_IOW(PT_IOC_MAGIC, 2, uint32_t)

/* fuse_open_out of protocol 7.40: backing_id where 7.38 has padding. */
struct pt_open_out {
	uint64_t	fh;
	uint32_t	open_flags;
	int32_t		backing_id;
};

static struct {
	pthread_mutex_t	 lock;		/* every inode's pt_* fields */
	int		 failed;	/* lock; errno of a failed registration */
	uint64_t	 opens;		/* atomic: passthrough opens, total */
	uint64_t	 cached;	/* atomic: cached opens, total */
	uint64_t	 bound;		/* lock: inodes with a backing id */
} pt = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/*
 * The OPEN or CREATE reply this thread is about to send: the handle it
 * names and the backing id to put in it (passthrough_reply).
 */
static __thread struct {
	uint64_t	fh;
	int32_t		id;
} pt_next;

/*
 * Run a FUSE_DEV_IOC_BACKING_* ioctl with CAP_SYS_ADMIN, which it needs,
 * and without CAP_FSETID, whose absence the registered credentials keep.
 * Capabilities are per thread: only this one changes, and only until
 * the ioctl returns.
 */
static int
passthrough_ioctl(unsigned long cmd, void *arg)
{
	/*
	 * A request thread's capabilities are set once, before it starts
	 * (priv_drop), and only changed here: read them once per thread.
	 */
	static __thread struct __user_cap_data_struct	 old[2], raised[2];
	static __thread int				 known;
	struct __user_cap_header_struct			 h = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	int						 r, e;

	if (!known) {
		if (syscall(SYS_capget, &h, old) == -1)
			return -errno;
		memcpy(raised, old, sizeof raised);
		raised[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective |=
		    CAP_TO_MASK(CAP_SYS_ADMIN);
		raised[CAP_TO_INDEX(CAP_FSETID)].effective &=
		    ~CAP_TO_MASK(CAP_FSETID);
		known = 1;
	}
	if (syscall(SYS_capset, &h, raised) == -1)
		return -errno;
	r = ioctl(fuse_session_fd(wsfs.se), cmd, arg);
	e = errno;
	if (syscall(SYS_capset, &h, old) == -1)
		fatal("could not restore capabilities after a backing ioctl");
	return r == -1 ? -e : r;
}

/*
 * Ask for passthrough in the INIT reply init (len bytes; loop.c) when the
 * kernel offered it in flags2, the configuration allows it and there is
 * no lock service. Protocol 7.40 put max_stack_depth, which must be 1 or
 * more, right after flags2, where 7.38's fuse_init_out has unused[0]: 1
 * lets the backing files be on any filesystem that is not itself
 * stacked.
 */
void
passthrough_init(struct fuse_init_out *init, size_t len,
    uint32_t kernel_flags2)
{
	const uint32_t	pass = (uint32_t)(PT_FUSE_PASSTHROUGH >> 32);

	if (!(kernel_flags2 & pass) || !wsfs.conf.passthrough ||
	    cluster_enabled() || (init->flags & FUSE_WRITEBACK_CACHE) ||
	    len < offsetof(struct fuse_init_out, unused) +
	    sizeof init->unused[0])
		return;
	init->flags |= FUSE_INIT_EXT;
	init->flags2 |= pass;
	init->unused[0] = 1;
	/* Before the kernel can send an open. */
	__atomic_store_n(&wsfs.passthrough, 1, __ATOMIC_RELEASE);
}

int
passthrough_enabled(void)
{
	return __atomic_load_n(&wsfs.passthrough, __ATOMIC_ACQUIRE);
}

/*
 * Why files are no longer bound (an errno: the backing filesystem is
 * stacked too deep, or the daemon lacks CAP_SYS_ADMIN), or 0.
 */
int
passthrough_failed(void)
{
	int	e;

	pthread_mutex_lock(&pt.lock);
	e = pt.failed;
	pthread_mutex_unlock(&pt.lock);
	return e;
}

void
passthrough_counts(uint64_t *opens, uint64_t *cached, uint64_t *bound)
{
	*opens = __atomic_load_n(&pt.opens, __ATOMIC_RELAXED);
	*cached = __atomic_load_n(&pt.cached, __ATOMIC_RELAXED);
	pthread_mutex_lock(&pt.lock);
	*bound = pt.bound;
	pthread_mutex_unlock(&pt.lock);
}

/*
 * Decide how f, just opened on fd with the stat st if known, is served:
 * returns 1 if it is bound to the inode's backing file (the reply must
 * then keep no cache: the caller clears keep_cache), 0 if not. Its reads
 * and writes then pass through, but for an O_DIRECT open (f->direct),
 * whose reads and writes still come to wsfs (FOPEN_DIRECT_IO) and only
 * mmap passes through: the kernel wants every open of an inode with a
 * backing bound to it. An O_DIRECT open of an inode served cached takes
 * no mode in the kernel and is left as it is.
 */
int
passthrough_open(struct wsfile *f, const struct stat *st)
{
	struct inode		*in = f->inode;
	struct pt_backing_map	 map;
	struct stat		 sb;
	int			 id;

	pt_next.fh = 0;
	if (!passthrough_enabled())
		return 0;
	if (st == NULL) {
		st = &sb;
		if (fstat(f->fd, &sb) == -1)
			memset(&sb, 0, sizeof sb);
	}
	pthread_mutex_lock(&pt.lock);
	if (in->pt_opens == 0 && (in->pt_cached > 0 || pt.failed ||
	    (st->st_mode & (S_ISUID | S_ISGID)))) {
		if (f->direct) {
			pthread_mutex_unlock(&pt.lock);
			return 0;
		}
		in->pt_cached++;
		f->pt = PT_CACHED;
		pthread_mutex_unlock(&pt.lock);
		__atomic_add_fetch(&pt.cached, 1, __ATOMIC_RELAXED);
		return 0;
	}
	if (in->pt_opens == 0) {
		memset(&map, 0, sizeof map);
		map.fd = f->fd;
		if ((id = passthrough_ioctl(PT_IOC_BACKING_OPEN, &map)) <= 0) {
			/* Once: the next opens of every inode go cached. */
			id = pt.failed = id < 0 ? -id : EINVAL;
			if (!f->direct) {
				in->pt_cached++;
				f->pt = PT_CACHED;
				__atomic_add_fetch(&pt.cached, 1,
				    __ATOMIC_RELAXED);
			}
			pthread_mutex_unlock(&pt.lock);
			log_warn("no passthrough: FUSE_DEV_IOC_BACKING_OPEN: "
			    "%s; reads and writes go through wsfs",
			    strerror(id));
			return 0;
		}
		in->pt_id = id;
		pt.bound++;
	}
	in->pt_opens++;
	f->pt = PT_PASS;
	pt_next.fh = (uintptr_t)f;
	pt_next.id = in->pt_id;
	pthread_mutex_unlock(&pt.lock);
	__atomic_add_fetch(&pt.opens, 1, __ATOMIC_RELAXED);
	return 1;
}

/* The kernel released f: give back its share of the inode's mode. */
void
passthrough_release(struct wsfile *f)
{
	struct inode	*in = f->inode;
	uint32_t	 id = 0;
	int		 r;

	if (f->pt == PT_NONE)
		return;
	pthread_mutex_lock(&pt.lock);
	if (f->pt == PT_CACHED)
		in->pt_cached--;
	else if (--in->pt_opens == 0) {
		id = (uint32_t)in->pt_id;
		in->pt_id = 0;
		pt.bound--;
		/* Under the lock: a new open must not find the old id gone. */
		if ((r = passthrough_ioctl(PT_IOC_BACKING_CLOSE, &id)) < 0)
			log_warn("FUSE_DEV_IOC_BACKING_CLOSE %u: %s", id,
			    strerror(-r));
	}
	f->pt = PT_NONE;
	pthread_mutex_unlock(&pt.lock);
}

/*
 * Called by loop.c for every reply this thread writes: if it is the
 * reply to the OPEN or CREATE that passthrough_open bound, mark it as
 * passing through to the backing id. libfuse sends a reply as a header
 * and one body; the body of an OPEN is a fuse_open_out, that of a CREATE
 * a fuse_entry_out and a fuse_open_out, and fh names the handle.
 */
void
passthrough_reply(struct iovec *iov, int count)
{
	const struct fuse_out_header	*out;
	struct pt_open_out		*o;
	size_t				 len;

	if (pt_next.fh == 0 || count != 2 ||
	    iov[0].iov_len != sizeof *out)
		return;
	out = iov[0].iov_base;
	len = iov[1].iov_len;
	if (out->error != 0)
		return;
	if (len == sizeof *o)
		o = iov[1].iov_base;
	else if (len == sizeof(struct fuse_entry_out) + sizeof *o)
		o = (struct pt_open_out *)((char *)iov[1].iov_base +
		    sizeof(struct fuse_entry_out));
	else
		return;
	if (o->fh != pt_next.fh)
		return;
	o->open_flags |= FOPEN_PASSTHROUGH;
	o->backing_id = pt_next.id;
	pt_next.fh = 0;
}

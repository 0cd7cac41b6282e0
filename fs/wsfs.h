/*
 * wsfs private header. The daemon serves a directory of workspaces through
 * the FUSE lowlevel API; every backing operation is relative to an fd of a
 * directory inside the workspace and never follows a symlink.
 */
#ifndef WSFS_H
#define WSFS_H

#include <sys/types.h>
#include <sys/queue.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "conf.h"
#include "log.h"

/*
 * One inode of the backing store as the kernel knows it. The FUSE node id
 * is the pointer. Inodes are keyed by (dev, ino, workspace) so that an inode
 * reached from two workspaces is two FUSE inodes, each confined to its own
 * workspace; a symlink is also keyed by the directory it was found in, since
 * what readlink returns depends on the link's depth.
 */
struct inode {
	dev_t			 dev;		/* const */
	ino_t			 ino;		/* const */
	mode_t			 type;		/* const: S_IFMT bits */
	uint64_t		 ws;		/* const: 0 = mount root level */
	struct inode		*ws_root;	/* const; NULL at mount root level */
	/*
	 * Where the kernel sees the inode: the directory it was last looked
	 * up in or renamed into through the mount; holds a ref. Symlinks and
	 * directories only (what readlink returns depends on it), NULL for
	 * workspace roots. For symlinks it is also part of the key.
	 */
	struct inode		*parent;	/* table lock */
	/*
	 * Files and special files: the directory a name of it was last given
	 * to the kernel in (looked up, listed, made or renamed into); holds a
	 * ref. Directories and symlinks have parent instead. Its lock requests
	 * name that directory and the ones above it (glock.c).
	 */
	struct inode		*dir_ref;	/* table lock */
	/*
	 * NULL if the fs has none. Const once set; lazy handles (inode.c)
	 * are set under the table lock when the fd is evicted, and read
	 * without it only atomically.
	 */
	struct file_handle	*fh;
	uint64_t		 generation;	/* const: unique per inode */
	uint64_t		 birth;		/* const: birth time, ns; 0 unknown */

	/* All below: guarded by the table lock. */
	int			 fd;		/* O_PATH fd, -1 when evicted */
	unsigned int		 fd_users;	/* pins: fd not evicted while > 0 */
	uint64_t		 nlookup;	/* kernel references */
	uint64_t		 refs;		/* references held by other inodes */
	unsigned int		 opens;		/* open file and dir handles */
	int			 pinned;	/* never evicted (roots) */
	TAILQ_ENTRY(inode)	 lru;		/* fds that may be evicted */
	int			 in_lru;
	int			 detached;	/* not in the table's tree */
	/*
	 * Directories and symlinks: the names the kernel was given for this
	 * inode (struct kname, in inode.c), so that a rename through the
	 * mount moves the very inode the kernel moved. A symlink whose names
	 * end up in two directories is adrift: its depth is not one number.
	 */
	LIST_HEAD(, kname)	 knames;
	int			 adrift;
	/*
	 * Set (atomically, never cleared) once this node asked the lock
	 * service for a POSIX or flock lock on the inode: a close before that
	 * has no lock to give back.
	 */
	int			 plocked;
	/*
	 * The kernel asks for security.capability before every write. Without
	 * a lock service, xattr_seq + 1 in no_cap_at means the backing store
	 * answered ENODATA, or wsfs made the file, and nothing changed an
	 * xattr through this inode since (ops.c; atomic, no lock). A setxattr
	 * or removexattr bumps xattr_seq before and after its change.
	 */
	unsigned int		 xattr_seq;
	unsigned int		 no_cap_at;
	/*
	 * Regular files (passthrough.c, its lock): the backing id the kernel
	 * passes reads and writes through while pt_opens > 0, and the opens
	 * served through wsfs's page cache instead; never both at once.
	 */
	int			 pt_id;
	unsigned int		 pt_opens;
	unsigned int		 pt_cached;
	/* Workspace roots: the name at the top of SOURCE (const, wsctl ids). */
	char			*name;
};

/*
 * Every open file and directory handle is on one list (handle.c), so
 * that handles the kernel never released (unmounted by a signal) are
 * freed at exit.
 */
struct wshandle {
	LIST_ENTRY(wshandle)	 entry;		/* handles_lock */
	int			 is_dir;
};

/*
 * An open file: what fi->fh points to, from open or create until its
 * release, which closes fd and gives back held (scratchd_release).
 */
struct wsfile {
	struct wshandle	 h;		/* must be first */
	int		 fd;		/* the handle's own; const */
	struct inode	*inode;		/* the kernel keeps it while open */
	const char	*held;		/* scratchd_hold's id, or NULL */
	int		 kill_priv;	/* writes clear setuid/setgid here */
	int		 direct;	/* writes bypass the page cache */
	enum { PT_NONE, PT_PASS, PT_CACHED } pt; /* passthrough.c's lock */
	uint64_t	 read;		/* bytes asked for through it (atomic) */
	int		 wrote;		/* a write came through it (atomic) */
	/*
	 * Lock owners that took fcntl locks through this open file: OFD
	 * locks go with its release, and the kernel tells us nothing else.
	 */
	pthread_mutex_t	 owners_lock;
	uint64_t	*owners;	/* owners_lock */
	size_t		 nowners;	/* owners_lock */
};

/* What the kernel may read ahead on a mount (INIT, and read_ahead_kb). */
#define WSFS_READAHEAD	(1024 * 1024)

struct wsfs {
	struct wsfs_conf	 conf;
	const char		*source;	/* for messages only */
	const char		*mountpoint;
	int			 source_fd;	/* O_PATH|O_DIRECTORY of SOURCE */
	int			 source_fd_rd;	/* O_RDONLY of SOURCE: handles */
	int			 proc_fd;	/* O_PATH of /proc/self/fd */
	struct inode		*root;
	struct fuse_session	*se;
	uid_t			 source_uid;
	/*
	 * SOURCE is a local filesystem (ext4, xfs, btrfs, tmpfs): close
	 * reports no errors, and an open fd keeps its inode's number from
	 * being reused. Not so for network filesystems.
	 */
	int			 source_local;
	/*
	 * The kernel leaves clearing setuid, setgid and file capabilities on
	 * write to wsfs (FUSE_HANDLE_KILLPRIV_V2, loop.c); set before the
	 * first write request. Atomic.
	 */
	int			 server_kills_priv;
	/*
	 * The kernel passes reads and writes of regular files through to
	 * the backing file (FUSE_PASSTHROUGH, loop.c, passthrough.c); set
	 * before the first open request. Atomic.
	 */
	int			 passthrough;
};

extern struct wsfs wsfs;

/*
 * Something waiting for an answer of the lock server: the done callback
 * of libwslock calls w->done from the lock thread.
 */
struct cluster_waiter {
	void	(*done)(struct cluster_waiter *w, int status, uint64_t token);
};
/*
 * Something waiting for the answer to a lock test (wslock_test): the
 * tested callback of libwslock calls t->tested from the lock thread.
 */
struct wslock_conflict;
struct cluster_tester {
	void	(*tested)(struct cluster_tester *t, int status,
		    const struct wslock_conflict *c);
};

/*
 * A user of the lock service (glock.c, plock.c) registers one of these
 * from the main thread before cluster_init; the struct is the caller's
 * and must outlive the mount, any member may be NULL. kind is the first
 * byte of the keys it makes with cluster_key: revoke and lost of those
 * keys go to it. opened is called from cluster_init, release_all from
 * cluster_shutdown, the others from the lock thread; tick returns how
 * many milliseconds may pass before its next call.
 */
struct cluster_user {
	char	 kind;
	void	(*opened)(void);
	void	(*revoke)(const void *key, size_t keylen);
	void	(*lost)(const void *key, size_t keylen);
	void	(*state_changed)(void);
	int	(*tick)(void);
	void	(*release_all)(void);
};

struct glock;

/* cluster.c */
void		 cluster_register(const struct cluster_user *u);
int		 cluster_init(void);
void		 cluster_start(void);
void		 cluster_shutdown(void);
int		 cluster_enabled(void);
int		 cluster_degraded(void);
const char	*cluster_state_name(void);
long long	 cluster_lease_left_ms(void);
struct wslock	*cluster_handle(void);
/* The lock link: connects, attempts, last error (wslock_conn_stats). */
struct wslock_conn_stats;
int		 cluster_conn_stats(struct wslock_conn_stats *st);
uint64_t	 cluster_now_ms(void);
size_t		 cluster_key(char kind, ino_t ino, char *buf, size_t len);
/* The same with the object's birth time (0: unknown), lockkey.h. */
size_t		 cluster_key_gen(char kind, ino_t ino, uint64_t gen, char *buf,
		     size_t len);
void		 cluster_defer(void (*fn)(void *), void *arg);
void		 cluster_defer_inval(void (*fn)(void *), void *arg);
/* Run fn(arg) in the operations thread: parked changes continue there. */
void		 cluster_defer_op(void (*fn)(void *), void *arg);
/* Milliseconds since the lock service went down or into jeopardy. */
uint64_t	 cluster_degraded_ms(void);
void		 cluster_wake(void);

/* control.c */
int		 control_init(void);
void		 control_start(void);
void		 control_stop(void);

/* glock.c */
/*
 * The cluster locks one operation needs, taken in one global order (inode
 * number). Lives in the caller's memory until glock_set_unlock, or until
 * its continuation ran with an error.
 */
#define GLOCK_MAX 4
/* Directories a lock request names above its object (WSLOCK_MAX_CHAIN). */
#define GLOCK_CHAIN 8
struct glock_dir {
	ino_t			 ino;
	uint64_t		 birth;
};
/*
 * An object as its lock names it: birth time, and where it was reached:
 * the directory, then the ones above it, nearest first (glock.c, top).
 */
struct glock_where {
	uint64_t		 birth;		/* 0: unknown */
	int			 nanc;		/* 0: unknown */
	struct glock_dir	 anc[GLOCK_CHAIN];
};
struct glock_set {
	int			 n;		/* inodes in the set */
	ino_t			 ino[GLOCK_MAX];	/* sorted, unique */
	struct inode		*in[GLOCK_MAX];	/* may be NULL */
	int			 mode[GLOCK_MAX];
	struct glock_where	 where[GLOCK_MAX];
	int			 own[GLOCK_MAX];	/* no cover: its own lock */
	/* Below: glock.c's, under its lock. */
	int			 nheld;		/* g[0..nheld) are held */
	struct glock		*g[GLOCK_MAX];
	struct glock		*on;		/* parked on this one */
	uint64_t		 deadline;
	void			(*cont)(void *, int);
	void			*arg;
	int			 err;
	int			 timed_out;
	TAILQ_ENTRY(glock_set)	 entry;
};
void		 glock_set_init(struct glock_set *s);
/* Add an inode (ino 0 is skipped; in may be NULL where unknown). */
void		 glock_set_add(struct glock_set *s, ino_t ino,
		     struct inode *in, int exclusive);
/*
 * Add, exclusive, the object a name in dir leads to (only its number is
 * known). own: the change gives it a name in another directory, so the
 * cover of a directory lock is not enough (glock.c).
 */
void		 glock_set_add_named(struct glock_set *s, ino_t ino,
		     uint64_t birth, struct inode *dir, int own);
/* Add in, exclusive, with its own lock (a link gives it another name). */
void		 glock_set_add_own(struct glock_set *s, struct inode *in);
/*
 * Take every lock of s without waiting in the calling thread: 0 when all
 * are held now; -EINPROGRESS when cont(arg, 0) will be called later from
 * the operations thread with all held, or cont(arg, -EIO) after
 * lock_timeout with none; -EIO at once when the lock service has been
 * away for longer than lock_timeout; -errno. With no lock service (or an
 * empty set) always 0.
 */
int		 glock_set_lock(struct glock_set *s,
		     void (*cont)(void *arg, int err), void *arg);
/* Give the set's locks back to the cache; wrote: the objects changed. */
void		 glock_set_unlock(struct glock_set *s, int wrote);
void		 glock_set_log_timeout(struct glock_set *s);
/*
 * One lock without parking (the write path): 0 with *out (NULL without a
 * lock service), -EWOULDBLOCK with a request on its way: then park with
 * glock_set_lock. Pair with glock_put.
 */
int		 glock_try(struct inode *in, int exclusive, struct glock **out);
void		 glock_put(struct glock *g, int wrote);
/*
 * What the kernel may cache, in seconds: attributes of in, names of the
 * directory parent. Without a lock service the configured timeouts; with
 * one, 0 unless the node holds the object's lock (then asks for it
 * quietly), else at most the lease left.
 */
double		 glock_attr_timeout(struct inode *in);
double		 glock_entry_timeout(struct inode *parent);
/* Whether an open of in may keep the kernel's pages (same hold). */
int		 glock_open_keep_cache(struct inode *in);
void		 glock_pages_stale(struct inode *in);
/* A rename from one directory to another has just succeeded. */
void		 glock_renamed(struct inode *from, struct inode *to,
		     int exchange);
/*
 * A new object of this node, made in dir under the change's exclusive
 * lock of dir: covered by that lock where it may be (glock.c), else its
 * own lock is asked for ahead of its first use.
 */
void		 glock_made(struct inode *in, struct inode *dir);
/*
 * Before a granted application lock is answered (inval thread): drop the
 * pages of every regular file given back since the last grant, and of
 * every open regular file the node holds no lock on, so that a mapping
 * sees what was written under the lock the application now holds.
 */
void		 glock_drop_stale_pages(void);
/* The object's last name was removed: its lock goes back after use. */
void		 glock_gone(ino_t ino, uint64_t birth);
/* Register with cluster.c and inode.c: before cluster_init. */
void		 glock_init(void);
/* Locks known, idle (LRU) and objects covered by a directory's lock. */
void		 glock_stats(unsigned long *count, unsigned long *idle,
		     unsigned long *covered);

/* perm.c */
/*
 * May the caller change dir's entries (name, making type, or 0), or with
 * name NULL dir itself? 0, or -EPERM at the top level of the mount for
 * everyone but admin_uid.
 */
int		 perm_may_change(fuse_req_t req, struct inode *dir,
		     const char *name, mode_t type);
/*
 * Open name in pfd, found there by an O_CREAT open that did not make it,
 * if the caller may open it with flags; a regular file only. Returns the
 * open fd or -errno (-EACCES, -EISDIR, -ELOOP, ...).
 */
int		 perm_open_existing(fuse_req_t req, int pfd, const char *name,
		     int flags);
/*
 * Clear setuid and setgid before the caller writes to or truncates fd, as
 * the kernel does on a local filesystem. perm_write_kills_priv tells at
 * open whether the writes of an open file need it from the daemon: all of
 * them when the kernel leaves the clearing to wsfs (server: direct I/O,
 * FUSE_HANDLE_KILLPRIV_V2), else a setgid file without group execute,
 * whose bit the kernel's own clearing misses. known is fd's stat if the
 * caller has one as fresh as an fstat now, else NULL.
 */
void		 perm_write_kill_priv(fuse_req_t req, int fd);
int		 perm_write_kills_priv(int fd, const struct stat *known,
		     int flags, int server);
/*
 * Give a file just made as fd in pfd (the daemon's) to the caller, with
 * mode, as a local filesystem would. 0 or -errno.
 */
int		 perm_set_owner(fuse_req_t req, int pfd, int fd, mode_t mode);
/*
 * Make name in parent (open as pfd) for the caller: a directory, FIFO,
 * socket, regular file (mode) or symlink to link, owned by the caller with
 * its final mode before it appears at name; then enter it into the table
 * and fill e. 0 or -errno (-EEXIST if name is taken).
 */
int		 perm_make(fuse_req_t req, struct inode *parent, int pfd,
		     const char *name, mode_t mode, const char *link,
		     struct fuse_entry_param *e);

/* plock.c */
void		 plock_setlk(fuse_req_t req, struct inode *in,
		     struct fuse_file_info *fi, struct flock *lk, int sleep);
void		 plock_getlk(fuse_req_t req, struct inode *in,
		     struct fuse_file_info *fi, struct flock *lk);
void		 plock_flock(fuse_req_t req, struct inode *in,
		     struct fuse_file_info *fi, int op);
void		 plock_release_owner(struct inode *in, uint64_t owner,
		     int flock);
/* Register with cluster.c: before cluster_init. */
void		 plock_init(void);

/* handle.c */
/* List h (the caller's, until handle_del or handle_pop gives it back). */
void		 handle_add(struct wshandle *h, int is_dir);
void		 handle_del(struct wshandle *h);
/* Take a handle off the list, NULL when none is left: for the exit. */
struct wshandle	*handle_pop(void);
/*
 * Call fn for every open regular file, with its inode and backing fd
 * (the list's lock held: fn must not list or unlist, nor wait).
 */
void		 handle_files_foreach(void (*fn)(struct inode *, int,
		     void *), void *arg);
/* Note that owner took an fcntl lock through the open file fi. */
void		 handle_lock_owner(struct fuse_file_info *fi, uint64_t owner);
/* inode.c */
void		 inode_table_init(int source_fd, int max_fds);
void		 inode_handles(int lazy, int by_name);
/*
 * Call fn(in) as each inode is freed, with the table locked: its node id
 * must not be used again (glock.c registers it). Before the loop starts.
 */
void		 inode_on_free(void (*fn)(struct inode *in));
/*
 * Inodes live in the table until the kernel forgets its last reference
 * (inode_forget) and no other inode refers to them: a pointer from
 * inode_from_ino is good for the request that carries the node id, one
 * kept longer needs a reference of its own (an open handle, opens).
 */
struct inode	*inode_root(void);
struct inode	*inode_from_ino(fuse_ino_t ino);
/*
 * Look name up in parent: 0 with e filled and one kernel reference taken
 * (the reply hands it to the kernel), or -errno.
 */
int		 inode_lookup(struct inode *parent, const char *name,
		     struct fuse_entry_param *e);
/*
 * The same for a name a listing gave with its inode number and type (a
 * readdirplus entry).
 */
int		 inode_lookup_listed(struct inode *parent, const char *name,
		     ino_t ino, unsigned char dtype, struct fuse_entry_param *e);
/*
 * Enter the object open as fd (O_PATH) under name in parent, as
 * inode_lookup does. fd is the table's from the call on, on success and
 * on failure: the caller never closes it.
 */
int		 inode_adopt(struct inode *parent, const char *name, int fd,
		     struct fuse_entry_param *e);
/*
 * The same for an object just made and open as fd (any access mode):
 * fd stays the caller's, to use and close; the table keeps an O_PATH
 * fd of its own.
 */
int		 inode_from_new_fd(struct inode *parent, const char *name,
		     int fd, struct fuse_entry_param *e);
void		 inode_forget(struct inode *in, uint64_t n);
/*
 * The inode's O_PATH fd, pinned (not evicted, not closed) until the
 * matching inode_fd_put; the caller must not close it. -errno if it
 * cannot be reopened.
 */
int		 inode_fd_get(struct inode *in);
void		 inode_fd_put(struct inode *in);
/* A new fd of the inode itself, opened with flags: the caller's to close. */
int		 inode_open(struct inode *in, int flags);
int		 inode_stat(struct inode *in, struct stat *st);
/*
 * The directories above an object as the kernel sees them, nearest
 * first: the one in was last named in (or dir itself, with in NULL),
 * then its parents, up to the workspace root, at most max. Returns how
 * many were stored in out.
 */
int		 inode_ancestors(struct inode *in, struct inode *dir,
		     struct glock_dir *out, int max);
/* fstatat that also gives the birth time in ns (0: unknown); -errno. */
int		 inode_statx(int dirfd, const char *name, int flags,
		     struct stat *st, uint64_t *birth);
int		 inode_kdepth(struct inode *in, unsigned int *depth);
void		 inode_renamed(struct inode *from, const char *name,
		     struct inode *to, const char *newname, int exchange);
void		 inode_unlinked(struct inode *parent, const char *name);
void		 inode_opened(struct inode *in, int delta);
void		 inode_procpath(int fd, char *buf, size_t len);
int		 inode_proc_open(int fd, int flags);
/* A new fd of name below dirfd (see inode.c): the caller's to close. */
int		 inode_openat_beneath(int dirfd, const char *name, int flags,
		     mode_t mode);
void		 inode_stats(unsigned long *inodes, unsigned long *fds);
void		 inode_closes_wait(void);

/* passthrough.c */
struct fuse_init_out;
void		 passthrough_init(struct fuse_init_out *init, size_t len,
		    uint32_t kernel_flags2);
int		 passthrough_enabled(void);
int		 passthrough_failed(void);
void		 passthrough_counts(uint64_t *opens, uint64_t *cached,
		    uint64_t *bound);
int		 passthrough_open(struct wsfile *f, const struct stat *st);
void		 passthrough_release(struct wsfile *f);
void		 passthrough_reply(struct iovec *iov, int count);

/* priv.c */
void		 priv_drop(void);
void		 priv_unmount_begin(void);
int		 priv_remove_capability(const char *path);

/* scratchd.c */
int		 scratchd_init(void);
void		 scratchd_start(void);
void		 scratchd_stop(void);
void		 scratchd_note(struct inode *in);
/*
 * Mark in's scratch workspace in use while a handle is open in it.
 * Returns its id, or NULL (not a scratch mount, or the mount root): the
 * root inode's own name, valid while the caller keeps in (an open handle
 * does), and not to be freed. Pass it to scratchd_release exactly once,
 * when the handle is released; scratchd_release(NULL) does nothing.
 */
const char	*scratchd_hold(struct inode *in);
void		 scratchd_release(const char *id);
int		 scratchd_status(time_t *last_run, unsigned long long *removed);

/* stats.c */
enum stats_op {
	OP_LOOKUP, OP_FORGET, OP_GETATTR, OP_SETATTR, OP_READLINK, OP_MKNOD,
	OP_MKDIR, OP_SYMLINK, OP_UNLINK, OP_RMDIR, OP_RENAME, OP_LINK, OP_OPEN,
	OP_CREATE, OP_READ, OP_WRITE, OP_FLUSH, OP_RELEASE, OP_FSYNC,
	OP_OPENDIR, OP_READDIR, OP_RELEASEDIR, OP_FSYNCDIR, OP_STATFS,
	OP_XATTR, OP_FALLOCATE, OP_LSEEK, OP_COPY, OP_LOCK, OP_NOPS
};
enum stats_counter {
	SC_LOCK_WAITS,		/* operations that waited for a cluster lock */
	SC_LOCK_TIMEOUTS,	/* ... and got none within lock_timeout */
	SC_REVOKES,		/* another node asked for a lock we held */
	SC_RELEASES,		/* locks given back */
	SC_CONFINE_REFUSED,	/* confinement refusals (mount points, devices) */
	SC_CACHE_INVALS,	/* kernel cache drops at a lock's release */
	SC_LOCKS_COVERED,	/* new objects covered by a directory's lock */
	SC_RELEASE_SYNCS,	/* written objects fsynced before a release */
	SC_NCOUNTERS
};
/*
 * What an operation carries from its handler to its answer: which one it
 * is and when its handler started. Every handler runs between
 * stats_begin and stats_end in its FUSE worker. One answered later from
 * another thread (a change parked for its cluster locks, an I/O on the
 * ring, a lock request at the server) keeps a stats_save copy beside its
 * fuse_req_t, taken before another thread can answer it, and calls
 * stats_detach once it is handed on; the answering thread calls
 * stats_resume with the copy, answers, then stats_end. So errors and
 * latency, lock waits and I/O included, are counted once, by the thread
 * that answers. Only a thread that serves no operation of its own
 * resumes one (the operations, io_uring, lock and inval threads), or a
 * worker its own (an answer given at once): resumes do not nest.
 */
struct stats_timing {
	int		 op;		/* enum stats_op; -1: none */
	uint64_t	 t0;		/* CLOCK_MONOTONIC ns at the handler's start */
};
void		 stats_begin(int op);
void		 stats_save(struct stats_timing *o);
void		 stats_detach(void);
void		 stats_resume(const struct stats_timing *o);
void		 stats_end(void);
/*
 * The one way to answer with an error: fuse_reply_err(req, err), err 0 or
 * a positive errno, a non-zero one counted as an error of the operation
 * the calling thread serves (begun or resumed).
 */
int		 stats_reply_err(fuse_req_t req, int err);
void		 stats_count(int counter, unsigned long long n);
unsigned long long stats_counter(int counter);
const char	*stats_op_name(int op);
void		 stats_foreach(void (*fn)(void *, const char *,
		     unsigned long long count, unsigned long long errors,
		     unsigned long long p50_us, unsigned long long p99_us),
		     void *arg);

/* symlink.c */
/*
 * Rewrite a stored symlink target for a link whose directory is depth
 * levels below the workspace root. Writes a NUL-terminated target into out
 * that, walked from the link's directory, never climbs above the root.
 * Returns 0 or -ENAMETOOLONG.
 */
int		 symlink_rewrite(const char *target, unsigned int depth,
		     char *out, size_t outlen);

/* uring.c */
/* Called once when an I/O is over (res: bytes or -errno), before the reply. */
typedef void	(*uring_done_fn)(void *arg, int res);
/* Start io_uring; on failure log once and fall back to plain syscalls. */
void		 uring_init(int enable);
void		 uring_shutdown(void);
int		 uring_active(void);
/* Each of these replies to req exactly once, possibly from another thread. */
void		 uring_read(fuse_req_t req, int fd, size_t size, off_t off,
		     uring_done_fn fn, void *fn_arg);
/* A buffered write by pwrite in the calling thread (no copy, no ring). */
void		 uring_write_now(fuse_req_t req, int fd, const char *buf,
		     size_t size, off_t off, uring_done_fn fn, void *fn_arg);
/* The same through the ring (buf is copied), answered from elsewhere. */
void		 uring_write(fuse_req_t req, int fd, const char *buf,
		     size_t size, off_t off, uring_done_fn fn, void *fn_arg);
void		 uring_fsync(fuse_req_t req, int fd, int datasync);
/*
 * FUSE over io_uring: uring_fuse_init patches the INIT reply (loop.c),
 * uring_fuse_start starts the ring threads once the kernel has it;
 * uring_fuse_answer takes an answer for a request from a ring (1) or
 * leaves it to /dev/fuse (0).
 */
void		 uring_fuse_init(struct fuse_init_out *init, size_t len,
		     uint32_t kernel_flags2);
void		 uring_fuse_start(int devfd, unsigned int max_threads);
int		 uring_fuse_answer(const struct iovec *iov, int count);
int		 uring_fuse_channel(char *why, size_t len,
		     unsigned int *queues, unsigned int *threads,
		     uint64_t *taken);
void		 uring_fuse_stop(void);

/* loop.c */
/*
 * Serve se's requests with up to max_threads threads until it is
 * unmounted or fuse_session_exit is called: 0, or -errno when reading
 * /dev/fuse failed.
 */
int		 loop_run(struct fuse_session *se, unsigned int max_threads);
/* Have loop_run look again at whether its session has exited. */
void		 loop_wake(void);	/* async-signal-safe */

/* ops.c */
void		 ops_handles_free_all(void);
extern const struct fuse_lowlevel_ops wsfs_ops;

#endif

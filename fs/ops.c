/*
 * The FUSE lowlevel operations. Each handler resolves its inodes, does the
 * backing work relative to pinned directory fds with single names, and ends
 * every path with exactly one fuse_reply_*. Reads, writes and fsync are
 * handed to uring.c, which replies from the completion.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wsfs.h"

/* Count every error answer of this file for the operation being served. */
#define fuse_reply_err(req, err) stats_reply_err(req, err)

struct wsdir {
	struct wshandle	 h;		/* must be first */
	DIR		*dp;
	off_t		 offset;
	struct dirent	*entry;
	const char	*held;		/* scratch workspace held open */
	int		 many;		/* -1 not known yet; ops_dir_many */
};

/* What an open file or directory holds, off the handle list already. */
static void
ops_file_free(struct wsfile *f)
{
	close(f->fd);
	scratchd_release(f->held);
	free(f->owners);
	pthread_mutex_destroy(&f->owners_lock);
	free(f);
}

static void
ops_dir_free(struct wsdir *d)
{
	closedir(d->dp);
	scratchd_release(d->held);
	free(d);
}

/* Every operation starts here: it is also the workspace's last use. */
static struct inode *
ops_inode(fuse_ino_t ino)
{
	struct inode	*in = inode_from_ino(ino);

	scratchd_note(in);
	return in;
}

static struct wsfile *
ops_file(struct fuse_file_info *fi)
{
	return (struct wsfile *)(uintptr_t)fi->fh;
}

/*
 * Before a change of f's data by req (write, fallocate, copy_file_range):
 * clear set-id bits where the kernel leaves that to wsfs (f->kill_priv).
 */
static void
ops_file_changing(fuse_req_t req, struct wsfile *f)
{
	if (f->kill_priv)
		perm_write_kill_priv(req, f->fd);
}

static struct wsdir *
ops_dir(struct fuse_file_info *fi)
{
	return (struct wsdir *)(uintptr_t)fi->fh;
}

/* Rename and link stay inside one workspace. */
static int
ops_same_workspace(struct inode *a, struct inode *b)
{
	return a->ws == b->ws;
}

/*
 * security.capability, which the kernel asks for before a write to learn
 * whether the write must remove it (before every write, unless it could
 * leave that to wsfs: FUSE_HANDLE_KILLPRIV_V2, loop.c), is answered from
 * memory while the inode is known to have none: learned from the backing
 * store's ENODATA, or because wsfs made the file, and forgotten by any
 * setxattr or removexattr through this inode. Also with a lock service:
 * no node can set a capability through wsfs (ops_setxattr, priv.c), other
 * nodes can only remove one. What a writer that bypasses wsfs sets is missed
 * until the kernel forgets the inode; README (Performance) says why that
 * cannot keep a capability across a write through wsfs.
 */
static int
ops_xattr_is_cap(const char *name)
{
	return strcmp(name, "security.capability") == 0;
}

static int
ops_no_cap(struct inode *in)
{
	return __atomic_load_n(&in->no_cap_at, __ATOMIC_ACQUIRE) ==
	    __atomic_load_n(&in->xattr_seq, __ATOMIC_ACQUIRE) + 1;
}

/* Record "no capability" as of seq (read before asking the store). */
static void
ops_no_cap_set(struct inode *in, unsigned int seq)
{
	if (seq & 1)			/* a change was under way */
		return;
	__atomic_store_n(&in->no_cap_at, seq + 1, __ATOMIC_RELEASE);
}

static void
ops_xattr_changing(struct inode *in)
{
	__atomic_add_fetch(&in->xattr_seq, 1, __ATOMIC_ACQ_REL);
}

/*
 * The inode number behind a name in a directory, 0 if there is none, and
 * its birth time (0 unknown): the two name the object's lock.
 */
static ino_t
ops_name_ino(int dirfd, const char *name, uint64_t *birth)
{
	struct stat	st;

	*birth = 0;
	if (!cluster_enabled() || inode_statx(dirfd, name, AT_SYMLINK_NOFOLLOW,
	    &st, birth) < 0)
		return 0;
	return st.st_ino;
}

/* Does the name still lead to the object locked as (ino, birth)? */
static int
ops_name_is(int dirfd, const char *name, ino_t ino, uint64_t birth)
{
	uint64_t	b;

	return ops_name_ino(dirfd, name, &b) == ino && b == birth;
}

/* Pin the fds of two inodes (0), or of none (-errno). */
static int
ops_fd_get2(struct inode *a, struct inode *b, int *fa, int *fb)
{
	if ((*fa = inode_fd_get(a)) < 0)
		return *fa;
	if ((*fb = inode_fd_get(b)) < 0) {
		inode_fd_put(a);
		return *fb;
	}
	return 0;
}

static void
ops_io_written(void *arg, int res)
{
	glock_put(arg, res > 0);
}

/*
 * Answer a lookup or a creation in parent: what the kernel may cache of
 * the name and of the inode depends on the cluster locks held.
 */
static void
ops_reply_entry(fuse_req_t req, struct inode *parent, int r,
    struct fuse_entry_param *e)
{
	if (r < 0)
		fuse_reply_err(req, -r);
	else {
		if (cluster_enabled()) {
			e->entry_timeout = glock_entry_timeout(parent);
			e->attr_timeout = glock_attr_timeout(ops_inode(e->ino));
		}
		fuse_reply_entry(req, e);
	}
}

/*
 * A lookup's answer: a missing name is answered as a negative entry while
 * the node holds the directory's lock.
 */
static void
ops_reply_lookup(fuse_req_t req, struct inode *parent, int r,
    struct fuse_entry_param *e)
{
	double	t;

	if (r == -ENOENT && cluster_enabled() &&
	    (t = glock_entry_timeout(parent)) > 0) {
		memset(e, 0, sizeof *e);
		e->entry_timeout = t;
		fuse_reply_entry(req, e);
	} else
		ops_reply_entry(req, parent, r, e);
}

/*
 * A change, with copies of what the kernel sent, so that it can wait for
 * its cluster locks without holding a FUSE worker and go on from the
 * operations thread. prepare names the locks (it may look at the backing
 * store); run does the change with them held and answers the kernel, or
 * returns -EAGAIN without answering when the objects it locked are no
 * longer the ones the names lead to (another node renamed them), and the
 * change starts over, at most WS_CHANGE_TRIES times.
 */
#define WS_CHANGE_TRIES	4

struct ops_change {
	fuse_req_t		 req;
	struct stats_timing	 st;		/* answered from its copy */
	int			(*prepare)(struct ops_change *);
	int			(*run)(struct ops_change *);
	struct glock_set	 locks;
	int			 tries;
	struct inode		*in, *in2;
	const char		*name, *name2;	/* in buf; NULL if none */
	const char		*data;		/* in buf */
	size_t			 size;
	mode_t			 mode;
	int			 flags, to_set;
	struct stat		 attr;
	struct fuse_file_info	 fi;
	int			 has_fi;
	uint64_t		 fh2;
	off_t			 off, off2, len;
	ino_t			 victim, victim2;
	uint64_t		 vbirth, vbirth2;	/* their birth times */
	char			 buf[];
};

static struct ops_change *
ops_change_new(fuse_req_t req, int (*prepare)(struct ops_change *),
    int (*run)(struct ops_change *), const char *name, const char *name2,
    const void *data, size_t size)
{
	struct ops_change	*c;
	size_t			 l1 = name ? strlen(name) + 1 : 0;
	size_t			 l2 = name2 ? strlen(name2) + 1 : 0;
	char			*p;

	if ((c = calloc(1, sizeof *c + l1 + l2 + size)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return NULL;
	}
	c->req = req;
	c->prepare = prepare;
	c->run = run;
	p = c->buf;
	if (name != NULL) {
		c->name = memcpy(p, name, l1);
		p += l1;
	}
	if (name2 != NULL) {
		c->name2 = memcpy(p, name2, l2);
		p += l2;
	}
	if (size > 0)
		memcpy(p, data, size);
	c->data = p;
	c->size = size;
	return c;
}

static void	ops_change_go(struct ops_change *);

/*
 * A change of in (or of the entry name in it) by the caller, once
 * perm_may_change(req, in, name, mode) allows it: NULL when the request
 * was answered (refused, or no memory).
 */
static struct ops_change *
ops_change_checked(fuse_req_t req, struct inode *in, const char *name,
    mode_t mode, int (*prepare)(struct ops_change *),
    int (*run)(struct ops_change *), const char *name2)
{
	struct ops_change	*c;
	int			 r;

	if ((r = perm_may_change(req, in, name, mode)) < 0) {
		fuse_reply_err(req, -r);
		return NULL;
	}
	if ((c = ops_change_new(req, prepare, run, name, name2, NULL, 0)) ==
	    NULL)
		return NULL;
	c->in = in;
	return c;
}

/* Run a change whose locks are held; start over if it asks to. */
static void
ops_change_run(struct ops_change *c)
{
	int	r;

	r = c->run(c);
	glock_set_unlock(&c->locks, 1);
	if (r == -EAGAIN) {
		c->tries++;
		ops_change_go(c);
		return;
	}
	free(c);
}

/* Operations thread: the parked change has its locks, or none in time. */
static void
ops_change_resume(void *arg, int err)
{
	struct ops_change	*c = arg;

	stats_resume(&c->st);
	if (err < 0) {
		glock_set_log_timeout(&c->locks);
		fuse_reply_err(c->req, -err);
		free(c);
	} else
		ops_change_run(c);
	stats_end();
}

static void
ops_change_go(struct ops_change *c)
{
	int	r;

	glock_set_init(&c->locks);
	stats_save(&c->st);
	if ((r = c->prepare(c)) == 0)
		r = glock_set_lock(&c->locks, ops_change_resume, c);
	if (r == -EINPROGRESS) {
		stats_detach();
		return;
	}
	if (r < 0) {
		fuse_reply_err(c->req, -r);
		free(c);
		return;
	}
	ops_change_run(c);
}

/* Whether run may still ask to start over. */
static int
ops_change_may_retry(struct ops_change *c)
{
	return cluster_enabled() && c->tries < WS_CHANGE_TRIES - 1;
}

/* The lock of the change's one inode, exclusive. */
static int
ops_prepare_in(struct ops_change *c)
{
	glock_set_add(&c->locks, c->in->ino, c->in, 1);
	return 0;
}

static void
ops_init(void *userdata, struct fuse_conn_info *conn)
{
	/*
	 * Let the kernel clear setuid/setgid on write, truncate and chown, as
	 * it does for a local filesystem; with atomic O_TRUNC it would skip
	 * that for open(O_TRUNC).
	 */
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
#ifdef FUSE_CAP_HANDLE_KILLPRIV_V2
	conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV_V2;
#endif
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	/* What readlink returns depends on where the link is: no caching. */
	conn->want &= ~FUSE_CAP_CACHE_SYMLINKS;
	conn->want &= ~FUSE_CAP_EXPORT_SUPPORT;
	/*
	 * Under cluster locks no name from a listing may be cached (the
	 * kernel stamps readdirplus names with the epoch when it reads the
	 * reply, which may follow our release), and a readdirplus entry with
	 * a zero timeout also expires the name the kernel had cached from a
	 * lookup under the lock: every listing would undo the name cache.
	 */
	if (cluster_enabled())
		conn->want &= ~FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	conn->max_write = 1024 * 1024;
	conn->max_readahead = WSFS_READAHEAD;
}

static void
ops_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param	e;

	struct inode		*p = ops_inode(parent);

	ops_reply_lookup(req, p, inode_lookup(p, name, &e), &e);
}

static void
ops_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	/* The kernel dropping an inode is no use of its workspace. */
	inode_forget(inode_from_ino(ino), nlookup);
	fuse_reply_none(req);
}

static void
ops_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	size_t	i;

	for (i = 0; i < count; i++)
		inode_forget(inode_from_ino(f[i].ino), f[i].nlookup);
	fuse_reply_none(req);
}

static void
ops_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat	st;
	int		r = 0;

	if (fi != NULL && fi->fh != 0 && ops_inode(ino)->type == S_IFREG) {
		if (fstat(ops_file(fi)->fd, &st) == -1)
			r = -errno;
	} else
		r = inode_stat(ops_inode(ino), &st);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, glock_attr_timeout(ops_inode(ino)));
}

static int
ops_truncate(fuse_req_t req, struct inode *in, struct fuse_file_info *fi,
    off_t size)
{
	int	fd, r = 0;

	if (in->type != S_IFREG)
		return in->type == S_IFDIR ? -EISDIR : -EINVAL;
	if (fi != NULL && fi->fh != 0) {
		perm_write_kill_priv(req, ops_file(fi)->fd);
		return ftruncate(ops_file(fi)->fd, size) == -1 ? -errno : 0;
	}
	if ((fd = inode_open(in, O_WRONLY | O_NONBLOCK)) < 0)
		return fd;
	perm_write_kill_priv(req, fd);
	if (ftruncate(fd, size) == -1)
		r = -errno;
	close(fd);
	return r;
}

static int
ops_utimens(int fd, struct fuse_file_info *fi, struct inode *in,
    const struct stat *attr, int to_set)
{
	struct timespec	ts[2];
	char		path[64];

	ts[0].tv_sec = ts[1].tv_sec = 0;
	ts[0].tv_nsec = ts[1].tv_nsec = UTIME_OMIT;
	if (to_set & FUSE_SET_ATTR_ATIME_NOW)
		ts[0].tv_nsec = UTIME_NOW;
	else if (to_set & FUSE_SET_ATTR_ATIME)
		ts[0] = attr->st_atim;
	if (to_set & FUSE_SET_ATTR_MTIME_NOW)
		ts[1].tv_nsec = UTIME_NOW;
	else if (to_set & FUSE_SET_ATTR_MTIME)
		ts[1] = attr->st_mtim;
	if (fi != NULL && fi->fh != 0 && in->type == S_IFREG)
		return futimens(ops_file(fi)->fd, ts) == -1 ? -errno : 0;
	if (utimensat(fd, "", ts, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == 0)
		return 0;
	if (errno != EINVAL || in->type == S_IFLNK)
		return -errno;
	inode_procpath(fd, path, sizeof path);
	return utimensat(AT_FDCWD, path, ts, 0) == -1 ? -errno : 0;
}

static int
ops_setattr_run(struct ops_change *c)
{
	fuse_req_t	 req = c->req;
	struct inode	*in = c->in;
	struct fuse_file_info *fi = c->has_fi ? &c->fi : NULL;
	struct stat	*attr = &c->attr, st;
	int		 to_set = c->to_set;
	char		 path[64];
	uid_t		 uid;
	gid_t		 gid;
	int		 fd, r = 0;

	if ((fd = inode_fd_get(in)) < 0) {
		fuse_reply_err(req, -fd);
		return 0;
	}
	/* Owner first: chown clears setuid bits a following chmod may set. */
	if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid = (to_set & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid = (to_set & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
		if (fchownat(fd, "", uid, gid,
		    AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1) {
			r = -errno;
			goto out;
		}
	}
	if (to_set & FUSE_SET_ATTR_MODE) {
		if (in->type == S_IFLNK) {
			r = -EOPNOTSUPP;
			goto out;
		}
		if (fi != NULL && fi->fh != 0 && in->type == S_IFREG)
			r = fchmod(ops_file(fi)->fd, attr->st_mode & 07777);
		else {
			inode_procpath(fd, path, sizeof path);
			r = chmod(path, attr->st_mode & 07777);
		}
		if (r == -1) {
			r = -errno;
			goto out;
		}
	}
	if ((to_set & FUSE_SET_ATTR_SIZE) &&
	    (r = ops_truncate(req, in, fi, attr->st_size)) < 0)
		goto out;
	if ((to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME |
	    FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_MTIME_NOW)) &&
	    (r = ops_utimens(fd, fi, in, attr, to_set)) < 0)
		goto out;
	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
		r = -errno;
out:
	inode_fd_put(in);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, glock_attr_timeout(in));
	return 0;
}

static void
ops_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
    struct fuse_file_info *fi)
{
	struct ops_change	*c;

	if ((c = ops_change_checked(req, ops_inode(ino), NULL, 0,
	    ops_prepare_in, ops_setattr_run, NULL)) == NULL)
		return;
	c->attr = *attr;
	c->to_set = to_set;
	if (fi != NULL) {
		c->fi = *fi;
		c->has_fi = 1;
	}
	ops_change_go(c);
}

static void
ops_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct inode	*in = ops_inode(ino);
	char		 target[PATH_MAX], out[PATH_MAX];
	unsigned int	 depth;
	ssize_t		 n;
	int		 fd, r;

	if (in->type != S_IFLNK) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if ((fd = inode_fd_get(in)) < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	n = readlinkat(fd, "", target, sizeof target - 1);
	r = n == -1 ? -errno : 0;
	inode_fd_put(in);
	/*
	 * The kernel follows the target from where it sees the link, so the
	 * depth is the kernel's, not the backing store's, which another node
	 * may have changed under it.
	 */
	if (r == 0) {
		target[n] = '\0';
		r = inode_kdepth(in, &depth);
	}
	if (r == 0)
		r = symlink_rewrite(target, depth, out, sizeof out);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_readlink(req, out);
}

static int
ops_make_run(struct ops_change *c)
{
	fuse_req_t		 req = c->req;
	struct inode		*p = c->in;
	const char		*name = c->name, *link = c->name2;
	mode_t			 mode = c->mode;
	struct fuse_entry_param	 e;
	int			 pfd, r;

	if ((pfd = inode_fd_get(p)) < 0) {
		r = pfd;
		goto out;
	}
	r = perm_make(req, p, pfd, name, mode, link, &e);
	inode_fd_put(p);
	if (r == 0)
		glock_made(ops_inode(e.ino), p);
out:
	ops_reply_entry(req, p, r, &e);
	return 0;
}

static void
ops_make(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
    const char *link)
{
	struct ops_change	*c;

	if ((c = ops_change_checked(req, ops_inode(parent), name, mode,
	    ops_prepare_in, ops_make_run, link)) == NULL)
		return;
	c->mode = mode;
	ops_change_go(c);
}

static void
ops_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
    dev_t rdev)
{
	if (S_ISCHR(mode) || S_ISBLK(mode)) {
		stats_count(SC_CONFINE_REFUSED, 1);
		log_limited(LOG_NOTICE, "mknod-dev", "refused to create device "
		    "node '%s' (uid %u)", name, (unsigned)fuse_req_ctx(req)->uid);
		fuse_reply_err(req, EPERM);
		return;
	}
	if ((mode & S_IFMT) == 0)
		mode |= S_IFREG;
	if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	ops_make(req, parent, name, mode, NULL);
}

static void
ops_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	ops_make(req, parent, name, S_IFDIR | (mode & 07777), NULL);
}

static void
ops_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
    const char *name)
{
	ops_make(req, parent, name, S_IFLNK | 0777, link);
}

/*
 * What the change's name leads to, for removing it, in one stat: -EAGAIN
 * if the change may start over and the name no longer leads to the
 * object it locked (ops_name_is), else its link count (0 or -errno).
 */
static int
ops_victim_nlink(struct ops_change *c, int dirfd, nlink_t *nlink)
{
	struct stat	st;
	uint64_t	birth;
	int		r;

	if (!cluster_enabled()) {
		*nlink = 2;
		return 0;
	}
	r = inode_statx(dirfd, c->name, AT_SYMLINK_NOFOLLOW, &st, &birth);
	if (ops_change_may_retry(c) && (r == 0 ? st.st_ino != c->victim ||
	    birth != c->vbirth : c->victim != 0))
		return -EAGAIN;
	if (r < 0)
		return r;
	*nlink = st.st_nlink;
	return 0;
}

/* The directory and the object whose link count changes. */
static int
ops_remove_prepare(struct ops_change *c)
{
	int	pfd;

	if ((pfd = inode_fd_get(c->in)) < 0)
		return pfd;
	c->victim = ops_name_ino(pfd, c->name, &c->vbirth);
	inode_fd_put(c->in);
	glock_set_add(&c->locks, c->in->ino, c->in, 1);
	glock_set_add_named(&c->locks, c->victim, c->vbirth, c->in, 0);
	return 0;
}

static int
ops_remove_run(struct ops_change *c)
{
	nlink_t	nlink = 0;
	int	pfd, r;

	if ((pfd = inode_fd_get(c->in)) < 0) {
		fuse_reply_err(c->req, -pfd);
		return 0;
	}
	if ((r = ops_victim_nlink(c, pfd, &nlink)) == -EAGAIN) {
		inode_fd_put(c->in);
		return -EAGAIN;
	}
	if (r == 0)
		r = unlinkat(pfd, c->name, c->flags) == -1 ? -errno : 0;
	if (r == 0) {
		inode_unlinked(c->in, c->name);
		/* Its last name is gone: give its lock back, free the number. */
		if (nlink <= 1 || (c->flags & AT_REMOVEDIR))
			glock_gone(c->victim, c->vbirth);
	}
	inode_fd_put(c->in);
	fuse_reply_err(c->req, -r);
	return 0;
}

static void
ops_remove(fuse_req_t req, fuse_ino_t parent, const char *name, int flags)
{
	struct ops_change	*c;

	if ((c = ops_change_checked(req, ops_inode(parent), name, 0,
	    ops_remove_prepare, ops_remove_run, NULL)) == NULL)
		return;
	c->flags = flags;
	ops_change_go(c);
}

static void
ops_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	ops_remove(req, parent, name, 0);
}

static void
ops_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	ops_remove(req, parent, name, AT_REMOVEDIR);
}

/* Both directories, the moved object and the one it replaces. */
static int
ops_rename_prepare(struct ops_change *c)
{
	int	pfd, npfd, r;

	if ((r = ops_fd_get2(c->in, c->in2, &pfd, &npfd)) < 0)
		return r;
	c->victim = ops_name_ino(pfd, c->name, &c->vbirth);
	c->victim2 = ops_name_ino(npfd, c->name2, &c->vbirth2);
	inode_fd_put(c->in2);
	inode_fd_put(c->in);
	glock_set_add(&c->locks, c->in->ino, c->in, 1);
	glock_set_add(&c->locks, c->in2->ino, c->in2, 1);
	/* Moved to another directory: a cover of the old one is not enough. */
	glock_set_add_named(&c->locks, c->victim, c->vbirth, c->in,
	    c->in != c->in2);
	glock_set_add_named(&c->locks, c->victim2, c->vbirth2, c->in2,
	    c->in != c->in2 &&
	    (c->flags & RENAME_EXCHANGE));
	return 0;
}

static int
ops_rename_run(struct ops_change *c)
{
	int	pfd, npfd, r;

	if ((r = ops_fd_get2(c->in, c->in2, &pfd, &npfd)) < 0) {
		fuse_reply_err(c->req, -r);
		return 0;
	}
	if (ops_change_may_retry(c) && (!ops_name_is(pfd, c->name, c->victim,
	    c->vbirth) || !ops_name_is(npfd, c->name2, c->victim2, c->vbirth2)))
		r = -EAGAIN;
	else if (renameat2(pfd, c->name, npfd, c->name2,
	    (unsigned int)c->flags) == -1)
		r = -errno;
	if (r == 0) {
		inode_renamed(c->in, c->name, c->in2, c->name2,
		    c->flags & RENAME_EXCHANGE);
		glock_renamed(c->in, c->in2, c->flags & RENAME_EXCHANGE);
	}
	inode_fd_put(c->in2);
	inode_fd_put(c->in);
	if (r == -EAGAIN)
		return r;
	fuse_reply_err(c->req, -r);
	return 0;
}

static void
ops_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
    fuse_ino_t newparent, const char *newname, unsigned int flags)
{
	struct inode		*p = ops_inode(parent);
	struct inode		*np = ops_inode(newparent);
	struct ops_change	*c;
	int			 r;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE))
		r = -EINVAL;
	else if (!ops_same_workspace(p, np))
		r = -EXDEV;
	else if ((r = perm_may_change(req, p, name, 0)) == 0)
		r = perm_may_change(req, np, newname, 0);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if ((c = ops_change_new(req, ops_rename_prepare, ops_rename_run, name,
	    newname, NULL, 0)) == NULL)
		return;
	c->in = p;
	c->in2 = np;
	c->flags = (int)flags;
	ops_change_go(c);
}

/* The object whose link count changes and the new directory. */
static int
ops_link_prepare(struct ops_change *c)
{
	glock_set_add_own(&c->locks, c->in);
	glock_set_add(&c->locks, c->in2->ino, c->in2, 1);
	return 0;
}

static int
ops_link_run(struct ops_change *c)
{
	struct fuse_entry_param	 e;
	int			 fd, npfd, r;

	if ((r = ops_fd_get2(c->in, c->in2, &fd, &npfd)) == 0) {
		r = linkat(fd, "", npfd, c->name, AT_EMPTY_PATH) == -1 ?
		    -errno : 0;
		inode_fd_put(c->in2);
		inode_fd_put(c->in);
	}
	if (r == 0)
		r = inode_lookup(c->in2, c->name, &e);
	ops_reply_entry(c->req, c->in2, r, &e);
	return 0;
}

static void
ops_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
    const char *newname)
{
	struct inode		*in = ops_inode(ino);
	struct inode		*np = ops_inode(newparent);
	struct ops_change	*c;
	int			 r = 0;

	if (!ops_same_workspace(in, np) || in->ws_root == NULL)
		r = -EXDEV;
	else
		r = perm_may_change(req, np, newname, in->type);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if ((c = ops_change_new(req, ops_link_prepare, ops_link_run, newname,
	    NULL, NULL, 0)) == NULL)
		return;
	c->in = in;
	c->in2 = np;
	ops_change_go(c);
}

static struct wsfile *
ops_file_new(struct inode *in, int fd, const struct stat *st,
    struct fuse_file_info *fi, int flags)
{
	struct wsfile	*f;

	if ((f = calloc(1, sizeof *f)) == NULL)
		return NULL;
	f->fd = fd;
	f->inode = in;
	pthread_mutex_init(&f->owners_lock, NULL);
	handle_add(&f->h, 0);
	fi->fh = (uintptr_t)f;
	/*
	 * With a lock service, other nodes change files: keep the cached
	 * pages only when they were read under the same cluster lock hold.
	 */
	fi->keep_cache = glock_open_keep_cache(in);
	/*
	 * O_DIRECT bypasses the kernel's cache; the backing open need not.
	 * With other nodes appending too, an O_APPEND write must reach the
	 * backing store whole: through the page cache the kernel splits a
	 * write at a partial page into several requests, which another node's
	 * append could then come between.
	 */
	if ((flags & O_DIRECT) || (cluster_enabled() && (flags & O_APPEND))) {
		fi->direct_io = 1;
		fi->keep_cache = 0;
		f->direct = 1;
	}
	f->kill_priv = perm_write_kills_priv(fd, st, flags, fi->direct_io ||
	    __atomic_load_n(&wsfs.server_kills_priv, __ATOMIC_ACQUIRE));
	/* The kernel refuses a page cache beside a passthrough open. */
	if (passthrough_open(f, st))
		fi->keep_cache = 0;
	inode_opened(in, 1);
	f->held = scratchd_hold(in);
	return f;
}

static void
ops_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct inode	*in = ops_inode(ino);
	int		 fd;

	if (in->type == S_IFDIR) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	if (in->type != S_IFREG) {
		/* FIFOs, sockets and devices are never opened on the backing. */
		fuse_reply_err(req, EACCES);
		return;
	}
	/*
	 * No lock to wait for: what another node wrote is on the backing
	 * store, and pages are kept only under the same hold.
	 */
	fd = inode_open(in, fi->flags & ~O_DIRECT);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	if (ops_file_new(in, fd, NULL, fi, fi->flags) == NULL) {
		close(fd);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fuse_reply_open(req, fi);
}

static int
ops_create_run(struct ops_change *c)
{
	fuse_req_t		 req = c->req;
	struct inode		*p = c->in;
	const char		*name = c->name;
	mode_t			 mode = c->mode;
	struct fuse_file_info	*fi = &c->fi;
	struct fuse_entry_param	 e;
	int			 pfd, fd = -1, r = 0, created = 1;
	int			 flags = fi->flags & ~(O_DIRECT | O_NOCTTY);

	if ((pfd = inode_fd_get(p)) < 0) {
		r = pfd;
		goto out;
	}
	/* Set-id bits only once it is the caller's (perm_set_owner). */
	fd = inode_openat_beneath(pfd, name, flags | O_CREAT | O_EXCL,
	    mode & 01777);
	if (fd == -EEXIST && !(fi->flags & O_EXCL)) {
		/* Made meanwhile by someone else: open it if the caller may. */
		created = 0;
		fd = perm_open_existing(req, pfd, name, flags);
	}
	if (fd < 0) {
		r = fd;
		fd = -1;
	} else if (created)
		r = perm_set_owner(req, pfd, fd, S_IFREG | (mode & 07777));
	inode_fd_put(p);
	if (r == 0)
		r = inode_from_new_fd(p, name, fd, &e);
	if (r == 0 && ops_inode(e.ino)->type != S_IFREG) {
		inode_forget(ops_inode(e.ino), 1);
		r = -EIO;
	}
	/*
	 * Ask for the new file's exclusive lock before the open below would
	 * ask for a shared one: its first write then needs no upgrade.
	 */
	if (r == 0 && created)
		glock_made(ops_inode(e.ino), p);
	/* Just made by us: no capability, unless another inode had it. */
	if (r == 0 && created)
		ops_no_cap_set(ops_inode(e.ino),
		    __atomic_load_n(&ops_inode(e.ino)->xattr_seq,
		    __ATOMIC_ACQUIRE));
	/* e.attr: the new file's stat, taken after perm_set_owner. */
	if (r == 0 && ops_file_new(ops_inode(e.ino), fd, &e.attr, fi,
	    fi->flags) == NULL) {
		inode_forget(ops_inode(e.ino), 1);
		r = -ENOMEM;
	}
out:
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		fuse_reply_err(req, -r);
	} else {
		if (cluster_enabled()) {
			e.entry_timeout = glock_entry_timeout(p);
			e.attr_timeout = glock_attr_timeout(ops_inode(e.ino));
		}
		fuse_reply_create(req, &e, fi);
	}
	return 0;
}

static void
ops_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
    struct fuse_file_info *fi)
{
	struct ops_change	*c;

	if ((c = ops_change_checked(req, ops_inode(parent), name, S_IFREG,
	    ops_prepare_in, ops_create_run, NULL)) == NULL)
		return;
	c->mode = mode;
	c->fi = *fi;
	c->has_fi = 1;
	ops_change_go(c);
}

static void
ops_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
    struct fuse_file_info *fi)
{
	struct wsfile	*f = ops_file(fi);

	__atomic_add_fetch(&f->read, size, __ATOMIC_RELAXED);
	/* Reads wait for no lock: a shared lock protects caches, not data. */
	uring_read(req, f->fd, size, off, NULL, NULL);
}

/* A write waiting for its cluster lock, with its own copy of the data. */
struct ops_parked_write {
	fuse_req_t		 req;
	struct stats_timing	 st;		/* answered from its copy */
	struct wsfile		*f;
	size_t			 size;
	off_t			 off;
	struct glock_set	 locks;
	char			 buf[];
};

static void
ops_parked_written(void *arg, int res)
{
	struct ops_parked_write	*pw = arg;

	glock_set_unlock(&pw->locks, res > 0);
	free(pw);
}

/*
 * A buffered write: a pwrite in this FUSE worker on a local SOURCE (see
 * uring_write_now), also under a cluster lock held now: the lock is held
 * no longer than the ring would hold it, and a local disk does not stall
 * for long. Through the ring on a network filesystem, whose server may
 * stall for long, and for a write parked for its lock, which the one
 * operations thread continues: that thread never waits for the backing
 * store.
 */
static void
ops_backing_write(fuse_req_t req, int fd, const char *buf, size_t size,
    off_t off, int parked, uring_done_fn fn, void *fn_arg)
{
	if (wsfs.source_local && !parked)
		uring_write_now(req, fd, buf, size, off, fn, fn_arg);
	else
		uring_write(req, fd, buf, size, off, fn, fn_arg);
}

static void
ops_write_locked(void *arg, int err)
{
	struct ops_parked_write	*pw = arg;

	stats_resume(&pw->st);
	if (err < 0) {
		glock_set_log_timeout(&pw->locks);
		fuse_reply_err(pw->req, -err);
		free(pw);
	} else {
		ops_file_changing(pw->req, pw->f);
		if (pw->f->direct)
			glock_pages_stale(pw->f->inode);
		ops_backing_write(pw->req, pw->f->fd, pw->buf, pw->size,
		    pw->off, 1, ops_parked_written, pw);
	}
	stats_end();
}

static void
ops_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
    off_t off, struct fuse_file_info *fi)
{
	struct wsfile		*f = ops_file(fi);
	struct ops_parked_write	*pw;
	struct glock		*g;
	int			 r;

	r = glock_try(f->inode, 1, &g);
	if (r == -EWOULDBLOCK) {
		/* Wait for the lock without holding this worker. */
		if ((pw = malloc(sizeof *pw + size)) == NULL) {
			fuse_reply_err(req, ENOMEM);
			return;
		}
		pw->req = req;
		pw->f = f;
		pw->size = size;
		pw->off = off;
		memcpy(pw->buf, buf, size);
		glock_set_init(&pw->locks);
		glock_set_add(&pw->locks, f->inode->ino, f->inode, 1);
		stats_save(&pw->st);
		if ((r = glock_set_lock(&pw->locks, ops_write_locked, pw)) == 0)
			ops_write_locked(pw, 0);
		else if (r == -EINPROGRESS)
			stats_detach();
		else {
			fuse_reply_err(req, -r);
			free(pw);
		}
		return;
	}
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	ops_file_changing(req, f);
	if (f->direct)
		glock_pages_stale(f->inode);
	if (!__atomic_load_n(&f->wrote, __ATOMIC_RELAXED))
		__atomic_store_n(&f->wrote, 1, __ATOMIC_RELAXED);
	ops_backing_write(req, f->fd, buf, size, off, 0,
	    g ? ops_io_written : NULL, g);
}

/*
 * What a handle read lives in the mount's page cache: at its release, a
 * handle that read at least OPS_DROP_READ bytes through that cache and
 * wrote nothing drops the backing store's copy of the file's pages
 * (POSIX_FADV_DONTNEED), so that a file is not cached twice. Besides the
 * memory: pages the backing store read ahead sit in large folios, and
 * ext4 walks a whole folio's buffers for every 4 KiB write into one, so
 * random writes through wsfs measured 13k IOPS over such pages and 27k
 * over dropped ones. A handle that wrote keeps them: after wsfs's own
 * write the kernel sees a new mtime at its next getattr and drops the
 * mount's pages (auto_inval_data), and the backing copy is then what a
 * reader finds without the disk. Small reads keep theirs too (a build's
 * many small files: a syscall each, for little memory). Over a local
 * filesystem only (on network storage the backing cache is its client's
 * own business); with a lock service too: while the node holds the
 * file's lock its pages stay, and after a revoke another node may have
 * written, so the next read goes to the store either way.
 */
#define OPS_DROP_READ	(1u << 20)

static void
ops_drop_backing_pages(struct wsfile *f)
{
	if (!wsfs.source_local || f->direct ||
	    __atomic_load_n(&f->wrote, __ATOMIC_RELAXED) ||
	    __atomic_load_n(&f->read, __ATOMIC_RELAXED) < OPS_DROP_READ)
		return;
	(void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
}

static void
ops_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int	fd;

	plock_release_owner(ops_file(fi)->inode, fi->lock_owner, 0);
	/*
	 * Closing a duplicate reports close-time errors (NFS) to close(2);
	 * a local filesystem has none (the flush is here for the locks).
	 */
	if (!wsfs.source_local &&
	    ((fd = dup(ops_file(fi)->fd)) == -1 || close(fd) == -1))
		fuse_reply_err(req, errno);
	else
		fuse_reply_err(req, 0);
}

static void
ops_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsfile	*f = ops_file(fi);
	struct inode	*in = f->inode;
	size_t		 i;

	if (fi->flock_release)
		plock_release_owner(in, fi->lock_owner, 1);
	/* OFD locks end with their open file; POSIX ones ended at flush. */
	for (i = 0; i < f->nowners; i++)
		plock_release_owner(in, f->owners[i], 0);
	ops_drop_backing_pages(f);
	passthrough_release(f);
	handle_del(&f->h);
	ops_file_free(f);
	inode_opened(in, -1);
	fuse_reply_err(req, 0);
}

static void
ops_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
    struct fuse_file_info *fi)
{
	uring_fsync(req, ops_file(fi)->fd, datasync);
}

static void
ops_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct inode	*in = ops_inode(ino);
	struct wsdir	*d;
	int		 pfd, fd, r;

	if ((pfd = inode_fd_get(in)) < 0) {
		fuse_reply_err(req, -pfd);
		return;
	}
	fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	r = fd == -1 ? errno : 0;
	inode_fd_put(in);
	if (r != 0) {
		fuse_reply_err(req, r);
		return;
	}
	if ((d = calloc(1, sizeof *d)) == NULL ||
	    (d->dp = fdopendir(fd)) == NULL) {
		r = errno;
		free(d);
		close(fd);
		fuse_reply_err(req, r);
		return;
	}
	d->many = -1;
	fi->fh = (uintptr_t)d;
	inode_opened(in, 1);
	d->held = scratchd_hold(in);
	handle_add(&d->h, 1);
	fuse_reply_open(req, fi);
}

/* Whether a directory entry is shown: the mount root lists workspaces only. */
static int
ops_dirent_visible(struct inode *dir, struct wsdir *d, struct dirent *de)
{
	struct stat	st;

	if (dir != inode_root())
		return 1;
	if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
		return 1;
	if (de->d_name[0] == '.')
		return 0;
	if (de->d_type == DT_DIR)
		return 1;
	if (de->d_type != DT_UNKNOWN)
		return 0;
	return fstatat(dirfd(d->dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    S_ISDIR(st.st_mode);
}

/*
 * Whether a listing is too big for readdirplus to pay: the backing
 * directory's size in bytes (ext4 takes some 25-35 per entry, so 128 KiB
 * is 4,000 entries or more). The kernel asks readdirplus for the first
 * chunk of a listing only (some 200 entries; later ones only after a
 * lookup in the directory), so there its attributes spare an `ls -l` a
 * twentieth of its lookups at most, while a listing that wants only the
 * names (find, a scandir) pays a stat of 200 inodes first: 10 ms after a
 * drop of the caches on this disk. Such a listing's entries go without
 * attributes (node id 0), as those of every later chunk do.
 */
#define OPS_DIR_MANY_BYTES	(128 * 1024)

static int
ops_dir_many(struct wsdir *d)
{
	struct stat	st;

	if (d->many < 0)
		d->many = fstat(dirfd(d->dp), &st) == 0 &&
		    st.st_size >= OPS_DIR_MANY_BYTES;
	return d->many;
}

static void
ops_do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
    struct fuse_file_info *fi, int plus)
{
	struct inode		*dir = ops_inode(ino);
	struct wsdir		*d = ops_dir(fi);
	struct fuse_entry_param	 e;
	struct dirent		*de;
	char			*buf, *p;
	size_t			 rem = size, entsize;
	off_t			 next;
	int			 r = 0, dot;

	if ((buf = calloc(1, size)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	p = buf;
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		if (d->entry == NULL) {
			errno = 0;
			if ((d->entry = readdir(d->dp)) == NULL) {
				if (errno != 0)
					r = -errno;
				break;
			}
		}
		de = d->entry;
		next = de->d_off;
		if (!ops_dirent_visible(dir, d, de))
			goto skip;
		dot = strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0;
		memset(&e, 0, sizeof e);
		e.attr.st_ino = de->d_ino;
		e.attr.st_mode = (mode_t)de->d_type << 12;
		if (!plus) {
			entsize = fuse_add_direntry(req, p, rem, de->d_name,
			    &e.attr, next);
			if (entsize > rem)
				break;
		} else {
			if (!dot && !ops_dir_many(d)) {
				r = inode_lookup_listed(dir, de->d_name,
				    de->d_ino, de->d_type, &e);
				if (r == -ENOENT) {
					r = 0;
					goto skip;
				}
				if (r < 0) {
					/* Listed, but no attributes to give. */
					memset(&e, 0, sizeof e);
					e.attr.st_ino = de->d_ino;
					e.attr.st_mode = (mode_t)de->d_type << 12;
					r = 0;
				} else if (cluster_enabled())
					e.attr_timeout = glock_attr_timeout(
					    ops_inode(e.ino));
			}
			entsize = fuse_add_direntry_plus(req, p, rem,
			    de->d_name, &e, next);
			if (entsize > rem) {
				if (e.ino != 0)
					inode_forget(ops_inode(e.ino), 1);
				break;
			}
		}
		p += entsize;
		rem -= entsize;
skip:
		d->entry = NULL;
		d->offset = next;
	}
	/* An error after some entries is reported by the next call. */
	if (r < 0 && rem == size)
		fuse_reply_err(req, -r);
	else
		fuse_reply_buf(req, buf, size - rem);
	free(buf);
}

static void
ops_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
    struct fuse_file_info *fi)
{
	ops_do_readdir(req, ino, size, offset, fi, 0);
}

static void
ops_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
    struct fuse_file_info *fi)
{
	ops_do_readdir(req, ino, size, offset, fi, 1);
}

static void
ops_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct wsdir	*d = ops_dir(fi);

	handle_del(&d->h);
	ops_dir_free(d);
	inode_opened(ops_inode(ino), -1);
	fuse_reply_err(req, 0);
}

static void
ops_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
    struct fuse_file_info *fi)
{
	int	fd = dirfd(ops_dir(fi)->dp);

	if ((datasync ? fdatasync(fd) : fsync(fd)) == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_err(req, 0);
}

static void
ops_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs	sv;

	if (fstatvfs(wsfs.source_fd, &sv) == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_statfs(req, &sv);
}

/*
 * POSIX ACLs would be stored but never enforced: the kernel checks only
 * the mode bits with default_permissions. Refuse them rather than pretend.
 */
static int
ops_xattr_acl(const char *name)
{
	return strcmp(name, "system.posix_acl_access") == 0 ||
	    strcmp(name, "system.posix_acl_default") == 0;
}

enum xattr_op { XA_GET, XA_LIST, XA_SET, XA_REMOVE };

/* Run one xattr call on the inode through its /proc/self/fd path. */
static ssize_t
ops_xattr(struct inode *in, enum xattr_op op, const char *name, void *value,
    size_t size, int flags)
{
	char	path[64];
	ssize_t	r;
	int	fd;

	if ((fd = inode_fd_get(in)) < 0)
		return fd;
	inode_procpath(fd, path, sizeof path);
	switch (op) {
	case XA_GET:
		r = getxattr(path, name, value, size);
		break;
	case XA_LIST:
		r = listxattr(path, value, size);
		break;
	case XA_SET:
		r = setxattr(path, name, value, size, flags);
		break;
	default:
		if (strcmp(name, "security.capability") == 0) {
			r = priv_remove_capability(path);
			inode_fd_put(in);
			return r;
		}
		r = removexattr(path, name);
		break;
	}
	if (r == -1)
		r = -errno;
	inode_fd_put(in);
	return r;
}

static void
ops_reply_xattr(fuse_req_t req, ssize_t r, const char *buf, size_t size)
{
	if (r < 0)
		fuse_reply_err(req, (int)-r);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)r);
	else
		fuse_reply_buf(req, buf, (size_t)r);
}

/* getxattr and listxattr: size 0 asks for the size, else for the data. */
static void
ops_xattr_read(fuse_req_t req, struct inode *in, enum xattr_op op,
    const char *name, size_t size)
{
	char	*buf = NULL;

	if (size > 0 && (buf = malloc(size)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	ops_reply_xattr(req, ops_xattr(in, op, name, buf, size, 0), buf, size);
	free(buf);
}

static void
ops_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct inode	*in = ops_inode(ino);
	unsigned int	 seq;
	char		*buf = NULL;
	ssize_t		 r;

	/* A symlink's xattrs cannot be reached without following it. */
	if (in->type == S_IFLNK || ops_xattr_acl(name)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	if (!ops_xattr_is_cap(name)) {
		ops_xattr_read(req, in, XA_GET, name, size);
		return;
	}
	if (ops_no_cap(in)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	seq = __atomic_load_n(&in->xattr_seq, __ATOMIC_ACQUIRE);
	if (size > 0 && (buf = malloc(size)) == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = ops_xattr(in, XA_GET, name, buf, size, 0);
	if (r == -ENODATA)
		ops_no_cap_set(in, seq);
	ops_reply_xattr(req, r, buf, size);
	free(buf);
}

static void
ops_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct inode	*in = ops_inode(ino);

	if (in->type == S_IFLNK) {
		ops_reply_xattr(req, 0, NULL, size);
		return;
	}
	ops_xattr_read(req, in, XA_LIST, NULL, size);
}

static int
ops_xattr_change_run(struct ops_change *c)
{
	ssize_t	r;

	/* Odd while the change is under way: see ops_no_cap_set. */
	ops_xattr_changing(c->in);
	if (c->to_set == XA_SET)
		r = ops_xattr(c->in, XA_SET, c->name,
		    (void *)(uintptr_t)c->data, c->size, c->flags);
	else
		r = ops_xattr(c->in, XA_REMOVE, c->name, NULL, 0, 0);
	ops_xattr_changing(c->in);
	fuse_reply_err(c->req, r < 0 ? (int)-r : 0);
	return 0;
}

/* setxattr and removexattr: changes, under the inode's lock. */
static void
ops_xattr_change(fuse_req_t req, struct inode *in, enum xattr_op op,
    const char *name, const char *value, size_t size, int flags)
{
	struct ops_change	*c;

	if ((c = ops_change_new(req, ops_prepare_in, ops_xattr_change_run, name,
	    NULL, value, size)) == NULL)
		return;
	c->in = in;
	c->to_set = op;
	c->flags = flags;
	ops_change_go(c);
}

static void
ops_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
    const char *value, size_t size, int flags)
{
	struct inode	*in = ops_inode(ino);
	int		 r = 0;

	/* No file capability is ever planted through wsfs (priv.c). */
	if (in->type == S_IFLNK || ops_xattr_is_cap(name))
		r = -EPERM;
	else if (ops_xattr_acl(name))
		r = -EOPNOTSUPP;
	else if (perm_may_change(req, in, NULL, 0) < 0)
		r = -EPERM;
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		ops_xattr_change(req, in, XA_SET, name, value, size, flags);
}

static void
ops_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct inode	*in = ops_inode(ino);
	int		 r = 0;

	/*
	 * A file capability is removed for whoever the kernel sends: its own
	 * kill-priv before a write or truncate by any writer (as a local
	 * filesystem does, whoever owns the file), or a caller it found
	 * holding CAP_SETFCAP (priv_remove_capability).
	 */
	if (in->type == S_IFLNK)
		r = -EPERM;
	else if (strcmp(name, "security.capability") != 0 &&
	    perm_may_change(req, in, NULL, 0) < 0)
		r = -EPERM;
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		ops_xattr_change(req, in, XA_REMOVE, name, NULL, 0, 0);
}

static int
ops_fallocate_run(struct ops_change *c)
{
	struct wsfile	*f = ops_file(&c->fi);
	int		 r;

	ops_file_changing(c->req, f);
	r = fallocate(f->fd, (int)c->mode, c->off, c->len) == -1 ? errno : 0;
	fuse_reply_err(c->req, r);
	return 0;
}

static void
ops_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
    off_t length, struct fuse_file_info *fi)
{
	struct ops_change	*c;

	if ((c = ops_change_new(req, ops_prepare_in, ops_fallocate_run, NULL,
	    NULL, NULL, 0)) == NULL)
		return;
	c->in = ops_inode(ino);
	c->mode = (mode_t)mode;
	c->off = offset;
	c->len = length;
	c->fi = *fi;
	ops_change_go(c);
}

static void
ops_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
    struct fuse_file_info *fi)
{
	off_t	r;

	if ((r = lseek(ops_file(fi)->fd, off, whence)) == -1)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, r);
}

static int
ops_copy_run(struct ops_change *c)
{
	struct fuse_file_info	 fi_in = { .fh = c->fh2 };
	off_t			 off_in = c->off, off_out = c->off2;
	ssize_t			 n;

	ops_file_changing(c->req, ops_file(&c->fi));
	n = copy_file_range(ops_file(&fi_in)->fd, &off_in, ops_file(&c->fi)->fd,
	    &off_out, c->size, (unsigned int)c->flags);
	if (n == -1)
		fuse_reply_err(c->req, errno);
	else
		fuse_reply_write(c->req, (size_t)n);
	return 0;
}

/* The written file's lock; the read one needs none. */
static void
ops_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
    struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
    struct fuse_file_info *fi_out, size_t len, int flags)
{
	struct ops_change	*c;

	if ((c = ops_change_new(req, ops_prepare_in, ops_copy_run, NULL, NULL,
	    NULL, 0)) == NULL)
		return;
	c->in = ops_inode(ino_out);
	c->fi = *fi_out;
	c->fh2 = fi_in->fh;
	c->off = off_in;
	c->off2 = off_out;
	c->size = len;
	c->flags = flags;
	ops_change_go(c);
}

static void
ops_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
    struct flock *lock)
{
	plock_getlk(req, ops_inode(ino), fi, lock);
}

static void
ops_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi,
    struct flock *lock, int sleep)
{
	plock_setlk(req, ops_inode(ino), fi, lock, sleep);
}

static void
ops_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
	plock_flock(req, ops_inode(ino), fi, op);
}

/*
 * Every handler runs timed: one row per operation, counted under its
 * stats.c name. Errors are counted by stats_reply_err; an operation
 * answered from another thread is timed to its answer there (stats.c).
 */
#define TIMED(op, call) do {						\
	stats_begin(op);						\
	call;								\
	stats_end();							\
} while (0)

static void t_lookup(fuse_req_t r, fuse_ino_t p, const char *n)
{ TIMED(OP_LOOKUP, ops_lookup(r, p, n)); }
static void t_forget(fuse_req_t r, fuse_ino_t i, uint64_t n)
{ TIMED(OP_FORGET, ops_forget(r, i, n)); }
static void t_forget_multi(fuse_req_t r, size_t c, struct fuse_forget_data *f)
{ TIMED(OP_FORGET, ops_forget_multi(r, c, f)); }
static void t_getattr(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi)
{ TIMED(OP_GETATTR, ops_getattr(r, i, fi)); }
static void t_setattr(fuse_req_t r, fuse_ino_t i, struct stat *a, int s,
    struct fuse_file_info *fi)
{ TIMED(OP_SETATTR, ops_setattr(r, i, a, s, fi)); }
static void t_readlink(fuse_req_t r, fuse_ino_t i)
{ TIMED(OP_READLINK, ops_readlink(r, i)); }
static void t_mknod(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m,
    dev_t d)
{ TIMED(OP_MKNOD, ops_mknod(r, p, n, m, d)); }
static void t_mkdir(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m)
{ TIMED(OP_MKDIR, ops_mkdir(r, p, n, m)); }
static void t_symlink(fuse_req_t r, const char *l, fuse_ino_t p,
    const char *n)
{ TIMED(OP_SYMLINK, ops_symlink(r, l, p, n)); }
static void t_unlink(fuse_req_t r, fuse_ino_t p, const char *n)
{ TIMED(OP_UNLINK, ops_unlink(r, p, n)); }
static void t_rmdir(fuse_req_t r, fuse_ino_t p, const char *n)
{ TIMED(OP_RMDIR, ops_rmdir(r, p, n)); }
static void t_rename(fuse_req_t r, fuse_ino_t p, const char *n,
    fuse_ino_t np, const char *nn, unsigned int f)
{ TIMED(OP_RENAME, ops_rename(r, p, n, np, nn, f)); }
static void t_link(fuse_req_t r, fuse_ino_t i, fuse_ino_t np, const char *nn)
{ TIMED(OP_LINK, ops_link(r, i, np, nn)); }
static void t_open(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi)
{ TIMED(OP_OPEN, ops_open(r, i, fi)); }
static void t_create(fuse_req_t r, fuse_ino_t p, const char *n, mode_t m,
    struct fuse_file_info *fi)
{ TIMED(OP_CREATE, ops_create(r, p, n, m, fi)); }
static void t_read(fuse_req_t r, fuse_ino_t i, size_t sz, off_t o,
    struct fuse_file_info *fi)
{ TIMED(OP_READ, ops_read(r, i, sz, o, fi)); }
static void t_write(fuse_req_t r, fuse_ino_t i, const char *b, size_t sz,
    off_t o, struct fuse_file_info *fi)
{ TIMED(OP_WRITE, ops_write(r, i, b, sz, o, fi)); }
static void t_flush(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi)
{ TIMED(OP_FLUSH, ops_flush(r, i, fi)); }
static void t_release(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi)
{ TIMED(OP_RELEASE, ops_release(r, i, fi)); }
static void t_fsync(fuse_req_t r, fuse_ino_t i, int d,
    struct fuse_file_info *fi)
{ TIMED(OP_FSYNC, ops_fsync(r, i, d, fi)); }
static void t_opendir(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi)
{ TIMED(OP_OPENDIR, ops_opendir(r, i, fi)); }
static void t_readdir(fuse_req_t r, fuse_ino_t i, size_t sz, off_t o,
    struct fuse_file_info *fi)
{ TIMED(OP_READDIR, ops_readdir(r, i, sz, o, fi)); }
static void t_readdirplus(fuse_req_t r, fuse_ino_t i, size_t sz, off_t o,
    struct fuse_file_info *fi)
{ TIMED(OP_READDIR, ops_readdirplus(r, i, sz, o, fi)); }
static void t_releasedir(fuse_req_t r, fuse_ino_t i,
    struct fuse_file_info *fi)
{ TIMED(OP_RELEASEDIR, ops_releasedir(r, i, fi)); }
static void t_fsyncdir(fuse_req_t r, fuse_ino_t i, int d,
    struct fuse_file_info *fi)
{ TIMED(OP_FSYNCDIR, ops_fsyncdir(r, i, d, fi)); }
static void t_statfs(fuse_req_t r, fuse_ino_t i)
{ TIMED(OP_STATFS, ops_statfs(r, i)); }
static void t_setxattr(fuse_req_t r, fuse_ino_t i, const char *n,
    const char *v, size_t sz, int f)
{ TIMED(OP_XATTR, ops_setxattr(r, i, n, v, sz, f)); }
static void t_getxattr(fuse_req_t r, fuse_ino_t i, const char *n, size_t sz)
{ TIMED(OP_XATTR, ops_getxattr(r, i, n, sz)); }
static void t_listxattr(fuse_req_t r, fuse_ino_t i, size_t sz)
{ TIMED(OP_XATTR, ops_listxattr(r, i, sz)); }
static void t_removexattr(fuse_req_t r, fuse_ino_t i, const char *n)
{ TIMED(OP_XATTR, ops_removexattr(r, i, n)); }
static void t_fallocate(fuse_req_t r, fuse_ino_t i, int m, off_t o, off_t l,
    struct fuse_file_info *fi)
{ TIMED(OP_FALLOCATE, ops_fallocate(r, i, m, o, l, fi)); }
static void t_lseek(fuse_req_t r, fuse_ino_t i, off_t o, int w,
    struct fuse_file_info *fi)
{ TIMED(OP_LSEEK, ops_lseek(r, i, o, w, fi)); }
static void t_copy_file_range(fuse_req_t r, fuse_ino_t ii, off_t oi,
    struct fuse_file_info *fii, fuse_ino_t io, off_t oo,
    struct fuse_file_info *fio, size_t l, int f)
{ TIMED(OP_COPY, ops_copy_file_range(r, ii, oi, fii, io, oo, fio, l, f)); }
static void t_getlk(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi,
    struct flock *l)
{ TIMED(OP_LOCK, ops_getlk(r, i, fi, l)); }
static void t_setlk(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi,
    struct flock *l, int s)
{ TIMED(OP_LOCK, ops_setlk(r, i, fi, l, s)); }
static void t_flock(fuse_req_t r, fuse_ino_t i, struct fuse_file_info *fi,
    int op)
{ TIMED(OP_LOCK, ops_flock(r, i, fi, op)); }

/* At exit, after the loop: what the kernel never released. */
void
ops_handles_free_all(void)
{
	struct wshandle	*h;

	while ((h = handle_pop()) != NULL) {
		if (h->is_dir)
			ops_dir_free((struct wsdir *)h);
		else
			ops_file_free((struct wsfile *)h);
	}
}

const struct fuse_lowlevel_ops wsfs_ops = {
	.init		 = ops_init,
	.lookup		 = t_lookup,
	.forget		 = t_forget,
	.forget_multi	 = t_forget_multi,
	.getattr	 = t_getattr,
	.setattr	 = t_setattr,
	.readlink	 = t_readlink,
	.mknod		 = t_mknod,
	.mkdir		 = t_mkdir,
	.symlink	 = t_symlink,
	.unlink		 = t_unlink,
	.rmdir		 = t_rmdir,
	.rename		 = t_rename,
	.link		 = t_link,
	.open		 = t_open,
	.create		 = t_create,
	.read		 = t_read,
	.write		 = t_write,
	.flush		 = t_flush,
	.release	 = t_release,
	.fsync		 = t_fsync,
	.opendir	 = t_opendir,
	.readdir	 = t_readdir,
	.readdirplus	 = t_readdirplus,
	.releasedir	 = t_releasedir,
	.fsyncdir	 = t_fsyncdir,
	.statfs		 = t_statfs,
	.setxattr	 = t_setxattr,
	.getxattr	 = t_getxattr,
	.listxattr	 = t_listxattr,
	.removexattr	 = t_removexattr,
	.fallocate	 = t_fallocate,
	.lseek		 = t_lseek,
	.copy_file_range = t_copy_file_range,
	/* Only with a lock service; else the kernel's own locks serve. */
	.getlk		 = t_getlk,
	.setlk		 = t_setlk,
	.flock		 = t_flock,
};

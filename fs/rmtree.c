/*
 * Safe removal of directory trees: the leaf module under the sweeper and
 * `wsctl workspace rm` (see rmtree.h for the guarantees).
 *
 * The walk trusts nothing it finds: every directory is entered with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV |
 * RESOLVE_NO_MAGICLINKS) relative to its parent's descriptor, so a symlink
 * planted in place of a directory is unlinked, not followed, and a mount
 * point is reported and left alone. Non-directories (files, symlinks,
 * FIFOs, sockets, devices) are unlinked by name and never opened.
 *
 * Descriptors stay bounded on deep trees: only the WALK_FDS deepest
 * directories are open. Climbing back to a closed one reopens it through
 * ".." and checks that it is the device and inode recorded on the way down;
 * if a racer moved the subtree elsewhere, the walk restarts from the top,
 * which stays pinned, rather than go where ".." now leads.
 *
 * Files are unlinked one unlinkat at a time. io_uring batches were tried
 * and measured slower: unlink holds the parent directory's lock across
 * the filesystem's work, so a batch of unlinks in one directory runs one
 * at a time in io-wq threads and only adds their hand-offs.
 */
#include "config.h"

#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "nofollow.h"
#include "rmtree.h"

#define WALK_FDS	32	/* directory streams open at once */
#define WALK_RESTARTS	64	/* restarts from the top of one tree */
#define WALK_RESCANS	1024	/* extra passes over directories, per walk */
#define WALK_MOUNTS	64	/* distinct mount points reported per walk */
#define MOVED_CHECK	256	/* unlinks between "still in the tree?" checks */

#define STATX_WANT	(STATX_TYPE | STATX_INO | STATX_BLOCKS | STATX_MNT_ID)

struct level {
	DIR		*dir;	/* NULL while closed to bound descriptors */
	dev_t		 dev;
	ino_t		 ino;
	char		*name;	/* name in the parent directory */
	int		 left;	/* something below cannot be removed */
	int		 again;	/* entries appeared: read it once more */
	unsigned	 unlinks;	/* unlinks issued here, for checks */
};

struct walk {
	int		 top;		/* directory holding the tree's root */
	const char	*name;		/* the root's name in top */
	const char	*report_id;	/* what reports call the tree */
	int		 measure;	/* count bytes, remove nothing */
	uint64_t	 bytes;
	dev_t		 dev;		/* the tree's device and mount */
	uint64_t	 mnt_id;
	int		 have_mnt_id;
	ino_t		 top_ino;
	int		 stale;		/* a directory moved: restart */
	struct level	*lv;
	size_t		 depth, cap;
	unsigned	 rescans;
	struct rmtree_stats *st;
	uint64_t	 mounts[WALK_MOUNTS];
	size_t		 nmounts;
};

static int
fd_statx(int fd, struct statx *stx)
{
	if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW |
	    AT_NO_AUTOMOUNT, STATX_WANT, stx) < 0)
		return -errno;
	return 0;
}

static int
name_valid(const char *name)
{
	size_t	len = strlen(name);

	return len > 0 && len <= NAME_MAX && name[0] != '.' &&
	    strchr(name, '/') == NULL;
}

static void
report(struct rmtree_stats *st, enum rmtree_event ev, const char *id,
    const char *detail)
{
	if (st != NULL && st->report != NULL)
		st->report(st->report_arg, ev, id, detail);
}

/*
 * The path of name below the tree's root, for reports only: it is never
 * handed to a syscall. Deep paths keep their tail.
 */
static void
walk_path(struct walk *w, const char *name, char *buf, size_t len)
{
	size_t	 need = strlen(name), i, n, pos;

	for (i = 1; i < w->depth; i++)
		need += strlen(w->lv[i].name) + 1;
	if (need < len) {
		buf[0] = '\0';
		for (i = 1; i < w->depth; i++) {
			strcat(buf, w->lv[i].name);
			strcat(buf, "/");
		}
		strcat(buf, name);
		return;
	}
	/* Build the tail backwards, behind a "..." marker. */
	pos = len - 1;
	buf[pos] = '\0';
	n = strlen(name);
	if (n > pos - 4)
		n = pos - 4;
	pos -= n;
	memcpy(buf + pos, name + strlen(name) - n, n);
	for (i = w->depth; i-- > 1;) {
		n = strlen(w->lv[i].name);
		if (n + 1 > pos - 4)
			break;
		buf[--pos] = '/';
		pos -= n;
		memcpy(buf + pos, w->lv[i].name, n);
	}
	pos -= 4;
	memcpy(buf + pos, ".../", 4);
	memmove(buf, buf + pos, len - pos);
}

static void
walk_error(struct walk *w, const char *name, const char *what, int err)
{
	char	path[1024], msg[1200];

	walk_path(w, name, path, sizeof path);
	snprintf(msg, sizeof msg, "%s %s: %s", what, path, strerror(-err));
	w->st->left++;
	log_warn("%s: %s", w->report_id, msg);
	report(w->st, RMTREE_EV_ERROR, w->report_id, msg);
}

/* A mount point at dirfd/name: report it once per walk, never cross it. */
static void
walk_mount(struct walk *w, int dirfd, const char *name)
{
	struct statx	stx;
	char		path[1024], msg[1200];
	size_t		i;

	if (w->depth > 0)
		w->lv[w->depth - 1].left = 1;
	memset(&stx, 0, sizeof stx);
	if (statx(dirfd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
	    STATX_MNT_ID, &stx) == 0 && (stx.stx_mask & STATX_MNT_ID)) {
		for (i = 0; i < w->nmounts; i++) {
			if (w->mounts[i] == stx.stx_mnt_id)
				return;
		}
		if (w->nmounts < WALK_MOUNTS)
			w->mounts[w->nmounts++] = stx.stx_mnt_id;
	}
	walk_path(w, name, path, sizeof path);
	snprintf(msg, sizeof msg, "mount point %s skipped, not crossed", path);
	w->st->mounts++;
	log_warn("%s: %s", w->report_id, msg);
	report(w->st, RMTREE_EV_MOUNT, w->report_id, msg);
}

/* The outcome of unlinking one non-directory of the top level. */
static void
walk_unlinked(struct walk *w, const char *name, int res)
{
	/* No level yet when the tree's root itself is not a directory. */
	struct level	*l = w->depth > 0 ? &w->lv[w->depth - 1] : NULL;
	int		 dfd = l != NULL ? dirfd(l->dir) : w->top;
	struct stat	 sb;

	switch (res) {
	case 0:
		w->st->files++;
		return;
	case -ENOENT:
		return;
	case -EISDIR:
		/* It became a directory since readdir: read this one again. */
		if (l != NULL) {
			l->again = 1;
			return;
		}
		break;
	case -EPERM:
		/* POSIX allows EPERM for a directory; else it is immutable. */
		if (l != NULL && fstatat(dfd, name, &sb,
		    AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode)) {
			l->again = 1;
			return;
		}
		break;
	case -EBUSY:
		walk_mount(w, dfd, name);
		return;
	}
	if (l != NULL)
		l->left = 1;
	walk_error(w, name, "cannot remove", res);
}

/*
 * Is the top level still where the walk found it? A directory renamed out
 * of the tree while the walk holds its descriptor is no longer part of
 * what is being removed: checked every MOVED_CHECK unlinks in it.
 */
static int
walk_moved(struct walk *w)
{
	struct level	*l = &w->lv[w->depth - 1];
	struct statx	 stx;
	dev_t		 pdev = w->dev;
	ino_t		 pino = w->top_ino;

	if (w->depth >= 2) {
		pdev = w->lv[w->depth - 2].dev;
		pino = w->lv[w->depth - 2].ino;
	}
	if (statx(dirfd(l->dir), "..", AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
	    STATX_INO, &stx) < 0)
		return 1;
	return makedev(stx.stx_dev_major, stx.stx_dev_minor) != pdev ||
	    stx.stx_ino != pino;
}

static void
walk_unlink(struct walk *w, const char *name)
{
	struct level	*l = &w->lv[w->depth - 1];
	int		 r;

	if (l->unlinks++ % MOVED_CHECK == 0 && walk_moved(w)) {
		w->stale = 1;
		return;
	}
	r = unlinkat(dirfd(l->dir), name, 0);
	walk_unlinked(w, name, r < 0 ? -errno : 0);
}

static void
walk_clear(struct walk *w)
{
	while (w->depth > 0) {
		struct level	*l = &w->lv[--w->depth];

		if (l->dir != NULL)
			closedir(l->dir);
		free(l->name);
	}
}

/* Push an opened directory; close the oldest stream beyond WALK_FDS. */
static int
walk_push(struct walk *w, int fd, const struct statx *stx, const char *name)
{
	struct level	*l, *nlv;
	DIR		*d;
	char		*dup;

	if (w->depth == w->cap) {
		size_t	ncap = w->cap ? w->cap * 2 : 64;

		if ((nlv = reallocarray(w->lv, ncap, sizeof *nlv)) == NULL)
			goto nomem;
		w->lv = nlv;
		w->cap = ncap;
	}
	if ((dup = strdup(name)) == NULL)
		goto nomem;
	if ((d = fdopendir(fd)) == NULL) {
		free(dup);
		goto nomem;
	}
	/* Levels below a reopened one are closed already. */
	if (w->depth >= WALK_FDS && (l = &w->lv[w->depth - WALK_FDS])->dir !=
	    NULL) {
		closedir(l->dir);
		l->dir = NULL;
	}
	l = &w->lv[w->depth++];
	l->dir = d;
	l->dev = makedev(stx->stx_dev_major, stx->stx_dev_minor);
	l->ino = stx->stx_ino;
	l->name = dup;
	l->left = 0;
	l->again = 0;
	l->unlinks = 0;
	return 0;
nomem:
	close(fd);
	return -ENOMEM;
}

/*
 * Enter dirfd/name if it is still a directory of the same mount. Returns
 * 1 when pushed, 0 when handled otherwise, -errno on failure.
 */
static int
walk_descend(struct walk *w, int dirfd, const char *name)
{
	struct statx	 stx;
	int		 fd, r;

	if ((fd = nofollow_open_beneath(dirfd, name)) < 0) {
		switch (fd) {
		case -ENOENT:
			return 0;
		case -ELOOP:
		case -ENOTDIR:
			/* Swapped for a symlink or a file: unlink that. */
			if (w->measure)
				return 0;
			r = unlinkat(dirfd, name, 0);
			walk_unlinked(w, name, r < 0 ? -errno : 0);
			return 0;
		case -EXDEV:
			walk_mount(w, dirfd, name);
			return 0;
		default:
			if (w->depth > 0)
				w->lv[w->depth - 1].left = 1;
			walk_error(w, name, "cannot open", fd);
			return 0;
		}
	}
	if ((r = fd_statx(fd, &stx)) < 0) {
		close(fd);
		if (w->depth > 0)
			w->lv[w->depth - 1].left = 1;
		walk_error(w, name, "cannot stat", r);
		return 0;
	}
	if (makedev(stx.stx_dev_major, stx.stx_dev_minor) != w->dev ||
	    (w->have_mnt_id && (stx.stx_mask & STATX_MNT_ID) &&
	    stx.stx_mnt_id != w->mnt_id)) {
		close(fd);
		walk_mount(w, dirfd, name);
		return 0;
	}
	if (w->measure)
		w->bytes += stx.stx_blocks * 512;
	if ((r = walk_push(w, fd, &stx, name)) < 0)
		return r;
	return 1;
}

/*
 * Leave the top level: make sure its parent is open (reopening it through
 * ".." if needed, checked against what was recorded) and remove it there.
 * -ESTALE: the tree moved under the walk; restart from the top.
 */
static int
walk_pop(struct walk *w)
{
	struct level	*c = &w->lv[w->depth - 1], *p = NULL;
	struct statx	 stx;
	int		 pfd = w->top, fd, r;

	if (w->depth > 1) {
		p = &w->lv[w->depth - 2];
		if (p->dir == NULL) {
			fd = openat(dirfd(c->dir), "..", O_RDONLY |
			    O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0)
				return -ESTALE;
			if (fd_statx(fd, &stx) < 0 ||
			    makedev(stx.stx_dev_major, stx.stx_dev_minor) !=
			    p->dev || stx.stx_ino != p->ino ||
			    (p->dir = fdopendir(fd)) == NULL) {
				close(fd);
				return -ESTALE;
			}
		}
		pfd = dirfd(p->dir);
	}
	closedir(c->dir);
	c->dir = NULL;
	r = 0;
	if (!w->measure && unlinkat(pfd, c->name, AT_REMOVEDIR) < 0)
		r = -errno;
	switch (r) {
	case 0:
		if (!w->measure)
			w->st->dirs++;
		break;
	case -ENOENT:
		break;
	case -ENOTEMPTY:
	case -EEXIST:
		if (p == NULL) {
			/* The root: the caller sees it still exists. */
			break;
		}
		if (c->left || w->rescans >= WALK_RESCANS)
			p->left = 1;
		else
			p->again = 1;
		break;
	default:
		w->depth--;
		if (p != NULL)
			p->left = 1;
		walk_error(w, c->name, "cannot remove directory", r);
		free(c->name);
		return 0;
	}
	free(c->name);
	w->depth--;
	return 0;
}

/* Walk (and unless measuring, remove) the tree top/name. */
static int
walk_run(struct walk *w)
{
	struct statx	 stx;
	struct dirent	*de;
	struct level	*l;
	unsigned	 restarts = 0;
	int		 r;
	unsigned char	 type;

	if ((r = fd_statx(w->top, &stx)) < 0)
		return r;
	w->dev = makedev(stx.stx_dev_major, stx.stx_dev_minor);
	w->have_mnt_id = (stx.stx_mask & STATX_MNT_ID) != 0;
	w->mnt_id = stx.stx_mnt_id;
	w->top_ino = stx.stx_ino;
restart:
	w->stale = 0;
	if ((r = walk_descend(w, w->top, w->name)) <= 0)
		return r;
	while (w->depth > 0) {
		if (w->stale) {
			walk_clear(w);
			if (++restarts > WALK_RESTARTS)
				return -EAGAIN;
			log_info("%s: a directory moved out during removal; "
			    "left alone, restarting from the top",
			    w->report_id);
			goto restart;
		}
		l = &w->lv[w->depth - 1];
		errno = 0;
		if ((de = readdir(l->dir)) == NULL) {
			if (errno != 0) {
				l->left = 1;
				walk_error(w, ".", "cannot read", -errno);
			}
			if (l->again && w->rescans < WALK_RESCANS) {
				w->rescans++;
				l->again = 0;
				rewinddir(l->dir);
				continue;
			}
			if ((r = walk_pop(w)) == -ESTALE) {
				walk_clear(w);
				if (++restarts > WALK_RESTARTS)
					return -EAGAIN;
				log_info("%s: tree moved during removal; "
				    "restarting from the top", w->report_id);
				goto restart;
			}
			continue;
		}
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		type = de->d_type;
		if (type == DT_UNKNOWN || (w->measure && type != DT_DIR)) {
			if (statx(dirfd(l->dir), de->d_name,
			    AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
			    STATX_TYPE | STATX_BLOCKS, &stx) < 0)
				continue;
			type = IFTODT(stx.stx_mode);
			if (w->measure && type != DT_DIR)
				w->bytes += stx.stx_blocks * 512;
		}
		if (type == DT_DIR) {
			if ((r = walk_descend(w, dirfd(l->dir),
			    de->d_name)) < 0) {
				walk_clear(w);
				return r;
			}
		} else if (!w->measure)
			walk_unlink(w, de->d_name);
	}
	return 0;
}

static void
walk_init(struct walk *w, int top, const char *name, const char *report_id,
    struct rmtree_stats *st, int measure)
{
	memset(w, 0, sizeof *w);
	w->top = top;
	w->name = name;
	w->report_id = report_id;
	w->st = st;
	w->measure = measure;
}

static void
walk_free(struct walk *w)
{
	walk_clear(w);
	free(w->lv);
}

/* Open BASE/.wsfs-trash, creating it; it must belong to us and no one else. */
static int
trash_open(int base_fd, int create)
{
	struct stat	sb;
	int		fd;

	if (create && mkdirat(base_fd, RMTREE_TRASH_DIR, 0700) < 0 &&
	    errno != EEXIST)
		return -errno;
	if ((fd = nofollow_open_beneath(base_fd, RMTREE_TRASH_DIR)) < 0)
		return fd;
	if (fstat(fd, &sb) < 0) {
		close(fd);
		return -errno;
	}
	if ((sb.st_uid != geteuid() && sb.st_uid != 0) ||
	    (sb.st_mode & (S_IWGRP | S_IWOTH))) {
		log_warn("%s: owned by uid %u mode %04o; refusing to use it",
		    RMTREE_TRASH_DIR, (unsigned)sb.st_uid,
		    (unsigned)(sb.st_mode & 07777));
		close(fd);
		return -EPERM;
	}
	return fd;
}

int
rmtree_trash_move(int base_fd, const char *name, char *trash, size_t trashlen)
{
	struct statx	stx, bstx;
	uint64_t	nonce;
	int		tfd = -1, r;

	if (!name_valid(name) || trashlen < 300)
		return -EINVAL;
	if ((r = fd_statx(base_fd, &bstx)) < 0)
		return r;
	if (statx(base_fd, name, AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
	    STATX_WANT, &stx) < 0)
		return -errno;
	if (!S_ISDIR(stx.stx_mode))
		return -ENOTDIR;
	if (stx.stx_dev_major != bstx.stx_dev_major ||
	    stx.stx_dev_minor != bstx.stx_dev_minor ||
	    ((stx.stx_mask & bstx.stx_mask & STATX_MNT_ID) &&
	    stx.stx_mnt_id != bstx.stx_mnt_id))
		return -EXDEV;
	if ((tfd = trash_open(base_fd, 1)) < 0)
		return tfd;
	if (getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) {
		r = -EIO;
		goto out;
	}
	/* Keep within NAME_MAX whatever the name's length. */
	snprintf(trash, trashlen, "%.200s.%016llx", name,
	    (unsigned long long)nonce);
	/*
	 * NFS and FUSE filesystems may not know RENAME_NOREPLACE; the 64-bit
	 * random nonce is what keeps the name unused there.
	 */
	if (renameat2(base_fd, name, tfd, trash, RENAME_NOREPLACE) < 0 &&
	    (errno != EINVAL || renameat(base_fd, name, tfd, trash) < 0)) {
		r = -errno;
		goto out;
	}
	/* The rename must reach the disk before any unlink inside it. */
	if (fsync(tfd) < 0 || fsync(base_fd) < 0) {
		r = -errno;
		goto out;
	}
	r = 0;
out:
	close(tfd);
	return r;
}

int
rmtree_trash_delete(int base_fd, const char *trashname, struct rmtree_stats *st)
{
	struct rmtree_stats	 dummy;
	struct walk		 w;
	struct stat		 sb;
	int			 tfd, r;

	if (st == NULL) {
		memset(&dummy, 0, sizeof dummy);
		st = &dummy;
	}
	if (strchr(trashname, '/') != NULL || trashname[0] == '\0' ||
	    strcmp(trashname, ".") == 0 || strcmp(trashname, "..") == 0)
		return -EINVAL;
	if ((tfd = trash_open(base_fd, 0)) < 0)
		return tfd;
	walk_init(&w, tfd, trashname, trashname, st, 0);
	r = walk_run(&w);
	walk_free(&w);
	if (r == 0 && fstatat(tfd, trashname, &sb, AT_SYMLINK_NOFOLLOW) == 0)
		r = -EBUSY;
	close(tfd);
	return r;
}

int
rmtree_remove(int base_fd, const char *name, struct rmtree_stats *st)
{
	char	trash[320];
	int	r;

	if ((r = rmtree_trash_move(base_fd, name, trash, sizeof trash)) < 0)
		return r;
	return rmtree_trash_delete(base_fd, trash, st);
}

int
rmtree_names(int dirfd, char ***out)
{
	struct dirent	 *de;
	DIR		 *d;
	char		**v = NULL, **nv;
	size_t		  n = 0, cap = 0;
	int		  fd, r = 0;

	if ((fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -errno;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return -errno;
	}
	for (;;) {
		errno = 0;
		if ((de = readdir(d)) == NULL) {
			r = -errno;
			break;
		}
		if (strcmp(de->d_name, ".") == 0 ||
		    strcmp(de->d_name, "..") == 0)
			continue;
		if (n + 2 > cap) {
			cap = cap ? cap * 2 : 16;
			if ((nv = reallocarray(v, cap, sizeof *v)) == NULL) {
				r = -ENOMEM;
				break;
			}
			v = nv;
		}
		if ((v[n] = strdup(de->d_name)) == NULL) {
			r = -ENOMEM;
			break;
		}
		v[++n] = NULL;
	}
	closedir(d);
	if (r < 0 || v == NULL) {
		while (n > 0)
			free(v[--n]);
		free(v);
		if (r < 0)
			return r;
		if ((v = calloc(1, sizeof *v)) == NULL)
			return -ENOMEM;
	}
	*out = v;
	return 0;
}

void
rmtree_names_free(char **v)
{
	size_t	i;

	if (v == NULL)
		return;
	for (i = 0; v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

int
rmtree_empty_trash(int base_fd, struct rmtree_stats *st, uint64_t *finished)
{
	char	**names = NULL;
	size_t	  i;
	int	  tfd, r;

	if ((tfd = trash_open(base_fd, 0)) < 0)
		return tfd == -ENOENT ? 0 : tfd;
	r = rmtree_names(tfd, &names);
	close(tfd);
	if (r < 0)
		return r;
	for (i = 0; names[i] != NULL; i++) {
		r = rmtree_trash_delete(base_fd, names[i], st);
		if (r == 0) {
			if (finished != NULL)
				(*finished)++;
			log_info("finished removing trash entry %s", names[i]);
			report(st, RMTREE_EV_TRASH, names[i], "finished");
		} else if (r != -EBUSY) {
			log_warn("trash entry %s: %s", names[i], strerror(-r));
			report(st, RMTREE_EV_ERROR, names[i], strerror(-r));
		}
	}
	rmtree_names_free(names);
	return 0;
}

int
rmtree_size(int dirfd, const char *name, uint64_t *bytes)
{
	struct rmtree_stats	st;
	struct walk		w;
	int			r;

	memset(&st, 0, sizeof st);
	walk_init(&w, dirfd, name, name, &st, 1);
	r = walk_run(&w);
	if (r == 0)
		*bytes = w.bytes;
	walk_free(&w);
	return r;
}

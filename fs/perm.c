/*
 * Access rules the kernel leaves to wsfs. With default_permissions the
 * kernel checks each request against the caller's rights, except where it
 * believes there is nothing to check (an O_CREAT open it takes for a fresh
 * create, though the name was taken on the backing store meanwhile) or
 * leaves the work to the server (clearing setuid and setgid on a direct
 * write); the daemon keeps CAP_DAC_OVERRIDE and CAP_FSETID, so that is
 * done here, for the caller's uid, gid and supplementary groups. Here too:
 * who may change the top level of the mount, and how a new object becomes
 * its creator's before anyone can reach it.
 */
#include "config.h"

#include <sys/random.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "wsfs.h"

/*
 * New directories, FIFOs, sockets and symlinks are made here, given their
 * owner and mode, and only then moved into place: made in place, the name
 * could be swapped on the backing store before the chown, which would then
 * give someone else's object to the caller. A directory at the top of
 * SOURCE, hidden from the mount as every name starting with '.' there;
 * only root may write in it.
 */
#define PERM_STAGE_DIR		".wsfs-new"
/* What a crash left there is removed once this old. */
#define PERM_STAGE_STALE_S	3600

static struct {
	pthread_mutex_t	 lock;
	int		 fd;		/* O_PATH of the stage, -1: not yet; lock */
} stage = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.fd = -1,
};

/*
 * The top level of the mount is the list of workspaces, made and removed
 * by the admin with wsctl on SOURCE: through the mount only the uid named
 * by admin_uid changes it, if any, and only with directories (anything
 * else there would not show and would stay behind in SOURCE). Names
 * starting with '.' there belong to wsfs and wsctl. dir is the directory
 * whose entries change, or (name NULL) the object whose attributes do;
 * type is what a create makes, 0 for other changes.
 */
int
perm_may_change(fuse_req_t req, struct inode *dir, const char *name,
    mode_t type)
{
	uid_t	uid = fuse_req_ctx(req)->uid;

	if (dir != inode_root())
		return 0;
	if (wsfs.conf.admin_uid < 0 || uid != (uid_t)wsfs.conf.admin_uid) {
		stats_count(SC_CONFINE_REFUSED, 1);
		log_limited(LOG_NOTICE, "top-change", "refused a change at the "
		    "top of %s by uid %u (admin_uid %s)", wsfs.source,
		    (unsigned)uid, wsfs.conf.admin_uid < 0 ? "not set" :
		    "is another uid");
		return -EPERM;
	}
	if ((name != NULL && name[0] == '.') || (type != 0 && !S_ISDIR(type)))
		return -EPERM;
	return 0;
}

/* Is gid the caller's primary or one of its supplementary groups? */
static int
perm_in_group(fuse_req_t req, gid_t gid)
{
	gid_t	 buf[64], *list = buf;
	int	 n, cap = 64, i, found = 0;

	if (fuse_req_ctx(req)->gid == gid)
		return 1;
	n = fuse_req_getgroups(req, cap, buf);
	if (n > cap) {
		/* Asked again: the list may have grown in between. */
		if ((list = calloc((size_t)n, sizeof *list)) == NULL)
			return 0;
		cap = n;
		n = fuse_req_getgroups(req, cap, list);
	}
	/* Unknown groups (the caller is gone) count as not a member. */
	for (i = 0; i < n && i < cap; i++)
		if (list[i] == gid) {
			found = 1;
			break;
		}
	if (list != buf)
		free(list);
	return found;
}

/*
 * May the caller have want (R_OK, W_OK) on st? By the mode bits, as the
 * kernel checks a FUSE inode: an ACL on the backing store is seen by the
 * kernel nowhere else on the mount, and its mask is the group bits, so this
 * never grants more than the mode does. Root stands for CAP_DAC_OVERRIDE,
 * as it does for the kernel.
 */
static int
perm_access(fuse_req_t req, const struct stat *st, int want)
{
	uid_t	uid = fuse_req_ctx(req)->uid;
	mode_t	bits;

	if (uid == 0)
		return 0;
	if (uid == st->st_uid)
		bits = st->st_mode >> 6;
	else if (perm_in_group(req, st->st_gid))
		bits = st->st_mode >> 3;
	else
		bits = st->st_mode;
	return ((int)bits & want) == want ? 0 : -EACCES;
}

/*
 * An O_CREAT open found name taken: what the kernel would have checked had
 * it seen the file, it did not (it answers the caller as for a file just
 * made). Look at what is there without opening it, check it, then open that
 * very inode. A FIFO, socket or device is never opened (a FIFO would hold
 * the worker until a writer came), nor a directory.
 */
int
perm_open_existing(fuse_req_t req, int pfd, const char *name, int flags)
{
	struct stat	st;
	int		pathfd, fd, want;

	/*
	 * -EXDEV: a mount point, or moved out of the workspace while the walk
	 * ran; refused as a lookup refuses it.
	 */
	if ((pathfd = inode_openat_beneath(pfd, name, O_PATH, 0)) < 0)
		return pathfd == -EXDEV ? -EACCES : pathfd;
	if (fstat(pathfd, &st) == -1) {
		fd = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		fd = S_ISDIR(st.st_mode) ? -EISDIR :
		    S_ISLNK(st.st_mode) ? -ELOOP : -EACCES;
		goto out;
	}
	switch (flags & O_ACCMODE) {
	case O_RDONLY:
		want = R_OK;
		break;
	case O_WRONLY:
		want = W_OK;
		break;
	default:
		want = R_OK | W_OK;
		break;
	}
	if (flags & O_TRUNC)
		want |= W_OK;
	if ((fd = perm_access(req, &st, want)) < 0)
		goto out;
	/* Through /proc: the inode checked, whatever the name holds now. */
	fd = inode_proc_open(pathfd,
	    flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY));
out:
	close(pathfd);
	return fd;
}

/*
 * The kernel's rule for a write or truncate by someone without CAP_FSETID
 * (setattr_should_drop_suidgid): setuid always goes, setgid when the group
 * may execute or the writer is not in the file's group. Root keeps both.
 */
void
perm_write_kill_priv(fuse_req_t req, int fd)
{
	struct stat	st;
	mode_t		kill = 0;

	if (fuse_req_ctx(req)->uid == 0 || fstat(fd, &st) == -1 ||
	    !S_ISREG(st.st_mode) || !(st.st_mode & (S_ISUID | S_ISGID)))
		return;
	if (st.st_mode & S_ISUID)
		kill |= S_ISUID;
	if ((st.st_mode & S_ISGID) && ((st.st_mode & S_IXGRP) ||
	    !perm_in_group(req, st.st_gid)))
		kill |= S_ISGID;
	if (kill != 0 && fchmod(fd, st.st_mode & 07777 & ~kill) == -1)
		log_warn("clearing setuid/setgid: %s", strerror(errno));
}

/*
 * Through the page cache, without FUSE_HANDLE_KILLPRIV_V2, the kernel
 * clears the bits itself (a setattr before the write), except setgid
 * without group execute, which FUSE's clearing leaves: that case costs an
 * fstat per write. So does every write the kernel leaves to the server
 * (direct I/O, or with FUSE_HANDLE_KILLPRIV_V2), since a chmod may come
 * at any time.
 */
int
perm_write_kills_priv(int fd, const struct stat *known, int flags,
    int server)
{
	struct stat	st;

	if ((flags & O_ACCMODE) == O_RDONLY)
		return 0;
	if (server)
		return 1;
	if (known == NULL) {
		if (fstat(fd, &st) == -1)
			return 0;
		known = &st;
	}
	return (known->st_mode & (S_ISGID | S_IXGRP)) == S_ISGID;
}

/* prefix and 128 random bits in hex: a name no one else will pick. */
static int
perm_random_name(const char *prefix, char *buf, size_t len)
{
	unsigned long long	n[2];

	if (getrandom(n, sizeof n, 0) != (ssize_t)sizeof n)
		return -EIO;
	snprintf(buf, len, "%s%016llx%016llx", prefix, n[0], n[1]);
	return 0;
}

/* A stage must be a directory in which no one but us may write. */
static int
perm_stage_check(int fd)
{
	struct stat	st;

	if (fstat(fd, &st) == -1)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH)))
		return -EPERM;
	return 0;
}

/* Remove what a crash left in the stage: empty objects, hours old. */
static void
perm_stage_sweep(int sfd)
{
	struct dirent	*de;
	struct stat	 st;
	DIR		*dp;
	time_t		 now = time(NULL);
	int		 fd;

	if ((fd = openat(sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1)
		return;
	if ((dp = fdopendir(fd)) == NULL) {
		close(fd);
		return;
	}
	while ((de = readdir(dp)) != NULL) {
		if (strncmp(de->d_name, "n.", 2) != 0 ||
		    fstatat(sfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) == -1 ||
		    st.st_ctime > now - PERM_STAGE_STALE_S)
			continue;
		(void)unlinkat(sfd, de->d_name,
		    S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0);
	}
	closedir(dp);
}

/* The stage at the top of SOURCE, made at first use; kept for good. */
static int
perm_stage_global(void)
{
	int	fd, r;

	pthread_mutex_lock(&stage.lock);
	if ((fd = stage.fd) >= 0)
		goto out;
	if (mkdirat(wsfs.source_fd, PERM_STAGE_DIR, 0700) == -1 &&
	    errno != EEXIST) {
		fd = -errno;
		goto out;
	}
	fd = inode_openat_beneath(wsfs.source_fd, PERM_STAGE_DIR,
	    O_PATH | O_DIRECTORY, 0);
	if (fd >= 0 && (r = perm_stage_check(fd)) < 0) {
		close(fd);
		fd = r;
	}
	if (fd >= 0) {
		perm_stage_sweep(fd);
		stage.fd = fd;
	}
out:
	pthread_mutex_unlock(&stage.lock);
	if (fd < 0)
		log_limited(LOG_WARNING, "stage", "%s/%s: %s; new objects are "
		    "staged in their own directory", wsfs.source,
		    PERM_STAGE_DIR, strerror(-fd));
	return fd;
}

/*
 * A stage of one use inside the parent itself, for a parent the global
 * stage cannot reach by rename (another filesystem, a project quota). It
 * is root's and 0700, so only root may write in it even if someone renames
 * it meanwhile; the caller removes it by name, which takes only an empty
 * directory.
 */
static int
perm_stage_local(int pfd, char *name, size_t len)
{
	int	fd, r;

	if ((r = perm_random_name(".wsfs-new.", name, len)) < 0)
		return r;
	if (mkdirat(pfd, name, 0700) == -1)
		return -errno;
	fd = inode_openat_beneath(pfd, name, O_PATH | O_DIRECTORY, 0);
	if (fd >= 0 && perm_stage_check(fd) < 0) {
		/* Swapped for someone else's directory: not ours to use. */
		close(fd);
		fd = -EIO;
	}
	if (fd < 0)
		(void)unlinkat(pfd, name, AT_REMOVEDIR);
	return fd;
}

/*
 * The owner and final mode of a new object in the directory pst, as a local
 * filesystem gives them: the caller's uid; the caller's gid, or the
 * directory's under a setgid directory, where a new directory is setgid
 * too. The mode from the kernel is already masked with the umask and
 * stripped of setgid where the caller may not have it.
 */
static void
perm_new_owner(fuse_req_t req, const struct stat *pst, mode_t mode,
    uid_t *uid, gid_t *gid, mode_t *final)
{
	const struct fuse_ctx	*ctx = fuse_req_ctx(req);

	*uid = ctx->uid;
	*gid = ctx->gid;
	*final = mode & 07777;
	if (pst->st_mode & S_ISGID) {
		*gid = pst->st_gid;
		if (S_ISDIR(mode))
			*final |= S_ISGID;
	}
}

/*
 * Give the object open as fd (st: its attributes) to uid and gid, then set
 * its final mode: a chown clears setuid and setgid, so they come last.
 */
static int
perm_give(int fd, const struct stat *st, uid_t uid, gid_t gid, mode_t final)
{
	char	path[64];

	if ((st->st_uid != uid || st->st_gid != gid) &&
	    fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
		return -errno;
	if (S_ISLNK(st->st_mode) || (st->st_mode & 07777) == final)
		return 0;
	inode_procpath(fd, path, sizeof path);
	return chmod(path, final) == -1 ? -errno : 0;
}

int
perm_set_owner(fuse_req_t req, int pfd, int fd, mode_t mode)
{
	struct stat	pst, st;
	uid_t		uid;
	gid_t		gid;
	mode_t		final;

	if (fstat(pfd, &pst) == -1 ||
	    fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1)
		return -errno;
	perm_new_owner(req, &pst, mode, &uid, &gid, &final);
	return perm_give(fd, &st, uid, gid, final);
}

/*
 * Move the finished object from the stage to its name, never over
 * something there. NFS and FUSE filesystems may not know RENAME_NOREPLACE:
 * then a link, which fails on a taken name, or for a directory a rename
 * after a check, which can replace only an empty directory made in
 * between.
 */
static int
perm_place(int sfd, const char *tmp, int pfd, const char *name, mode_t type)
{
	struct stat	st;

	if (renameat2(sfd, tmp, pfd, name, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EINVAL)
		return -errno;
	if (!S_ISDIR(type)) {
		if (linkat(sfd, tmp, pfd, name, 0) == -1)
			return -errno;
		(void)unlinkat(sfd, tmp, 0);
		return 0;
	}
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return -EEXIST;
	if (renameat(sfd, tmp, pfd, name) == 0)
		return 0;
	return errno == ENOTEMPTY || errno == ENOTDIR ? -EEXIST : -errno;
}

/* Make the object in the stage sfd, finish it, and move it to pfd/name. */
static int
perm_make_in(fuse_req_t req, const struct stat *pst, int sfd, int pfd,
    const char *name, mode_t mode, const char *link)
{
	struct stat	st;
	char		tmp[48];
	mode_t		type = mode & S_IFMT, final;
	uid_t		uid;
	gid_t		gid;
	int		fd, r;

	if ((r = perm_random_name("n.", tmp, sizeof tmp)) < 0)
		return r;
	/* Never set-id while it is root's: the bits come with the owner. */
	if (S_ISDIR(type))
		r = mkdirat(sfd, tmp, mode & 01777);
	else if (S_ISLNK(type))
		r = symlinkat(link, sfd, tmp);
	else
		r = mknodat(sfd, tmp, type | (mode & 01777), 0);
	if (r == -1)
		return -errno;
	if ((fd = inode_openat_beneath(sfd, tmp, O_PATH, 0)) < 0) {
		r = fd;
		goto fail;
	}
	if (fstatat(fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) == -1) {
		r = -errno;
		goto fail;
	}
	perm_new_owner(req, pst, mode, &uid, &gid, &final);
	if ((r = perm_give(fd, &st, uid, gid, final)) < 0 ||
	    (r = perm_place(sfd, tmp, pfd, name, type)) < 0)
		goto fail;
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	(void)unlinkat(sfd, tmp, S_ISDIR(type) ? AT_REMOVEDIR : 0);
	return r;
}

int
perm_make(fuse_req_t req, struct inode *parent, int pfd, const char *name,
    mode_t mode, const char *link, struct fuse_entry_param *e)
{
	struct stat	pst;
	char		local[64];
	int		sfd, r = -EXDEV;

	if (fstat(pfd, &pst) == -1)
		return -errno;
	if ((sfd = perm_stage_global()) >= 0)
		r = perm_make_in(req, &pst, sfd, pfd, name, mode, link);
	if (r == -EXDEV) {
		if ((sfd = perm_stage_local(pfd, local, sizeof local)) < 0)
			return sfd;
		r = perm_make_in(req, &pst, sfd, pfd, name, mode, link);
		close(sfd);
		(void)unlinkat(pfd, local, AT_REMOVEDIR);
	}
	if (r < 0)
		return r;
	return inode_adopt(parent, name, r, e);
}

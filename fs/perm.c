/*
 * Access rules the kernel leaves to wsfs. With default_permissions the
 * kernel checks each request against the caller's rights, except where it
 * believes there is nothing to check (an O_CREAT open it takes for a fresh
 * create, though the name was taken on the backing store meanwhile) or
 * leaves the work to the server (clearing setuid and setgid on a direct
 * write). The daemon keeps CAP_DAC_OVERRIDE and CAP_FSETID, so what the
 * kernel skipped is done here, for the caller's uid, gid and supplementary
 * groups.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wsfs.h"

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
	char		path[32];
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
	snprintf(path, sizeof path, "%d", pathfd);
	fd = openat(wsfs.proc_fd, path,
	    (flags & ~(O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY)) | O_CLOEXEC);
	if (fd == -1)
		fd = -errno;
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
 * Through the page cache the kernel clears the bits itself (a setattr
 * before the write), except setgid without group execute, which FUSE's
 * clearing leaves: that case costs an fstat per write, and so does every
 * direct write, since a chmod may come at any time.
 */
int
perm_write_kills_priv(int fd, int flags, int direct)
{
	struct stat	st;

	if ((flags & O_ACCMODE) == O_RDONLY)
		return 0;
	return direct || (fstat(fd, &st) == 0 &&
	    (st.st_mode & (S_ISGID | S_IXGRP)) == S_ISGID);
}

/*
 * Opening directories without following a symlink anywhere on the way:
 * the admin-given paths of wsctl and wsfs (a scratch base, SOURCE) and the
 * names below a directory fd.
 */
#ifndef WSFS_NOFOLLOW_H
#define WSFS_NOFOLLOW_H

#define NOFOLLOW_CREATE	0x1	/* make missing directories, mode 0755 */

/*
 * Open the directory path (absolute, or relative to the working
 * directory) one component at a time, never through a symlink: -ELOOP if
 * path or any directory above it is a symlink, -ENOTDIR if one is not a
 * directory, -ENOENT if one is missing (unless NOFOLLOW_CREATE). Only
 * search permission is needed above the last component. Returns an
 * O_RDONLY | O_DIRECTORY | O_CLOEXEC descriptor that the caller owns, or
 * -errno.
 */
int	nofollow_open_path(const char *path, int flags);
/*
 * Open the directory dirfd/name, never leaving dirfd: openat2 with
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV |
 * RESOLVE_NO_MAGICLINKS, so a symlink anywhere gives -ELOOP and a mount
 * point -EXDEV. Returns an O_RDONLY | O_DIRECTORY | O_CLOEXEC descriptor
 * that the caller owns, or -errno.
 */
int	nofollow_open_beneath(int dirfd, const char *name);

#endif

/*
 * The mounts of the caller's mount namespace, from /proc/self/mountinfo:
 * wsctl finds a wsfs mount by its SOURCE, wsfs its own new mount's device.
 */
#ifndef WSFS_MOUNTINFO_H
#define WSFS_MOUNTINFO_H

struct mountinfo {
	unsigned int	 major, minor;	/* st_dev of the mount's files */
	const char	*root;		/* the mounted directory of the fs */
	const char	*point;		/* the mount point */
	const char	*fstype;	/* "ext4", "fuse.wsfs", ... */
	const char	*source;
};

/*
 * Call fn for each mount, oldest first, with its strings unescaped
 * (mountinfo writes a space as \040) and valid during the call only,
 * until fn returns non-zero. Returns that value, 0 after the last mount,
 * or -errno if mountinfo cannot be read.
 */
int	mountinfo_walk(int (*fn)(const struct mountinfo *, void *), void *arg);

#endif

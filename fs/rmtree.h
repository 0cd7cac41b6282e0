/*
 * Safe removal of directory trees inside a base directory: the leaf under
 * the scratch sweeper (sweep.c), wsctl scratch end and wsctl workspace rm.
 *
 * A tree is first renamed into BASE/.wsfs-trash/NAME.NONCE and only then
 * deleted, so a crash half-way leaves a trash entry that the next
 * rmtree_empty_trash() finishes, never a half-deleted live tree. The walk
 * never follows a symlink, never enters another mount (mount points are
 * reported and left in place), never resolves a path outside the
 * directory it started from, and holds a bounded number of descriptors
 * however deep the tree is.
 *
 * Every function returns 0 or -errno unless it says otherwise. None of
 * them aborts; all may be called from any thread.
 */
#ifndef WSFS_RMTREE_H
#define WSFS_RMTREE_H

#include <stddef.h>
#include <stdint.h>

#define RMTREE_TRASH_DIR	".wsfs-trash"

enum rmtree_event {
	RMTREE_EV_TRASH,	/* a leftover trash entry was finished */
	RMTREE_EV_MOUNT,	/* a mount point was found and not crossed */
	RMTREE_EV_ERROR,	/* something could not be removed */
};

/*
 * Called once per finding. id is the tree (or trash entry) name; detail
 * is a short human-readable reason or path. Both strings are only valid
 * during the call.
 */
typedef void	rmtree_report_fn(void *arg, enum rmtree_event ev,
		    const char *id, const char *detail);

/*
 * Counters of one or more removals. The caller zeroes it and may set
 * report/report_arg to hear about skipped mount points and errors; every
 * call adds to the counters.
 */
struct rmtree_stats {
	rmtree_report_fn *report;
	void		*report_arg;
	uint64_t	 files;		/* non-directories unlinked */
	uint64_t	 dirs;		/* directories removed */
	uint64_t	 mounts;	/* mount points left in place */
	uint64_t	 left;		/* entries that could not be removed */
};

/*
 * Remove BASE/NAME (NAME: one path component, not starting with '.'):
 * rename it into the trash, then delete it. base_fd must be a directory;
 * st may be NULL. Returns 0 when the tree is gone, -ENOENT if NAME does
 * not exist, -ENOTDIR if it is not a directory, -EXDEV if NAME is itself
 * a mount point, -EBUSY if it went to the trash but something inside (a
 * mount point, an immutable file) was left there, -EINVAL for a bad name.
 */
int	rmtree_remove(int base_fd, const char *name, struct rmtree_stats *st);

/*
 * The two halves of rmtree_remove for callers that must do something in
 * between (the sweeper drops the workspace's metadata and lock, wsctl
 * workspace rm checks the inode again). rmtree_trash_move renames
 * BASE/NAME into the trash and fsyncs both directories; it writes the
 * trash entry's name into trash (trashlen >= 300). rmtree_trash_delete
 * deletes BASE/.wsfs-trash/TRASHNAME; st may be NULL.
 */
int	rmtree_trash_move(int base_fd, const char *name, char *trash,
	    size_t trashlen);
int	rmtree_trash_delete(int base_fd, const char *trashname,
	    struct rmtree_stats *st);

/*
 * Finish every leftover entry in BASE/.wsfs-trash (a crash or a mount
 * point interrupted it). *finished (may be NULL) counts entries fully
 * removed. A missing trash directory is not an error.
 */
int	rmtree_empty_trash(int base_fd, struct rmtree_stats *st,
	    uint64_t *finished);

/*
 * Allocated size in bytes of the tree DIRFD/NAME, walked with the same
 * rules (no symlinks followed, no mounts crossed); hard links count once
 * per link. *bytes is set only on success.
 */
int	rmtree_size(int dirfd, const char *name, uint64_t *bytes);

/*
 * The names in dirfd but "." and "..", as one NULL-terminated array that
 * the caller owns and frees with rmtree_names_free (NULL is a no-op).
 * dirfd itself is not moved (the names are read through a new open of
 * "."). *out is set only on success.
 */
int	rmtree_names(int dirfd, char ***out);
void	rmtree_names_free(char **v);

#endif

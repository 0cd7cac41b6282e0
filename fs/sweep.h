/*
 * Safe removal of directory trees inside a base directory, and the scratch
 * sweeper built on it. Shared by wsfs (the sweep timer), wsctl sweep, wsctl
 * scratch end and wsctl workspace rm.
 *
 * A tree is first renamed into BASE/.wsfs-trash/NAME.NONCE and only then
 * deleted, so a crash half-way leaves a trash entry that the next
 * sweep_empty_trash() finishes, never a half-deleted live workspace. The
 * walk never follows a symlink, never enters another mount (mount points
 * are reported and left in place), never resolves a path outside the
 * directory it started from, and holds a bounded number of descriptors
 * however deep the tree is.
 *
 * Every function returns 0 or -errno. None of them aborts.
 */
#ifndef WSFS_SWEEP_H
#define WSFS_SWEEP_H

#include <stdint.h>

#define SWEEP_TRASH_DIR		".wsfs-trash"

struct scratch_base;

enum sweep_event {
	SWEEP_EV_REMOVED,	/* a workspace was removed */
	SWEEP_EV_WOULD_REMOVE,	/* dry run: it would have been removed */
	SWEEP_EV_KEPT,		/* a workspace was kept; detail says why */
	SWEEP_EV_TRASH,		/* a leftover trash entry was finished */
	SWEEP_EV_MOUNT,		/* a mount point was found and not crossed */
	SWEEP_EV_ERROR,		/* something could not be removed */
};

/*
 * Called once per decision or finding. id is the workspace (or trash entry)
 * name; detail is a short human-readable reason or path. Both strings are
 * only valid during the call.
 */
typedef void	sweep_report_fn(void *arg, enum sweep_event ev, const char *id,
		    const char *detail);

/*
 * Counters of one or more removals. The caller zeroes it and may set
 * report/report_arg to hear about skipped mount points and errors; every
 * call adds to the counters.
 */
struct sweep_stats {
	sweep_report_fn	*report;
	void		*report_arg;
	uint64_t	 files;		/* non-directories unlinked */
	uint64_t	 dirs;		/* directories removed */
	uint64_t	 mounts;	/* mount points left in place */
	uint64_t	 left;		/* entries that could not be removed */
};

/*
 * Remove BASE/NAME (NAME: one path component, not starting with '.'):
 * rename it into the trash, then delete it. base_fd must be a directory.
 * Returns 0 when the tree is gone, -ENOENT if NAME does not exist,
 * -ENOTDIR if it is not a directory, -EXDEV if NAME is itself a mount
 * point, -EBUSY if it went to the trash but something inside (a mount
 * point, an immutable file) was left there, -EINVAL for a bad name.
 */
int	sweep_remove_tree(int base_fd, const char *name, struct sweep_stats *st);

/*
 * The two halves of sweep_remove_tree for callers that must do something in
 * between (the scratch sweeper drops the workspace's metadata and lock).
 * sweep_trash_move renames BASE/NAME into the trash and fsyncs both
 * directories; it writes the trash entry's name into trash (size >= 300).
 * sweep_trash_delete deletes BASE/.wsfs-trash/TRASHNAME.
 */
int	sweep_trash_move(int base_fd, const char *name, char *trash,
	    size_t trashlen);
int	sweep_trash_delete(int base_fd, const char *trashname,
	    struct sweep_stats *st);

/*
 * Finish every leftover entry in BASE/.wsfs-trash (a crash or a mount
 * point interrupted it). *finished (may be NULL) counts entries fully
 * removed. A missing trash directory is not an error.
 */
int	sweep_empty_trash(int base_fd, struct sweep_stats *st,
	    uint64_t *finished);

/*
 * Allocated size in bytes of the tree DIRFD/NAME, walked with the same
 * rules (no symlinks followed, no mounts crossed); hard links count once
 * per link.
 */
int	sweep_tree_size(int dirfd, const char *name, uint64_t *bytes);

/*
 * Unlink files in io_uring batches (when the kernel allows it) instead of
 * one unlinkat at a time. Default off: unlinks in one directory serialise
 * on its lock, and on the machines measured the batches were slower.
 * Process-wide; set it before sweeping.
 */
void	sweep_use_uring(int on);

/* The scratch sweeper. */
struct sweep_params {
	double		 ttl_hours;	/* idle time before removal */
	int		 dry_run;	/* decide and report, remove nothing */
	sweep_report_fn	*report;	/* may be NULL */
	void		*report_arg;
};

struct sweep_result {
	uint64_t	 removed;	/* workspaces removed (or would be) */
	uint64_t	 kept;		/* workspaces kept, in use or not */
	uint64_t	 in_use;	/* of those, kept because in use */
	uint64_t	 trash;		/* leftover trash entries finished */
	uint64_t	 errors;
	struct sweep_stats stats;	/* files, dirs, mount points */
};

/*
 * One sweep of a scratch base: finish the trash, then remove every
 * workspace whose task ended and every one not in use and idle longer than
 * ttl_hours. Only one sweep runs per base at a time: returns -EWOULDBLOCK
 * at once if another holds BASE/.wsfs/sweep.lock. Safe to call from any
 * thread; it blocks for as long as the deletions take.
 */
int	sweep_run(struct scratch_base *sb, const struct sweep_params *p,
	    struct sweep_result *res);

/* What the sweeper decides for one workspace, and why. */
enum sweep_verdict {
	SWEEP_KEEP_IN_USE,
	SWEEP_KEEP_FRESH,
	SWEEP_REMOVE_ENDED,
	SWEEP_REMOVE_IDLE,
};
struct scratch_meta;
/*
 * The decision itself, a pure function: now and last_use in seconds since
 * the epoch (last_use 0: never used, the creation time counts). A last use
 * in the future counts as now. *idle gets the idle time in seconds.
 */
enum sweep_verdict sweep_decide(const struct scratch_meta *m, int in_use,
	    double last_use, double now, double ttl_hours, double *idle);
const char *sweep_verdict_name(enum sweep_verdict v);

/* Seconds until the next timer sweep: the interval with +-10% jitter. */
double	sweep_next_delay(double interval_minutes);

#endif

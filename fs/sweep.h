/*
 * The scratch sweeper: one pass over a scratch base removes the
 * workspaces whose task has ended and those idle longer than the ttl that
 * nobody holds; the removal itself is rmtree.c's. Shared by wsfs (the
 * sweep timer) and wsctl sweep.
 *
 * Every function returns 0 or -errno unless it says otherwise. None of
 * them aborts.
 */
#ifndef WSFS_SWEEP_H
#define WSFS_SWEEP_H

#include <stdint.h>

#include "rmtree.h"

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

/* What one sweep does and whom it tells. */
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
	struct rmtree_stats stats;	/* files, dirs, mount points */
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

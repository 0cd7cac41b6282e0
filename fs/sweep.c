/*
 * The scratch sweeper: which workspaces of a base nothing needs any more
 * (their task ended, or they sat idle past the ttl while nobody held
 * them), decided under each workspace's lock and removed with rmtree.c.
 * wsfs runs it on a timer (scratchd.c), wsctl sweep on demand.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "nofollow.h"
#include "rmtree.h"
#include "scratch.h"
#include "sweep.h"

static void
sweep_report(const struct sweep_params *p, enum sweep_event ev,
    const char *id, const char *detail)
{
	if (p->report != NULL)
		p->report(p->report_arg, ev, id, detail);
}

/* What the removal finds (mount points, errors) goes to the same report. */
static void
sweep_relay(void *arg, enum rmtree_event ev, const char *id,
    const char *detail)
{
	static const enum sweep_event	map[] = {
		[RMTREE_EV_TRASH] = SWEEP_EV_TRASH,
		[RMTREE_EV_MOUNT] = SWEEP_EV_MOUNT,
		[RMTREE_EV_ERROR] = SWEEP_EV_ERROR,
	};

	sweep_report(arg, map[ev], id, detail);
}

const char *
sweep_verdict_name(enum sweep_verdict v)
{
	static const char	*names[] = {
		[SWEEP_KEEP_IN_USE] = "in use",
		[SWEEP_KEEP_FRESH] = "not idle long enough",
		[SWEEP_REMOVE_ENDED] = "task ended",
		[SWEEP_REMOVE_IDLE] = "idle past the ttl",
	};

	return names[v];
}

enum sweep_verdict
sweep_decide(const struct scratch_meta *m, int in_use, double last_use,
    double now, double ttl_hours, double *idle)
{
	double	last = (double)m->created;

	if (last_use > last)
		last = last_use;
	/* A clock stepped back makes the last use lie ahead: that is now. */
	if (last > now)
		last = now;
	*idle = now - last;
	if (in_use)
		return SWEEP_KEEP_IN_USE;
	if (m->lifetime == SCRATCH_LIFETIME_TASK && m->ended != 0)
		return SWEEP_REMOVE_ENDED;
	if (*idle > ttl_hours * 3600.0)
		return SWEEP_REMOVE_IDLE;
	return SWEEP_KEEP_FRESH;
}

double
sweep_next_delay(double interval_minutes)
{
	uint32_t	r;

	if (getrandom(&r, sizeof r, 0) != sizeof r)
		r = (uint32_t)time(NULL);
	return interval_minutes * 60.0 * (0.9 + 0.2 * (r / 4294967296.0));
}

/* An idle time for people: seconds when short, hours otherwise. */
static void
fmt_idle(double s, char *buf, size_t len)
{
	if (s < 360)
		snprintf(buf, len, "%.1f s", s);
	else
		snprintf(buf, len, "%.2f h", s / 3600);
}

/* Decide about one workspace of the base and act on it. */
static void
sweep_one(struct scratch_base *sb, const char *id,
    const struct sweep_params *p, struct sweep_result *res)
{
	struct scratch_meta	 m;
	struct statx		 stx;
	enum sweep_verdict	 v;
	struct rmtree_stats	*st = &res->stats;
	char			 msg[512], trash[320], idles[32];
	double			 last = 0, now, idle;
	uint64_t		 files = st->files, dirs = st->dirs;
	int			 lfd = -1, r;

	if (!scratch_id_valid(id)) {
		res->kept++;
		log_debug("%s: not a scratch workspace id; left alone", id);
		sweep_report(p, SWEEP_EV_KEPT, id, "not created by wsctl scratch");
		return;
	}
	if (statx(scratch_base_fd(sb), id, AT_SYMLINK_NOFOLLOW |
	    AT_NO_AUTOMOUNT, STATX_TYPE, &stx) < 0 || !S_ISDIR(stx.stx_mode)) {
		res->kept++;
		sweep_report(p, SWEEP_EV_KEPT, id, "not a directory; left alone");
		return;
	}
	if ((r = scratch_lock(sb, id, LOCK_EX | LOCK_NB, &lfd)) < 0) {
		res->kept++;
		if (r == -EWOULDBLOCK) {
			res->in_use++;
			log_info("%s: kept, in use", id);
			sweep_report(p, SWEEP_EV_KEPT, id, "in use");
		} else {
			log_info("%s: kept, no lock file (%s)", id,
			    strerror(-r));
			sweep_report(p, SWEEP_EV_KEPT, id,
			    "no metadata; not created by wsctl scratch");
		}
		return;
	}
	/* Decide under the lock: a holder may have just let go. */
	if ((r = scratch_read(sb, id, &m)) < 0) {
		res->kept++;
		res->errors++;
		snprintf(msg, sizeof msg, "unreadable metadata (%s); left "
		    "alone", strerror(-r));
		log_warn("%s: %s", id, msg);
		sweep_report(p, SWEEP_EV_KEPT, id, msg);
		goto out;
	}
	(void)scratch_last_use(sb, id, &last);
	now = clock_s(CLOCK_REALTIME);
	v = sweep_decide(&m, 0, last, now, p->ttl_hours, &idle);
	fmt_idle(idle, idles, sizeof idles);
	if (last > now + 1 && !p->dry_run) {
		log_warn("%s: last use %.0f s in the future; counted as now",
		    id, last - now);
		(void)scratch_touch(sb, id);
	}
	if (v == SWEEP_KEEP_FRESH) {
		res->kept++;
		snprintf(msg, sizeof msg, "idle %s, ttl %g h", idles,
		    p->ttl_hours);
		log_debug("%s: kept, %s", id, msg);
		sweep_report(p, SWEEP_EV_KEPT, id, msg);
		goto out;
	}
	if (p->dry_run) {
		res->removed++;
		snprintf(msg, sizeof msg, "%s, idle %s",
		    sweep_verdict_name(v), idles);
		sweep_report(p, SWEEP_EV_WOULD_REMOVE, id, msg);
		goto out;
	}
	if ((r = scratch_retire(sb, id, trash, sizeof trash)) < 0) {
		res->errors++;
		snprintf(msg, sizeof msg, "cannot move to the trash: %s",
		    strerror(-r));
		log_warn("%s: %s", id, msg);
		sweep_report(p, SWEEP_EV_ERROR, id, msg);
		goto out;
	}
	/* No longer a workspace: let go of the lock before the long part. */
	close(lfd);
	lfd = -1;
	res->removed++;
	r = trash[0] != '\0' ? rmtree_trash_delete(scratch_base_fd(sb), trash,
	    st) : 0;
	if (r == 0)
		snprintf(msg, sizeof msg, "%s, idle %s; %llu files, "
		    "%llu directories", sweep_verdict_name(v), idles,
		    (unsigned long long)(st->files - files),
		    (unsigned long long)(st->dirs - dirs));
	else
		snprintf(msg, sizeof msg, "%s; incomplete (%s): the rest "
		    "stays in %s/%s", sweep_verdict_name(v), strerror(-r),
		    RMTREE_TRASH_DIR, trash);
	log_info("%s: removed: %s", id, msg);
	sweep_report(p, SWEEP_EV_REMOVED, id, msg);
out:
	if (lfd >= 0)
		close(lfd);
}

/*
 * Metadata whose workspace directory is gone: a crash between the move to
 * the trash and dropping the metadata, or a workspace removed by hand.
 */
static void
sweep_orphans(struct scratch_base *sb, const struct sweep_params *p)
{
	char	**names = NULL, id[SCRATCH_ID_LEN + 1], trash[320];
	struct stat	  st;
	size_t	  i, len;
	time_t	  now;
	int	  lfd, r;

	if (rmtree_names(scratch_meta_fd(sb), &names) < 0)
		return;
	now = time(NULL);
	for (i = 0; names[i] != NULL; i++) {
		len = strlen(names[i]);
		/* Temp files of a metadata write that crashed: an hour on. */
		if (len > SCRATCH_ID_LEN + 5 &&
		    strncmp(names[i] + SCRATCH_ID_LEN, ".tmp.", 5) == 0) {
			if (!p->dry_run && fstatat(scratch_meta_fd(sb),
			    names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISREG(st.st_mode) && st.st_mtime < now - 3600)
				(void)unlinkat(scratch_meta_fd(sb), names[i], 0);
			continue;
		}
		if (len != SCRATCH_ID_LEN + 5 ||
		    strcmp(names[i] + SCRATCH_ID_LEN, ".meta") != 0)
			continue;
		memcpy(id, names[i], SCRATCH_ID_LEN);
		id[SCRATCH_ID_LEN] = '\0';
		if (!scratch_id_valid(id) ||
		    faccessat(scratch_base_fd(sb), id, F_OK,
		    AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
			continue;
		if (p->dry_run) {
			log_info("%s: metadata without workspace (dry run)",
			    id);
			continue;
		}
		if (scratch_lock(sb, id, LOCK_EX | LOCK_NB, &lfd) < 0)
			continue;
		/* Check again under the lock: create writes meta first. */
		if (faccessat(scratch_base_fd(sb), id, F_OK,
		    AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT) {
			r = scratch_retire(sb, id, trash, sizeof trash);
			log_info("%s: dropped metadata without workspace%s",
			    id, r < 0 ? " (failed)" : "");
		}
		close(lfd);
	}
	rmtree_names_free(names);
}

int
sweep_run(struct scratch_base *sb, const struct sweep_params *p,
    struct sweep_result *res)
{
	char	**names = NULL, **tnames = NULL;
	size_t	  i;
	int	  lfd = -1, tfd, r;

	memset(res, 0, sizeof *res);
	res->stats.report = sweep_relay;
	res->stats.report_arg = (void *)p;
	if ((r = scratch_sweep_lock(sb, &lfd)) < 0)
		return r;
	log_info("sweep of %s: ttl %.4g h%s", scratch_base_path(sb),
	    p->ttl_hours, p->dry_run ? ", dry run" : "");
	if (!p->dry_run)
		(void)rmtree_empty_trash(scratch_base_fd(sb), &res->stats,
		    &res->trash);
	else if ((tfd = nofollow_open_beneath(scratch_base_fd(sb),
	    RMTREE_TRASH_DIR)) >= 0) {
		if (rmtree_names(tfd, &tnames) == 0) {
			for (i = 0; tnames[i] != NULL; i++)
				sweep_report(p, SWEEP_EV_TRASH, tnames[i],
				    "would be finished (dry run)");
		}
		close(tfd);
	}
	if ((r = rmtree_names(scratch_base_fd(sb), &names)) < 0)
		goto out;
	for (i = 0; names[i] != NULL; i++) {
		if (names[i][0] == '.')
			continue;
		sweep_one(sb, names[i], p, res);
	}
	sweep_orphans(sb, p);
	log_info("sweep of %s: removed %llu, kept %llu (%llu in use), "
	    "%llu files, %llu directories, %llu mount points skipped",
	    scratch_base_path(sb), (unsigned long long)res->removed,
	    (unsigned long long)res->kept, (unsigned long long)res->in_use,
	    (unsigned long long)res->stats.files,
	    (unsigned long long)res->stats.dirs,
	    (unsigned long long)res->stats.mounts);
	r = 0;
out:
	rmtree_names_free(tnames);
	rmtree_names_free(names);
	close(lfd);
	return r;
}

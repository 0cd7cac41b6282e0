/*
 * kind=scratch inside the daemon: activity through the mount is recorded
 * as each workspace's last use, a workspace with open files or directories
 * is held (the sweeper sees it in use), and the sweeper runs on a jittered
 * timer every sweep_interval_minutes. The rules themselves live in
 * scratch.c and sweep.c, shared with wsctl.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "scratch.h"
#include "sweep.h"
#include "wsfs.h"

static struct {
	struct scratch_base	*sb;
	pthread_t		 thread;
	pthread_mutex_t		 lock;
	pthread_cond_t		 cond;
	int			 stop;		/* guarded by lock */
	time_t			 last_run;	/* guarded by lock */
	unsigned long long	 removed;	/* guarded by lock */
} sd = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

int
scratchd_init(void)
{
	double	note;
	int	r;

	if (wsfs.conf.kind != CONF_KIND_SCRATCH)
		return 0;
	if ((r = scratch_base_open(wsfs.source, SCRATCH_CREATE, &sd.sb)) < 0) {
		log_err("scratch base %s: %s", wsfs.source, strerror(-r));
		return r;
	}
	/* A short ttl must still see activity in time. */
	note = wsfs.conf.scratch_ttl_hours * 360;
	scratch_set_note_interval(sd.sb, note < 60 ? note : 60);
	return 0;
}

static void
scratchd_sweep_once(void)
{
	struct sweep_params	p;
	struct sweep_result	res;
	int			r;

	memset(&p, 0, sizeof p);
	p.ttl_hours = wsfs.conf.scratch_ttl_hours;
	r = sweep_run(sd.sb, &p, &res);
	if (r == -EWOULDBLOCK) {
		log_info("sweep of %s skipped: another sweep is running",
		    wsfs.source);
		return;
	}
	if (r < 0) {
		log_err("sweep of %s failed: %s", wsfs.source, strerror(-r));
		return;
	}
	/* sweep_run has logged each decision and the totals. */
	pthread_mutex_lock(&sd.lock);
	sd.last_run = time(NULL);
	sd.removed += res.removed;
	pthread_mutex_unlock(&sd.lock);
}

static void *
scratchd_loop(void *arg)
{
	struct timespec	ts;
	double		delay;
	int		stop;

	for (;;) {
		delay = sweep_next_delay(wsfs.conf.sweep_interval_minutes);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)delay;
		ts.tv_nsec += (long)((delay - floor(delay)) * 1e9);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&sd.lock);
		while (!sd.stop && pthread_cond_timedwait(&sd.cond, &sd.lock,
		    &ts) != ETIMEDOUT)
			;
		stop = sd.stop;
		pthread_mutex_unlock(&sd.lock);
		if (stop)
			break;
		scratchd_sweep_once();
	}
	return NULL;
}

/* After priv_drop: threads inherit the reduced capabilities. */
void
scratchd_start(void)
{
	int	r;

	if (sd.sb == NULL)
		return;
	if ((r = pthread_create(&sd.thread, NULL, scratchd_loop, NULL)) != 0)
		fatalx("pthread_create: %s", strerror(r));
	log_info("scratch sweeper: every %g minutes, ttl %g hours",
	    wsfs.conf.sweep_interval_minutes, wsfs.conf.scratch_ttl_hours);
}

void
scratchd_stop(void)
{
	if (sd.sb == NULL)
		return;
	pthread_mutex_lock(&sd.lock);
	sd.stop = 1;
	pthread_cond_broadcast(&sd.cond);
	pthread_mutex_unlock(&sd.lock);
	pthread_join(sd.thread, NULL);
	scratch_base_free(sd.sb);
	sd.sb = NULL;
}

/* For status: when the sweeper last ran (0: never) and what it removed. */
int
scratchd_status(time_t *last_run, unsigned long long *removed)
{
	if (sd.sb == NULL)
		return 0;
	pthread_mutex_lock(&sd.lock);
	*last_run = sd.last_run;
	*removed = sd.removed;
	pthread_mutex_unlock(&sd.lock);
	return 1;
}

/* The workspace an inode belongs to, by its name at the top of SOURCE. */
static const char *
scratchd_ws(struct inode *in)
{
	if (sd.sb == NULL || in == NULL || in->ws_root == NULL)
		return NULL;
	return in->ws_root->name;
}

void
scratchd_note(struct inode *in)
{
	const char	*id = scratchd_ws(in);

	if (id != NULL)
		scratch_note_use(sd.sb, id);
}

/* Returns the id held (for scratchd_release), or NULL. */
const char *
scratchd_hold(struct inode *in)
{
	const char	*id = scratchd_ws(in);

	if (id != NULL)
		scratch_hold_open(sd.sb, id);
	return id;
}

void
scratchd_release(const char *id)
{
	if (id != NULL && sd.sb != NULL)
		scratch_hold_close(sd.sb, id);
}

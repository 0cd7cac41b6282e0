/*
 * What an admin can ask a running wsfs: a Unix control socket (root only)
 * answering "status" in text or JSON for `wsctl status`, and, with
 * -o metrics=ADDR, Prometheus text-format metrics over HTTP. One thread
 * serves both; each answer is built from counters and takes no lock that
 * an operation holds for long.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "metrics.h"
#include "wslock.h"
#include "wsfs.h"

#define CONTROL_MAX_FDS	8

static struct {
	char		 path[108];
	char		 mnt[PATH_MAX];
	int		 fds[CONTROL_MAX_FDS];	/* [0] control, then metrics */
	int		 nfds;
	int		 stop_pipe[2];
	pthread_t	 thread;
	int		 running;
	time_t		 started;
} ctl = { .stop_pipe = { -1, -1 } };

/* Names of the workspaces: the directories at the top of SOURCE. */
static int
control_workspaces(FILE *f, int json)
{
	struct dirent	*de;
	struct stat	 st;
	DIR		*d;
	int		 fd, n = 0;

	if ((fd = openat(wsfs.source_fd, ".", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) == -1 || (d = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return 0;
	}
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.' || fstatat(fd, de->d_name, &st,
		    AT_SYMLINK_NOFOLLOW) == -1 || !S_ISDIR(st.st_mode))
			continue;
		if (f != NULL) {
			if (json) {
				fputs(n ? ", " : "", f);
				json_put_str(f, de->d_name);
			} else
				fprintf(f, "%s%s", n ? " " : "", de->d_name);
		}
		n++;
	}
	closedir(d);
	return n;
}

struct op_row {
	FILE	*f;
	int	 json;
	int	 n;
};

static void
control_op_row(void *arg, const char *name, unsigned long long count,
    unsigned long long errors, unsigned long long p50,
    unsigned long long p99)
{
	struct op_row	*r = arg;

	if (count == 0 && errors == 0)
		return;
	if (r->json)
		fprintf(r->f, "%s\n    \"%s\": {\"count\": %llu, \"errors\": "
		    "%llu, \"p50_us\": %llu, \"p99_us\": %llu}",
		    r->n ? "," : "", name, count, errors, p50, p99);
	else
		fprintf(r->f, "  %-16s %10llu %8llu %10llu %10llu\n", name,
		    count, errors, p50, p99);
	r->n++;
}

/* Whether the kernel left clearing set-id bits on write to wsfs (loop.c). */
static int
control_setid_clearing(void)
{
	return __atomic_load_n(&wsfs.server_kills_priv, __ATOMIC_ACQUIRE);
}

/* Who moves file data: the kernel (passthrough.c) or wsfs, and why. */
static const char *
control_data_path(void)
{
	static char	buf[128];
	int		e;

	if (passthrough_enabled() && (e = passthrough_failed()) != 0) {
		snprintf(buf, sizeof buf, "wsfs (no backing file could be "
		    "passed through: %s)", strerror(e));
		return buf;
	}
	if (passthrough_enabled())
		return "passthrough";
	if (!wsfs.conf.passthrough)
		return "wsfs (passthrough=off)";
	if (cluster_enabled())
		return "wsfs (lock service)";
	return "wsfs (the kernel offers no passthrough)";
}

static void
control_status(FILE *f, int json)
{
	struct op_row		 row = { f, json, 0 };
	struct wslock_conn_stats cs;
	unsigned long		 inodes, fds, gcount, gidle, gcov;
	unsigned long long	 removed = 0;
	time_t			 last = 0;
	uint64_t		 pt_opens, pt_cached, pt_bound, ring_taken;
	unsigned int		 ring_q, ring_t;
	char			 dev_why[128];
	int			 scratch, nws, ring;

	inode_stats(&inodes, &fds);
	passthrough_counts(&pt_opens, &pt_cached, &pt_bound);
	ring = uring_fuse_channel(dev_why, sizeof dev_why, &ring_q, &ring_t,
	    &ring_taken);
	glock_stats(&gcount, &gidle, &gcov);
	scratch = scratchd_status(&last, &removed);
	if (json) {
		fputs("{\n  \"mountpoint\": ", f);
		json_put_str(f, ctl.mnt);
		fputs(",\n  \"source\": ", f);
		json_put_str(f, wsfs.source);
		fprintf(f, ",\n  \"kind\": \"%s\",\n  \"pid\": %d,\n"
		    "  \"uptime_s\": %lld,\n  \"workspaces\": [",
		    conf_kind_name(wsfs.conf.kind), (int)getpid(),
		    (long long)(time(NULL) - ctl.started));
		nws = control_workspaces(f, 1);
		fprintf(f, "],\n  \"workspace_count\": %d,\n"
		    "  \"io\": \"%s\",\n  \"setid_clearing\": \"%s\",\n"
		    "  \"inodes\": %lu,\n  \"fds\": %lu,\n"
		    "  \"max_fds\": %d,\n", nws,
		    uring_active() ? "io_uring" : "syscalls",
		    control_setid_clearing() ? "wsfs" : "kernel", inodes, fds,
		    wsfs.conf.max_fds);
		if (ring)
			fprintf(f, "  \"channel\": \"io_uring\", "
			    "\"ring_queues\": %u, \"ring_threads\": %u, "
			    "\"ring_requests\": %llu,\n", ring_q, ring_t,
			    (unsigned long long)ring_taken);
		else {
			fputs("  \"channel\": \"/dev/fuse\", "
			    "\"channel_why\": ", f);
			json_put_str(f, dev_why);
			fputs(",\n", f);
		}
		fputs("  \"data\": ", f);
		json_put_str(f, control_data_path());
		fprintf(f, ",\n  \"passthrough_opens\": %llu,\n"
		    "  \"cached_opens\": %llu,\n  \"backing_bound\": %llu,\n",
		    (unsigned long long)pt_opens,
		    (unsigned long long)pt_cached,
		    (unsigned long long)pt_bound);
		fputs("  \"locks\": {\"service\": ", f);
		json_put_str(f, wsfs.conf.lockd ? wsfs.conf.lockd : "embedded");
		fputs(", \"node\": ", f);
		json_put_str(f, wsfs.conf.node ? wsfs.conf.node : "");
		fprintf(f, ", \"state\": \"%s\", \"lease_left_ms\": %lld, "
		    "\"cached\": %lu, \"idle\": %lu, \"waits\": %llu, "
		    "\"timeouts\": %llu, \"revokes\": %llu, "
		    "\"releases\": %llu, \"invalidations\": %llu, "
		    "\"covered\": %lu, \"covered_total\": %llu, "
		    "\"syncs\": %llu},\n",
		    cluster_state_name(),
		    cluster_lease_left_ms(), gcount, gidle,
		    stats_counter(SC_LOCK_WAITS),
		    stats_counter(SC_LOCK_TIMEOUTS), stats_counter(SC_REVOKES),
		    stats_counter(SC_RELEASES), stats_counter(SC_CACHE_INVALS),
		    gcov, stats_counter(SC_LOCKS_COVERED),
		    stats_counter(SC_RELEASE_SYNCS));
		if (cluster_conn_stats(&cs) == 0) {
			fprintf(f, "  \"lock_link\": {\"connects\": %llu, "
			    "\"attempts\": %llu, \"attempts_since_down\": %llu, "
			    "\"state_ms\": %llu, \"last_errno\": %d, "
			    "\"last_error\": ",
			    (unsigned long long)cs.connects,
			    (unsigned long long)cs.attempts,
			    (unsigned long long)cs.attempts_down,
			    (unsigned long long)cs.state_ms, -cs.last_err);
			json_put_str(f, cs.last_error);
			fputs("},\n", f);
		}
		fprintf(f, "  \"confinement_refusals\": %llu,\n",
		    stats_counter(SC_CONFINE_REFUSED));
		if (scratch)
			fprintf(f, "  \"sweeper\": {\"last_run\": %lld, "
			    "\"removed\": %llu, \"ttl_hours\": %g},\n",
			    (long long)last, removed,
			    wsfs.conf.scratch_ttl_hours);
		fprintf(f, "  \"operations\": {");
		stats_foreach(control_op_row, &row);
		fprintf(f, "\n  }\n}\n");
		return;
	}
	fprintf(f, "mount:       %s (source %s, kind %s, pid %d)\n", ctl.mnt,
	    wsfs.source, conf_kind_name(wsfs.conf.kind), (int)getpid());
	fprintf(f, "workspaces:  ");
	nws = control_workspaces(f, 0);
	fprintf(f, "%s(%d)\n", nws ? " " : "", nws);
	fprintf(f, "io:          %s\n", uring_active() ? "io_uring" :
	    "plain syscalls");
	if (ring)
		fprintf(f, "requests:    through FUSE over io_uring: %u queues, "
		    "%u threads, %llu requests\n", ring_q, ring_t,
		    (unsigned long long)ring_taken);
	else
		fprintf(f, "requests:    through /dev/fuse (%s)\n", dev_why);
	fprintf(f, "set-id bits: %s\n", control_setid_clearing() ?
	    "cleared by wsfs on write (FUSE_HANDLE_KILLPRIV_V2)" :
	    "cleared by the kernel (it asks for security.capability "
	    "before every write)");
	if (passthrough_enabled() && passthrough_failed() == 0)
		fprintf(f, "data:        read and written by the kernel on the "
		    "backing files (FUSE_PASSTHROUGH): %llu opens; %llu "
		    "through wsfs (set-id files); %llu files open\n",
		    (unsigned long long)pt_opens,
		    (unsigned long long)pt_cached,
		    (unsigned long long)pt_bound);
	else
		fprintf(f, "data:        %s\n", control_data_path());
	fprintf(f, "inodes:      %lu known, %lu fds open (max_fds %d)\n",
	    inodes, fds, wsfs.conf.max_fds);
	if (wsfs.conf.lockd != NULL)
		fprintf(f, "locks:       %s as node %s: %s, lease left %lld ms; "
		    "%lu cached (%lu idle); %llu waits, %llu timeouts, "
		    "%llu revokes, %llu given back, %llu cache drops; "
		    "%lu new objects under a directory's lock (%llu made); "
		    "%llu written objects synced before release\n",
		    wsfs.conf.lockd, wsfs.conf.node, cluster_state_name(),
		    cluster_lease_left_ms(), gcount, gidle,
		    stats_counter(SC_LOCK_WAITS),
		    stats_counter(SC_LOCK_TIMEOUTS), stats_counter(SC_REVOKES),
		    stats_counter(SC_RELEASES), stats_counter(SC_CACHE_INVALS),
		    gcov, stats_counter(SC_LOCKS_COVERED),
		    stats_counter(SC_RELEASE_SYNCS));
	if (wsfs.conf.lockd != NULL && cluster_conn_stats(&cs) == 0)
		fprintf(f, "lock link:   %s for %llu ms; %llu sessions, %llu "
		    "connects tried (%llu since down); last error: %s\n",
		    cs.state == WSLOCK_UP ? "up" : "down or in jeopardy",
		    (unsigned long long)cs.state_ms,
		    (unsigned long long)cs.connects,
		    (unsigned long long)cs.attempts,
		    (unsigned long long)cs.attempts_down,
		    cs.last_error[0] ? cs.last_error : "none");
	if (wsfs.conf.lockd == NULL)
		fprintf(f, "locks:       embedded (one node: the kernel's own "
		    "flock/fcntl locks)\n");
	fprintf(f, "refused:     %llu confinement refusals\n",
	    stats_counter(SC_CONFINE_REFUSED));
	if (scratch) {
		if (last != 0)
			fprintf(f, "sweeper:     last run %lld s ago, %llu "
			    "removed since start, ttl %g h\n",
			    (long long)(time(NULL) - last), removed,
			    wsfs.conf.scratch_ttl_hours);
		else
			fprintf(f, "sweeper:     not run yet, ttl %g h\n",
			    wsfs.conf.scratch_ttl_hours);
	}
	fprintf(f, "operations:  %-16s %10s %8s %10s %10s\n", "", "count",
	    "errors", "p50 us", "p99 us");
	stats_foreach(control_op_row, &row);
}

static void
control_metric_row(void *arg, const char *name, unsigned long long count,
    unsigned long long errors, unsigned long long p50,
    unsigned long long p99)
{
	FILE	*f = arg;

	fprintf(f, "wsfs_operations_total{op=\"%s\"} %llu\n", name, count);
	fprintf(f, "wsfs_operation_errors_total{op=\"%s\"} %llu\n", name,
	    errors);
	fprintf(f, "wsfs_operation_latency_seconds{op=\"%s\",quantile=\"0.5\"}"
	    " %g\n", name, (double)p50 / 1e6);
	fprintf(f, "wsfs_operation_latency_seconds{op=\"%s\",quantile=\"0.99\"}"
	    " %g\n", name, (double)p99 / 1e6);
}

static void
control_metric(FILE *f, const char *name, const char *type, const char *help,
    double v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name,
	    type, name, v);
}

static void
control_metrics(FILE *f, void *arg)
{
	unsigned long		inodes, fds, gcount, gidle, gcov;
	unsigned long long	removed = 0;
	uint64_t		pt_opens, pt_cached, pt_bound;
	time_t			last = 0;
	uint64_t		ring_taken;
	unsigned int		ring_q, ring_t;
	char			why[128];

	inode_stats(&inodes, &fds);
	glock_stats(&gcount, &gidle, &gcov);
	fprintf(f, "# HELP wsfs_operations_total FUSE operations served.\n"
	    "# TYPE wsfs_operations_total counter\n"
	    "# HELP wsfs_operation_errors_total Operations answered with an "
	    "error.\n# TYPE wsfs_operation_errors_total counter\n"
	    "# HELP wsfs_operation_latency_seconds Upper bound of the latency "
	    "quantile (power-of-two buckets).\n"
	    "# TYPE wsfs_operation_latency_seconds gauge\n");
	stats_foreach(control_metric_row, f);
	control_metric(f, "wsfs_inodes", "gauge", "Inodes the kernel knows.",
	    (double)inodes);
	control_metric(f, "wsfs_open_fds", "gauge", "O_PATH fds held by the "
	    "inode table.", (double)fds);
	control_metric(f, "wsfs_workspaces", "gauge", "Workspaces in SOURCE.",
	    (double)control_workspaces(NULL, 0));
	control_metric(f, "wsfs_io_uring", "gauge", "1 if the data path uses "
	    "io_uring.", uring_active());
	control_metric(f, "wsfs_fuse_uring", "gauge", "1 if requests come "
	    "through FUSE over io_uring rather than /dev/fuse.",
	    uring_fuse_channel(why, sizeof why, &ring_q, &ring_t, &ring_taken));
	control_metric(f, "wsfs_fuse_uring_requests_total", "counter",
	    "Requests served through FUSE over io_uring.", (double)ring_taken);
	passthrough_counts(&pt_opens, &pt_cached, &pt_bound);
	control_metric(f, "wsfs_passthrough", "gauge", "1 if the kernel reads "
	    "and writes open files on their backing files (FUSE passthrough).",
	    passthrough_enabled());
	control_metric(f, "wsfs_passthrough_opens_total", "counter", "Opens "
	    "whose reads and writes the kernel passed through.",
	    (double)pt_opens);
	control_metric(f, "wsfs_cached_opens_total", "counter", "Opens served "
	    "through wsfs while passthrough is on (set-id files).",
	    (double)pt_cached);
	control_metric(f, "wsfs_passthrough_files", "gauge", "Files open "
	    "through the kernel's passthrough (backing ids held).",
	    (double)pt_bound);
	control_metric(f, "wsfs_lock_service_up", "gauge", "1 if the lock "
	    "session is up (always 1 when embedded).",
	    !cluster_enabled() || !cluster_degraded());
	control_metric(f, "wsfs_locks_cached", "gauge", "Cluster locks known "
	    "to this node.", (double)gcount);
	control_metric(f, "wsfs_lock_waits_total", "counter", "Operations that "
	    "waited for a cluster lock.", (double)stats_counter(SC_LOCK_WAITS));
	control_metric(f, "wsfs_lock_timeouts_total", "counter", "Operations "
	    "failed with EIO after lock_timeout.",
	    (double)stats_counter(SC_LOCK_TIMEOUTS));
	control_metric(f, "wsfs_lock_revokes_total", "counter", "Locks another "
	    "node asked for.", (double)stats_counter(SC_REVOKES));
	control_metric(f, "wsfs_lock_releases_total", "counter", "Locks given "
	    "back.", (double)stats_counter(SC_RELEASES));
	control_metric(f, "wsfs_lock_cache_invalidations_total", "counter",
	    "Kernel caches dropped when a lock was given back or lost.",
	    (double)stats_counter(SC_CACHE_INVALS));
	control_metric(f, "wsfs_locks_covered", "gauge", "New objects used "
	    "under their directory's exclusive lock, without a lock of their "
	    "own.", (double)gcov);
	control_metric(f, "wsfs_locks_covered_total", "counter", "New objects "
	    "covered by their directory's lock.",
	    (double)stats_counter(SC_LOCKS_COVERED));
	control_metric(f, "wsfs_lock_release_syncs_total", "counter",
	    "Written objects made durable (fsync) before their lock was "
	    "given back.", (double)stats_counter(SC_RELEASE_SYNCS));
	control_metric(f, "wsfs_confinement_refusals_total", "counter",
	    "Operations refused by the confinement rules.",
	    (double)stats_counter(SC_CONFINE_REFUSED));
	if (scratchd_status(&last, &removed)) {
		control_metric(f, "wsfs_sweep_last_run_timestamp_seconds",
		    "gauge", "When the sweeper last ran.", (double)last);
		control_metric(f, "wsfs_sweep_removed_total", "counter",
		    "Scratch workspaces the sweeper removed.",
		    (double)removed);
	}
}

/* Answer one control client: root only, one request line, one answer. */
static void
control_serve(int lfd)
{
	struct ucred	 cred;
	socklen_t	 clen = sizeof cred;
	struct timeval	 tv = { 1, 0 };
	char		 req[64], *out = NULL;
	size_t		 outlen = 0, off = 0;
	ssize_t		 n;
	FILE		*f;
	int		 fd;

	if ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) == -1)
		return;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) == -1 ||
	    cred.uid != 0) {
		log_limited(LOG_NOTICE, "control-uid", "control socket: refused "
		    "uid %d", (int)cred.uid);
		close(fd);
		return;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	(void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	n = read(fd, req, sizeof req - 1);
	req[n > 0 ? n : 0] = '\0';
	req[strcspn(req, "\r\n")] = '\0';
	if ((f = open_memstream(&out, &outlen)) == NULL) {
		close(fd);
		return;
	}
	if (strcmp(req, "status") == 0)
		control_status(f, 0);
	else if (strcmp(req, "status json") == 0)
		control_status(f, 1);
	else if (strcmp(req, "metrics") == 0)
		control_metrics(f, NULL);
	else if (strcmp(req, "lockd") == 0)
		/* For wsctl lock --workspace: where this node's locks live. */
		fprintf(f, "%s\n%s\n", wsfs.conf.lockd != NULL &&
		    cluster_enabled() ? wsfs.conf.lockd : "",
		    wsfs.conf.key != NULL ? wsfs.conf.key : WS_DEFAULT_KEY);
	else
		fprintf(f, "error: unknown request '%s'\n", req);
	fclose(f);
	while (off < outlen && (n = write(fd, out + off, outlen - off)) > 0)
		off += (size_t)n;
	free(out);
	close(fd);
}

static void *
control_loop(void *arg)
{
	struct pollfd	pfd[CONTROL_MAX_FDS + 1];
	int		i;

	for (i = 0; i < ctl.nfds; i++) {
		pfd[i].fd = ctl.fds[i];
		pfd[i].events = POLLIN;
	}
	pfd[ctl.nfds].fd = ctl.stop_pipe[0];
	pfd[ctl.nfds].events = POLLIN;
	for (;;) {
		if (poll(pfd, (nfds_t)ctl.nfds + 1, -1) == -1) {
			if (errno == EINTR)
				continue;
			log_warn("control: poll: %s", strerror(errno));
			break;
		}
		if (pfd[ctl.nfds].revents)
			break;
		for (i = 0; i < ctl.nfds; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			if (i == 0)
				control_serve(ctl.fds[0]);
			else
				metrics_serve(ctl.fds[i], control_metrics,
				    NULL);
		}
	}
	return NULL;
}

/* Before privileges are dropped: the socket goes under /run. */
int
control_init(void)
{
	struct sockaddr_un	sun;
	mode_t			mask;
	int			fd, r = 0;

	ctl.started = time(NULL);
	if (realpath(wsfs.mountpoint, ctl.mnt) == NULL)
		snprintf(ctl.mnt, sizeof ctl.mnt, "%s", wsfs.mountpoint);
	if (wsfs.conf.control_socket != NULL)
		snprintf(ctl.path, sizeof ctl.path, "%s",
		    wsfs.conf.control_socket);
	else {
		if (mkdir(CONF_RUN_DIR, 0700) == -1 && errno != EEXIST)
			log_warn("mkdir %s: %s", CONF_RUN_DIR, strerror(errno));
		conf_control_path(ctl.mnt, ctl.path, sizeof ctl.path);
	}
	memset(&sun, 0, sizeof sun);
	sun.sun_family = AF_UNIX;
	snprintf(sun.sun_path, sizeof sun.sun_path, "%s", ctl.path);
	if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
		return -errno;
	/*
	 * wsfs runs with umask 0 (the kernel hands over modes already
	 * masked), so a socket would be born mode 0777: make both the
	 * control and a Unix metrics socket 0600 from the start, not after.
	 */
	mask = umask(0177);
	(void)unlink(ctl.path);
	if (bind(fd, (struct sockaddr *)&sun, sizeof sun) == -1 ||
	    listen(fd, 16) == -1) {
		r = -errno;
		log_warn("control socket %s: %s; wsctl status will not work",
		    ctl.path, strerror(-r));
		close(fd);
		fd = -1;
		r = 0;
	}
	/* Slot 0 is the control socket (-1 if none: poll skips it). */
	ctl.fds[0] = fd;
	ctl.nfds = 1;
	if (wsfs.conf.metrics != NULL) {
		r = metrics_listen(wsfs.conf.metrics, ctl.fds + ctl.nfds,
		    CONTROL_MAX_FDS - ctl.nfds);
		if (r < 0)
			fprintf(stderr, "wsfs: metrics address %s: %s\n",
			    wsfs.conf.metrics, strerror(-r));
		else {
			ctl.nfds += r;
			r = 0;
		}
	}
	umask(mask);
	return r;
}

void
control_start(void)
{
	int	r;

	if (ctl.nfds == 0 || (ctl.fds[0] < 0 && ctl.nfds == 1))
		return;
	if (pipe2(ctl.stop_pipe, O_CLOEXEC) == -1)
		fatal("pipe2");
	if ((r = pthread_create(&ctl.thread, NULL, control_loop, NULL)) != 0)
		fatalx("pthread_create: %s", strerror(r));
	ctl.running = 1;
}

void
control_stop(void)
{
	int	i;

	if (ctl.running) {
		(void)write(ctl.stop_pipe[1], "x", 1);
		pthread_join(ctl.thread, NULL);
		ctl.running = 0;
	}
	for (i = 0; i < ctl.nfds; i++)
		if (ctl.fds[i] >= 0)
			close(ctl.fds[i]);
	if (ctl.nfds > 0 && ctl.fds[0] >= 0)
		(void)unlink(ctl.path);
	ctl.nfds = 0;
}

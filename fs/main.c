/*
 * wsfs entry point: reads the configuration and mount options, checks
 * SOURCE, mounts with the fixed safety options (nosuid, nodev), and runs
 * the multithreaded FUSE loop until unmounted or signalled.
 */
#include "config.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mountinfo.h"
#include "wsfs.h"

struct wsfs wsfs;

static void
usage(FILE *f)
{
	fprintf(f, "usage: wsfs [-f] [-d] [-v] [-o OPTIONS] SOURCE MOUNTPOINT\n"
	    "       wsfs --help | --version\n\n"
	    "  -f             stay in the foreground, log to stderr\n"
	    "  -d             FUSE debug output (implies -f)\n"
	    "  -v             verbose logging\n"
	    "  -o OPTIONS     comma-separated options; config=FILE reads FILE\n"
	    "                 instead of %s\n\n"
	    "See wsfs(8) and wsfs.conf(5) for every option.\n",
	    CONF_DEFAULT_PATH);
}

static noreturn void
usage_error(const char *reason)
{
	fprintf(stderr, "wsfs: %s\nTry 'wsfs --help'.\n", reason);
	exit(2);
}

/* Mount options for the kernel or mount(8) rather than for wsfs. */
static const char *const passthrough_opts[] = {
	"ro", "rw", "noexec", "exec", "noatime", "atime", "relatime",
	"strictatime", "nodiratime", "diratime", "sync", "async", "dirsync",
	"lazytime", "nolazytime", NULL
};
static const char *const ignored_opts[] = {
	"defaults", "auto", "noauto", "nofail", "_netdev", "user", "nouser",
	"users", "nosuid", "nodev", "suid", "dev", "loop", NULL
};
static const char *const ignored_prefixes[] = {
	"x-", "comment=", "fsname=", "subtype=", NULL
};

static int
in_list(const char *const *list, const char *s)
{
	for (; *list != NULL; list++)
		if (strcmp(*list, s) == 0)
			return 1;
	return 0;
}

static int
has_prefix(const char *const *list, const char *s)
{
	for (; *list != NULL; list++)
		if (strncmp(*list, s, strlen(*list)) == 0)
			return 1;
	return 0;
}

/*
 * lockd=A,B,C names the replicas of the lock service, and -o splits at
 * the same commas: the items after lockd= that are addresses (they have
 * a ':' and no '=', which no other option has) are joined back to it.
 * rest is strtok_r's position just after the lockd= item; returns the
 * position after the last item joined.
 */
static char *
lockd_list(char *rest)
{
	size_t	n;

	while (rest != NULL && *rest != '\0') {
		n = strcspn(rest, ",");
		if (memchr(rest, ':', n) == NULL || memchr(rest, '=', n) != NULL)
			break;
		rest[-1] = ',';
		rest += n;
		if (*rest == ',')
			*rest++ = '\0';
	}
	return rest;
}

/*
 * Apply one -o string. Pass 0 picks out config=FILE only; pass 1 applies
 * everything else on top of the loaded file.
 */
static void
apply_opts(const char *optstr, int pass, char **config, char *kopts,
    size_t klen)
{
	char	 err[256], *opts, *o, *save = NULL, *val;

	/* Each pass splits its own copy; config= values must outlive it. */
	if ((opts = strdup(optstr)) == NULL)
		fatal("strdup");
	for (o = strtok_r(opts, ",", &save); o != NULL;
	    o = strtok_r(NULL, ",", &save)) {
		if (strncmp(o, "lockd=", 6) == 0)
			save = lockd_list(save);
		if ((val = strchr(o, '=')) != NULL)
			*val++ = '\0';
		if (strcmp(o, "config") == 0) {
			if (val == NULL || *val == '\0')
				usage_error("option 'config' needs a file");
			if (pass == 0) {
				free(*config);
				if ((*config = strdup(val)) == NULL)
					fatal("strdup");
			}
			goto next;
		}
		if (pass == 0)
			goto next;
		if (val == NULL && in_list(passthrough_opts, o)) {
			strncat(kopts, ",", klen - strlen(kopts) - 1);
			strncat(kopts, o, klen - strlen(kopts) - 1);
			goto next;
		}
		if (val == NULL && in_list(ignored_opts, o))
			goto next;
		if (val != NULL)
			val[-1] = '=';
		if (has_prefix(ignored_prefixes, o))
			goto next;
		if (val != NULL)
			val[-1] = '\0';
		if (conf_set(&wsfs.conf, o, val, err, sizeof err) < 0) {
			fprintf(stderr, "wsfs: %s\n", err);
			exit(2);
		}
next:
		;
	}
	free(opts);
}

/* Append s to buf with ',' and '\' escaped for libfuse's option parser. */
static void
escape_opt(char *buf, size_t len, const char *s)
{
	size_t	n = strlen(buf);

	for (; *s != '\0' && n + 3 < len; s++) {
		if (*s == ',' || *s == '\\')
			buf[n++] = '\\';
		buf[n++] = *s;
	}
	buf[n] = '\0';
}

static void
check_source(int fd)
{
	struct stat	st;

	if (fstat(fd, &st) == -1)
		fatal("stat %s", wsfs.source);
	wsfs.source_uid = st.st_uid;
	/*
	 * Whoever can write the top of SOURCE can plant or swap workspaces;
	 * that must be the admin's choice, not an accident.
	 */
	if (!wsfs.conf.allow_writable_source &&
	    (st.st_uid != 0 || (st.st_mode & S_IWOTH) ||
	    ((st.st_mode & S_IWGRP) && st.st_gid != 0)))
		fatalx("%s is writable by non-root users (owner %u, mode %04o); "
		    "fix its owner and mode, or mount with "
		    "-o allow_writable_source", wsfs.source,
		    (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
}

/* Is SOURCE on a filesystem of this machine (see struct wsfs)? */
static int
source_is_local(int fd)
{
	struct statfs	sf;

	if (fstatfs(fd, &sf) == -1)
		return 0;
	switch ((unsigned long)sf.f_type) {
	case EXT4_SUPER_MAGIC:
	case XFS_SUPER_MAGIC:
	case BTRFS_SUPER_MAGIC:
	case TMPFS_MAGIC:
		return 1;
	default:
		return 0;
	}
}

static volatile sig_atomic_t stop_signal;

static void
quiet_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
}

static void
on_stop_signal(int sig)
{
	stop_signal = sig;
	fuse_session_exit(wsfs.se);
	loop_wake();
}

/* Like libfuse's handlers, but remember that a signal ended the loop. */
static void
catch_stop_signals(void)
{
	struct sigaction	sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) == -1 ||
	    sigaction(SIGINT, &sa, NULL) == -1 ||
	    sigaction(SIGHUP, &sa, NULL) == -1)
		fatal("sigaction");
}

static int
default_max_fds(void)
{
	struct rlimit	rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == -1 || rl.rlim_cur == RLIM_INFINITY)
		return 10000;
	/* Leave room for open files, directories and the daemon itself. */
	return rl.rlim_cur > 256 ? (int)(rl.rlim_cur / 2) : 64;
}

struct readahead_mount {
	const char	*point;
	unsigned int	 major, minor, found;
};

/* The newest mount on the point is the one just made. */
static int
readahead_mount_one(const struct mountinfo *m, void *arg)
{
	struct readahead_mount	*rm = arg;

	if (strcmp(m->point, rm->point) == 0) {
		rm->major = m->major;
		rm->minor = m->minor;
		rm->found = 1;
	}
	return 0;
}

/*
 * Let the kernel read ahead as far as wsfs asked at INIT (WSFS_READAHEAD):
 * it reads ahead no further than the mount's read_ahead_kb, 128 KiB for a
 * new FUSE mount, whatever the daemon asked for. A cold 1 GiB read took
 * 8,192 requests of 128 KiB and ran at 0.34-0.89 GB/s on a tmpfs SOURCE,
 * and at 2.3-2.4 GB/s with 1 MiB (2026-12-06). The kernel still ramps the
 * window up only for sequential reads. The mount is the newest one on
 * mnt (an absolute path) in mountinfo; it is found there, not by a stat
 * of the mount, which would wait for this daemon to answer.
 */
static void
set_readahead(const char *mnt)
{
	struct readahead_mount	 rm = { mnt, 0, 0, 0 };
	char			 file[64];
	int			 fd;

	if (mountinfo_walk(readahead_mount_one, &rm) < 0 || !rm.found)
		return;
	snprintf(file, sizeof file, "/sys/class/bdi/%u:%u/read_ahead_kb",
	    rm.major, rm.minor);
	if ((fd = open(file, O_WRONLY | O_CLOEXEC)) == -1 ||
	    dprintf(fd, "%d\n", WSFS_READAHEAD / 1024) < 0)
		log_warn("%s: %s: reading ahead 128 KiB at most", file,
		    strerror(errno));
	if (fd != -1)
		close(fd);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 }
	};
	struct fuse_args	 args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_lowlevel_ops ops;
	char			*config = NULL;
	char			 err[512], kopts[4096], **optv, *mnt_abs;
	int			 c, foreground = 0, debug = 0, verbose = 0;
	int			 nopt = 0, i, r, explicit_config = 0;

	log_open("wsfs", LOG_TO_STDERR, 0);
	if ((optv = calloc((size_t)argc + 1, sizeof *optv)) == NULL)
		fatal("calloc");
	while ((c = getopt_long(argc, argv, "fdvo:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			foreground = 1;
			break;
		case 'd':
			debug = foreground = 1;
			break;
		case 'v':
			verbose = 1;
			break;
		case 'o':
			optv[nopt++] = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("wsfs %s (libfuse %s)\n", PACKAGE_VERSION,
			    fuse_pkgversion());
			return 0;
		default:
			fprintf(stderr, "Try 'wsfs --help'.\n");
			return 2;
		}
	}
	if (argc - optind != 2)
		usage_error("expected SOURCE and MOUNTPOINT");
	wsfs.source = argv[optind];
	wsfs.mountpoint = argv[optind + 1];
	log_set_verbose(verbose);

	conf_init(&wsfs.conf);
	kopts[0] = '\0';
	for (i = 0; i < nopt; i++)
		apply_opts(optv[i], 0, &config, kopts, sizeof kopts);
	explicit_config = config != NULL;
	if (conf_load(&wsfs.conf, explicit_config ? config : CONF_DEFAULT_PATH,
	    !explicit_config, err, sizeof err) < 0) {
		fprintf(stderr, "wsfs: %s\n", err);
		return 2;
	}
	for (i = 0; i < nopt; i++)
		apply_opts(optv[i], 1, &config, kopts, sizeof kopts);
	if (!wsfs.conf.default_permissions && wsfs.conf.allow_other) {
		fprintf(stderr, "wsfs: default_permissions=no would let every "
		    "user of the mount act as root; it needs allow_other=no\n");
		return 2;
	}

	wsfs.source_fd = open(wsfs.source, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (wsfs.source_fd == -1) {
		fprintf(stderr, "wsfs: source %s: %s\n", wsfs.source,
		    strerror(errno));
		return 1;
	}
	check_source(wsfs.source_fd);
	wsfs.source_local = source_is_local(wsfs.source_fd);
	/* Messages and status name SOURCE by its full path. */
	if ((wsfs.source = realpath(argv[optind], NULL)) == NULL)
		wsfs.source = argv[optind];
	/* open_by_handle_at wants a real fd, not an O_PATH one. */
	if ((wsfs.source_fd_rd = openat(wsfs.source_fd, ".", O_RDONLY |
	    O_DIRECTORY | O_CLOEXEC)) == -1)
		fatal("open %s", wsfs.source);
	if (wsfs.conf.max_fds == 0)
		wsfs.conf.max_fds = default_max_fds();
	/* Modes from the kernel are already masked with the caller's umask. */
	umask(0);
	inode_table_init(wsfs.source_fd, wsfs.conf.max_fds);
	/* The users of the lock service, before its session opens. */
	glock_init();
	plock_init();

	snprintf(err, sizeof err, "-osubtype=wsfs,nosuid,nodev%s%s,fsname=",
	    wsfs.conf.allow_other ? ",allow_other" : "",
	    wsfs.conf.default_permissions ? ",default_permissions" : "");
	escape_opt(err, sizeof err, wsfs.source);
	strncat(err, kopts, sizeof err - strlen(err) - 1);
	if (fuse_opt_add_arg(&args, argv[0]) == -1 ||
	    fuse_opt_add_arg(&args, err) == -1 ||
	    (debug && fuse_opt_add_arg(&args, "-d") == -1))
		fatalx("out of memory");

	if (scratchd_init() < 0)
		return 1;
	if (control_init() < 0)
		return 2;
	if ((r = cluster_init()) < 0) {
		fprintf(stderr, "wsfs: lock service: %s\n", strerror(-r));
		return 1;
	}
	/*
	 * Other nodes change names and attributes under a shared mount: with
	 * a lock service the kernel asks every time, as NFS does with
	 * lookupcache=none, unless the admin chose otherwise.
	 */
	if (wsfs.conf.attr_timeout < 0)
		wsfs.conf.attr_timeout = cluster_enabled() ? 0 : 1;
	if (wsfs.conf.entry_timeout < 0)
		wsfs.conf.entry_timeout = cluster_enabled() ? 0 : 1;
	ops = wsfs_ops;
	/*
	 * Over a local filesystem files are entered by name; handles are
	 * taken only at eviction there unless cluster locks need them.
	 */
	inode_handles(wsfs.source_local && !cluster_enabled(),
	    wsfs.source_local);
	if (!cluster_enabled()) {
		/* One node: the kernel's own flock and fcntl locks serve. */
		ops.getlk = NULL;
		ops.setlk = NULL;
		ops.flock = NULL;
		/*
		 * A flush only reports close-time errors of the backing
		 * store (NFS): a local one has none. Without the handler
		 * the kernel stops sending a request per close.
		 */
		if (wsfs.source_local)
			ops.flush = NULL;
	}
	wsfs.se = fuse_session_new(&args, &ops, sizeof ops, NULL);
	if (wsfs.se == NULL)
		fatalx("could not create the FUSE session");
	if (fuse_set_signal_handlers(wsfs.se) == -1)
		fatalx("could not set signal handlers");
	catch_stop_signals();
	mnt_abs = realpath(wsfs.mountpoint, NULL);
	if (fuse_session_mount(wsfs.se, wsfs.mountpoint) == -1) {
		fprintf(stderr, "wsfs: could not mount %s on %s\n",
		    wsfs.source, wsfs.mountpoint);
		free(mnt_abs);
		control_stop();
		return 1;
	}
	if (mnt_abs != NULL)
		set_readahead(mnt_abs);
	free(mnt_abs);
	if (!foreground) {
		if (fuse_daemonize(0) == -1)
			fatalx("could not daemonize");
		log_open("wsfs", LOG_TO_SYSLOG, verbose);
	}
	/* After the fork of fuse_daemonize: "self" is resolved at open. */
	if ((wsfs.proc_fd = open("/proc/self/fd", O_PATH | O_DIRECTORY |
	    O_CLOEXEC)) == -1)
		fatal("open /proc/self/fd (is /proc mounted?)");
	/* Before any thread starts: capabilities are per thread. */
	priv_drop();
	uring_init(wsfs.conf.uring != CONF_URING_OFF);
	cluster_start();
	scratchd_start();
	control_start();
	log_info("serving %s on %s (kind=%s)", wsfs.source, wsfs.mountpoint,
	    conf_kind_name(wsfs.conf.kind));

	if ((r = loop_run(wsfs.se, (unsigned)wsfs.conf.max_threads)) < 0)
		log_warn("the request loop ended: %s", strerror(-r));

	/*
	 * Wind down in dependency order: parked writes finish (cluster),
	 * then every I/O in flight (uring), before the handles they use are
	 * freed; the sweeper last, since handles release scratch holds.
	 */
	control_stop();
	cluster_shutdown();
	uring_shutdown();
	ops_handles_free_all();
	scratchd_stop();
	/*
	 * After umount(8) the mount is gone and libfuse would complain about
	 * unmounting nothing: quiet then.
	 */
	priv_unmount_begin();
	if (stop_signal == 0 && r == 0)
		fuse_set_log_func(quiet_log);
	/* Also frees what libfuse keeps of the mount. */
	fuse_session_unmount(wsfs.se);
	fuse_remove_signal_handlers(wsfs.se);
	fuse_session_destroy(wsfs.se);
	fuse_opt_free_args(&args);
	log_info("unmounted %s", wsfs.mountpoint);
	conf_free(&wsfs.conf);
	free(config);
	free(optv);
	/*
	 * A stop asked for by SIGTERM, SIGINT or SIGHUP is a clean exit
	 * (systemd and init scripts read 0 as "stopped fine"): the loop
	 * returns 0 then, and -errno only when reading /dev/fuse failed.
	 */
	return r == 0 ? 0 : 1;
}

/*
 * wsctl scratch: the life of a scratch workspace, as a task runner sees it.
 * "create" makes BASE/UUID with its metadata, "hold" runs a task holding the
 * workspace's lock (so the sweeper leaves it alone while the task lives),
 * "end" says the task is over (lifetime task: removed at once) and "list"
 * shows what the base holds. The base is --base, else scratch_dir from
 * /etc/wsfs/wsfs.conf, else /var/lib/wsfs/scratch.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "json.h"
#include "log.h"
#include "mountinfo.h"
#include "number.h"
#include "rmtree.h"
#include "scratch.h"
#include "wsctl.h"

static int	sc_create(int, char **);
static int	sc_hold(int, char **);
static int	sc_end(int, char **);
static int	sc_list(int, char **);

static const struct wsctl_cmd sc_cmds[] = {
	{ "create", "[--base DIR] [--lifetime task|conversation] "
	    "[--owner USER] [--label TEXT]", NULL, sc_create },
	{ "hold", "[--base DIR] ID -- COMMAND [ARG...]", NULL, sc_hold },
	{ "end", "[--base DIR] ID", NULL, sc_end },
	{ "list", "[--base DIR] [--json]", NULL, sc_list },
	{ NULL, NULL, NULL, NULL }
};

int
cmd_scratch_conf(const char *base_opt, char **base, double *ttl_hours)
{
	struct wsfs_conf	c;
	char			err[512];
	int			r;

	conf_init(&c);
	if ((r = conf_load(&c, CONF_DEFAULT_PATH, 1, err, sizeof err)) < 0) {
		fprintf(stderr, "wsctl: %s\n", err);
		conf_free(&c);
		return r;
	}
	if (base_opt != NULL)
		*base = strdup(base_opt);
	else
		*base = strdup(c.scratch_dir != NULL ? c.scratch_dir :
		    SCRATCH_DEFAULT_BASE);
	if (ttl_hours != NULL)
		*ttl_hours = c.scratch_ttl_hours;
	conf_free(&c);
	if (*base == NULL) {
		fprintf(stderr, "wsctl: out of memory\n");
		return -ENOMEM;
	}
	return 0;
}

int
cmd_scratch_open(const char *base, int flags, struct scratch_base **sb)
{
	int	r;

	if ((r = scratch_base_open(base, flags, sb)) < 0) {
		if (r == -ENOENT)
			fprintf(stderr, "wsctl: scratch base %s: no such "
			    "directory (nothing was ever created there)\n",
			    base);
		else if (r == -ELOOP)
			fprintf(stderr, "wsctl: scratch base %s: it or a "
			    "directory above it is a symlink, which wsctl does "
			    "not follow; give the real path\n", base);
		else
			fprintf(stderr, "wsctl: scratch base %s: %s\n", base,
			    strerror(-r));
	}
	return r;
}

struct find_mount {
	const char	*real;		/* the SOURCE looked for, resolved */
	char		*found;
};

static int
find_mount_one(const struct mountinfo *m, void *arg)
{
	struct find_mount	*fm = arg;
	char			 src[PATH_MAX];

	if (strcmp(m->fstype, "fuse.wsfs") != 0 || strcmp(m->root, "/") != 0 ||
	    realpath(m->source, src) == NULL || strcmp(src, fm->real) != 0)
		return 0;
	fm->found = strdup(m->point);
	return 1;
}

/*
 * The mount point of a wsfs mount whose SOURCE is base, or NULL. The
 * caller frees it.
 */
static char *
find_mount(const char *base)
{
	struct find_mount	fm = { NULL, NULL };
	char			real[PATH_MAX];

	if (realpath(base, real) == NULL)
		return NULL;
	fm.real = real;
	(void)mountinfo_walk(find_mount_one, &fm);
	return fm.found;
}

/* A user name with an account, or a numeric uid. */
static int
parse_owner(const char *s, uid_t *uid, gid_t *gid)
{
	struct passwd	*pw;
	uint64_t	 v;

	if ((pw = getpwnam(s)) != NULL) {
		*uid = pw->pw_uid;
		*gid = pw->pw_gid;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -ENOENT;
	/* (uid_t)-1 means "no change" to chown: never an owner. */
	if (number_parse(s, 0, UINT32_MAX - 1, &v) < 0)
		return -EINVAL;
	*uid = (uid_t)v;
	*gid = (pw = getpwuid(*uid)) != NULL ? pw->pw_gid : (gid_t)v;
	return 0;
}

static const struct option base_opts[] = {
	{ "base",	required_argument,	NULL, 'b' },
	{ "lifetime",	required_argument,	NULL, 'l' },
	{ "owner",	required_argument,	NULL, 'o' },
	{ "label",	required_argument,	NULL, 'L' },
	{ "json",	no_argument,		NULL, 'j' },
	{ "help",	no_argument,		NULL, 'h' },
	{ NULL,		0,			NULL, 0 }
};

/* Options of one subcommand; which of them it accepts is in allowed. */
struct sc_opts {
	const char		*base;
	const char		*owner;
	const char		*label;
	enum scratch_lifetime	 lifetime;
	int			 json;
};

/*
 * Parse the options of one scratch subcommand, those in allowed: -1 to
 * go on, else the exit status to return (after --help or a usage error
 * told to the user).
 */
static int
sc_getopt(int argc, char **argv, const char *allowed, struct sc_opts *o)
{
	const char	*cmd = argv[0];
	char		 what[64];
	int		 c;

	memset(o, 0, sizeof *o);
	o->lifetime = SCRATCH_LIFETIME_TASK;
	o->label = "";
	snprintf(what, sizeof what, "scratch %s", cmd);
	while ((c = wsctl_getopt(what, argc, argv, "+h", base_opts)) != -1) {
		if (c == 'h') {
			wsctl_sub_usage("scratch", sc_cmds, cmd);
			return WSCTL_EXIT_OK;
		}
		if (c == '?')
			return WSCTL_EXIT_USAGE;
		if (strchr(allowed, c) == NULL)
			return wsctl_opt_refused(what, base_opts, c);
		switch (c) {
		case 'b':
			o->base = optarg;
			break;
		case 'l':
			if (scratch_lifetime_parse(optarg, &o->lifetime) < 0)
				return wsctl_usage_error(what, "--lifetime "
				    "must be task or conversation, not '%s'",
				    optarg);
			break;
		case 'o':
			o->owner = optarg;
			break;
		case 'L':
			if (!scratch_label_valid(optarg))
				return wsctl_usage_error(what, "--label must "
				    "be at most %d printable ASCII characters",
				    SCRATCH_LABEL_MAX);
			o->label = optarg;
			break;
		case 'j':
			o->json = 1;
			break;
		}
	}
	return -1;
}

static int
sc_create(int argc, char **argv)
{
	struct scratch_base	*sb = NULL;
	struct sc_opts		 o;
	char			 id[SCRATCH_ID_LEN + 1], *base = NULL;
	char			*mnt = NULL;
	uid_t			 uid = getuid();
	gid_t			 gid = getgid();
	int			 r, ret = WSCTL_EXIT_FAIL;

	if ((r = sc_getopt(argc, argv, "blLo", &o)) >= 0)
		return r;
	if (wsctl_no_operands("scratch create", argc, argv) != 0)
		return WSCTL_EXIT_USAGE;
	if (o.owner != NULL && (r = parse_owner(o.owner, &uid, &gid)) < 0)
		return wsctl_usage_error("scratch create", "--owner '%s': %s",
		    o.owner, r == -ENOENT ? "no such user" :
		    "not a valid uid");
	if (cmd_scratch_conf(o.base, &base, NULL) < 0)
		goto out;
	if (cmd_scratch_open(base, SCRATCH_CREATE, &sb) < 0)
		goto out;
	if ((r = scratch_create(sb, o.lifetime, uid, gid, o.label, id)) < 0) {
		fprintf(stderr, "wsctl: cannot create a workspace in %s: %s\n",
		    base, strerror(-r));
		goto out;
	}
	mnt = find_mount(base);
	printf("%s %s/%s\n", id, mnt != NULL ? mnt : base, id);
	ret = WSCTL_EXIT_OK;
out:
	free(mnt);
	free(base);
	scratch_base_free(sb);
	return ret;
}

/* Refuse to let anyone but root or the owner act on a workspace. */
static int
sc_allowed(const struct scratch_meta *m)
{
	uid_t	uid = getuid();

	if (uid == 0 || uid == m->owner)
		return 1;
	fprintf(stderr, "wsctl: workspace %s belongs to uid %u, not to you\n",
	    m->id, (unsigned)m->owner);
	return 0;
}

/* Parse "ID" (and for hold "-- COMMAND"), open the base, read the meta. */
static int
sc_open_id(int argc, char **argv, const char *allowed, struct sc_opts *o,
    struct scratch_base **sb, struct scratch_meta *m)
{
	char		 what[64], *base = NULL;
	const char	*id;
	int		 r;

	snprintf(what, sizeof what, "scratch %s", argv[0]);
	if ((r = sc_getopt(argc, argv, allowed, o)) >= 0)
		return r;
	if (optind >= argc)
		return wsctl_usage_error(what, "missing workspace id");
	id = argv[optind];
	if (!scratch_id_valid(id))
		return wsctl_usage_error(what, "'%s' is not a workspace id "
		    "(a lower-case uuid as printed by wsctl scratch create)",
		    id);
	if (cmd_scratch_conf(o->base, &base, NULL) < 0)
		return WSCTL_EXIT_FAIL;
	r = cmd_scratch_open(base, 0, sb);
	free(base);
	if (r < 0)
		return WSCTL_EXIT_FAIL;
	if ((r = scratch_read(*sb, id, m)) < 0) {
		if (r == -ENOENT)
			fprintf(stderr, "wsctl: no scratch workspace %s in "
			    "%s\n", id, scratch_base_path(*sb));
		else
			fprintf(stderr, "wsctl: workspace %s: unreadable "
			    "metadata: %s\n", id, strerror(-r));
		scratch_base_free(*sb);
		*sb = NULL;
		return WSCTL_EXIT_FAIL;
	}
	return -1;
}

static int
sc_hold(int argc, char **argv)
{
	struct scratch_base	*sb = NULL;
	struct scratch_meta	 m;
	struct sc_opts		 o;
	struct stat		 st;
	char			 path[PATH_MAX];
	int			 fd = -1, r, ret;

	if ((ret = sc_open_id(argc, argv, "b", &o, &sb, &m)) >= 0)
		return ret;
	ret = WSCTL_EXIT_FAIL;
	/* getopt stopped at ID; "--" before COMMAND is required. */
	if (optind + 1 >= argc || strcmp(argv[optind + 1], "--") != 0 ||
	    optind + 2 >= argc) {
		ret = wsctl_usage_error("scratch hold", "expected ID -- "
		    "COMMAND [ARG...]");
		goto out;
	}
	if (!sc_allowed(&m))
		goto out;
	/*
	 * Shared: several tasks may hold one workspace. A sweeper holds the
	 * lock exclusively only while it decides, so this waits briefly.
	 */
	if ((r = scratch_lock(sb, m.id, LOCK_SH, &fd)) < 0) {
		fprintf(stderr, "wsctl: cannot hold workspace %s: %s\n",
		    m.id, r == -ENOENT ? "it was removed" : strerror(-r));
		goto out;
	}
	if (fstatat(scratch_base_fd(sb), m.id, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		fprintf(stderr, "wsctl: cannot hold workspace %s: it was "
		    "removed\n", m.id);
		goto out;
	}
	(void)scratch_touch(sb, m.id);
	/*
	 * The lock lives as long as COMMAND: exec keeps the descriptor (not
	 * close-on-exec) and the exit status is COMMAND's own.
	 */
	if (fcntl(fd, F_SETFD, 0) < 0) {
		fprintf(stderr, "wsctl: fcntl: %s\n", strerror(errno));
		goto out;
	}
	snprintf(path, sizeof path, "%s/%s", scratch_base_path(sb), m.id);
	if (setenv("WSFS_SCRATCH_ID", m.id, 1) < 0 ||
	    setenv("WSFS_SCRATCH_DIR", path, 1) < 0) {
		fprintf(stderr, "wsctl: setenv: %s\n", strerror(errno));
		goto out;
	}
	fflush(stdout);
	execvp(argv[optind + 2], argv + optind + 2);
	fprintf(stderr, "wsctl: %s: %s\n", argv[optind + 2], strerror(errno));
	ret = errno == ENOENT ? 127 : 126;
out:
	if (fd >= 0)
		close(fd);
	scratch_base_free(sb);
	return ret;
}

static int
sc_end(int argc, char **argv)
{
	struct scratch_base	*sb = NULL;
	struct scratch_meta	 m;
	struct rmtree_stats	 st;
	struct sc_opts		 o;
	char			 trash[320];
	int			 fd = -1, r, ret;

	if ((ret = sc_open_id(argc, argv, "b", &o, &sb, &m)) >= 0)
		return ret;
	ret = WSCTL_EXIT_FAIL;
	if (optind + 1 != argc) {
		ret = wsctl_usage_error("scratch end", "unexpected argument "
		    "'%s'", argv[optind + 1]);
		goto out;
	}
	if (!sc_allowed(&m))
		goto out;
	if (m.ended == 0) {
		m.ended = time(NULL);
		if ((r = scratch_write(sb, &m)) < 0) {
			fprintf(stderr, "wsctl: cannot mark %s ended: %s\n",
			    m.id, strerror(-r));
			goto out;
		}
	}
	if (m.lifetime == SCRATCH_LIFETIME_CONVERSATION) {
		printf("ended %s (lifetime conversation: kept until the "
		    "sweeper finds it idle)\n", m.id);
		ret = WSCTL_EXIT_OK;
		goto out;
	}
	if ((r = scratch_lock(sb, m.id, LOCK_EX | LOCK_NB, &fd)) < 0) {
		if (r == -EWOULDBLOCK) {
			printf("ended %s; still in use, the sweeper removes it "
			    "once released\n", m.id);
			ret = WSCTL_EXIT_OK;
		} else
			fprintf(stderr, "wsctl: %s: %s\n", m.id, strerror(-r));
		goto out;
	}
	if ((r = scratch_retire(sb, m.id, trash, sizeof trash)) < 0) {
		fprintf(stderr, "wsctl: cannot remove %s: %s\n", m.id,
		    strerror(-r));
		goto out;
	}
	close(fd);
	fd = -1;
	memset(&st, 0, sizeof st);
	r = trash[0] != '\0' ? rmtree_trash_delete(scratch_base_fd(sb), trash,
	    &st) : 0;
	if (r < 0) {
		fprintf(stderr, "wsctl: %s: removal incomplete (%s); the rest "
		    "stays in %s/%s/%s for the sweeper\n", m.id, strerror(-r),
		    scratch_base_path(sb), RMTREE_TRASH_DIR, trash);
		goto out;
	}
	printf("removed %s (%llu files, %llu directories)\n", m.id,
	    (unsigned long long)st.files, (unsigned long long)st.dirs);
	ret = WSCTL_EXIT_OK;
out:
	if (fd >= 0)
		close(fd);
	scratch_base_free(sb);
	return ret;
}

static void
fmt_time(double t, char *buf, size_t len)
{
	struct tm	tm;
	time_t		tt = (time_t)t;

	if (t <= 0 || gmtime_r(&tt, &tm) == NULL)
		snprintf(buf, len, "-");
	else
		strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void
fmt_owner(uid_t uid, char *buf, size_t len)
{
	struct passwd	*pw;

	if ((pw = getpwuid(uid)) != NULL)
		snprintf(buf, len, "%s", pw->pw_name);
	else
		snprintf(buf, len, "%u", (unsigned)uid);
}

static void
fmt_size(uint64_t n, char *buf, size_t len)
{
	static const char	*units = "KMGTP";
	double			 v = (double)n;
	int			 u = -1;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)n);
	else
		snprintf(buf, len, "%.1f%c", v, units[u]);
}

static int
sc_list(int argc, char **argv)
{
	struct scratch_base	*sb = NULL;
	struct scratch_meta	 m;
	struct sc_opts		 o;
	struct dirent		*de;
	DIR			*d = NULL;
	char			*base = NULL, created[32], used[32], owner[64];
	char			 size[32], lt[32];
	double			 last;
	uint64_t		 bytes;
	int			 fd, r, ret = WSCTL_EXIT_FAIL, inuse, first = 1;
	int			 have_size;

	if ((r = sc_getopt(argc, argv, "bj", &o)) >= 0)
		return r;
	if (wsctl_no_operands("scratch list", argc, argv) != 0)
		return WSCTL_EXIT_USAGE;
	if (cmd_scratch_conf(o.base, &base, NULL) < 0)
		goto out;
	if (cmd_scratch_open(base, 0, &sb) < 0)
		goto out;
	if ((fd = openat(scratch_base_fd(sb), ".", O_RDONLY | O_DIRECTORY |
	    O_CLOEXEC)) < 0 || (d = fdopendir(fd)) == NULL) {
		fprintf(stderr, "wsctl: %s: %s\n", base, strerror(errno));
		goto out;
	}
	if (o.json)
		printf("[");
	else
		printf("%-36s  %-10s  %-18s  %-20s  %-20s  %8s  %-6s  %s\n",
		    "ID", "OWNER", "LIFETIME", "CREATED", "LAST USE", "SIZE",
		    "IN USE", "LABEL");
	while ((de = readdir(d)) != NULL) {
		if (!scratch_id_valid(de->d_name) ||
		    scratch_read(sb, de->d_name, &m) < 0)
			continue;
		last = m.created;
		if (scratch_last_use(sb, m.id, &last) < 0 || last < m.created)
			last = m.created;
		inuse = scratch_in_use(sb, m.id);
		have_size = rmtree_size(scratch_base_fd(sb), m.id,
		    &bytes) == 0;
		fmt_time(m.created, created, sizeof created);
		fmt_time(last, used, sizeof used);
		fmt_owner(m.owner, owner, sizeof owner);
		if (o.json) {
			printf("%s\n {\"id\": \"%s\", \"owner\": ",
			    first ? "" : ",", m.id);
			json_put_str(stdout, owner);
			printf(", \"uid\": %u, \"lifetime\": \"%s\", "
			    "\"label\": ", (unsigned)m.owner,
			    scratch_lifetime_name(m.lifetime));
			json_put_str(stdout, m.label);
			printf(", \"created\": %lld, \"ended\": %lld, "
			    "\"last_use\": %.3f, \"size\": ",
			    (long long)m.created, (long long)m.ended, last);
			if (have_size)
				printf("%llu", (unsigned long long)bytes);
			else
				printf("null");
			printf(", \"in_use\": %s}", inuse == 1 ? "true" :
			    "false");
		} else {
			if (have_size)
				fmt_size(bytes, size, sizeof size);
			else
				snprintf(size, sizeof size, "-");
			snprintf(lt, sizeof lt, "%s%s",
			    scratch_lifetime_name(m.lifetime),
			    m.ended ? ",ended" : "");
			printf("%-36s  %-10s  %-18s  %-20s  %-20s  %8s  %-6s  "
			    "%s\n", m.id, owner, lt, created, used, size,
			    inuse == 1 ? "yes" : "no", m.label);
		}
		first = 0;
	}
	if (o.json)
		printf("%s]\n", first ? "" : "\n");
	ret = WSCTL_EXIT_OK;
out:
	if (d != NULL)
		closedir(d);
	free(base);
	scratch_base_free(sb);
	return ret;
}

int
cmd_scratch(int argc, char **argv)
{
	return wsctl_dispatch("scratch", sc_cmds, argc, argv);
}

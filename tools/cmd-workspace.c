/*
 * wsctl workspace: the admin creates, removes and lists the workspaces of a
 * SOURCE directory (DESIGN.md, confinement rules 3 and 5). A workspace is a
 * top-level directory of SOURCE; one made by wsctl has a marker file
 * SOURCE/.wsfs/workspaces/NAME that records its owner, uid and inode, so
 * that "rm" removes only what wsctl made, never a stray directory that
 * someone else put there. Names starting with '.' at the top of SOURCE are
 * metadata and are never shown by wsfs.
 *
 * Every filesystem call is relative to a directory fd of SOURCE opened with
 * O_NOFOLLOW and never follows a symlink. Creates and removals of one SOURCE
 * are serialised by a lock file (flock, which the Linux NFS client maps to a
 * POSIX lock on the server), so two admins cannot hand out one uid twice.
 * The marker's format lives in marker.c; the helpers here are wsp_*.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fdio.h"
#include "json.h"
#include "log.h"
#include "nofollow.h"
#include "rmtree.h"
#include "wsctl.h"

#define WSP_META_DIR	".wsfs"
#define WSP_MARKER_DIR	"workspaces"
#define WSP_LOCK_FILE	"workspaces.lock"

/* Uids derived for owners without an account (DESIGN.md rule 5). */
#define WSP_UID_MIN	20000
#define WSP_UID_COUNT	40000		/* 20000 .. 59999 */

/* A marker together with the workspace name it belongs to. */
struct wsp_record {
	char		*name;
	struct marker m;
};

/* An opened SOURCE: its fd, the metadata directories and the lock. */
struct wsp_source {
	const char	*path;
	int		 fd;
	struct stat	 st;
	int		 meta_fd;	/* SOURCE/.wsfs, or -1 */
	int		 marker_fd;	/* SOURCE/.wsfs/workspaces, or -1 */
	int		 lock_fd;	/* held with flock(LOCK_EX), or -1 */
};

static int	wsp_create(int, char **);
static int	wsp_rm(int, char **);
static int	wsp_list(int, char **);

static const struct wsctl_cmd wsp_cmds[] = {
	{ "create",	"SOURCE/NAME [--owner USER]",	NULL, wsp_create },
	{ "rm",		"SOURCE/NAME",			NULL, wsp_rm },
	{ "list",	"SOURCE [--json]",		NULL, wsp_list },
	{ NULL,		NULL,				NULL, NULL }
};

static void
wsp_source_init(struct wsp_source *s)
{
	s->path = NULL;
	s->fd = s->meta_fd = s->marker_fd = s->lock_fd = -1;
}

static void
wsp_source_close(struct wsp_source *s)
{
	if (s->lock_fd != -1)
		close(s->lock_fd);
	if (s->marker_fd != -1)
		close(s->marker_fd);
	if (s->meta_fd != -1)
		close(s->meta_fd);
	if (s->fd != -1)
		close(s->fd);
	wsp_source_init(s);
}

/*
 * A workspace name is one path component that wsfs shows: not empty, no
 * '/', not starting with '.' (reserved for metadata), at most NAME_MAX.
 */
static const char *
wsp_name_invalid(const char *name)
{
	if (*name == '\0')
		return "the workspace name is empty";
	if (strchr(name, '/') != NULL)
		return "the workspace name must be one path component";
	if (*name == '.')
		return "names starting with '.' are reserved for metadata";
	if (strlen(name) > NAME_MAX)
		return "the workspace name is longer than 255 bytes";
	return NULL;
}

/* Drop trailing slashes, which would make open(2) follow a symlink. */
static void
wsp_trim(char *path)
{
	size_t	len = strlen(path);

	while (len > 1 && path[len - 1] == '/')
		path[--len] = '\0';
}

/*
 * Split "SOURCE/NAME" into its two parts, in place. Trailing slashes are
 * dropped as mkdir(1) does; a bare NAME means the current directory.
 */
static int
wsp_split(char *arg, const char **source, const char **name)
{
	char	*slash;

	wsp_trim(arg);
	if ((slash = strrchr(arg, '/')) == NULL) {
		*source = ".";
		*name = arg;
		return 0;
	}
	*name = slash + 1;
	if (slash == arg)
		*source = "/";
	else {
		*slash = '\0';
		*source = arg;
	}
	return 0;
}

/*
 * Open SOURCE and, if present (or create is set), its metadata directories.
 * Takes the workspace lock when lock is set. Prints why on failure.
 */
static int
wsp_source_open(struct wsp_source *s, const char *path, int create, int lock)
{
	int	r;

	wsp_source_init(s);
	s->path = path;
	if ((r = nofollow_open_path(path, 0)) < 0) {
		if (r == -ELOOP)
			log_warn("%s: it or a directory above it is a symlink, "
			    "which wsctl does not follow; give the real path",
			    path);
		else if (r == -ENOTDIR)
			log_warn("%s: not a directory", path);
		else
			log_warn("%s: %s", path, strerror(-r));
		goto out;
	}
	s->fd = r;
	if (fstat(s->fd, &s->st) == -1) {
		r = -errno;
		log_warn("%s: %s", path, strerror(errno));
		goto out;
	}
	if (create && mkdirat(s->fd, WSP_META_DIR, 0755) == -1 &&
	    errno != EEXIST) {
		r = -errno;
		log_warn("%s/%s: %s", path, WSP_META_DIR, strerror(errno));
		goto out;
	}
	s->meta_fd = openat(s->fd, WSP_META_DIR,
	    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->meta_fd == -1) {
		if (errno == ENOENT && !create)
			return 0;	/* nothing was ever created here */
		r = -errno;
		log_warn("%s/%s: %s", path, WSP_META_DIR, errno == ELOOP ?
		    "is a symlink, refused" : strerror(errno));
		goto out;
	}
	if (create && mkdirat(s->meta_fd, WSP_MARKER_DIR, 0755) == -1 &&
	    errno != EEXIST) {
		r = -errno;
		log_warn("%s/%s/%s: %s", path, WSP_META_DIR, WSP_MARKER_DIR,
		    strerror(errno));
		goto out;
	}
	s->marker_fd = openat(s->meta_fd, WSP_MARKER_DIR,
	    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (s->marker_fd == -1) {
		if (errno == ENOENT && !create)
			return 0;
		r = -errno;
		log_warn("%s/%s/%s: %s", path, WSP_META_DIR, WSP_MARKER_DIR,
		    errno == ELOOP ? "is a symlink, refused" : strerror(errno));
		goto out;
	}
	if (lock) {
		s->lock_fd = openat(s->meta_fd, WSP_LOCK_FILE, O_RDWR |
		    O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
		if (s->lock_fd == -1) {
			r = -errno;
			log_warn("%s/%s/%s: %s", path, WSP_META_DIR,
			    WSP_LOCK_FILE, strerror(errno));
			goto out;
		}
		if (flock(s->lock_fd, LOCK_EX) == -1) {
			r = -errno;
			log_warn("%s/%s/%s: lock: %s", path, WSP_META_DIR,
			    WSP_LOCK_FILE, strerror(errno));
			goto out;
		}
	}
	return 0;
out:
	wsp_source_close(s);
	return r;
}

/*
 * Read the marker of workspace name. Returns 0, -ENOENT when there is none,
 * or another -errno (-EINVAL for a damaged marker).
 */
static int
wsp_marker_read(struct wsp_source *s, const char *name, struct marker *m)
{
	struct stat	 st;
	char		 buf[MARKER_MAX + 1];
	ssize_t		 n;
	int		 fd, r;

	if (s->marker_fd == -1)
		return -ENOENT;
	fd = openat(s->marker_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
	    O_NOCTTY | O_CLOEXEC);
	if (fd == -1)
		return errno == ELOOP ? -EINVAL : -errno;
	if (fstat(fd, &st) == -1) {
		r = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > MARKER_MAX) {
		r = -EINVAL;
		goto out;
	}
	if ((n = fdio_read_all(fd, buf, MARKER_MAX)) < 0) {
		r = (int)n;
		goto out;
	}
	buf[n] = '\0';
	if (memchr(buf, '\0', (size_t)n) != NULL) {
		r = -EINVAL;
		goto out;
	}
	r = marker_parse(buf, m);
out:
	close(fd);
	return r;
}

/* The file handle of an open directory as "TYPE:HEX", or "" if none. */
static void
wsp_handle_get(int fd, char *out, size_t outlen)
{
	union {
		struct file_handle	fh;
		char			buf[sizeof(struct file_handle) +
					    MARKER_HANDLE_MAX];
	} u;
	size_t	i, off;
	int	mount_id;

	*out = '\0';
	u.fh.handle_bytes = MARKER_HANDLE_MAX;
	if (name_to_handle_at(fd, "", &u.fh, &mount_id, AT_EMPTY_PATH) == -1)
		return;		/* the filesystem cannot export handles */
	off = (size_t)snprintf(out, outlen, "%d:", u.fh.handle_type);
	for (i = 0; i < u.fh.handle_bytes && off + 3 <= outlen; i++)
		off += (size_t)snprintf(out + off, outlen - off, "%02x",
		    u.fh.f_handle[i]);
}

/*
 * Write the marker of name atomically: a temporary file beside it, synced,
 * then renamed over it, so a crash never leaves half a marker.
 */
static int
wsp_marker_write(struct wsp_source *s, const char *name,
    const struct marker *m)
{
	char		 tmp[32], text[MARKER_MAX];
	size_t		 len;
	int		 fd, r;

	if ((r = marker_format(m, text, sizeof text)) < 0)
		return r;
	len = (size_t)r;
	snprintf(tmp, sizeof tmp, ".tmp.%08" PRIx32, randombytes_random());
	fd = openat(s->marker_fd, tmp, O_WRONLY | O_CREAT | O_EXCL |
	    O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd == -1)
		return -errno;
	if ((r = fdio_write_all(fd, text, len)) < 0)
		goto fail;
	if (fsync(fd) == -1) {
		r = -errno;
		goto fail;
	}
	close(fd);
	fd = -1;
	if (renameat(s->marker_fd, tmp, s->marker_fd, name) == -1) {
		r = -errno;
		goto fail;
	}
	fsync(s->marker_fd);
	return 0;
fail:
	if (fd != -1)
		close(fd);
	unlinkat(s->marker_fd, tmp, 0);
	return r;
}

static void
wsp_records_free(struct wsp_record *v, size_t n)
{
	size_t	i;

	for (i = 0; i < n; i++)
		free(v[i].name);
	free(v);
}

static int
wsp_record_cmp(const void *a, const void *b)
{
	return strcmp(((const struct wsp_record *)a)->name,
	    ((const struct wsp_record *)b)->name);
}

/*
 * Read every marker of SOURCE, sorted by name. A damaged marker is
 * reported and makes the whole read fail: uids must not be handed out on
 * a partial picture.
 */
static int
wsp_records_read(struct wsp_source *s, struct wsp_record **out, size_t *nout)
{
	struct wsp_record	*v = NULL;
	char			**names = NULL;
	size_t			  i, n = 0, cap;
	int			  r;

	if (s->marker_fd == -1) {
		*out = NULL;
		*nout = 0;
		return 0;
	}
	if ((r = rmtree_names(s->marker_fd, &names)) < 0)
		return r;
	for (cap = 0; names[cap] != NULL; cap++)
		;
	if ((v = calloc(cap + 1, sizeof *v)) == NULL) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; names[i] != NULL; i++) {
		if (names[i][0] == '.')
			continue;
		if ((r = wsp_marker_read(s, names[i], &v[n].m)) < 0) {
			log_warn("%s/%s/%s/%s: %s", s->path, WSP_META_DIR,
			    WSP_MARKER_DIR, names[i], r == -EINVAL ?
			    "damaged marker; an operator must repair or "
			    "remove it" : strerror(-r));
			goto out;
		}
		if ((v[n].name = strdup(names[i])) == NULL) {
			r = -ENOMEM;
			goto out;
		}
		n++;
	}
	if (n > 1)
		qsort(v, n, sizeof *v, wsp_record_cmp);
	*out = v;
	*nout = n;
	v = NULL;
	n = 0;
	r = 0;
out:
	wsp_records_free(v, n);
	rmtree_names_free(names);
	return r;
}

/*
 * The uid of an owner without an account, before collisions are resolved:
 * BLAKE2b-256 (libsodium crypto_generichash, no key) of the owner name, the
 * first 8 bytes of the digest read as a little-endian integer, modulo 40000,
 * plus 20000. It is keyless so that every node and every copy of wsctl
 * derives the same uid; Python's hashlib.blake2b(name, digest_size=32)
 * gives the same digest.
 */
static uid_t
wsp_uid_hash(const char *owner)
{
	unsigned char	d[crypto_generichash_BYTES];
	uint64_t	h = 0;
	int		i;

	crypto_generichash(d, sizeof d, (const unsigned char *)owner,
	    strlen(owner), NULL, 0);
	for (i = 7; i >= 0; i--)
		h = (h << 8) | d[i];
	return (uid_t)(WSP_UID_MIN + h % WSP_UID_COUNT);
}

/*
 * A derived uid is free when no marker records it, no account has it, no
 * group has it as gid (the workspace gets the same number as its gid) and
 * no top-level entry of SOURCE (a stray directory) is owned by it: any of
 * those would let someone else into the new workspace or its files.
 */
static int
wsp_uid_free(struct wsp_source *s, const struct wsp_record *rec, size_t nrec,
    uid_t uid)
{
	struct stat	  st;
	char		**names;
	size_t		  i;
	int		  taken = 0;

	for (i = 0; i < nrec; i++)
		if (rec[i].m.uid == uid)
			return 0;
	if (getpwuid(uid) != NULL || getgrgid((gid_t)uid) != NULL)
		return 0;
	if (rmtree_names(s->fd, &names) < 0)
		return 0;
	for (i = 0; !taken && names[i] != NULL; i++) {
		if (fstatat(s->fd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 &&
		    st.st_uid == uid)
			taken = 1;
	}
	rmtree_names_free(names);
	return !taken;
}

/*
 * Decide the uid and gid of owner into m (DESIGN.md rule 5):
 * an account gives its uid; an owner without one reuses the uid recorded
 * for it, or gets a derived one, probing linearly past taken uids. An owner
 * whose uid is recorded for another owner too, or who is recorded with
 * several uids, is refused: only an operator can tell which is right.
 */
static int
wsp_owner_ids(struct wsp_source *s, const struct wsp_record *rec, size_t nrec,
    const char *owner, struct marker *m)
{
	struct passwd	*pw, *other;
	const char	*mine = NULL;
	uid_t		 uid = 0, h;
	size_t		 i;
	uint32_t	 probe;
	int		 recorded = 0;

	for (i = 0; i < nrec; i++) {
		if (strcmp(rec[i].m.owner, owner) != 0)
			continue;
		if (recorded && rec[i].m.uid != uid) {
			log_warn("owner '%s' is recorded with uid %lu "
			    "(workspace '%s') and uid %lu (workspace '%s'); "
			    "an operator must fix the markers in %s/%s/%s",
			    owner, (unsigned long)uid, mine,
			    (unsigned long)rec[i].m.uid, rec[i].name, s->path,
			    WSP_META_DIR, WSP_MARKER_DIR);
			return -EEXIST;
		}
		recorded = 1;
		uid = rec[i].m.uid;
		mine = rec[i].name;
	}
	snprintf(m->owner, sizeof m->owner, "%s", owner);
	errno = 0;
	if ((pw = getpwnam(owner)) != NULL) {
		if (recorded && uid != pw->pw_uid) {
			log_warn("owner '%s' has uid %lu but is recorded with "
			    "uid %lu (workspace '%s'); an operator must fix "
			    "the workspace owner or the account", owner,
			    (unsigned long)pw->pw_uid, (unsigned long)uid,
			    mine);
			return -EEXIST;
		}
		m->uid = pw->pw_uid;
		m->gid = pw->pw_gid;
		m->account = 1;
	} else if (errno != 0 && errno != ENOENT && errno != ESRCH) {
		log_warn("looking up user '%s': %s", owner, strerror(errno));
		return -errno;
	} else if (recorded) {
		if ((other = getpwuid(uid)) != NULL) {
			log_warn("uid %lu recorded for owner '%s' (workspace "
			    "'%s') now belongs to the account '%s'; an "
			    "operator must fix this", (unsigned long)uid,
			    owner, mine, other->pw_name);
			return -EEXIST;
		}
		m->uid = m->gid = uid;
	} else {
		h = wsp_uid_hash(owner);
		for (probe = 0; probe < WSP_UID_COUNT; probe++) {
			uid = WSP_UID_MIN +
			    (h - WSP_UID_MIN + probe) % WSP_UID_COUNT;
			if (wsp_uid_free(s, rec, nrec, uid))
				break;
		}
		if (probe == WSP_UID_COUNT) {
			log_warn("no free uid left in %d-%d for owner '%s'",
			    WSP_UID_MIN, WSP_UID_MIN + WSP_UID_COUNT - 1,
			    owner);
			return -ENOSPC;
		}
		if (probe != 0)
			log_info("uid %lu of owner '%s' is taken; using uid "
			    "%lu", (unsigned long)h, owner,
			    (unsigned long)uid);
		m->uid = m->gid = uid;
	}
	for (i = 0; i < nrec; i++) {
		if (rec[i].m.uid == m->uid && strcmp(rec[i].m.owner, owner)) {
			log_warn("uid %lu of owner '%s' is recorded for owner "
			    "'%s' too (workspace '%s'); refusing to share it, "
			    "an operator must fix the markers in %s/%s/%s",
			    (unsigned long)m->uid, owner, rec[i].m.owner,
			    rec[i].name, s->path, WSP_META_DIR, WSP_MARKER_DIR);
			return -EEXIST;
		}
	}
	return 0;
}

/*
 * Parse the options of one workspace subcommand, --owner and --json, and
 * its one operand: SOURCE/NAME, split, with a name a workspace may have,
 * or SOURCE alone if name is NULL. -1 to go on, else the exit status to
 * return (after --help or a usage error told to the user).
 */
static int
wsp_getopt(int argc, char **argv, const char *cmd, int allow_owner,
    int allow_json, const char **owner, int *json, const char **source,
    const char **name)
{
	static const struct option opts[] = {
		{ "owner",	required_argument,	NULL, 'o' },
		{ "json",	no_argument,		NULL, 'j' },
		{ "help",	no_argument,		NULL, 'h' },
		{ NULL,		0,			NULL, 0 },
	};
	const char	*why;
	char		 what[64];
	int		 c;

	snprintf(what, sizeof what, "workspace %s", cmd);
	while ((c = wsctl_getopt(what, argc, argv, "", opts)) != -1) {
		switch (c) {
		case 'o':
			if (!allow_owner)
				goto bad;
			*owner = optarg;
			break;
		case 'j':
			if (!allow_json)
				goto bad;
			*json = 1;
			break;
		case 'h':
			wsctl_sub_usage("workspace", wsp_cmds, cmd);
			return WSCTL_EXIT_OK;
		case '?':
			return WSCTL_EXIT_USAGE;
		}
	}
	if (argc - optind != 1)
		return wsctl_usage_error("workspace", "%s: expected one %s",
		    cmd, name != NULL ? "SOURCE/NAME" : "SOURCE");
	if (name == NULL) {
		wsp_trim(argv[optind]);
		*source = argv[optind];
		return -1;
	}
	wsp_split(argv[optind], source, name);
	if ((why = wsp_name_invalid(*name)) != NULL)
		return wsctl_usage_error("workspace", "%s: '%s': %s", cmd,
		    *name, why);
	return -1;
bad:
	return wsctl_opt_refused(what, opts, c);
}

/* wsctl workspace create SOURCE/NAME [--owner USER] */
static int
wsp_create(int argc, char **argv)
{
	struct wsp_source	 s;
	struct wsp_record	*rec = NULL;
	struct marker	 m, old;
	struct stat		 st;
	const char		*owner = NULL, *source, *name, *why;
	size_t			 nrec = 0;
	int			 json = 0, dfd = -1, made = 0, marked = 0;
	int			 r, ret = WSCTL_EXIT_FAIL;

	wsp_source_init(&s);
	if ((r = wsp_getopt(argc, argv, "create", 1, 0, &owner, &json,
	    &source, &name)) >= 0)
		return r;
	if (owner != NULL && (why = marker_owner_invalid(owner)) != NULL)
		return wsctl_usage_error("workspace", "create: owner '%s': %s",
		    owner, why);

	if (wsp_source_open(&s, source, 1, 1) < 0)
		goto out;
	if (wsp_records_read(&s, &rec, &nrec) < 0)
		goto out;
	memset(&m, 0, sizeof m);
	if (wsp_owner_ids(&s, rec, nrec, owner != NULL ? owner : "root",
	    &m) < 0)
		goto out;
	m.mode = owner != NULL ? 0700 : 0755;
	m.created = time(NULL);

	if (fstatat(s.fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		log_warn("%s/%s already exists%s; refused", source, name,
		    S_ISLNK(st.st_mode) ? " as a symlink" :
		    S_ISDIR(st.st_mode) ? "" : " and is not a directory");
		goto out;
	}
	if (errno != ENOENT) {
		log_warn("%s/%s: %s", source, name, strerror(errno));
		goto out;
	}
	if ((r = wsp_marker_read(&s, name, &old)) != -ENOENT)
		log_warn("%s/%s: replacing the stale marker of a workspace "
		    "that no longer exists", source, name);

	/*
	 * Made root-only first, so nobody can enter it before the marker
	 * says whose it is; handed to its owner last, through the fd.
	 */
	if (mkdirat(s.fd, name, 0700) == -1) {
		log_warn("%s/%s: %s", source, name, strerror(errno));
		goto out;
	}
	made = 1;
	dfd = openat(s.fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (dfd == -1 || fstat(dfd, &st) == -1) {
		log_warn("%s/%s: %s", source, name, strerror(errno));
		goto out;
	}
	m.dev = st.st_dev;
	m.ino = st.st_ino;
	wsp_handle_get(dfd, m.handle, sizeof m.handle);
	if ((r = wsp_marker_write(&s, name, &m)) < 0) {
		log_warn("%s/%s/%s/%s: %s", source, WSP_META_DIR,
		    WSP_MARKER_DIR, name, strerror(-r));
		goto out;
	}
	marked = 1;
	if (fchown(dfd, m.uid, m.gid) == -1 || fchmod(dfd, m.mode) == -1) {
		log_warn("%s/%s: %s", source, name, strerror(errno));
		goto out;
	}
	printf("%s/%s owner %s uid %lu mode %04o\n", source, name, m.owner,
	    (unsigned long)m.uid, (unsigned int)m.mode);
	made = marked = 0;
	ret = WSCTL_EXIT_OK;
out:
	if (marked)
		unlinkat(s.marker_fd, name, 0);
	if (made)
		unlinkat(s.fd, name, AT_REMOVEDIR);	/* still empty */
	if (dfd != -1)
		close(dfd);
	wsp_records_free(rec, nrec);
	wsp_source_close(&s);
	return ret;
}

/*
 * Check that the directory name in dirfd is the one the marker records: a
 * directory, on SOURCE's filesystem (not a mount on top of it), with the
 * recorded inode and, where the filesystem has them, the recorded file
 * handle (which carries the inode generation, so a reused inode number does
 * not match). st_dev itself is not compared with the marker: on NFS it is
 * assigned per mount and changes across remounts and nodes. where names
 * dirfd in messages.
 */
static int
wsp_check_inode(struct wsp_source *s, int dirfd, const char *where,
    const char *name, const struct marker *m)
{
	struct stat	st;
	char		handle[sizeof m->handle];
	int		fd, r = 0;

	fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
	    O_CLOEXEC);
	if (fd == -1) {
		r = -errno;
		if (errno == ELOOP || errno == ENOTDIR)
			log_warn("%s/%s is not a directory (a symlink or "
			    "file took its place); not removed", where, name);
		else if (errno != ENOENT)
			log_warn("%s/%s: %s", where, name, strerror(errno));
		return r;
	}
	if (fstat(fd, &st) == -1) {
		r = -errno;
		log_warn("%s/%s: %s", where, name, strerror(errno));
		goto out;
	}
	if (st.st_dev != s->st.st_dev) {
		log_warn("%s/%s is another filesystem mounted on the "
		    "workspace; not removed", where, name);
		r = -EXDEV;
		goto out;
	}
	wsp_handle_get(fd, handle, sizeof handle);
	if (st.st_ino != m->ino || (m->handle[0] != '\0' &&
	    handle[0] != '\0' && strcmp(handle, m->handle) != 0)) {
		log_warn("%s/%s is not the directory wsctl created (inode "
		    "%ju, marker records %ju); not removed", where, name,
		    (uintmax_t)st.st_ino, (uintmax_t)m->ino);
		r = -ESTALE;
	}
out:
	close(fd);
	return r;
}

/* Tell the admin what the safe deletion had to leave in place. */
static void
wsp_rmtree_report(void *arg, enum rmtree_event ev, const char *id,
    const char *detail)
{
	const char	*source = arg;

	if (ev == RMTREE_EV_MOUNT)
		log_warn("%s/%s/%s: a mount point, not crossed and left in "
		    "place", source, RMTREE_TRASH_DIR, detail);
	else if (ev == RMTREE_EV_ERROR)
		log_warn("%s/%s/%s: %s", source, RMTREE_TRASH_DIR, id, detail);
}

/*
 * Remove the workspace name with the sweeper's safe deletion: rename it
 * into SOURCE/.wsfs-trash, check again that what was moved is the recorded
 * directory (closing the window between the first check and the rename),
 * then delete it there without following symlinks or crossing mounts.
 * Anything else that was moved is put back.
 */
static int
wsp_remove(struct wsp_source *s, const char *name, const struct marker *m,
    struct rmtree_stats *stats)
{
	char	trash[320], where[PATH_MAX];
	int	tfd, r;

	if ((r = rmtree_trash_move(s->fd, name, trash, sizeof trash)) < 0) {
		log_warn("%s/%s: moving it to %s failed: %s", s->path, name,
		    RMTREE_TRASH_DIR, strerror(-r));
		return r;
	}
	tfd = openat(s->fd, RMTREE_TRASH_DIR, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC);
	if (tfd == -1) {
		r = -errno;
		log_warn("%s/%s: %s", s->path, RMTREE_TRASH_DIR,
		    strerror(errno));
		return r;
	}
	snprintf(where, sizeof where, "%s/%s", s->path, RMTREE_TRASH_DIR);
	if ((r = wsp_check_inode(s, tfd, where, trash, m)) < 0) {
		if (renameat2(tfd, trash, s->fd, name, RENAME_NOREPLACE) == -1)
			log_warn("%s/%s: could not be put back as %s/%s: %s",
			    where, trash, s->path, name, strerror(errno));
		close(tfd);
		return r;
	}
	close(tfd);
	if ((r = rmtree_trash_delete(s->fd, trash, stats)) < 0) {
		if (r == -EBUSY)
			log_warn("%s/%s: removed except for what is left in "
			    "%s/%s", s->path, name, where, trash);
		else
			log_warn("%s/%s: deleting %s/%s failed: %s", s->path,
			    name, where, trash, strerror(-r));
	}
	return r;
}

/* wsctl workspace rm SOURCE/NAME */
static int
wsp_rm(int argc, char **argv)
{
	struct wsp_source	 s;
	struct marker	 m;
	struct rmtree_stats	 stats;
	const char		*source, *name, *owner = NULL;
	uint64_t		 finished = 0;
	int			 json = 0, r, ret = WSCTL_EXIT_FAIL;

	wsp_source_init(&s);
	if ((r = wsp_getopt(argc, argv, "rm", 0, 0, &owner, &json,
	    &source, &name)) >= 0)
		return r;

	if (wsp_source_open(&s, source, 0, 1) < 0)
		goto out;
	memset(&stats, 0, sizeof stats);
	stats.report = wsp_rmtree_report;
	stats.report_arg = (void *)source;
	/*
	 * An earlier rm that crashed half-way left its tree in the trash;
	 * finish it first (the workspace lock keeps other rm's out of it).
	 */
	if ((r = rmtree_empty_trash(s.fd, &stats, &finished)) < 0)
		log_warn("%s/%s: finishing earlier removals: %s", source,
		    RMTREE_TRASH_DIR, strerror(-r));
	else if (finished > 0)
		log_info("%s/%s: finished %ju interrupted removal%s", source,
		    RMTREE_TRASH_DIR, (uintmax_t)finished,
		    finished == 1 ? "" : "s");
	if ((r = wsp_marker_read(&s, name, &m)) < 0) {
		if (r == -ENOENT)
			log_warn("%s/%s was not created by wsctl (no marker "
			    "in %s/%s/%s); not removed", source, name, source,
			    WSP_META_DIR, WSP_MARKER_DIR);
		else
			log_warn("%s/%s/%s/%s: %s", source, WSP_META_DIR,
			    WSP_MARKER_DIR, name, r == -EINVAL ?
			    "damaged marker; not removed" : strerror(-r));
		goto out;
	}
	if ((r = wsp_check_inode(&s, s.fd, source, name, &m)) < 0) {
		if (r != -ENOENT)
			goto out;
		log_warn("%s/%s was already gone; removing its marker",
		    source, name);
	} else if ((r = wsp_remove(&s, name, &m, &stats)) < 0 && r != -EBUSY)
		goto out;
	/*
	 * The marker goes last: a crash before this leaves a stale marker
	 * that the next rm (or a create of the same name) cleans up. After
	 * -EBUSY the name is gone and only the trash holds the rest.
	 */
	if (unlinkat(s.marker_fd, name, 0) == -1) {
		log_warn("%s/%s/%s/%s: %s", source, WSP_META_DIR,
		    WSP_MARKER_DIR, name, strerror(errno));
		goto out;
	}
	fsync(s.marker_fd);
	if (r == 0)
		printf("removed %s/%s (%ju files, %ju directories)\n", source,
		    name, (uintmax_t)stats.files, (uintmax_t)stats.dirs);
	if (r == 0 || r == -ENOENT)
		ret = WSCTL_EXIT_OK;
out:
	wsp_source_close(&s);
	return ret;
}

/* One row of "workspace list". */
struct wsp_row {
	char		*name;
	char		 owner[MARKER_OWNER_MAX + 1];
	unsigned long	 uid;
	int		 have_dir;
	mode_t		 mode;
	time_t		 created;	/* 0: unknown */
	int		 marker;
	const char	*state;
};

struct wsp_rows {
	struct wsp_row	*v;
	size_t		 n, cap;
};

static int
wsp_row_cmp(const void *a, const void *b)
{
	return strcmp(((const struct wsp_row *)a)->name,
	    ((const struct wsp_row *)b)->name);
}

/* A new zeroed row named name; an admin tool may die when memory is out. */
static struct wsp_row *
wsp_row_add(struct wsp_rows *rows, const char *name)
{
	struct wsp_row	*v, *row;

	if (rows->n == rows->cap) {
		rows->cap = rows->cap ? rows->cap * 2 : 16;
		if ((v = reallocarray(rows->v, rows->cap, sizeof *v)) == NULL)
			fatalx("out of memory");
		rows->v = v;
	}
	row = &rows->v[rows->n++];
	memset(row, 0, sizeof *row);
	if ((row->name = strdup(name)) == NULL)
		fatalx("out of memory");
	return row;
}

static void
wsp_rows_free(struct wsp_rows *rows)
{
	size_t	i;

	for (i = 0; i < rows->n; i++)
		free(rows->v[i].name);
	free(rows->v);
}

/*
 * One row per top-level directory of SOURCE and per marker, with its
 * state: "ok" (wsctl made it and the inode matches), "stray" (no marker:
 * never removed by rm), "missing" (a marker whose directory is gone) or
 * "replaced" (a marker whose name is now another inode or no directory).
 */
static int
wsp_rows_collect(struct wsp_source *s, const struct wsp_record *rec,
    size_t nrec, struct wsp_rows *rows)
{
	struct wsp_row	 *row;
	struct passwd	 *pw;
	struct stat	  st;
	char		**names;
	size_t		  i, j;
	int		  r;

	if ((r = rmtree_names(s->fd, &names)) < 0)
		return r;
	for (j = 0; names[j] != NULL; j++) {
		if (names[j][0] == '.')
			continue;	/* metadata, never a workspace */
		if (fstatat(s->fd, names[j], &st, AT_SYMLINK_NOFOLLOW) == -1 ||
		    !S_ISDIR(st.st_mode))
			continue;	/* wsfs shows only directories */
		row = wsp_row_add(rows, names[j]);
		row->have_dir = 1;
		row->uid = st.st_uid;
		row->mode = st.st_mode & 07777;
		row->state = "stray";
		pw = getpwuid(st.st_uid);
		snprintf(row->owner, sizeof row->owner, "%s",
		    pw != NULL ? pw->pw_name : "-");
		for (i = 0; i < nrec; i++) {
			if (strcmp(rec[i].name, row->name) != 0)
				continue;
			row->marker = 1;
			row->created = rec[i].m.created;
			snprintf(row->owner, sizeof row->owner, "%s",
			    rec[i].m.owner);
			row->state = st.st_ino == rec[i].m.ino &&
			    st.st_dev == s->st.st_dev ? "ok" : "replaced";
		}
	}
	rmtree_names_free(names);
	/* Markers whose directory is gone (or is no directory any more). */
	for (i = 0; i < nrec; i++) {
		for (j = 0; j < rows->n; j++)
			if (strcmp(rows->v[j].name, rec[i].name) == 0)
				break;
		if (j < rows->n)
			continue;
		row = wsp_row_add(rows, rec[i].name);
		snprintf(row->owner, sizeof row->owner, "%s", rec[i].m.owner);
		row->uid = rec[i].m.uid;
		row->marker = 1;
		row->created = rec[i].m.created;
		row->state = fstatat(s->fd, rec[i].name, &st,
		    AT_SYMLINK_NOFOLLOW) == -1 ? "missing" : "replaced";
	}
	if (rows->n > 1)
		qsort(rows->v, rows->n, sizeof *rows->v, wsp_row_cmp);
	return 0;
}

/*
 * Print a name for a terminal: bytes that are not printable ASCII become
 * \ooo, as ls -b does, so a name cannot break the table or send escapes.
 */
static void
wsp_text_name(FILE *f, const char *name, int width)
{
	const unsigned char	*p;
	int			 n = 0;

	for (p = (const unsigned char *)name; *p != '\0'; p++) {
		if (*p < 0x20 || *p >= 0x7f || *p == '\\')
			n += fprintf(f, "\\%03o", *p);
		else {
			fputc(*p, f);
			n++;
		}
	}
	fprintf(f, "%*s", width > n ? width - n : 0, "");
}

static void
wsp_rows_print(const struct wsp_rows *rows, int json)
{
	const struct wsp_row	*row;
	char			 created[64], mode[8];
	size_t			 i;

	if (json)
		printf("[");
	else
		printf("%-24s %-16s %7s %5s %-20s %-6s %s\n", "NAME", "OWNER",
		    "UID", "MODE", "CREATED", "MARKER", "STATE");
	for (i = 0; i < rows->n; i++) {
		row = &rows->v[i];
		if (row->created != 0)
			marker_time_format(row->created, created,
			    sizeof created);
		else
			snprintf(created, sizeof created, "-");
		snprintf(mode, sizeof mode, row->have_dir ? "%04o" : "-",
		    (unsigned int)row->mode);
		if (!json) {
			wsp_text_name(stdout, row->name, 24);
			printf(" %-16s %7lu %5s %-20s %-6s %s\n", row->owner,
			    row->uid, mode, created, row->marker ? "yes" : "no",
			    row->state);
			continue;
		}
		printf("%s\n  {\"name\": ", i ? "," : "");
		json_put_str(stdout, row->name);
		printf(", \"owner\": ");
		json_put_str(stdout, row->owner);
		printf(", \"uid\": %lu, \"mode\": ", row->uid);
		printf(row->have_dir ? "\"%s\"" : "null", mode);
		printf(", \"created\": ");
		printf(row->created != 0 ? "\"%s\"" : "null", created);
		printf(", \"marker\": %s, \"state\": \"%s\"}",
		    row->marker ? "true" : "false", row->state);
	}
	if (json)
		printf("%s]\n", rows->n ? "\n" : "");
}

/* wsctl workspace list SOURCE [--json] */
static int
wsp_list(int argc, char **argv)
{
	struct wsp_source	 s;
	struct wsp_record	*rec = NULL;
	struct wsp_rows		 rows = { NULL, 0, 0 };
	const char		*owner = NULL, *source;
	size_t			 nrec = 0;
	int			 json = 0, r, ret = WSCTL_EXIT_FAIL;

	wsp_source_init(&s);
	if ((r = wsp_getopt(argc, argv, "list", 0, 1, &owner, &json,
	    &source, NULL)) >= 0)
		return r;
	if (wsp_source_open(&s, source, 0, 0) < 0)
		goto out;
	if (wsp_records_read(&s, &rec, &nrec) < 0)
		goto out;
	if ((r = wsp_rows_collect(&s, rec, nrec, &rows)) < 0) {
		log_warn("%s: %s", s.path, strerror(-r));
		goto out;
	}
	wsp_rows_print(&rows, json);
	if (fflush(stdout) == EOF) {
		log_warn("stdout: %s", strerror(errno));
		goto out;
	}
	ret = WSCTL_EXIT_OK;
out:
	wsp_rows_free(&rows);
	wsp_records_free(rec, nrec);
	wsp_source_close(&s);
	return ret;
}

int
cmd_workspace(int argc, char **argv)
{
	if (sodium_init() < 0)
		fatalx("libsodium failed to initialise");
	return wsctl_dispatch("workspace", wsp_cmds, argc, argv);
}

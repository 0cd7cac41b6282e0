/*
 * Scratch workspaces: node-local task directories BASE/UUID with their
 * metadata in BASE/.wsfs/ (UUID.meta: key=value text, UUID.lock: the flock
 * that says "in use", UUID.used: its mtime is the last use through the
 * mount). Used by wsctl scratch, the sweeper and wsfs (kind=scratch), which
 * reports activity with scratch_note_use() and scratch_hold_open/close().
 *
 * Every function returns 0 or -errno unless it says otherwise.
 */
#ifndef WSFS_SCRATCH_H
#define WSFS_SCRATCH_H

#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>

#include "defaults.h"

#define SCRATCH_META_DIR	".wsfs"
#define SCRATCH_DEFAULT_BASE	WS_DEFAULT_SCRATCH
#define SCRATCH_ID_LEN		36	/* a lower-case libuuid string */
#define SCRATCH_LABEL_MAX	200
#define SCRATCH_META_MAX	1024	/* longest metadata file accepted */
#define SCRATCH_META_VERSION	1

enum scratch_lifetime {
	SCRATCH_LIFETIME_TASK,		/* removed when its task ends */
	SCRATCH_LIFETIME_CONVERSATION,	/* kept until idle past the ttl */
};

struct scratch_meta {
	char			 id[SCRATCH_ID_LEN + 1];
	enum scratch_lifetime	 lifetime;
	uid_t			 owner;
	char			 label[SCRATCH_LABEL_MAX + 1];	/* may be "" */
	int64_t			 created;	/* seconds since the epoch */
	int64_t			 ended;		/* 0: not ended */
};

/*
 * Strict parser of a metadata file: "key=value\n" lines, each known key at
 * most once, version/id/lifetime/owner/created required, nothing else.
 * Returns 0 and fills m, or -EINVAL; m is untouched on failure.
 */
int	scratch_meta_parse(const char *buf, size_t len, struct scratch_meta *m);
/* Format m into buf; returns the length or -ENOSPC / -EINVAL. */
int	scratch_meta_format(const struct scratch_meta *m, char *buf,
	    size_t len);
int	scratch_lifetime_parse(const char *s, enum scratch_lifetime *out);
const char *scratch_lifetime_name(enum scratch_lifetime l);
/* 1 if s is a workspace id (lower-case canonical uuid), else 0. */
int	scratch_id_valid(const char *s);
/* 1 if s is an acceptable label (printable ASCII, at most 200), else 0. */
int	scratch_label_valid(const char *s);

struct scratch_base;

#define SCRATCH_CREATE	0x1	/* create the base and .wsfs if missing */

/*
 * Open a scratch base once and its .wsfs directory, never through a
 * symlink: -ELOOP if the base or a directory above it is one. The base
 * must be owned by root or the caller and not writable by group or
 * others. The caller owns *out (scratch_base_free).
 */
int	scratch_base_open(const char *path, int flags,
	    struct scratch_base **out);
void	scratch_base_free(struct scratch_base *sb);
/*
 * The base's and .wsfs's directory fds and the base's path: sb's, valid
 * until scratch_base_free; the caller neither closes nor frees them.
 */
int	scratch_base_fd(const struct scratch_base *sb);
int	scratch_meta_fd(const struct scratch_base *sb);
const char *scratch_base_path(const struct scratch_base *sb);

/*
 * Create a workspace: metadata, lock and last-use files first, then the
 * directory BASE/ID (mode 0700, owned by uid:gid). Writes the new id into
 * id (SCRATCH_ID_LEN + 1 bytes).
 */
int	scratch_create(struct scratch_base *sb, enum scratch_lifetime lt,
	    uid_t uid, gid_t gid, const char *label, char *id);
/* Read and parse ID's metadata. -ENOENT: no such workspace. */
int	scratch_read(struct scratch_base *sb, const char *id,
	    struct scratch_meta *m);
/* Replace ID's metadata atomically (temp file, fsync, renameat). */
int	scratch_write(struct scratch_base *sb, const struct scratch_meta *m);
/* Last use (mtime of ID.used) in seconds since the epoch. */
int	scratch_last_use(struct scratch_base *sb, const char *id, double *t);
/* Set ID's last use to now, whatever the throttle says. */
int	scratch_touch(struct scratch_base *sb, const char *id);

/*
 * Take ID's lock file with flock(op): LOCK_SH or LOCK_EX, maybe |LOCK_NB.
 * Succeeds only if the lock file is still the linked one after locking
 * (a sweeper may have removed the workspace meanwhile). *fdp owns the lock;
 * close it to release. -EWOULDBLOCK: held by someone else (LOCK_NB).
 * -ENOENT: no such workspace.
 */
int	scratch_lock(struct scratch_base *sb, const char *id, int op,
	    int *fdp);
/*
 * 1 if someone holds ID's lock (a task runner, wsfs with open files),
 * 0 if not, -errno.
 */
int	scratch_in_use(struct scratch_base *sb, const char *id);
/*
 * With ID's LOCK_EX held: rename the workspace into the trash and drop
 * its metadata. The trash entry's name goes to trash (>= 300 bytes); the
 * caller then releases the lock and calls rmtree_trash_delete().
 * A missing directory is fine (trash is then "").
 */
int	scratch_retire(struct scratch_base *sb, const char *id, char *trash,
	    size_t trashlen);

/*
 * Take BASE/.wsfs/sweep.lock (LOCK_EX|LOCK_NB); -EWOULDBLOCK if taken.
 * *fdp is the caller's: closing it releases the lock.
 */
int	scratch_sweep_lock(struct scratch_base *sb, int *fdp);

/*
 * For wsfs. Thread-safe, never blocks on a lock, no errors to handle.
 *
 * scratch_note_use: activity in workspace id (the top-level name); cheap
 * enough for every FUSE operation: it writes the last use at most once per
 * note interval (default 60 s) per workspace.
 *
 * scratch_hold_open/close: wsfs opened / released a file or directory
 * handle in workspace id. While a workspace has open handles wsfs holds a
 * shared flock on its lock file, so the sweeper sees it in use.
 * Every hold_open must be matched by one hold_close.
 */
void	scratch_note_use(struct scratch_base *sb, const char *id);
void	scratch_hold_open(struct scratch_base *sb, const char *id);
void	scratch_hold_close(struct scratch_base *sb, const char *id);
/*
 * Most seconds between two last-use writes of one workspace. wsfs sets it
 * to min(60, scratch_ttl_hours * 360) so a ttl of a few seconds still sees
 * activity in time.
 */
void	scratch_set_note_interval(struct scratch_base *sb, double seconds);

#endif

/*
 * wsfs configuration: /etc/wsfs/wsfs.conf (key = value) overridden by
 * mount options. Shared by wsfs and wsctl so both read the same settings.
 */
#ifndef WSFS_CONF_H
#define WSFS_CONF_H

#include <stddef.h>

#include "defaults.h"

#define CONF_DEFAULT_PATH	WS_DEFAULT_CONF

enum conf_kind {
	CONF_KIND_SHARED,
	CONF_KIND_SCRATCH,
};

enum conf_uring {
	CONF_URING_AUTO,	/* io_uring if the kernel allows it */
	CONF_URING_OFF,		/* plain syscalls */
};

struct wsfs_conf {
	enum conf_kind	 kind;
	char		*lockd;		/* NULL: embedded lock table */
	char		*key;		/* cluster key file */
	char		*node;		/* node name; NULL: hostname */
	double		 lock_timeout;	/* seconds */
	int		 lock_cache;	/* idle cluster locks kept */
	double		 lock_cache_timeout; /* kernel cache under a lock, s */
	char		*scratch_dir;
	double		 scratch_ttl_hours;
	double		 sweep_interval_minutes;
	int		 allow_other;
	int		 default_permissions;
	double		 attr_timeout;
	double		 entry_timeout;
	int		 max_threads;
	int		 max_fds;	/* 0: derived from RLIMIT_NOFILE */
	enum conf_uring	 uring;
	int		 passthrough;	/* kernel passthrough without lockd */
	int		 fuse_uring;	/* FUSE over io_uring without lockd */
	int		 allow_writable_source;
	char		*control_socket;
	char		*metrics;
	char		*lock_log;	/* NULL: no lock history */
	int		 admin_uid;	/* changes the top level; -1: nobody */
	/* Application locks on the lock server, per uid and node-wide. */
	int		 plock_max_per_uid;
	int		 plock_max_waiters_per_uid;
	int		 plock_max_total;
	int		 plock_max_waiters_total;
};

/* Fill with the built-in defaults. Never fails. */
void	conf_init(struct wsfs_conf *c);
/* Release strings owned by c; conf_free of an initialised conf is safe. */
void	conf_free(struct wsfs_conf *c);
/*
 * Set one key. Returns 0, or -EINVAL with a message in err for an unknown
 * key or a bad value.
 */
int	conf_set(struct wsfs_conf *c, const char *key, const char *value,
	    char *err, size_t errlen);
/*
 * Read a config file. A missing file is not an error when optional is set.
 * Returns 0 or -errno with a message (file and line) in err.
 */
int	conf_load(struct wsfs_conf *c, const char *path, int optional,
	    char *err, size_t errlen);
/* Parse a decimal number of the form [0-9]+(.[0-9]+)?, within [min, max]. */
int	conf_parse_double(const char *s, double min, double max, double *out);
const char *conf_kind_name(enum conf_kind k);
/*
 * The default control socket of the wsfs mounted at the absolute,
 * resolved path mnt: /run/wsfs/ctl-HASH.sock. wsfs and wsctl agree on it.
 */
#define CONF_RUN_DIR	WS_RUN_DIR
void	conf_control_path(const char *mnt, char *buf, size_t len);

#endif

/*
 * Configuration keys in one table: each key has a parser and a place in
 * struct wsfs_conf. The config file goes through libinih; mount options
 * reach conf_set one at a time. Unknown keys and bad values are errors.
 */
#include "config.h"

#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "number.h"

enum conf_type {
	CT_KIND,
	CT_STR,
	CT_DOUBLE,
	CT_BOOL,
	CT_INT,
	CT_URING,
};

struct conf_key {
	const char	*name;
	enum conf_type	 type;
	size_t		 off;
	double		 min, max;
};

#define OFF(f) offsetof(struct wsfs_conf, f)
static const struct conf_key conf_keys[] = {
	{ "kind",		    CT_KIND,   OFF(kind),		0, 0 },
	{ "lockd",		    CT_STR,    OFF(lockd),		0, 0 },
	{ "key",		    CT_STR,    OFF(key),		0, 0 },
	{ "node",		    CT_STR,    OFF(node),		0, 0 },
	{ "lock_timeout",	    CT_DOUBLE, OFF(lock_timeout),	0.1, 86400 },
	{ "lock_cache",		    CT_INT,    OFF(lock_cache),		1, 1 << 24 },
	{ "lock_cache_timeout",	    CT_DOUBLE, OFF(lock_cache_timeout),	0, 86400 },
	{ "scratch_dir",	    CT_STR,    OFF(scratch_dir),	0, 0 },
	{ "scratch_ttl_hours",	    CT_DOUBLE, OFF(scratch_ttl_hours),	0, 876000 },
	{ "sweep_interval_minutes", CT_DOUBLE, OFF(sweep_interval_minutes), 0.001, 525600 },
	{ "allow_other",	    CT_BOOL,   OFF(allow_other),	0, 0 },
	{ "default_permissions",    CT_BOOL,   OFF(default_permissions), 0, 0 },
	{ "attr_timeout",	    CT_DOUBLE, OFF(attr_timeout),	0, 3600 },
	{ "entry_timeout",	    CT_DOUBLE, OFF(entry_timeout),	0, 3600 },
	{ "max_threads",	    CT_INT,    OFF(max_threads),	1, 1024 },
	{ "max_fds",		    CT_INT,    OFF(max_fds),		0, 1 << 24 },
	{ "uring",		    CT_URING,  OFF(uring),		0, 0 },
	{ "passthrough",	    CT_BOOL,   OFF(passthrough),	0, 0 },
	{ "fuse_uring",		    CT_BOOL,   OFF(fuse_uring),		0, 0 },
	{ "allow_writable_source",  CT_BOOL,   OFF(allow_writable_source), 0, 0 },
	{ "control_socket",	    CT_STR,    OFF(control_socket),	0, 0 },
	{ "metrics",		    CT_STR,    OFF(metrics),		0, 0 },
	{ "lock_log",		    CT_STR,    OFF(lock_log),		0, 0 },
	{ "admin_uid",		    CT_INT,    OFF(admin_uid),		0, INT_MAX },
	{ "plock_max_per_uid",	    CT_INT,    OFF(plock_max_per_uid),	1, 100000000 },
	{ "plock_max_waiters_per_uid", CT_INT, OFF(plock_max_waiters_per_uid), 0, 100000000 },
	{ "plock_max_total",	    CT_INT,    OFF(plock_max_total),	1, 100000000 },
	{ "plock_max_waiters_total", CT_INT,   OFF(plock_max_waiters_total), 0, 100000000 },
};
#undef OFF

void
conf_init(struct wsfs_conf *c)
{
	memset(c, 0, sizeof *c);
	c->kind = CONF_KIND_SHARED;
	c->lock_timeout = 30;
	c->lock_cache = 65536;
	c->lock_cache_timeout = 3600;
	c->scratch_ttl_hours = 24;
	c->sweep_interval_minutes = 10;
	c->allow_other = 1;
	c->default_permissions = 1;
	/* -1: chosen at mount: 1 s on one node, 0 with a lock service. */
	c->attr_timeout = -1;
	c->entry_timeout = -1;
	c->max_threads = 16;
	c->uring = CONF_URING_AUTO;
	c->passthrough = 1;
	c->fuse_uring = 1;
	c->admin_uid = -1;
	/* Half of wslockd's default per-session quota, for object locks. */
	c->plock_max_per_uid = 4096;
	c->plock_max_waiters_per_uid = 256;
	c->plock_max_total = 50000;
	c->plock_max_waiters_total = 5000;
}

void
conf_free(struct wsfs_conf *c)
{
	size_t	i;

	for (i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++) {
		if (conf_keys[i].type == CT_STR) {
			char **p = (char **)((char *)c + conf_keys[i].off);
			free(*p);
			*p = NULL;
		}
	}
}

void
conf_control_path(const char *mnt, char *buf, size_t len)
{
	unsigned long long	h = 1469598103934665603ULL;	/* FNV-1a */
	const char		*p;

	for (p = mnt; *p != '\0'; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ULL;
	snprintf(buf, len, "%s/ctl-%016llx.sock", CONF_RUN_DIR, h);
}

const char *
conf_kind_name(enum conf_kind k)
{
	return k == CONF_KIND_SCRATCH ? "scratch" : "shared";
}

int
conf_parse_double(const char *s, double min, double max, double *out)
{
	const char	*p = s;
	char		*end;
	double		 v;

	/* Only plain decimals: no signs, exponents, hex, inf or nan. */
	if (*p < '0' || *p > '9')
		return -EINVAL;
	while (*p >= '0' && *p <= '9')
		p++;
	if (*p == '.') {
		p++;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p != '\0' || p - s > 32)
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static int
conf_parse_bool(const char *s, int *out)
{
	static const char *yes[] = { "1", "yes", "true", "on" };
	static const char *no[] = { "0", "no", "false", "off" };
	size_t		   i;

	for (i = 0; i < 4; i++) {
		if (strcmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -EINVAL;
}

int
conf_set(struct wsfs_conf *c, const char *key, const char *value, char *err,
    size_t errlen)
{
	const struct conf_key	*k = NULL;
	void			*field;
	double			 d;
	uint64_t		 u;
	size_t			 i;
	int			 b;

	for (i = 0; i < sizeof conf_keys / sizeof conf_keys[0]; i++) {
		if (strcmp(conf_keys[i].name, key) == 0) {
			k = &conf_keys[i];
			break;
		}
	}
	if (k == NULL) {
		snprintf(err, errlen, "unknown option '%s'", key);
		return -EINVAL;
	}
	field = (char *)c + k->off;
	if (value == NULL) {
		/* A bare boolean flag means "yes". */
		if (k->type != CT_BOOL) {
			snprintf(err, errlen, "option '%s' needs a value", key);
			return -EINVAL;
		}
		*(int *)field = 1;
		return 0;
	}
	switch (k->type) {
	case CT_KIND:
		if (strcmp(value, "shared") == 0)
			c->kind = CONF_KIND_SHARED;
		else if (strcmp(value, "scratch") == 0)
			c->kind = CONF_KIND_SCRATCH;
		else
			goto bad;
		return 0;
	case CT_URING:
		if (strcmp(value, "auto") == 0 || strcmp(value, "on") == 0)
			c->uring = CONF_URING_AUTO;
		else if (strcmp(value, "off") == 0)
			c->uring = CONF_URING_OFF;
		else
			goto bad;
		return 0;
	case CT_STR: {
		char	**p = field, *dup;

		if (*value == '\0' || strlen(value) >= PATH_MAX)
			goto bad;
		if ((dup = strdup(value)) == NULL) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
		free(*p);
		*p = dup;
		return 0;
	}
	case CT_DOUBLE:
		if (conf_parse_double(value, k->min, k->max, &d) < 0)
			goto range;
		*(double *)field = d;
		return 0;
	case CT_INT:
		if (number_parse(value, 0, (uint64_t)k->max, &u) < 0 ||
		    u < (uint64_t)k->min)
			goto range;
		*(int *)field = (int)u;
		return 0;
	case CT_BOOL:
		if (conf_parse_bool(value, &b) < 0)
			goto bad;
		*(int *)field = b;
		return 0;
	}
bad:
	snprintf(err, errlen, "bad value '%s' for option '%s'", value, key);
	return -EINVAL;
range:
	snprintf(err, errlen, "bad value '%s' for option '%s' (a number from "
	    "%g to %g)", value, key, k->min, k->max);
	return -EINVAL;
}

struct conf_parse_ctx {
	struct wsfs_conf	*c;
	char			 err[256];
	int			 errnum;
};

static int
conf_ini_handler(void *user, const char *section, const char *name,
    const char *value)
{
	struct conf_parse_ctx	*ctx = user;
	int			 r;

	if (ctx->errnum != 0)
		return 0;
	if (section[0] != '\0' && strcmp(section, "wsfs") != 0) {
		snprintf(ctx->err, sizeof ctx->err, "unknown section [%s]",
		    section);
		ctx->errnum = -EINVAL;
		return 0;
	}
	if ((r = conf_set(ctx->c, name, value, ctx->err, sizeof ctx->err)) < 0) {
		ctx->errnum = r;
		return 0;
	}
	return 1;
}

int
conf_load(struct wsfs_conf *c, const char *path, int optional, char *err,
    size_t errlen)
{
	struct conf_parse_ctx	 ctx = { .c = c };
	FILE			*f;
	int			 line;

	if ((f = fopen(path, "re")) == NULL) {
		if (optional && errno == ENOENT)
			return 0;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -errno;
	}
	line = ini_parse_file(f, conf_ini_handler, &ctx);
	fclose(f);
	if (line != 0) {
		if (ctx.errnum == 0) {
			snprintf(err, errlen, "%s:%d: syntax error", path, line);
			return -EINVAL;
		}
		snprintf(err, errlen, "%s:%d: %s", path, line, ctx.err);
		return ctx.errnum;
	}
	return 0;
}

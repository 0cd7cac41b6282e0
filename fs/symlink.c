/*
 * Symlink target rewriting (DESIGN.md, confinement rule 2). The kernel
 * follows whatever readlink returns from the caller's view of the mount, so
 * wsfs returns only targets that stay inside the link's workspace. This
 * module is pure: it sees the stored target and the depth of the link's
 * directory below the workspace root, and nothing else.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "wsfs.h"

struct sl_out {
	char	*p;
	size_t	 len, cap;
	int	 overflow;
};

static void
sl_put(struct sl_out *o, const char *s, size_t n)
{
	if (o->len + n + 1 > o->cap) {
		o->overflow = 1;
		return;
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
	o->p[o->len] = '\0';
}

/*
 * A relative target that is a run of ".." climbing no higher than the root
 * followed by plain names is returned as stored, so that the common links
 * (../lib/libx.so, node_modules/.bin/x) read back exactly as written.
 */
static int
symlink_is_plain(const char *t, unsigned int depth)
{
	unsigned int	 ups = 0;
	int		 names = 0;
	const char	*c = t, *e;
	size_t		 n;

	if (*t == '\0' || *t == '/')
		return 0;
	for (;;) {
		e = strchr(c, '/');
		n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.'))
			return 0;
		if (n == 2 && c[0] == '.' && c[1] == '.') {
			if (names || ++ups > depth)
				return 0;
		} else
			names = 1;
		if (e == NULL)
			return 1;
		c = e + 1;
	}
}

int
symlink_rewrite(const char *target, unsigned int depth, char *out,
    size_t outlen)
{
	/* Component starts and lengths of the resolved path below the root. */
	const char	*name[PATH_MAX / 2];
	size_t		 nlen[PATH_MAX / 2];
	size_t		 nnames = 0, n, i;
	unsigned int	 keep, ups;
	const char	*c, *e;
	struct sl_out	 o = { out, 0, outlen, 0 };
	size_t		 tlen = strlen(target);

	if (outlen == 0)
		return -ENAMETOOLONG;
	out[0] = '\0';
	if (tlen >= PATH_MAX)
		return -ENAMETOOLONG;
	if (symlink_is_plain(target, depth)) {
		sl_put(&o, target, tlen);
		return o.overflow ? -ENAMETOOLONG : 0;
	}

	/*
	 * Resolve lexically. The first "keep" components are those of the
	 * link's own directory (names unknown, only their number); ".." first
	 * pops resolved names, then eats into that prefix, and stops at the
	 * workspace root, as RESOLVE_IN_ROOT does.
	 */
	keep = target[0] == '/' ? 0 : depth;
	for (c = target;; c = e + 1) {
		e = strchr(c, '/');
		n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.')) {
			/* empty or "." component: nothing to do */
		} else if (n == 2 && c[0] == '.' && c[1] == '.') {
			if (nnames > 0)
				nnames--;
			else if (keep > 0)
				keep--;
		} else {
			if (nnames == sizeof name / sizeof name[0])
				return -ENAMETOOLONG;
			name[nnames] = c;
			nlen[nnames++] = n;
		}
		if (e == NULL)
			break;
	}

	ups = depth - keep;
	for (i = 0; i < ups; i++)
		sl_put(&o, i == 0 ? ".." : "/..", i == 0 ? 2 : 3);
	for (i = 0; i < nnames; i++) {
		if (o.len > 0)
			sl_put(&o, "/", 1);
		sl_put(&o, name[i], nlen[i]);
	}
	if (o.len == 0)
		sl_put(&o, ".", 1);
	/* A trailing slash asks for a directory; keep that meaning. */
	if (tlen > 0 && target[tlen - 1] == '/' && o.p[o.len - 1] != '/' &&
	    strspn(target, "/") != tlen && strcmp(o.p, ".") != 0)
		sl_put(&o, "/", 1);
	return o.overflow ? -ENAMETOOLONG : 0;
}

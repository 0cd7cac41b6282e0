/*
 * Lock keys (see lockkey.h): the one formatter and the one parser, so
 * that the node that takes a lock and the one that is asked for it back
 * read the same name the same way.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lockkey.h"
#include "number.h"

static int
lockkey_kind_ok(char kind)
{
	return kind >= 'a' && kind <= 'z';
}

size_t
lockkey_format_gen(char kind, uint64_t source, uint64_t ino, uint64_t gen,
    char *buf, size_t len)
{
	int	n;

	if (!lockkey_kind_ok(kind))
		return 0;
	if (gen == 0)
		n = snprintf(buf, len, "%c/%" PRIu64 "/%" PRIu64, kind, source,
		    ino);
	else
		n = snprintf(buf, len, "%c/%" PRIu64 "/%" PRIu64 "/%" PRIu64,
		    kind, source, ino, gen);
	return n < 0 || (size_t)n >= len ? 0 : (size_t)n;
}

size_t
lockkey_format(char kind, uint64_t source, uint64_t ino, char *buf,
    size_t len)
{
	return lockkey_format_gen(kind, source, ino, 0, buf, len);
}

int
lockkey_parse_gen(const void *key, size_t len, char *kind, uint64_t *source,
    uint64_t *ino, uint64_t *gen)
{
	char		 buf[LOCKKEY_MAX], *slash, *slash2;
	uint64_t	 s, i, g = 0;

	/* A NUL would end the string early: "g/1/2\0" is not a key. */
	if (len < 5 || len >= sizeof buf || memchr(key, '\0', len) != NULL)
		return -EINVAL;
	memcpy(buf, key, len);
	buf[len] = '\0';
	if (!lockkey_kind_ok(buf[0]) || buf[1] != '/' ||
	    (slash = strchr(buf + 2, '/')) == NULL)
		return -EINVAL;
	*slash = '\0';
	if ((slash2 = strchr(slash + 1, '/')) != NULL) {
		*slash2 = '\0';
		/* One spelling per key: an unknown generation is left out. */
		if (number_parse(slash2 + 1, NUMBER_CANONICAL, UINT64_MAX,
		    &g) < 0 || g == 0)
			return -EINVAL;
	}
	if (number_parse(buf + 2, NUMBER_CANONICAL, UINT64_MAX, &s) < 0 ||
	    number_parse(slash + 1, NUMBER_CANONICAL, UINT64_MAX, &i) < 0)
		return -EINVAL;
	*kind = buf[0];
	*source = s;
	*ino = i;
	*gen = g;
	return 0;
}

int
lockkey_parse(const void *key, size_t len, char *kind, uint64_t *source,
    uint64_t *ino)
{
	char		k;
	uint64_t	s, i, g;
	int		r;

	if ((r = lockkey_parse_gen(key, len, &k, &s, &i, &g)) < 0)
		return r;
	*kind = k;
	*source = s;
	*ino = i;
	return 0;
}

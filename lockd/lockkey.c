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
lockkey_format(char kind, uint64_t source, uint64_t ino, char *buf,
    size_t len)
{
	int	n;

	if (!lockkey_kind_ok(kind))
		return 0;
	n = snprintf(buf, len, "%c/%" PRIu64 "/%" PRIu64, kind, source, ino);
	return n < 0 || (size_t)n >= len ? 0 : (size_t)n;
}

int
lockkey_parse(const void *key, size_t len, char *kind, uint64_t *source,
    uint64_t *ino)
{
	char		 buf[LOCKKEY_MAX], *slash;
	uint64_t	 s, i;

	if (len < 5 || len >= sizeof buf)
		return -EINVAL;
	memcpy(buf, key, len);
	buf[len] = '\0';
	if (!lockkey_kind_ok(buf[0]) || buf[1] != '/' ||
	    (slash = strchr(buf + 2, '/')) == NULL)
		return -EINVAL;
	*slash = '\0';
	if (number_parse(buf + 2, NUMBER_CANONICAL, UINT64_MAX, &s) < 0 ||
	    number_parse(slash + 1, NUMBER_CANONICAL, UINT64_MAX, &i) < 0)
		return -EINVAL;
	*kind = buf[0];
	*source = s;
	*ino = i;
	return 0;
}

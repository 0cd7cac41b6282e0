/*
 * Strict unsigned integers (see number.h): digits only, overflow checked
 * digit by digit, so every caller refuses the same malformed input.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>

#include "number.h"

int
number_parse(const char *s, int flags, uint64_t max, uint64_t *out)
{
	unsigned	base = (flags & NUMBER_OCTAL) ? 8 : 10, d;
	uint64_t	v = 0;
	const char	*p;
	int		range = 0;

	if (*s == '\0')
		return -EINVAL;
	if ((flags & NUMBER_CANONICAL) && s[0] == '0' && s[1] != '\0')
		return -EINVAL;
	for (p = s; *p != '\0'; p++) {
		if (*p < '0' || (d = (unsigned)(*p - '0')) >= base)
			return -EINVAL;
		/* Keep reading after an overflow: junk later is -EINVAL. */
		if (v > (max - d) / base || max < d)
			range = 1;
		else
			v = v * base + d;
	}
	if (range)
		return -ERANGE;
	*out = v;
	return 0;
}

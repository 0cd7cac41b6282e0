/*
 * The one strict parser of unsigned integers in text that wsfs, wsctl and
 * their files read: options, metadata files, markers. strtoul(3) accepts
 * leading space, a sign, "0x" and wraps "-1" around; none of that is a
 * number here.
 */
#ifndef WS_NUMBER_H
#define WS_NUMBER_H

#include <stdint.h>

#define NUMBER_OCTAL		0x1	/* digits 0-7, base 8 */
#define NUMBER_CANONICAL	0x2	/* no leading zero: one spelling */

/*
 * Parse all of s as digits, nothing else, in base 10 (or 8). Returns 0
 * and sets *out; -EINVAL if s is empty or holds anything but digits (or,
 * with NUMBER_CANONICAL, starts with a 0 other than "0" itself); -ERANGE
 * if the value is above max. *out is set only on success.
 */
int	number_parse(const char *s, int flags, uint64_t max, uint64_t *out);

#endif

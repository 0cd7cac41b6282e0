/* Unit tests for the strict integer parser (lockd/number.c). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "unit.h"

#include "number.h"

static uint64_t
ok(const char *s, int flags, uint64_t max)
{
	uint64_t	v = 12345;

	if (number_parse(s, flags, max, &v) != 0)
		fail_msg("'%s' refused", s);
	return v;
}

static void
bad(const char *s, int flags, uint64_t max, int err)
{
	uint64_t	v = 12345;

	assert_int_equal(number_parse(s, flags, max, &v), err);
	/* Out-parameters are set only on success. */
	assert_int_equal(v, 12345);
}

static void
test_decimal(void **state)
{
	assert_int_equal(ok("0", 0, 10), 0);
	assert_int_equal(ok("7", 0, 10), 7);
	assert_int_equal(ok("10", 0, 10), 10);
	assert_int_equal(ok("007", 0, 10), 7);
	assert_int_equal(ok("4294967294", 0, UINT32_MAX - 1), 4294967294u);
	assert_int_equal(ok("18446744073709551615", 0, UINT64_MAX),
	    UINT64_MAX);
	bad("11", 0, 10, -ERANGE);
	bad("4294967295", 0, UINT32_MAX - 1, -ERANGE);
	bad("18446744073709551616", 0, UINT64_MAX, -ERANGE);
	bad("99999999999999999999999", 0, UINT64_MAX, -ERANGE);
	bad("5", 0, 4, -ERANGE);
}

static void
test_malformed(void **state)
{
	static const char *junk[] = {
		"", " 1", "1 ", "+1", "-1", "-0", "0x10", "1e3", "1.0", "1.",
		".5", "1_000", "١", "1\n", "\t7", "abc", "12a", "a12",
	};
	size_t	i;

	for (i = 0; i < sizeof junk / sizeof junk[0]; i++)
		bad(junk[i], 0, UINT64_MAX, -EINVAL);
	/* Junk after an overflow is still junk, not a range error. */
	bad("99999999999999999999999x", 0, UINT64_MAX, -EINVAL);
}

static void
test_flags(void **state)
{
	assert_int_equal(ok("0755", NUMBER_OCTAL, 07777), 0755);
	assert_int_equal(ok("7777", NUMBER_OCTAL, 07777), 07777);
	bad("10000", NUMBER_OCTAL, 07777, -ERANGE);
	bad("0758", NUMBER_OCTAL, 07777, -EINVAL);
	bad("9", NUMBER_OCTAL, 07777, -EINVAL);
	assert_int_equal(ok("0", NUMBER_CANONICAL, 10), 0);
	assert_int_equal(ok("10", NUMBER_CANONICAL, 10), 10);
	bad("01", NUMBER_CANONICAL, 10, -EINVAL);
	bad("00", NUMBER_CANONICAL, 10, -EINVAL);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_decimal),
    cmocka_unit_test(test_malformed),
    cmocka_unit_test(test_flags))

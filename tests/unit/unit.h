/*
 * What every unit test shares: cmocka and its main. A test file ends with
 *
 *	UNIT_MAIN(READY, SETUP, TEARDOWN,
 *	    cmocka_unit_test(test_one),
 *	    cmocka_unit_test(test_two))
 *
 * READY is checked before any test runs (0: exit 1 at once), SETUP and
 * TEARDOWN run around the whole group (NULL for none).
 */
#ifndef TESTS_UNIT_UNIT_H
#define TESTS_UNIT_UNIT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#define UNIT_MAIN(ready, setup, teardown, ...)				\
int									\
main(void)								\
{									\
	const struct CMUnitTest	tests[] = { __VA_ARGS__ };		\
									\
	if (!(ready))							\
		return 1;						\
	return cmocka_run_group_tests(tests, setup, teardown);		\
}

#endif

/* Unit tests for symlink_rewrite(): the table of DESIGN.md rule 2. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"

#include "wsfs.h"

struct wsfs wsfs;

static void
check(const char *target, unsigned int depth, const char *want)
{
	char	out[PATH_MAX];

	assert_int_equal(symlink_rewrite(target, depth, out, sizeof out), 0);
	if (strcmp(out, want) != 0)
		fail_msg("'%s' at depth %u: got '%s', want '%s'", target, depth,
		    out, want);
}

static void
test_absolute(void **state)
{
	check("/lib/x", 0, "lib/x");
	check("/lib/x", 1, "../lib/x");
	check("/lib/x", 3, "../../../lib/x");
	check("/", 0, ".");
	check("/", 2, "../..");
	check("/a/./b//c/", 1, "../a/b/c/");
	check("/../../etc/passwd", 2, "../../etc/passwd");
	check("/a/b/../c", 0, "a/c");
}

static void
test_plain_kept(void **state)
{
	check("../lib/libx.so", 1, "../lib/libx.so");
	check("../../a", 2, "../../a");
	check("node_modules/.bin", 0, "node_modules/.bin");
	check("x", 5, "x");
	check("..", 1, "..");
	check(".hidden/..x", 0, ".hidden/..x");
}

static void
test_climbing_clamped(void **state)
{
	check("../../../../etc/passwd", 1, "../etc/passwd");
	check("../../../../etc/passwd", 0, "etc/passwd");
	check("..", 0, ".");
	check("../..", 1, "..");
	check("../../", 1, "../");
}

static void
test_dotdot_after_name(void **state)
{
	check("a/../../x", 1, "../x");
	check("a/../../x", 0, "x");
	check("a/../b", 2, "b");
	check("a/b/../../..", 3, "..");
	check("x/../../../y", 2, "../../y");
	check("./a", 1, "a");
	check("a//b", 0, "a/b");
	check("a/.", 0, "a");
}

static void
test_too_long(void **state)
{
	char	out[16], target[PATH_MAX + 8];

	assert_int_equal(symlink_rewrite("/aaaaaaaaaaaaaaaaaaaaa", 0, out,
	    sizeof out), -ENAMETOOLONG);
	memset(target, 'a', sizeof target - 1);
	target[sizeof target - 1] = '\0';
	assert_int_equal(symlink_rewrite(target, 0, out, sizeof out),
	    -ENAMETOOLONG);
}

/* Leading ".." count never exceeds depth; no ".." after a name. */
static void
test_property_random(void **state)
{
	static const char *parts[] = { "..", ".", "a", "", "bb", "..." };
	char		   target[256], out[PATH_MAX], *c, *save = NULL;
	unsigned int	   seed = 12345, i, j, n, depth, ups;
	int		   names;

	for (i = 0; i < 200000; i++) {
		target[0] = '\0';
		seed = seed * 1103515245 + 12345;
		if (seed & 0x10000)
			strcat(target, "/");
		n = (seed >> 8) % 9;
		for (j = 0; j < n; j++) {
			seed = seed * 1103515245 + 12345;
			strcat(target, parts[(seed >> 16) % 6]);
			if (j + 1 < n)
				strcat(target, "/");
		}
		depth = (seed >> 4) % 4;
		assert_int_equal(symlink_rewrite(target, depth, out,
		    sizeof out), 0);
		ups = 0;
		names = 0;
		for (c = strtok_r(out, "/", &save); c != NULL;
		    c = strtok_r(NULL, "/", &save)) {
			if (strcmp(c, "..") == 0) {
				assert_int_equal(names, 0);
				ups++;
			} else if (strcmp(c, ".") != 0)
				names = 1;
		}
		assert_true(ups <= depth);
		assert_true(out[0] != '/');
	}
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_absolute),
    cmocka_unit_test(test_plain_kept),
    cmocka_unit_test(test_climbing_clamped),
    cmocka_unit_test(test_dotdot_after_name),
    cmocka_unit_test(test_too_long),
    cmocka_unit_test(test_property_random))

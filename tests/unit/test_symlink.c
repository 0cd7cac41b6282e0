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

/*
 * The rule's table: (stored target, depth of the link's directory below
 * the workspace root, what readlink answers), in groups by the case of
 * DESIGN.md rule 2 they test.
 */
static const struct rewrite_case {
	const char	*group;
	const char	*target;
	unsigned int	 depth;
	const char	*want;
} cases[] = {
	/* An absolute target means "from the workspace root". */
	{ "absolute", "/lib/x", 0, "lib/x" },
	{ "absolute", "/lib/x", 1, "../lib/x" },
	{ "absolute", "/lib/x", 3, "../../../lib/x" },
	{ "absolute", "/", 0, "." },
	{ "absolute", "/", 2, "../.." },
	{ "absolute", "/a/./b//c/", 1, "../a/b/c/" },
	{ "absolute", "/../../etc/passwd", 2, "../../etc/passwd" },
	{ "absolute", "/a/b/../c", 0, "a/c" },
	/* Leading ".." within the root, then names: kept as stored. */
	{ "plain", "../lib/libx.so", 1, "../lib/libx.so" },
	{ "plain", "../../a", 2, "../../a" },
	{ "plain", "node_modules/.bin", 0, "node_modules/.bin" },
	{ "plain", "x", 5, "x" },
	{ "plain", "..", 1, ".." },
	{ "plain", ".hidden/..x", 0, ".hidden/..x" },
	/* Climbing above the root stops at the root. */
	{ "climbing", "../../../../etc/passwd", 1, "../etc/passwd" },
	{ "climbing", "../../../../etc/passwd", 0, "etc/passwd" },
	{ "climbing", "..", 0, "." },
	{ "climbing", "../..", 1, ".." },
	{ "climbing", "../../", 1, "../" },
	/* ".." after a name: resolved inside the root. */
	{ "dotdot", "a/../../x", 1, "../x" },
	{ "dotdot", "a/../../x", 0, "x" },
	{ "dotdot", "a/../b", 2, "b" },
	{ "dotdot", "a/b/../../..", 3, ".." },
	{ "dotdot", "x/../../../y", 2, "../../y" },
	{ "dotdot", "./a", 1, "a" },
	{ "dotdot", "a//b", 0, "a/b" },
	{ "dotdot", "a/.", 0, "a" },
};

/* Every row of the group, which must have some. */
static void
check_group(const char *group)
{
	char	out[PATH_MAX];
	size_t	i, n = 0;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (strcmp(cases[i].group, group) != 0)
			continue;
		n++;
		assert_int_equal(symlink_rewrite(cases[i].target,
		    cases[i].depth, out, sizeof out), 0);
		if (strcmp(out, cases[i].want) != 0)
			fail_msg("'%s' at depth %u: got '%s', want '%s'",
			    cases[i].target, cases[i].depth, out,
			    cases[i].want);
	}
	assert_true(n > 0);
}

static void
test_absolute(void **state)
{
	check_group("absolute");
}

static void
test_plain_kept(void **state)
{
	check_group("plain");
}

static void
test_climbing_clamped(void **state)
{
	check_group("climbing");
}

static void
test_dotdot_after_name(void **state)
{
	check_group("dotdot");
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

/*
 * Unit tests for the marker parser and writer of wsctl workspace
 * (tools/marker.c): what wsctl writes reads back the same, required keys,
 * strict numbers, comments, unknown keys, and damaged markers.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "wsctl.h"

static const char good[] =
    "# Created by wsctl workspace create; wsctl workspace rm removes\n"
    "# the workspace only while its inode matches this marker.\n"
    "version=1\nowner=agent-7\nuid=20123\ngid=20123\naccount=no\n"
    "mode=0700\ndev=2049\nino=18446744073709551615\n"
    "handle=1:00ab\ncreated=2024-03-01T12:34:56Z\n";

static int
parse(const char *text, struct marker *m)
{
	char	buf[MARKER_MAX + 1];

	snprintf(buf, sizeof buf, "%s", text);
	return marker_parse(buf, m);
}

static void
test_good(void **state)
{
	struct marker	m;

	assert_int_equal(parse(good, &m), 0);
	assert_string_equal(m.owner, "agent-7");
	assert_int_equal(m.uid, 20123);
	assert_int_equal(m.gid, 20123);
	assert_int_equal(m.account, 0);
	assert_int_equal(m.mode, 0700);
	assert_int_equal(m.dev, 2049);
	assert_int_equal(m.ino, UINT64_MAX);
	assert_string_equal(m.handle, "1:00ab");
	assert_int_equal(m.created, 1709296496);
	/* The minimum: owner, uid, ino; root is a valid owner. */
	assert_int_equal(parse("owner=root\nuid=0\nino=2\n", &m), 0);
	assert_int_equal(m.created, 0);
	assert_int_equal(m.account, 0);
	/* Unknown keys (a newer wsctl), comments and blank lines pass. */
	assert_int_equal(parse("# x\n\nowner=bob\ncolour=red\nuid=1\n"
	    "ino=3\naccount=yes\n", &m), 0);
	assert_int_equal(m.account, 1);
	/* A value may hold '='; the last of a repeated key wins. */
	assert_int_equal(parse("owner=bob\nuid=1\nuid=2\nino=3\n"
	    "handle=a=b\n", &m), 0);
	assert_int_equal(m.uid, 2);
	assert_string_equal(m.handle, "a=b");
}

static void
test_bad(void **state)
{
	static const char *bad[] = {
		"",
		"owner=bob\nuid=1\n",			/* no ino */
		"uid=1\nino=3\n",			/* no owner */
		"owner=bob\nino=3\n",			/* no uid */
		"owner=bob\nuid=1\nino=3\njunk\n",	/* no '=' */
		"version=2\nowner=bob\nuid=1\nino=3\n",
		"owner=12345\nuid=1\nino=3\n",		/* all digits */
		"owner=a b\nuid=1\nino=3\n",
		"owner=-x\nuid=1\nino=3\n",
		"owner=\nuid=1\nino=3\n",
		"owner=bob\nuid=-1\nino=3\n",
		"owner=bob\nuid=4294967295\nino=3\n",
		"owner=bob\nuid= 1\nino=3\n",
		"owner=bob\nuid=1\nino=3\ngid=0x10\n",
		"owner=bob\nuid=1\nino=18446744073709551616\n",
		"owner=bob\nuid=1\nino=3\nmode=10000\n",
		"owner=bob\nuid=1\nino=3\nmode=0789\n",
		"owner=bob\nuid=1\nino=3\nmode= 755\n",
		"owner=bob\nuid=1\nino=3\nmode=-1\n",
		"owner=bob\nuid=1\nino=3\ncreated=yesterday\n",
		"owner=bob\nuid=1\nino=3\ncreated=2024-03-01T12:34:56Zx\n",
		"owner=bob\nuid=1\r\nino=3\n",
	};
	struct marker	m;
	size_t		i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (parse(bad[i], &m) != -EINVAL)
			fail_msg("accepted damaged marker #%zu: %s", i, bad[i]);
	}
}

static void
test_roundtrip(void **state)
{
	struct marker	m, m2;
	char		buf[MARKER_MAX];
	int		n;

	memset(&m, 0, sizeof m);
	/* The longest owner, handle and time a marker holds. */
	memset(m.owner, 'o', MARKER_OWNER_MAX);
	m.uid = 4294967294u;
	m.gid = 0;
	m.account = 1;
	m.mode = 07777;
	m.dev = UINT64_MAX;
	m.ino = 1;
	memset(m.handle, 'f', sizeof m.handle - 1);
	m.created = 253402300799;	/* 9999-12-31T23:59:59Z */
	n = marker_format(&m, buf, sizeof buf);
	assert_true(n > 0 && (size_t)n == strlen(buf));
	assert_int_equal(marker_parse(buf, &m2), 0);
	assert_memory_equal(&m, &m2, sizeof m);
	assert_int_equal(marker_format(&m, buf, 100), -ENAMETOOLONG);
}

static void
test_owner_invalid(void **state)
{
	char	long_name[80];

	assert_null(marker_owner_invalid("agent-7"));
	assert_null(marker_owner_invalid("u\xc3\xa9"));
	assert_non_null(marker_owner_invalid(""));
	assert_non_null(marker_owner_invalid("007"));
	assert_non_null(marker_owner_invalid("a:b"));
	assert_non_null(marker_owner_invalid("a=b"));
	assert_non_null(marker_owner_invalid("a\nb"));
	memset(long_name, 'a', 65);
	long_name[65] = '\0';
	assert_non_null(marker_owner_invalid(long_name));
	long_name[64] = '\0';
	assert_null(marker_owner_invalid(long_name));
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_good),
    cmocka_unit_test(test_bad),
    cmocka_unit_test(test_roundtrip),
    cmocka_unit_test(test_owner_invalid))

/* Unit tests for the lock key pair (lockd/lockkey.c). */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"

#include "lockkey.h"

static void
test_round_trip(void **state)
{
	static const struct { char kind; uint64_t src, ino; const char *s; }
	    t[] = {
		{ 'g', 1234, 5678, "g/1234/5678" },
		{ 'p', 0, 0, "p/0/0" },
		{ 'w', 2, UINT64_MAX, "w/2/18446744073709551615" },
		{ 'f', UINT64_MAX, UINT64_MAX,
		    "f/18446744073709551615/18446744073709551615" },
	};
	char		buf[LOCKKEY_MAX], kind;
	uint64_t	src, ino;
	size_t		i, n;

	for (i = 0; i < sizeof t / sizeof t[0]; i++) {
		n = lockkey_format(t[i].kind, t[i].src, t[i].ino, buf,
		    sizeof buf);
		assert_int_equal(n, strlen(t[i].s));
		assert_string_equal(buf, t[i].s);
		assert_int_equal(lockkey_parse(buf, n, &kind, &src, &ino), 0);
		assert_int_equal(kind, t[i].kind);
		assert_true(src == t[i].src && ino == t[i].ino);
	}
}

static void
test_format_refuses(void **state)
{
	char	buf[LOCKKEY_MAX];

	assert_int_equal(lockkey_format('G', 1, 2, buf, sizeof buf), 0);
	assert_int_equal(lockkey_format('/', 1, 2, buf, sizeof buf), 0);
	assert_int_equal(lockkey_format('g', 1, 2, buf, 5), 0);
	assert_int_equal(lockkey_format('g', 1, 2, buf, 6), 5);
}

static void
test_parse_refuses(void **state)
{
	static const char *const bad[] = {
		"", "g", "g/", "g/1", "g/1/", "g//2", "g/1/2/", "g/1/2/0",
		"g/1/2/03", "g/1/2/3/", "g/1/2/3/4", "g//2/3",
		"G/1/2", "/1/2", "gg/1/2", "g/01/2", "g/1/02", "g/+1/2",
		"g/1/-2", "g/ 1/2", "g/1/2 ", "g/1/0x2",
		"g/18446744073709551616/1", "ws/1/2",
		"g/1/2222222222222222222222222222222222222222222222",
	};
	char		kind = '?';
	uint64_t	src = 7, ino = 7;
	size_t		i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		assert_int_equal(lockkey_parse(bad[i], strlen(bad[i]), &kind,
		    &src, &ino), -EINVAL);
		assert_true(kind == '?' && src == 7 && ino == 7);
	}
	/* The length given is the key: no NUL is looked for. */
	assert_int_equal(lockkey_parse("g/1/2", 4, &kind, &src, &ino),
	    -EINVAL);
	assert_int_equal(lockkey_parse("g/1/23", 5, &kind, &src, &ino), 0);
	assert_true(kind == 'g' && src == 1 && ino == 2);
}

/* The long form with a generation; 0 is the short form. */
static void
test_generation(void **state)
{
	char		buf[LOCKKEY_MAX], kind;
	uint64_t	src, ino, gen;
	size_t		n;

	n = lockkey_format_gen('g', UINT64_MAX, UINT64_MAX, UINT64_MAX, buf,
	    sizeof buf);
	assert_int_equal(n, strlen("g/18446744073709551615/"
	    "18446744073709551615/18446744073709551615"));
	assert_int_equal(lockkey_parse_gen(buf, n, &kind, &src, &ino, &gen), 0);
	assert_true(kind == 'g' && src == UINT64_MAX && ino == UINT64_MAX &&
	    gen == UINT64_MAX);
	n = lockkey_format_gen('g', 1, 2, 0, buf, sizeof buf);
	assert_string_equal(buf, "g/1/2");
	assert_int_equal(lockkey_parse_gen(buf, n, &kind, &src, &ino, &gen), 0);
	assert_true(gen == 0);
	n = lockkey_format_gen('g', 1, 2, 3, buf, sizeof buf);
	assert_string_equal(buf, "g/1/2/3");
	assert_int_equal(lockkey_parse(buf, n, &kind, &src, &ino), 0);
	assert_true(src == 1 && ino == 2);
	/* Bytes after a NUL are part of the key, not padding. */
	assert_int_equal(lockkey_parse_gen("g/1/2\0\0", 7, &kind, &src, &ino,
	    &gen), -EINVAL);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_generation),
    cmocka_unit_test(test_round_trip),
    cmocka_unit_test(test_format_refuses),
    cmocka_unit_test(test_parse_refuses))

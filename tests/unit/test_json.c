/*
 * Unit tests for the JSON string escaper (lockd/json.c): fixed cases, and
 * every input of one and two bytes plus many random longer ones decoded
 * back with the surrogateescape rule of json.h.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"

#include "json.h"

/* The escaped form of len bytes at s; the caller frees it. */
static char *
escape(const void *s, size_t len, size_t *outlen)
{
	char	*out = NULL;
	size_t	 n = 0;
	FILE	*f;

	assert_non_null(f = open_memstream(&out, &n));
	json_put_bytes(f, s, len);
	assert_int_equal(fclose(f), 0);
	if (outlen != NULL)
		*outlen = n;
	return out;
}

static void
expect(const char *in, size_t len, const char *want)
{
	char	*got = escape(in, len, NULL);

	assert_string_equal(got, want);
	free(got);
}

static void
test_fixed(void **state)
{
	expect("", 0, "\"\"");
	expect("plain name", 10, "\"plain name\"");
	expect("q\"b\\s/", 6, "\"q\\\"b\\\\s/\"");
	expect("\b\f\n\r\t", 5, "\"\\b\\f\\n\\r\\t\"");
	expect("\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\"");
	expect("a\0b", 3, "\"a\\u0000b\"");
	/* Well-formed UTF-8 of two, three and four bytes stays as it is. */
	expect("\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e", 9,
	    "\"\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\"");
	expect("\xef\xbf\xbf\xf4\x8f\xbf\xbf", 7,
	    "\"\xef\xbf\xbf\xf4\x8f\xbf\xbf\"");
	/* Everything else, byte by byte, as \udcXX. */
	expect("\xff", 1, "\"\\udcff\"");
	expect("\x80", 1, "\"\\udc80\"");
	expect("\xc0\x80", 2, "\"\\udcc0\\udc80\"");		/* overlong */
	expect("\xc1\xbf", 2, "\"\\udcc1\\udcbf\"");		/* overlong */
	expect("\xe0\x80\xaf", 3, "\"\\udce0\\udc80\\udcaf\"");	/* overlong */
	expect("\xed\xa0\x80", 3, "\"\\udced\\udca0\\udc80\"");	/* surrogate */
	expect("\xf0\x80\x80\x80", 4,
	    "\"\\udcf0\\udc80\\udc80\\udc80\"");		/* overlong */
	expect("\xf4\x90\x80\x80", 4,
	    "\"\\udcf4\\udc90\\udc80\\udc80\"");		/* > U+10FFFF */
	expect("\xf5\xf8\xfe", 3, "\"\\udcf5\\udcf8\\udcfe\"");
	expect("\xe2\x82", 2, "\"\\udce2\\udc82\"");		/* truncated */
	expect("\xe2\x82x", 3, "\"\\udce2\\udc82x\"");
	expect("\xc3\xa9\xff\xc3\xa9", 5, "\"\xc3\xa9\\udcff\xc3\xa9\"");
}

static int
hexval(const char *p)
{
	int	v = 0, i;

	for (i = 0; i < 4; i++) {
		v <<= 4;
		if (p[i] >= '0' && p[i] <= '9')
			v |= p[i] - '0';
		else if (p[i] >= 'a' && p[i] <= 'f')
			v |= p[i] - 'a' + 10;
		else
			fail_msg("bad hex digit in \\u escape");
	}
	return v;
}

/* Append code point c (no surrogates) as UTF-8. */
static size_t
put_utf8(unsigned char *o, int c)
{
	if (c < 0x80) {
		o[0] = (unsigned char)c;
		return 1;
	}
	if (c < 0x800) {
		o[0] = (unsigned char)(0xc0 | c >> 6);
		o[1] = (unsigned char)(0x80 | (c & 0x3f));
		return 2;
	}
	o[0] = (unsigned char)(0xe0 | c >> 12);
	o[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
	o[2] = (unsigned char)(0x80 | (c & 0x3f));
	return 3;
}

/*
 * Decode one JSON string as a strict reader would (no raw control
 * characters, only the standard escapes) and map \udcXX back to the byte
 * XX, as os.fsencode(json.loads(...)) does. Returns the decoded length.
 */
static size_t
unescape(const char *s, size_t len, unsigned char *out)
{
	size_t	i = 1, n = 0;
	int	c;

	assert_true(len >= 2 && s[0] == '"' && s[len - 1] == '"');
	while (i < len - 1) {
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f || s[i] == '"')
			fail_msg("raw control character or quote at %zu", i);
		if (s[i] != '\\') {
			out[n++] = (unsigned char)s[i++];
			continue;
		}
		assert_true(i + 1 < len - 1);
		switch (s[i + 1]) {
		case '"':	out[n++] = '"'; break;
		case '\\':	out[n++] = '\\'; break;
		case 'b':	out[n++] = '\b'; break;
		case 'f':	out[n++] = '\f'; break;
		case 'n':	out[n++] = '\n'; break;
		case 'r':	out[n++] = '\r'; break;
		case 't':	out[n++] = '\t'; break;
		case 'u':
			assert_true(i + 6 <= len - 1);
			c = hexval(s + i + 2);
			if (c >= 0xdc80 && c <= 0xdcff)
				out[n++] = (unsigned char)(c - 0xdc00);
			else if (c >= 0xd800 && c <= 0xdfff)
				fail_msg("unexpected surrogate %04x", c);
			else
				n += put_utf8(out + n, c);
			i += 6;
			continue;
		default:
			fail_msg("unknown escape \\%c", s[i + 1]);
		}
		i += 2;
	}
	return n;
}

/* The raw (unescaped) bytes of the output must be well-formed UTF-8. */
static void
check_utf8(const unsigned char *p, size_t len)
{
	size_t	i = 0, need, k;

	while (i < len) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		need = p[i] >= 0xf0 ? 3 : p[i] >= 0xe0 ? 2 : 1;
		assert_true(p[i] >= 0xc2 && p[i] <= 0xf4 && i + need < len + 1);
		for (k = 1; k <= need; k++)
			assert_int_equal(p[i + k] & 0xc0, 0x80);
		i += need + 1;
	}
}

static void
roundtrip(const unsigned char *in, size_t len)
{
	unsigned char	 back[64];
	size_t		 n, elen;
	char		*e = escape(in, len, &elen);

	assert_true(len <= 8);
	check_utf8((const unsigned char *)e, elen);
	n = unescape(e, elen, back);
	assert_int_equal(n, len);
	assert_memory_equal(back, in, len);
	free(e);
}

static void
test_roundtrip(void **state)
{
	unsigned char	buf[8];
	uint32_t	x = 12345;
	unsigned	i, j, k;

	for (i = 0; i < 256; i++) {
		buf[0] = (unsigned char)i;
		roundtrip(buf, 1);
		for (j = 0; j < 256; j++) {
			buf[1] = (unsigned char)j;
			roundtrip(buf, 2);
		}
	}
	/* Random longer inputs, biased towards bytes that start sequences. */
	for (i = 0; i < 200000; i++) {
		size_t	len = 3 + i % 6;

		for (k = 0; k < len; k++) {
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			buf[k] = (unsigned char)(x % 3 == 0 ? 0x80 + (x >> 8) % 0x80 :
			    x % 3 == 1 ? 0xc0 + (x >> 8) % 0x40 : x >> 8);
		}
		roundtrip(buf, len);
	}
}

static void
test_str(void **state)
{
	char	*out = NULL;
	size_t	 n = 0;
	FILE	*f;

	assert_non_null(f = open_memstream(&out, &n));
	json_put_str(f, "ws\"1\n");
	assert_int_equal(fclose(f), 0);
	assert_string_equal(out, "\"ws\\\"1\\n\"");
	free(out);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_fixed),
    cmocka_unit_test(test_roundtrip),
    cmocka_unit_test(test_str))

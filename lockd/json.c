/*
 * The JSON string escaper shared by wsctl and wsfs (see json.h for the
 * rules). Kept apart from any JSON writer so that every producer, whatever
 * its shape, escapes the same way.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "json.h"

/*
 * Length of the well-formed UTF-8 sequence at p (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0 if there is none.
 */
static size_t
json_utf8_len(const unsigned char *p, size_t n)
{
	unsigned char	lo = 0x80, hi = 0xbf;
	size_t		need, i;

	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		need = 1;
	else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		need = 2;
		if (p[0] == 0xe0)
			lo = 0xa0;
		else if (p[0] == 0xed)
			hi = 0x9f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		need = 3;
		if (p[0] == 0xf0)
			lo = 0x90;
		else if (p[0] == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (n <= need)
		return 0;
	for (i = 1; i <= need; i++) {
		if (p[i] < lo || p[i] > hi)
			return 0;
		lo = 0x80;
		hi = 0xbf;
	}
	return need + 1;
}

/* The two-character escapes of RFC 8259; other control bytes get \u00XX. */
static const char json_short[0x80] = {
	['"'] = '"', ['\\'] = '\\', ['\b'] = 'b', ['\f'] = 'f',
	['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't',
};

void
json_put_bytes(FILE *f, const void *s, size_t len)
{
	const unsigned char	*p = s, *end = p + len;
	size_t			 n;

	putc('"', f);
	for (; p < end; p += n) {
		n = 1;
		if (*p < 0x80 && json_short[*p] != '\0') {
			putc('\\', f);
			putc(json_short[*p], f);
		} else if (*p < 0x20 || *p == 0x7f)
			fprintf(f, "\\u%04x", *p);
		else if (*p < 0x80)
			putc(*p, f);
		else if ((n = json_utf8_len(p, (size_t)(end - p))) > 0)
			fwrite(p, 1, n, f);
		else {
			fprintf(f, "\\udc%02x", *p);
			n = 1;
		}
	}
	putc('"', f);
}

void
json_put_str(FILE *f, const char *s)
{
	json_put_bytes(f, s, strlen(s));
}

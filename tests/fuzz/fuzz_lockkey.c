/*
 * libFuzzer target for lockkey_parse_gen(): a key wslockd sends back
 * (revoke, lost) is parsed only if it is exactly what lockkey_format_gen
 * writes for the fields it yields, so every lock has one spelling and a
 * revoke can never name a lock under another spelling.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "lockkey.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		 buf[LOCKKEY_MAX], kind, k2;
	uint64_t	 src, ino, gen, s2, i2;
	size_t		 n;

	if (lockkey_parse_gen(data, size, &kind, &src, &ino, &gen) < 0)
		return 0;
	n = lockkey_format_gen(kind, src, ino, gen, buf, sizeof buf);
	if (n != size || memcmp(buf, data, size) != 0)
		abort();
	/* The short parser agrees on what both read. */
	if (lockkey_parse(data, size, &k2, &s2, &i2) < 0 || k2 != kind ||
	    s2 != src || i2 != ino)
		abort();
	return 0;
}

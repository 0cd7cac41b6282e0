/*
 * JSON string literals, the one escaper behind every --json answer of
 * wsctl and the JSON status of wsfs. Names on Linux are any bytes but '/'
 * and NUL, lock keys any bytes at all, so the input is bytes, not text.
 */
#ifndef WS_JSON_H
#define WS_JSON_H

#include <stddef.h>
#include <stdio.h>

/*
 * Write the len bytes at s to f as one JSON string, quotes included.
 * '"' and '\' are escaped, control characters and DEL become \n, \t, ...
 * or \u00XX, valid UTF-8 sequences are copied, and every byte that is not
 * part of one becomes \udcXX: the lone surrogate that Python's
 * surrogateescape maps back to that byte, so json.loads followed by
 * os.fsencode gives the original bytes, and the output is always valid
 * UTF-8. Write errors are left in f's error flag.
 */
void	json_put_bytes(FILE *f, const void *s, size_t len);
/* json_put_bytes of a NUL-terminated string. */
void	json_put_str(FILE *f, const char *s);

#endif

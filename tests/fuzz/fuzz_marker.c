/*
 * libFuzzer target for the workspace marker parser (tools/marker.c): any
 * bytes, no crash; whatever parses must format and parse back to the
 * same marker, since rm trusts what it reads as much as what it wrote.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wsctl.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct marker	m, m2;
	char		buf[MARKER_MAX + 1];
	int		n;

	/* What the reader hands over: at most MARKER_MAX bytes, no NUL. */
	if (size > MARKER_MAX || memchr(data, '\0', size) != NULL)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	if (marker_parse(buf, &m) < 0)
		return 0;
	if ((n = marker_format(&m, buf, sizeof buf)) < 0)
		abort();
	if (marker_parse(buf, &m2) < 0)
		abort();
	if (strcmp(m.owner, m2.owner) != 0 || m.uid != m2.uid ||
	    m.gid != m2.gid || m.account != m2.account || m.mode != m2.mode ||
	    m.dev != m2.dev || m.ino != m2.ino ||
	    strcmp(m.handle, m2.handle) != 0 || m.created != m2.created)
		abort();
	return 0;
}

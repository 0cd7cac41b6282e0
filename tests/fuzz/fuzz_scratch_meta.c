/*
 * libFuzzer target for the scratch metadata parser: any bytes, no crash;
 * whatever parses must format and parse back to the same metadata.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "scratch.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct scratch_meta	m, m2;
	char			buf[SCRATCH_META_MAX + 1];
	int			n;

	if (scratch_meta_parse((const char *)data, size, &m) < 0)
		return 0;
	if ((n = scratch_meta_format(&m, buf, sizeof buf)) < 0)
		abort();
	if (scratch_meta_parse(buf, (size_t)n, &m2) < 0)
		abort();
	if (strcmp(m.id, m2.id) != 0 || m.lifetime != m2.lifetime ||
	    m.owner != m2.owner || strcmp(m.label, m2.label) != 0 ||
	    m.created != m2.created || m.ended != m2.ended)
		abort();
	return 0;
}

/*
 * libFuzzer target for symlink_rewrite(): whatever the stored target, the
 * result walked from the link's directory never climbs above the root.
 * The first input byte is the depth of the link's directory.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "wsfs.h"

struct wsfs wsfs;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char		 target[PATH_MAX + 16], out[PATH_MAX], *c, *save = NULL;
	unsigned int	 depth, ups = 0;
	int		 names = 0, r;

	if (size < 1 || size > sizeof target - 1)
		return 0;
	depth = data[0] % 64;
	memcpy(target, data + 1, size - 1);
	target[size - 1] = '\0';
	r = symlink_rewrite(target, depth, out, sizeof out);
	if (r < 0)
		return 0;
	if (out[0] == '/')
		abort();
	for (c = strtok_r(out, "/", &save); c != NULL;
	    c = strtok_r(NULL, "/", &save)) {
		if (strcmp(c, "..") == 0) {
			if (names || ++ups > depth)
				abort();
		} else if (strcmp(c, ".") != 0)
			names = 1;
	}
	return 0;
}

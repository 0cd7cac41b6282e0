/* libFuzzer target for the wsfs.conf parser: any bytes, no crash or leak. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "conf.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char		 path[64];
	struct wsfs_conf	 c;
	char			 err[256];
	FILE			*f;

	if (path[0] == '\0')
		snprintf(path, sizeof path, "/tmp/fuzz-conf-%d", (int)getpid());
	if ((f = fopen(path, "w")) == NULL)
		abort();
	fwrite(data, 1, size, f);
	fclose(f);
	conf_init(&c);
	(void)conf_load(&c, path, 0, err, sizeof err);
	conf_free(&c);
	return 0;
}

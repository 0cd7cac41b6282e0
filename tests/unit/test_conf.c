/* Unit tests for the configuration parser (fs/conf.c). */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"

#include "conf.h"

static char *
write_tmp(const char *text)
{
	static char	path[64];
	int		fd;

	snprintf(path, sizeof path, "/tmp/wsfs-conf-XXXXXX");
	assert_true((fd = mkstemp(path)) >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void
test_defaults(void **state)
{
	struct wsfs_conf	c;

	conf_init(&c);
	assert_int_equal(c.kind, CONF_KIND_SHARED);
	assert_true(c.scratch_ttl_hours == 24);
	assert_true(c.lock_timeout == 30);
	assert_int_equal(c.allow_other, 1);
	assert_int_equal(c.default_permissions, 1);
	assert_null(c.lockd);
	conf_free(&c);
	conf_free(&c);
}

static void
test_set(void **state)
{
	struct wsfs_conf	c;
	char			err[256];

	conf_init(&c);
	assert_int_equal(conf_set(&c, "kind", "scratch", err, sizeof err), 0);
	assert_int_equal(c.kind, CONF_KIND_SCRATCH);
	assert_int_equal(conf_set(&c, "scratch_ttl_hours", "0.01", err,
	    sizeof err), 0);
	assert_true(c.scratch_ttl_hours > 0.0099 && c.scratch_ttl_hours < 0.0101);
	assert_int_equal(conf_set(&c, "lockd", "lock1:7420", err, sizeof err),
	    0);
	assert_string_equal(c.lockd, "lock1:7420");
	assert_int_equal(conf_set(&c, "lockd", "lock2:7420", err, sizeof err),
	    0);
	assert_string_equal(c.lockd, "lock2:7420");
	assert_int_equal(conf_set(&c, "allow_other", NULL, err, sizeof err), 0);
	assert_int_equal(conf_set(&c, "allow_other", "no", err, sizeof err), 0);
	assert_int_equal(c.allow_other, 0);
	assert_int_equal(conf_set(&c, "max_threads", "8", err, sizeof err), 0);
	assert_int_equal(c.max_threads, 8);
	assert_int_equal(conf_set(&c, "uring", "off", err, sizeof err), 0);
	assert_int_equal(c.uring, CONF_URING_OFF);
	conf_free(&c);
}

static void
test_errors(void **state)
{
	static const char *bad[][2] = {
		{ "nosuchkey", "1" },
		{ "kind", "local" },
		{ "scratch_ttl_hours", "-1" },
		{ "scratch_ttl_hours", "1e3" },
		{ "scratch_ttl_hours", "nan" },
		{ "scratch_ttl_hours", "" },
		{ "scratch_ttl_hours", "1." },
		{ "lock_timeout", "0" },
		{ "max_threads", "2.5" },
		{ "max_threads", "0" },
		{ "max_threads", "1025" },
		{ "max_threads", "8.0" },
		{ "max_threads", "+8" },
		{ "max_fds", "0x10" },
		{ "max_fds", "99999999999999999999" },
		{ "allow_other", "maybe" },
		{ "lockd", "" },
		{ "lockd", NULL },
		{ "uring", "sometimes" },
	};
	struct wsfs_conf	c;
	char			err[256];
	size_t			i;

	conf_init(&c);
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		if (conf_set(&c, bad[i][0], bad[i][1], err, sizeof err) != -EINVAL)
			fail_msg("%s=%s accepted", bad[i][0],
			    bad[i][1] ? bad[i][1] : "(none)");
		assert_non_null(strstr(err, bad[i][0]));
	}
	conf_free(&c);
}

static void
test_file(void **state)
{
	struct wsfs_conf	 c;
	char			 err[256], *path;

	conf_init(&c);
	path = write_tmp("# comment\nkind = scratch\n[wsfs]\n"
	    "scratch_dir = /srv/scratch\nscratch_ttl_hours = 0.5\n");
	assert_int_equal(conf_load(&c, path, 0, err, sizeof err), 0);
	assert_int_equal(c.kind, CONF_KIND_SCRATCH);
	assert_string_equal(c.scratch_dir, "/srv/scratch");
	unlink(path);
	conf_free(&c);

	conf_init(&c);
	path = write_tmp("kind = shared\nbogus = 1\n");
	assert_int_equal(conf_load(&c, path, 0, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, ":2:"));
	assert_non_null(strstr(err, "bogus"));
	unlink(path);

	path = write_tmp("[other]\nkind = shared\n");
	assert_int_equal(conf_load(&c, path, 0, err, sizeof err), -EINVAL);
	assert_non_null(strstr(err, "section"));
	unlink(path);

	path = write_tmp("this is not a key value line\n");
	assert_int_equal(conf_load(&c, path, 0, err, sizeof err), -EINVAL);
	unlink(path);

	assert_int_equal(conf_load(&c, "/nonexistent/wsfs.conf", 1, err,
	    sizeof err), 0);
	assert_int_equal(conf_load(&c, "/nonexistent/wsfs.conf", 0, err,
	    sizeof err), -ENOENT);
	conf_free(&c);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_defaults),
    cmocka_unit_test(test_set),
    cmocka_unit_test(test_errors),
    cmocka_unit_test(test_file))

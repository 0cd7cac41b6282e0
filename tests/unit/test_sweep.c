/*
 * Unit tests for scratch metadata and state (fs/scratch.c) and the
 * sweeper's decisions and passes over a real base (fs/sweep.c). The tree
 * walk itself is tested in test_rmtree.c.
 */
#include "config.h"

#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"

#include "scratch.h"
#include "sweep.h"
#include "tbase.h"

#define ID	"0b6c2f3e-4a1d-4c8e-9f70-1234567890ab"

static const char good[] =
    "version=1\n"
    "id=" ID "\n"
    "lifetime=conversation\n"
    "owner=1000\n"
    "label=build #42 = ok\n"
    "created=1700000000\n"
    "ended=0\n";

static int
parse(const char *s)
{
	struct scratch_meta	m;

	return scratch_meta_parse(s, strlen(s), &m);
}

static void
test_meta_good(void **state)
{
	struct scratch_meta	m;

	assert_int_equal(scratch_meta_parse(good, strlen(good), &m), 0);
	assert_string_equal(m.id, ID);
	assert_int_equal(m.lifetime, SCRATCH_LIFETIME_CONVERSATION);
	assert_int_equal(m.owner, 1000);
	assert_string_equal(m.label, "build #42 = ok");
	assert_int_equal(m.created, 1700000000);
	assert_int_equal(m.ended, 0);
	/* Optional keys may be absent. */
	assert_int_equal(parse("version=1\nid=" ID "\nlifetime=task\n"
	    "owner=0\ncreated=1\n"), 0);
}

static void
test_meta_bad(void **state)
{
	static const char *bad[] = {
		"",
		"version=1\n",
		/* no trailing newline */
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1",
		/* missing required keys */
		"id=" ID "\nlifetime=task\nowner=0\ncreated=1\n",
		"version=1\nlifetime=task\nowner=0\ncreated=1\n",
		"version=1\nid=" ID "\nowner=0\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\n",
		/* duplicate, unknown, malformed lines */
		"version=1\nversion=1\nid=" ID "\nlifetime=task\nowner=0\n"
		    "created=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n"
		    "colour=red\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n"
		    "label\n",
		"version=1\r\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n",
		" version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n",
		/* bad values */
		"version=2\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=Task\nowner=0\ncreated=1\n",
		"version=1\nid=0B6C2F3E-4A1D-4C8E-9F70-1234567890AB\n"
		    "lifetime=task\nowner=0\ncreated=1\n",
		"version=1\nid=" ID "x\nlifetime=task\nowner=0\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=-1\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=+1\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=01\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=4294967295\n"
		    "created=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=\ncreated=1\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=0\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\n"
		    "created=99999999999999999999\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\n"
		    "created=253402300800\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n"
		    "ended=1.5\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n"
		    "label=tab\there\n",
		"version=1\nid=" ID "\nlifetime=task\nowner=0\ncreated=1\n"
		    "label=caf\xc3\xa9\n",
	};
	size_t	i;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (parse(bad[i]) != -EINVAL)
			fail_msg("accepted bad metadata #%zu: %s", i, bad[i]);
	}
}

static void
test_meta_nul_and_size(void **state)
{
	struct scratch_meta	m;
	char			buf[SCRATCH_META_MAX + 64];
	size_t			len;

	/* An embedded NUL is refused even though the text parses. */
	memcpy(buf, good, sizeof good);
	len = strlen(good);
	buf[5] = '\0';
	assert_int_equal(scratch_meta_parse(buf, len, &m), -EINVAL);
	/* A label of 200 is fine; 201 is not; a huge file is refused. */
	memset(buf, 'a', sizeof buf);
	len = (size_t)snprintf(buf, sizeof buf, "version=1\nid=" ID
	    "\nlifetime=task\nowner=0\ncreated=1\nlabel=%.200s\n",
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	    "aaaaaaaaaa");
	assert_int_equal(scratch_meta_parse(buf, len, &m), 0);
	assert_int_equal(strlen(m.label), 200);
	buf[len - 1] = 'a';
	buf[len] = '\n';
	assert_int_equal(scratch_meta_parse(buf, len + 1, &m), -EINVAL);
	assert_int_equal(scratch_meta_parse(buf, SCRATCH_META_MAX + 1, &m),
	    -EINVAL);
}

static void
test_meta_roundtrip(void **state)
{
	struct scratch_meta	m, m2;
	char			buf[SCRATCH_META_MAX];
	int			n;

	assert_int_equal(scratch_meta_parse(good, strlen(good), &m), 0);
	m.ended = 1700000100;
	n = scratch_meta_format(&m, buf, sizeof buf);
	assert_true(n > 0);
	assert_int_equal(scratch_meta_parse(buf, (size_t)n, &m2), 0);
	assert_memory_equal(&m, &m2, sizeof m);
	/* Format refuses what parse would refuse. */
	strcpy(m.label, "new\nline");
	assert_int_equal(scratch_meta_format(&m, buf, sizeof buf), -EINVAL);
	assert_int_equal(scratch_meta_format(&m2, buf, 10), -ENOSPC);
}

static void
test_id_valid(void **state)
{
	assert_true(scratch_id_valid(ID));
	assert_false(scratch_id_valid(""));
	assert_false(scratch_id_valid("0b6c2f3e-4a1d-4c8e-9f70-1234567890a"));
	assert_false(scratch_id_valid("0b6c2f3e-4a1d-4c8e-9f70-1234567890abc"));
	assert_false(scratch_id_valid("0b6c2f3e_4a1d-4c8e-9f70-1234567890ab"));
	assert_false(scratch_id_valid("../../../../../../../../../../etc/pa"));
}

static void
test_decide(void **state)
{
	struct scratch_meta	m;
	double			idle, now = 1700010000;

	memset(&m, 0, sizeof m);
	m.created = 1700000000;
	m.lifetime = SCRATCH_LIFETIME_TASK;
	/* Fresh, idle, in use. */
	assert_int_equal(sweep_decide(&m, 0, 0, now, 24, &idle),
	    SWEEP_KEEP_FRESH);
	assert_true(idle == 10000);
	assert_int_equal(sweep_decide(&m, 0, 0, now, 2, &idle),
	    SWEEP_REMOVE_IDLE);
	assert_int_equal(sweep_decide(&m, 1, 0, now, 0, &idle),
	    SWEEP_KEEP_IN_USE);
	/* A recent use resets the idle time; an old one does not count. */
	assert_int_equal(sweep_decide(&m, 0, now - 10, now, 0.01, &idle),
	    SWEEP_KEEP_FRESH);
	assert_true(idle == 10);
	assert_int_equal(sweep_decide(&m, 0, 1600000000, now, 24, &idle),
	    SWEEP_KEEP_FRESH);
	assert_true(idle == 10000);
	/* Decimal ttl: 0.001 h is 3.6 s. */
	assert_int_equal(sweep_decide(&m, 0, now - 3, now, 0.001, &idle),
	    SWEEP_KEEP_FRESH);
	assert_int_equal(sweep_decide(&m, 0, now - 4, now, 0.001, &idle),
	    SWEEP_REMOVE_IDLE);
	/* A last use in the future (clock stepped back) counts as now. */
	assert_int_equal(sweep_decide(&m, 0, now + 86400 * 365, now, 0.001,
	    &idle), SWEEP_KEEP_FRESH);
	assert_true(idle == 0);
	/* Ended task: removed unless in use, however fresh. */
	m.ended = now - 1;
	assert_int_equal(sweep_decide(&m, 0, now, now, 24, &idle),
	    SWEEP_REMOVE_ENDED);
	assert_int_equal(sweep_decide(&m, 1, now, now, 24, &idle),
	    SWEEP_KEEP_IN_USE);
	/* Ended conversation: kept until idle past the ttl. */
	m.lifetime = SCRATCH_LIFETIME_CONVERSATION;
	assert_int_equal(sweep_decide(&m, 0, now - 60, now, 24, &idle),
	    SWEEP_KEEP_FRESH);
	assert_int_equal(sweep_decide(&m, 0, now - 60, now, 0.01, &idle),
	    SWEEP_REMOVE_IDLE);
}

static void
test_next_delay(void **state)
{
	int	i;

	for (i = 0; i < 1000; i++) {
		double d = sweep_next_delay(10);

		assert_true(d >= 540 && d <= 660);
	}
}

static double
mtime_of(int dirfd, const char *name)
{
	struct stat	sb;

	assert_int_equal(fstatat(dirfd, name, &sb, 0), 0);
	return sb.st_mtim.tv_sec + sb.st_mtim.tv_nsec / 1e9;
}

static void
set_old(int dirfd, const char *name)
{
	struct timespec	ts[2] = { { 1000000000, 0 }, { 1000000000, 0 } };

	assert_int_equal(utimensat(dirfd, name, ts, 0), 0);
}

/*
 * wsfs's view: note_use writes at most once per interval, hold_open makes
 * the workspace in use until the last hold_close, which records a use.
 */
static void
test_note_use_and_hold(void **state)
{
	struct scratch_base	*sb;
	struct scratch_meta	 m;
	struct tbase		 t;
	char			 path[128], id[SCRATCH_ID_LEN + 1];
	char			 used[64];
	double			 last;

	tbase_init(&t);
	snprintf(path, sizeof path, "%s/base", t.dir);
	assert_int_equal(scratch_base_open(path, 0, &sb), 0);
	assert_int_equal(scratch_create(sb, SCRATCH_LIFETIME_TASK, 1234, 1234,
	    "unit", id), 0);
	assert_int_equal(scratch_read(sb, id, &m), 0);
	assert_int_equal(m.owner, 1234);
	snprintf(used, sizeof used, "%s.used", id);

	set_old(scratch_meta_fd(sb), used);
	scratch_note_use(sb, id);
	assert_true(mtime_of(scratch_meta_fd(sb), used) > 1600000000);
	/* Throttled: the next use within the interval writes nothing. */
	set_old(scratch_meta_fd(sb), used);
	scratch_note_use(sb, id);
	assert_true(mtime_of(scratch_meta_fd(sb), used) < 1600000000);
	assert_int_equal(scratch_last_use(sb, id, &last), 0);
	assert_true(last < 1600000000);
	/* With no interval every use is written. */
	scratch_set_note_interval(sb, 0);
	scratch_note_use(sb, id);
	assert_true(mtime_of(scratch_meta_fd(sb), used) > 1600000000);

	assert_int_equal(scratch_in_use(sb, id), 0);
	scratch_hold_open(sb, id);
	scratch_hold_open(sb, id);
	assert_int_equal(scratch_in_use(sb, id), 1);
	scratch_hold_close(sb, id);
	assert_int_equal(scratch_in_use(sb, id), 1);
	set_old(scratch_meta_fd(sb), used);
	scratch_hold_close(sb, id);
	assert_int_equal(scratch_in_use(sb, id), 0);
	assert_true(mtime_of(scratch_meta_fd(sb), used) > 1600000000);
	/* Ids that are not workspaces are ignored. */
	scratch_note_use(sb, "../../etc");
	scratch_hold_open(sb, "x");
	scratch_base_free(sb);
	tbase_done(&t);
}

/* sweep_run end to end on a base: ended, idle, held, fresh, stray. */
static void
test_sweep_run(void **state)
{
	struct scratch_base	*sb;
	struct scratch_meta	 m;
	struct sweep_params	 p;
	struct sweep_result	 res;
	struct tbase		 t;
	char			 path[128], ended[40], idle[40], held[40];
	char			 fresh[40], used[64];
	int			 lfd, busy;

	tbase_init(&t);
	snprintf(path, sizeof path, "%s/base", t.dir);
	assert_int_equal(scratch_base_open(path, 0, &sb), 0);
	assert_int_equal(scratch_create(sb, SCRATCH_LIFETIME_TASK, 0, 0, "",
	    ended), 0);
	assert_int_equal(scratch_create(sb, SCRATCH_LIFETIME_CONVERSATION, 0,
	    0, "", idle), 0);
	assert_int_equal(scratch_create(sb, SCRATCH_LIFETIME_CONVERSATION, 0,
	    0, "", held), 0);
	assert_int_equal(scratch_create(sb, SCRATCH_LIFETIME_CONVERSATION, 0,
	    0, "", fresh), 0);
	assert_int_equal(mkdirat(t.fd, "stray", 0700), 0);
	assert_int_equal(scratch_read(sb, ended, &m), 0);
	m.ended = time(NULL);
	assert_int_equal(scratch_write(sb, &m), 0);
	/* Make idle and held old: created long ago, never used since. */
	assert_int_equal(scratch_read(sb, idle, &m), 0);
	m.created = 1000000000;
	assert_int_equal(scratch_write(sb, &m), 0);
	snprintf(used, sizeof used, "%s.used", idle);
	set_old(scratch_meta_fd(sb), used);
	assert_int_equal(scratch_read(sb, held, &m), 0);
	m.created = 1000000000;
	assert_int_equal(scratch_write(sb, &m), 0);
	snprintf(used, sizeof used, "%s.used", held);
	set_old(scratch_meta_fd(sb), used);
	assert_int_equal(scratch_lock(sb, held, LOCK_SH, &lfd), 0);

	/* Only one sweeper at a time. */
	assert_int_equal(scratch_sweep_lock(sb, &busy), 0);
	memset(&p, 0, sizeof p);
	p.ttl_hours = 1;
	assert_int_equal(sweep_run(sb, &p, &res), -EWOULDBLOCK);
	close(busy);

	p.dry_run = 1;
	assert_int_equal(sweep_run(sb, &p, &res), 0);
	assert_int_equal(res.removed, 2);
	assert_int_equal(faccessat(t.fd, ended, F_OK, 0), 0);
	p.dry_run = 0;
	assert_int_equal(sweep_run(sb, &p, &res), 0);
	assert_int_equal(res.removed, 2);
	assert_int_equal(res.in_use, 1);
	assert_int_equal(res.kept, 3);		/* held, fresh, stray */
	assert_int_equal(faccessat(t.fd, ended, F_OK, 0), -1);
	assert_int_equal(faccessat(t.fd, idle, F_OK, 0), -1);
	assert_int_equal(scratch_read(sb, idle, &m), -ENOENT);
	assert_int_equal(faccessat(t.fd, held, F_OK, 0), 0);
	assert_int_equal(faccessat(t.fd, fresh, F_OK, 0), 0);
	assert_int_equal(faccessat(t.fd, "stray", F_OK, 0), 0);
	/* Released: it goes on the next sweep. */
	close(lfd);
	assert_int_equal(sweep_run(sb, &p, &res), 0);
	assert_int_equal(res.removed, 1);
	assert_int_equal(faccessat(t.fd, held, F_OK, 0), -1);
	scratch_base_free(sb);
	tbase_done(&t);
}

UNIT_MAIN(1, NULL, NULL,
    cmocka_unit_test(test_meta_good),
    cmocka_unit_test(test_meta_bad),
    cmocka_unit_test(test_meta_nul_and_size),
    cmocka_unit_test(test_meta_roundtrip),
    cmocka_unit_test(test_id_valid),
    cmocka_unit_test(test_decide),
    cmocka_unit_test(test_next_delay),
    cmocka_unit_test(test_note_use_and_hold),
    cmocka_unit_test(test_sweep_run))

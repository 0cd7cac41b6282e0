/*
 * The marker file of a workspace made by wsctl workspace create
 * (SOURCE/.wsfs/workspaces/NAME): "key=value" lines and '#' comments that
 * record the owner, uid, gid, mode and the inode and file handle of the
 * directory, so that rm removes only what wsctl made. One table of keys,
 * each with its parser; a new key is one function and one row. The text
 * comes from the shared store and is not trusted: the fuzz target
 * tests/fuzz/fuzz_marker.c feeds it anything.
 */
#include "config.h"

#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "number.h"
#include "wsctl.h"

#define MARKER_TIME_FORMAT	"%Y-%m-%dT%H:%M:%SZ"

/* Keys without which a marker is damaged. */
#define HAVE_OWNER	0x1
#define HAVE_UID	0x2
#define HAVE_INO	0x4
#define HAVE_ALL	(HAVE_OWNER | HAVE_UID | HAVE_INO)

static int
marker_version(const char *v, struct marker *m)
{
	return strcmp(v, "1") == 0 ? 0 : -EINVAL;
}

static int
marker_owner(const char *v, struct marker *m)
{
	/* root is the owner of workspaces made without --owner. */
	if (marker_owner_invalid(v) != NULL && strcmp(v, "root") != 0)
		return -EINVAL;
	snprintf(m->owner, sizeof m->owner, "%s", v);
	return 0;
}

/* A uid or gid: (uid_t)-1 means "no change" to chown, never an id. */
static int
marker_id(const char *v, uint64_t *out)
{
	return number_parse(v, 0, UINT32_MAX - 1, out) < 0 ? -EINVAL : 0;
}

static int
marker_uid(const char *v, struct marker *m)
{
	uint64_t	n;

	if (marker_id(v, &n) < 0)
		return -EINVAL;
	m->uid = (uid_t)n;
	return 0;
}

static int
marker_gid(const char *v, struct marker *m)
{
	uint64_t	n;

	if (marker_id(v, &n) < 0)
		return -EINVAL;
	m->gid = (gid_t)n;
	return 0;
}

static int
marker_account(const char *v, struct marker *m)
{
	m->account = strcmp(v, "yes") == 0;
	return 0;
}

static int
marker_mode(const char *v, struct marker *m)
{
	uint64_t	n;

	if (number_parse(v, NUMBER_OCTAL, 07777, &n) < 0)
		return -EINVAL;
	m->mode = (mode_t)n;
	return 0;
}

static int
marker_dev(const char *v, struct marker *m)
{
	uint64_t	n;

	if (number_parse(v, 0, UINT64_MAX, &n) < 0)
		return -EINVAL;
	m->dev = (dev_t)n;
	return 0;
}

static int
marker_ino(const char *v, struct marker *m)
{
	uint64_t	n;

	if (number_parse(v, 0, UINT64_MAX, &n) < 0)
		return -EINVAL;
	m->ino = (ino_t)n;
	return 0;
}

static int
marker_handle(const char *v, struct marker *m)
{
	snprintf(m->handle, sizeof m->handle, "%s", v);
	return 0;
}

static int
marker_created(const char *v, struct marker *m)
{
	struct tm	 tm;
	const char	*end;

	memset(&tm, 0, sizeof tm);
	end = strptime(v, MARKER_TIME_FORMAT, &tm);
	if (end == NULL || *end != '\0')
		return -EINVAL;
	m->created = timegm(&tm);
	return 0;
}

static const struct {
	const char	*name;
	int		(*parse)(const char *, struct marker *);
	unsigned	 have;		/* HAVE_* bit of a required key */
} marker_keys[] = {
	{ "version",	marker_version,	0 },
	{ "owner",	marker_owner,	HAVE_OWNER },
	{ "uid",	marker_uid,	HAVE_UID },
	{ "gid",	marker_gid,	0 },
	{ "account",	marker_account,	0 },
	{ "mode",	marker_mode,	0 },
	{ "dev",	marker_dev,	0 },
	{ "ino",	marker_ino,	HAVE_INO },
	{ "handle",	marker_handle,	0 },
	{ "created",	marker_created,	0 },
};

const char *
marker_owner_invalid(const char *owner)
{
	const unsigned char	*p;
	int			 digits = 1;

	if (*owner == '\0')
		return "the owner name is empty";
	if (strlen(owner) > MARKER_OWNER_MAX)
		return "the owner name is longer than 64 bytes";
	if (*owner == '-')
		return "the owner name must not start with '-'";
	for (p = (const unsigned char *)owner; *p != '\0'; p++) {
		if (*p < 0x21 || *p == 0x7f || *p == ':' || *p == '/' ||
		    *p == ',' || *p == '=')
			return "the owner name contains a space, control "
			    "character, ':', '/', ',' or '='";
		if (!isdigit(*p))
			digits = 0;
	}
	if (digits)
		return "the owner name is all digits; give a user name";
	return NULL;
}

int
marker_parse(char *text, struct marker *out)
{
	struct marker	 m;
	char		*line, *next, *eq;
	unsigned	 have = 0;
	size_t		 k;

	memset(&m, 0, sizeof m);
	for (line = text; line != NULL && *line != '\0'; line = next) {
		if ((next = strchr(line, '\n')) != NULL)
			*next++ = '\0';
		if (*line == '#' || *line == '\0')
			continue;
		if ((eq = strchr(line, '=')) == NULL)
			return -EINVAL;
		*eq++ = '\0';
		for (k = 0; k < sizeof marker_keys / sizeof marker_keys[0];
		    k++) {
			if (strcmp(line, marker_keys[k].name) == 0)
				break;
		}
		/* Unknown keys are kept for newer versions of wsctl. */
		if (k == sizeof marker_keys / sizeof marker_keys[0])
			continue;
		if (marker_keys[k].parse(eq, &m) < 0)
			return -EINVAL;
		have |= marker_keys[k].have;
	}
	if (have != HAVE_ALL)
		return -EINVAL;
	*out = m;
	return 0;
}

void
marker_time_format(time_t t, char *buf, size_t len)
{
	struct tm	tm;

	if (gmtime_r(&t, &tm) == NULL ||
	    strftime(buf, len, MARKER_TIME_FORMAT, &tm) == 0)
		snprintf(buf, len, "%lld", (long long)t);
}

int
marker_format(const struct marker *m, char *buf, size_t len)
{
	char	created[64];
	int	n;

	marker_time_format(m->created, created, sizeof created);
	n = snprintf(buf, len,
	    "# Created by wsctl workspace create; wsctl workspace rm removes\n"
	    "# the workspace only while its inode matches this marker.\n"
	    "version=1\nowner=%s\nuid=%lu\ngid=%lu\naccount=%s\nmode=%04o\n"
	    "dev=%ju\nino=%ju\nhandle=%s\ncreated=%s\n", m->owner,
	    (unsigned long)m->uid, (unsigned long)m->gid,
	    m->account ? "yes" : "no", (unsigned int)m->mode,
	    (uintmax_t)m->dev, (uintmax_t)m->ino, m->handle, created);
	if (n < 0 || (size_t)n >= len)
		return -ENAMETOOLONG;
	return n;
}

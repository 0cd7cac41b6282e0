/*
 * The marker file of a workspace made by wsctl workspace create
 * (SOURCE/.wsfs/workspaces/NAME): "key=value" lines and '#' comments that
 * record the owner, uid, gid, mode and the inode and file handle of the
 * directory, so that rm removes only what wsctl made. One table of keys
 * with their type, field and bounds, as in fs/conf.c; a new key is one
 * row. The text
 * comes from the shared store and is not trusted: the fuzz target
 * tests/fuzz/fuzz_marker.c feeds it anything.
 */
#include "config.h"

#include <sys/types.h>

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
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

enum marker_type {
	MT_VERSION,	/* must be 1 */
	MT_OWNER,	/* a valid owner name, or root */
	MT_NUMBER,	/* number_parse with flags, at most max */
	MT_YESNO,	/* "yes" is 1, anything else 0 */
	MT_STRING,	/* copied, cut to the field */
	MT_TIME,	/* MARKER_TIME_FORMAT, UTC */
};

#define FIELD(f)	offsetof(struct marker, f), sizeof(((struct marker *)0)->f)
static const struct marker_key {
	const char		*name;
	enum marker_type	 type;
	size_t			 off, size;
	int			 flags;		/* MT_NUMBER */
	uint64_t		 max;		/* MT_NUMBER */
	unsigned		 have;		/* HAVE_* bit of a required key */
} marker_keys[] = {
	{ "version", MT_VERSION, 0, 0, 0, 0, 0 },
	{ "owner", MT_OWNER, FIELD(owner), 0, 0, HAVE_OWNER },
	/* (uid_t)-1 means "no change" to chown: never an id. */
	{ "uid", MT_NUMBER, FIELD(uid), 0, UINT32_MAX - 1, HAVE_UID },
	{ "gid", MT_NUMBER, FIELD(gid), 0, UINT32_MAX - 1, 0 },
	{ "account", MT_YESNO, FIELD(account), 0, 0, 0 },
	{ "mode", MT_NUMBER, FIELD(mode), NUMBER_OCTAL, 07777, 0 },
	{ "dev", MT_NUMBER, FIELD(dev), 0, UINT64_MAX, 0 },
	{ "ino", MT_NUMBER, FIELD(ino), 0, UINT64_MAX, HAVE_INO },
	{ "handle", MT_STRING, FIELD(handle), 0, 0, 0 },
	{ "created", MT_TIME, FIELD(created), 0, 0, 0 },
};
#undef FIELD
#define NKEYS	(sizeof marker_keys / sizeof marker_keys[0])

_Static_assert(sizeof(uid_t) == 4 && sizeof(gid_t) == 4 &&
    sizeof(mode_t) == 4 && sizeof(dev_t) == 8 && sizeof(ino_t) == 8 &&
    sizeof(time_t) == 8, "marker fields are 32 or 64 bits");

/* Store v in an unsigned field of 4 or 8 bytes. */
static void
marker_store(void *field, size_t size, uint64_t v)
{
	uint32_t	v32 = (uint32_t)v;

	if (size == sizeof v32)
		memcpy(field, &v32, sizeof v32);
	else
		memcpy(field, &v, sizeof v);
}

/* Parse the value v of key k into m. */
static int
marker_set(const struct marker_key *k, const char *v, struct marker *m)
{
	char		*field = (char *)m + k->off;
	struct tm	 tm;
	const char	*end;
	uint64_t	 n;
	time_t		 t;

	switch (k->type) {
	case MT_VERSION:
		return strcmp(v, "1") == 0 ? 0 : -EINVAL;
	case MT_OWNER:
		/* root is the owner of workspaces made without --owner. */
		if (marker_owner_invalid(v) != NULL && strcmp(v, "root") != 0)
			return -EINVAL;
		snprintf(field, k->size, "%s", v);
		return 0;
	case MT_NUMBER:
		if (number_parse(v, k->flags, k->max, &n) < 0)
			return -EINVAL;
		marker_store(field, k->size, n);
		return 0;
	case MT_YESNO:
		n = strcmp(v, "yes") == 0;
		marker_store(field, k->size, n);
		return 0;
	case MT_STRING:
		snprintf(field, k->size, "%s", v);
		return 0;
	case MT_TIME:
		memset(&tm, 0, sizeof tm);
		end = strptime(v, MARKER_TIME_FORMAT, &tm);
		if (end == NULL || *end != '\0')
			return -EINVAL;
		t = timegm(&tm);
		memcpy(field, &t, sizeof t);
		return 0;
	}
	return -EINVAL;
}

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
		for (k = 0; k < NKEYS; k++) {
			if (strcmp(line, marker_keys[k].name) == 0)
				break;
		}
		/* Unknown keys are kept for newer versions of wsctl. */
		if (k == NKEYS)
			continue;
		if (marker_set(&marker_keys[k], eq, &m) < 0)
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

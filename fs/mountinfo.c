/*
 * Reading /proc/self/mountinfo (see mountinfo.h): a leaf module.
 *
 * A line is "ID PARENT MAJOR:MINOR ROOT POINT OPTIONS [TAGS...] - FSTYPE
 * SOURCE SUPEROPTIONS"; names escape a space, tab, newline and backslash
 * as three octal digits.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mountinfo.h"

/* Undo the octal escapes in place. */
static void
mountinfo_unescape(char *s)
{
	char	*d = s;

	while (*s != '\0') {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' &&
		    s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*d++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
			    (s[3] - '0'));
			s += 4;
		} else
			*d++ = *s++;
	}
	*d = '\0';
}

/* Split one line into m; 0, or -1 if it is not a mount line. */
static int
mountinfo_parse(char *line, struct mountinfo *m)
{
	char	*fields[6], *dash, *save, *p;
	int	 n = 0;

	line[strcspn(line, "\n")] = '\0';
	if ((dash = strstr(line, " - ")) == NULL)
		return -1;
	*dash = '\0';
	for (p = strtok_r(line, " ", &save); p != NULL && n < 6;
	    p = strtok_r(NULL, " ", &save))
		fields[n++] = p;
	if (n < 5 || sscanf(fields[2], "%u:%u", &m->major, &m->minor) != 2)
		return -1;
	if ((m->fstype = strtok_r(dash + 3, " ", &save)) == NULL ||
	    (p = strtok_r(NULL, " ", &save)) == NULL)
		return -1;
	mountinfo_unescape(fields[3]);
	mountinfo_unescape(fields[4]);
	mountinfo_unescape(p);
	m->root = fields[3];
	m->point = fields[4];
	m->source = p;
	return 0;
}

int
mountinfo_walk(int (*fn)(const struct mountinfo *, void *), void *arg)
{
	struct mountinfo	 m;
	FILE			*f;
	char			*line = NULL;
	size_t			 cap = 0;
	int			 r = 0;

	if ((f = fopen("/proc/self/mountinfo", "re")) == NULL)
		return -errno;
	while (r == 0 && getline(&line, &cap, f) != -1)
		if (mountinfo_parse(line, &m) == 0)
			r = fn(&m, arg);
	free(line);
	fclose(f);
	return r;
}

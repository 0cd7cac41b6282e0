/*
 * Listen and connect addresses, as wslockd, libwslock and the metrics
 * endpoints read them from options and configuration.
 */
#include "config.h"

#include <sys/socket.h>
#include <sys/un.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lockd.h"

/*
 * ADDR is "unix:PATH", "HOST:PORT", "[V6ADDR]:PORT", "HOST" (default port)
 * or ":PORT" (any address, for listening).
 */
int
addr_parse(const char *s, struct addr *a)
{
	struct addr	 x;
	const char	*colon, *host, *port;
	size_t		 hostlen;
	char		*end;
	unsigned long	 p;

	memset(&x, 0, sizeof x);
	if (strncmp(s, "unix:", 5) == 0) {
		if (s[5] == '\0' || strlen(s + 5) >=
		    sizeof(((struct sockaddr_un *)0)->sun_path))
			return -EINVAL;
		x.family = AF_UNIX;
		snprintf(x.host, sizeof x.host, "%s", s + 5);
		*a = x;
		return 0;
	}
	x.family = AF_UNSPEC;
	if (s[0] == '[') {
		if ((colon = strchr(s, ']')) == NULL)
			return -EINVAL;
		host = s + 1;
		hostlen = colon - host;
		if (colon[1] == ':')
			port = colon + 2;
		else if (colon[1] == '\0')
			port = NULL;
		else
			return -EINVAL;
	} else {
		colon = strrchr(s, ':');
		if (colon != NULL && strchr(s, ':') != colon)
			return -EINVAL;	/* bare IPv6 needs brackets */
		host = s;
		hostlen = colon ? (size_t)(colon - s) : strlen(s);
		port = colon ? colon + 1 : NULL;
	}
	if (hostlen >= sizeof x.host)
		return -EINVAL;
	memcpy(x.host, host, hostlen);
	if (port == NULL)
		snprintf(x.port, sizeof x.port, "%d", WSL_DEFAULT_PORT);
	else {
		errno = 0;
		p = strtoul(port, &end, 10);
		if (*port == '\0' || *end != '\0' || errno != 0 ||
		    p > 65535)
			return -EINVAL;
		snprintf(x.port, sizeof x.port, "%lu", p);
	}
	*a = x;
	return 0;
}

/*
 * Whole reads and writes (see fdio.h): the one copy of the loop that
 * every reader of a small file and writer of a short answer needs.
 */
#include "config.h"

#include <errno.h>
#include <unistd.h>

#include "fdio.h"

ssize_t
fdio_read_all(int fd, void *buf, size_t max)
{
	char	*p = buf;
	size_t	 len = 0;
	ssize_t	 n;

	while (len < max) {
		n = read(fd, p + len, max - len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	return (ssize_t)len;
}

int
fdio_write_all(int fd, const void *buf, size_t len)
{
	const char	*p = buf;
	ssize_t		 n;

	while (len > 0) {
		n = write(fd, p, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

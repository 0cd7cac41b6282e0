/*
 * Whole reads and writes on a descriptor, retried across EINTR and short
 * transfers: for the small files and sockets of wsfs, wsctl and wslockd
 * (metadata, markers, metrics answers). The fd stays the caller's.
 */
#ifndef WS_FDIO_H
#define WS_FDIO_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Read until end of file or max bytes: the number of bytes read (short
 * only at end of file), or -errno.
 */
ssize_t	fdio_read_all(int fd, void *buf, size_t max);

/* Write all len bytes: 0, or -errno (-EIO if write(2) wrote nothing). */
int	fdio_write_all(int fd, const void *buf, size_t len);

#endif

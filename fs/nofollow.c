/*
 * Admin-given paths opened without following symlinks. O_NOFOLLOW alone
 * guards only the last component; here every component is resolved with
 * openat2(RESOLVE_NO_SYMLINKS) relative to the one before, so a symlinked
 * parent of a scratch base or of SOURCE is refused instead of silently
 * leading somewhere else.
 */
#include "config.h"

#include <sys/stat.h>
#include <sys/syscall.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nofollow.h"

/* openat2, retried while the kernel says a rename raced the lookup. */
static int
nofollow_openat2(int dirfd, const char *name, uint64_t flags,
    uint64_t resolve)
{
	struct open_how	how;
	long		fd;

	memset(&how, 0, sizeof how);
	how.flags = flags;
	how.resolve = resolve;
	do
		fd = syscall(SYS_openat2, dirfd, name, &how, sizeof how);
	while (fd < 0 && errno == EAGAIN);
	return fd < 0 ? -errno : (int)fd;
}

/* One component below dirfd, as an O_PATH descriptor: search rights do. */
static int
nofollow_step(int dirfd, const char *name)
{
	return nofollow_openat2(dirfd, name, O_PATH | O_DIRECTORY | O_CLOEXEC,
	    RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
}

int
nofollow_open_beneath(int dirfd, const char *name)
{
	return nofollow_openat2(dirfd, name, O_RDONLY | O_DIRECTORY |
	    O_NOFOLLOW | O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
	    RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS);
}

int
nofollow_open_path(const char *path, int flags)
{
	char	*copy, *comp, *next;
	int	 fd, nfd, r;

	if (*path == '\0')
		return -ENOENT;
	if ((copy = strdup(path)) == NULL)
		return -ENOMEM;
	if ((fd = nofollow_step(AT_FDCWD, *path == '/' ? "/" : ".")) < 0) {
		r = fd;
		goto out;
	}
	for (comp = copy; comp != NULL; comp = next) {
		if ((next = strchr(comp, '/')) != NULL)
			*next++ = '\0';
		if (*comp == '\0' || strcmp(comp, ".") == 0)
			continue;
		nfd = nofollow_step(fd, comp);
		if (nfd == -ENOENT && (flags & NOFOLLOW_CREATE)) {
			if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
				r = -errno;
				goto out;
			}
			nfd = nofollow_step(fd, comp);
		}
		if (nfd < 0) {
			r = nfd;
			goto out;
		}
		close(fd);
		fd = nfd;
	}
	if ((r = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = -errno;
out:
	if (fd >= 0)
		close(fd);
	free(copy);
	return r;
}

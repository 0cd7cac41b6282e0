/*
 * wsctl keygen FILE: write a new cluster key, 32 random bytes from
 * libsodium, mode 0600. An existing file is never overwritten: replacing
 * the key of a running cluster locks every node out, so that takes a
 * deliberate rm first.
 */
#include "config.h"

#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "wsctl.h"

int
cmd_keygen(int argc, char **argv)
{
	unsigned char	key[32];
	int		fd, r = WSCTL_EXIT_FAIL;

	if (argc < 2)
		return wsctl_usage_error("keygen", "missing FILE");
	if (argc > 2)
		return wsctl_usage_error("keygen", "too many arguments");
	if (argv[1][0] == '-')
		return wsctl_usage_error("keygen", "unknown option '%s'",
		    argv[1]);
	if (sodium_init() < 0) {
		fprintf(stderr, "wsctl keygen: libsodium failed to start\n");
		return WSCTL_EXIT_FAIL;
	}
	if ((fd = open(argv[1], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
	    O_CLOEXEC, 0600)) < 0) {
		fprintf(stderr, "wsctl keygen: %s: %s\n", argv[1],
		    errno == EEXIST ? "exists; refusing to overwrite a key" :
		    strerror(errno));
		return WSCTL_EXIT_FAIL;
	}
	randombytes_buf(key, sizeof key);
	/* The umask may have taken bits away, never added: make it exact. */
	if (fchmod(fd, 0600) < 0 || write(fd, key, sizeof key) !=
	    (ssize_t)sizeof key || fsync(fd) < 0) {
		fprintf(stderr, "wsctl keygen: %s: %s\n", argv[1],
		    strerror(errno ? errno : EIO));
		close(fd);
		unlink(argv[1]);
		goto out;
	}
	if (close(fd) < 0) {
		fprintf(stderr, "wsctl keygen: %s: %s\n", argv[1],
		    strerror(errno));
		unlink(argv[1]);
		goto out;
	}
	r = WSCTL_EXIT_OK;
out:
	sodium_memzero(key, sizeof key);
	return r;
}

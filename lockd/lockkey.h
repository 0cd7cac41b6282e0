/*
 * The lock keys of wsfs and wsctl, one spelling for both: a kind byte,
 * the inode number of SOURCE and an inode number under it,
 *
 *	"<kind>/<source inode>/<inode>"	e.g. "g/1234/5678"
 *
 * kind 'g' is an object's cache lock (fs/glock.c), 'p' and 'f' its
 * fcntl(2) and flock(2) locks (fs/plock.c), 'w' a whole workspace
 * (`wsctl lock --workspace`, inode of the workspace's directory). Inode
 * numbers of shared storage are the same on every client, device
 * numbers are not, so the key names the same object on every node. To
 * wslockd a key is opaque bytes.
 */
#ifndef WS_LOCKKEY_H
#define WS_LOCKKEY_H

#include <stddef.h>
#include <stdint.h>

/* Longest key lockkey_format writes, with its NUL. */
#define LOCKKEY_MAX	48

/*
 * Write the key into buf (len bytes, LOCKKEY_MAX is enough). Returns its
 * length without the NUL, or 0 if kind is not a letter or buf is short.
 */
size_t	lockkey_format(char kind, uint64_t source, uint64_t ino, char *buf,
	    size_t len);

/*
 * Read a key of len bytes (no NUL needed), exactly as lockkey_format
 * writes it. Returns 0 and sets *kind, *source, *ino; -EINVAL for
 * anything else. Out-parameters are set only on success.
 */
int	lockkey_parse(const void *key, size_t len, char *kind,
	    uint64_t *source, uint64_t *ino);

#endif

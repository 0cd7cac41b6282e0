/*
 * The lock keys of wsfs and wsctl, one spelling for both: a kind byte,
 * the inode number of SOURCE, an inode number under it and, where the
 * storage tells it, the object's birth time in nanoseconds (its
 * generation), so that a key names one object for its whole life even
 * when the storage hands the inode number out again:
 *
 *	"<kind>/<source inode>/<inode>"		e.g. "g/1234/5678"
 *	"<kind>/<source inode>/<inode>/<gen>"	e.g. "g/1234/5678/17964..."
 *
 * kind 'g' is an object's cache lock (fs/glock.c), 'p' and 'f' its
 * fcntl(2) and flock(2) locks (fs/plock.c), 'w' a whole workspace
 * (`wsctl lock --workspace`, inode of the workspace's directory). Inode
 * numbers and birth times of shared storage are the same on every
 * client, device numbers are not, so the key names the same object on
 * every node. A generation of 0 means unknown and is spelled with the
 * short form. To wslockd a key is opaque bytes.
 */
#ifndef WS_LOCKKEY_H
#define WS_LOCKKEY_H

#include <stddef.h>
#include <stdint.h>

/* Longest key lockkey_format writes, with its NUL. */
#define LOCKKEY_MAX	72

/*
 * Write the key into buf (len bytes, LOCKKEY_MAX is enough). Returns its
 * length without the NUL, or 0 if kind is not a letter or buf is short.
 */
size_t	lockkey_format(char kind, uint64_t source, uint64_t ino, char *buf,
	    size_t len);
/* The same with a generation (0: the short form). */
size_t	lockkey_format_gen(char kind, uint64_t source, uint64_t ino,
	    uint64_t gen, char *buf, size_t len);

/*
 * Read a key of len bytes (no NUL needed), exactly as lockkey_format
 * or lockkey_format_gen writes it. Returns 0 and sets *kind, *source, *ino; -EINVAL for
 * anything else. Out-parameters are set only on success.
 */
int	lockkey_parse(const void *key, size_t len, char *kind,
	    uint64_t *source, uint64_t *ino);
/* The same, also setting *gen (0 for the short form). */
int	lockkey_parse_gen(const void *key, size_t len, char *kind,
	    uint64_t *source, uint64_t *ino, uint64_t *gen);

#endif
